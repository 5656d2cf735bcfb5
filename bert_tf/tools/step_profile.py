"""Where a benchmark step spends its time: one traced step, its time per op type and dtype
(scripts/benchmark.py --trace_file), and a Chrome trace."""


import tensorflow as tf

from bert_tf.tools import machine
from bert_tf.tools.benchmark_step import build_step, initialize, step_session_config

tf1 = tf.compat.v1


def profile_step(spec, session_config=None, trace_file=None, num_warmup_steps=2):
    """Runs one traced step and sums the time of each op type.

    Args:
      spec: `BenchmarkSpec`.
      session_config: ConfigProto (default from `spec.use_xla`).
      trace_file: if set, a Chrome trace (chrome://tracing, Perfetto) is written there.
      num_warmup_steps: untimed steps before the traced one.

    Returns:
      list of (op_type, dtype, total_ms, count) sorted by total time, where
      op_type is the kernel that ran after grappler's rewrites (e.g. _FusedMatMul)
      and dtype its "T" attribute (or "" if it has none).
    """
    spec.validate()
    graph, fetch, _ = build_step(spec)
    with tf1.Session(graph=graph,
                     config=step_session_config(spec, graph, session_config)) as session:
        initialize(session, graph)
        machine.time_steps(session, fetch, num_warmup_steps, 0)
        options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
        metadata = tf1.RunMetadata()
        session.run(fetch, options=options, run_metadata=metadata)
    if trace_file:
        from tensorflow.python.client import timeline  # Not exported under tf.compat.v1.
        with open(trace_file, "w") as f:
            f.write(timeline.Timeline(metadata.step_stats).generate_chrome_trace_format())
    totals = {}
    for device_stats in metadata.step_stats.dev_stats:
        for node in device_stats.node_stats:
            op_type = kernel_op_type(node) or "other"
            dtype = _node_dtype(graph, node.node_name)
            micros = node.all_end_rel_micros
            key = (op_type, dtype)
            total, count = totals.get(key, (0.0, 0))
            totals[key] = (total + micros / 1000.0, count + 1)
    rows = [(op, dtype, total, count) for (op, dtype), (total, count) in totals.items()]
    return sorted(rows, key=lambda row: -row[2])


def kernel_op_type(node_stats):
    """The op type a traced kernel ran as (after grappler's rewrites, e.g. "_FusedMatMul"), from
    a `NodeExecStats` of `RunMetadata.step_stats`; None for an entry that is not a kernel."""
    # timeline_label reads "name = OpType(inputs)" for kernels.
    label = node_stats.timeline_label
    return label.split(" = ", 1)[1].split("(", 1)[0] if " = " in label else None


def _node_dtype(graph, node_name):
    """The "T" attribute of a graph node ("SrcT->DstT" for casts), "" if unknown."""
    try:
        attr = graph.get_operation_by_name(node_name).node_def.attr
    except (KeyError, ValueError):
        return ""  # Nodes grappler created (fusions keep the original name, others do not).
    if "SrcT" in attr and "DstT" in attr:
        return f"{tf.as_dtype(attr['SrcT'].type).name}->{tf.as_dtype(attr['DstT'].type).name}"
    return tf.as_dtype(attr["T"].type).name if "T" in attr else ""


def format_profile(rows, limit=25):
    """The profile rows as a text table with each op type's share of the summed op time; the
    last line sums them, with the number of kernels the step ran."""
    total = sum(row[2] for row in rows) or 1.0
    lines = [f"{'op type':<28} {'dtype':<18} {'ms':>9} {'share':>6} {'count':>6}"]
    for op_type, dtype, millis, count in rows[:limit]:
        lines.append(f"{op_type:<28} {dtype:<18} {millis:9.1f} {millis / total:6.1%} {count:6d}")
    lines.append(f"{'(all ops)':<28} {'':<18} {total:9.1f} {1:6.1%} {ops_per_step(rows):6d}")
    return "\n".join(lines)


def ops_per_step(rows):
    """How many kernels one step ran (the sum of the profile's counts)."""
    return sum(row[3] for row in rows)


def profile_summary(rows):
    """The profile as JSON-ready data: ops per step and every row as a dict."""
    return {"ops_per_step": ops_per_step(rows),
            "rows": [{"op_type": op, "dtype": dtype, "ms": round(millis, 3), "count": count}
                     for op, dtype, millis, count in rows]}
