"""Throughput benchmark of the real BERT training step or inference forward.

`run_benchmark` builds the task's own model_fn (SQuAD, classifier or pre-training:
the same graph `run_squad.py` / `run_classifier.py` / `run_pretraining.py` train)
on random features generated inside the graph, so the input pipeline is not what
is measured, warms it up, then times `num_steps` steps with graph construction
and warm-up excluded. One step is one optimizer update (forward, backward and
update of `num_accumulation_steps` micro-batches) in train mode, and one forward
of one batch in infer mode.

Alongside throughput it reports the model FLOPs of a step counted from the
config (`count_flops`), the matmul peak of this machine measured in the same
process at the same precision (`measure_peak_matmul_tflops`) and their ratio,
the model FLOPs utilisation (MFU).

Under a distribution strategy (`--distribution_strategy`, see `bert_tf.training.distribute`) every
replica runs the step on `batch_size / replicas` sequences (`batch_size` stays the global
micro-batch, as `--train_batch_size` in training) and the train step all-reduces the
gradients as training does; MFU is then against one device's peak times the replicas. With
multi_worker every worker runs and times the step; only the chief writes the JSON and the
plot. `step_profile.profile_step` traces the single-device step.
"""

import contextlib
import dataclasses
import json
import os
import time

import numpy as np
import tensorflow as tf

from bert_tf import fileio, precision
from bert_tf.errors import BertTfError
from bert_tf.tools import benchmark_step, machine
from bert_tf.tools.benchmark_step import BenchmarkSpec, build_step, count_flops, initialize
from bert_tf.training import distribute, multi_worker
from bert_tf.training import session as session_lib

tf1 = tf.compat.v1

# Keys every result (and so the JSON) carries; tests check them.
RESULT_KEYS = ("sequences_per_second", "step_time_median_s", "step_time_p90_s", "flops_per_step",
               "achieved_tflops", "peak_matmul_tflops", "mfu", "peak_memory_mb")


def run_benchmark(spec, session_config=None, log=print, strategy=None, step_timeout_secs=None,
                  startup_timeout_secs=None):
    """Builds, warms up and times the step; measures the matmul peak; returns a result dict.

    Args:
      spec: `BenchmarkSpec`.
      session_config: ConfigProto; default `session_lib.session_config(spec.use_xla)`; a
        training step runs with a training session's rewrites on top (`step_session_config`).
      log: function taking one string for progress lines (None: silent).
      strategy: a `tf.distribute` strategy (see `build_step`), or None for one device.
      step_timeout_secs: multi-worker only: a timed step waiting longer than this for the
        other workers stops with an error. None or 0: no limit.
      startup_timeout_secs: multi-worker only: how long to wait for the other workers of
        TF_CONFIG to start, and as long again for the initialization and each warm-up step
        (which also optimises the graph). None: multi_worker.DEFAULT_STARTUP_TIMEOUT_SECS; 0: no
        limit.

    Returns:
      dict with RESULT_KEYS (throughput in sequences/s, step times in s, FLOPs,
      TFLOP/s, MFU, peak memory of the timed steps in MB and where that number comes from:
      `peak_memory_mb`), the spec, the per-step times, the last loss and machine info.

    Raises:
      BertTfError: on a bad spec, or when another worker died or hangs.
    """
    spec.validate()
    log = log or (lambda _: None)
    if session_config is None:
        session_config = session_lib.session_config(use_xla=spec.use_xla)
    compute_dtype = precision.compute_dtype_from_name(spec.precision)
    timing = _time_step(spec, session_config, log, strategy, step_timeout_secs,
                        startup_timeout_secs)
    peak = machine.measure_peak_matmul_tflops(compute_dtype, session_config, spec.peak_matmul_size)
    flops = timing.runs_per_step * count_flops(
        spec.bert_config, spec.task, spec.mode, spec.batch_size, spec.max_seq_length,
        spec.max_predictions_per_seq, spec.num_labels)
    return _result(spec, timing, flops, peak, distribute.num_replicas(strategy))


@dataclasses.dataclass(frozen=True)
class _StepTiming:
    """What one benchmark session measured.

    Attributes:
      times: seconds of each timed step (list of `num_steps` floats).
      build_seconds: seconds from building the graph to the end of its initialization.
      runs_per_step: session runs per step (`num_accumulation_steps` in train mode, else 1).
      peak_mb, peak_source: peak memory of the timed steps in MB, and where it comes from.
      rss_mb, rss_source: the process's resident peak in MB, and where it comes from.
      load_before, load_after: `os.getloadavg()` around the timed steps.
      last_loss: the loss of one more (untimed) run (None where the step has no loss).
    """

    times: list
    build_seconds: float
    runs_per_step: int
    peak_mb: float
    peak_source: str
    rss_mb: float
    rss_source: str
    load_before: tuple
    load_after: tuple
    last_loss: float | None


def _time_step(spec, session_config, log, strategy, step_timeout_secs, startup_timeout_secs):
    """Builds the step, starts its session, warms it up and times it (`run_benchmark`'s
    arguments): a `_StepTiming`.

    Raises:
      BertTfError: when another worker died or hangs (multi-worker only).
    """
    replicas = distribute.num_replicas(strategy)
    several_workers = distribute.is_multi_worker(strategy)
    if startup_timeout_secs is None:
        startup_timeout_secs = multi_worker.DEFAULT_STARTUP_TIMEOUT_SECS
    startup_options = options = None
    if several_workers:
        startup_options = multi_worker.session_run_deadline(startup_timeout_secs)
        options = multi_worker.session_run_deadline(step_timeout_secs)

    start = time.perf_counter()
    graph, fetch, loss = build_step(spec, strategy)
    # Every update also reads the loss (a scalar the step computes anyway): one set of fetches,
    # so the session builds and optimizes one executor, not a second for the last update. Across
    # workers the loss is one more all-reduce per step, so there only the last update reads it.
    last_fetch = [fetch, loss]
    if spec.mode == "train" and not several_workers:
        fetch = last_fetch
    started = False
    try:
        target = (multi_worker.wait_for_workers(strategy, startup_timeout_secs, what="benchmark")
                  if several_workers else distribute.session_target(strategy))
        waiting = (multi_worker.WaitingLog("the other workers to join", startup_timeout_secs)
                   if several_workers else contextlib.nullcontext())
        step_config = benchmark_step.step_session_config(spec, graph, session_config)
        config = distribute.session_config(strategy, step_config)
        with tf1.Session(target, graph=graph, config=config) as session:
            # Initialization waits for the chief's initial values; warm-up, for every worker.
            with waiting:
                initialize(session, graph, startup_options)
                build_seconds = time.perf_counter() - start
                log(f"built the {spec.task} {spec.mode} step ({replicas} replica(s)) in "
                    f"{build_seconds:.1f} s; warming up {spec.num_warmup_steps} step(s), timing "
                    f"{spec.num_steps}")
                runs_per_step = spec.num_accumulation_steps if spec.mode == "train" else 1
                machine.time_steps(session, fetch, spec.num_warmup_steps, 0, runs_per_step,
                                   options=startup_options)
            started = True
            return _timed_steps(session, spec, (fetch, last_fetch, loss), options,
                                build_seconds, runs_per_step)
    except multi_worker.WORKER_FAILURE_ERRORS as e:
        if not several_workers:
            raise
        if started:
            message = multi_worker.worker_failure_message(step_timeout_secs, e, what="benchmark")
        else:
            message = multi_worker.startup_failure_message(startup_timeout_secs, e,
                                                           what="benchmark")
        raise BertTfError(message) from None


def _timed_steps(session, spec, fetches, options, build_seconds, runs_per_step):
    """Times `spec.num_steps` steps in a warm session, then reads the loss once.

    Args:
      session: the session, initialized and warmed up.
      spec: the `BenchmarkSpec`.
      fetches: (fetch, last_fetch, loss): what a timed step runs, what the last train update
        runs ([its fetch, the loss]), and the scalar loss tensor (or None).
      options: `RunOptions` of every run (None: no deadline).
      build_seconds, runs_per_step: as in `_StepTiming`.

    Returns:
      A `_StepTiming`.
    """
    fetch, last_fetch, loss = fetches
    load_before = os.getloadavg()
    peak_reset = machine.reset_peak_memory()
    times = machine.time_steps(session, fetch, 0, spec.num_steps, runs_per_step,
                               options=options)
    peak_mb, peak_source = machine.peak_memory_mb(peak_reset)
    rss_mb, rss_source = machine.peak_rss_mb(peak_reset)
    # Other processes on the cores slow every step: keep the load next to the numbers.
    load_after = os.getloadavg()
    last_loss = None
    if loss is not None and spec.mode == "infer":
        last_loss = float(session.run(loss, options=options))
    if spec.mode == "train":
        # One more (untimed) update that also reads the loss, to show it is finite.
        last_loss = float(session.run(last_fetch, options=options)[1])
    return _StepTiming(times, build_seconds, runs_per_step, peak_mb, peak_source, rss_mb,
                       rss_source, load_before, load_after, last_loss)


def _result(spec, timing, flops, peak, replicas):
    """`run_benchmark`'s result dict from the `_StepTiming`, the FLOPs of a step, one
    device's matmul peak in TFLOP/s and the number of replicas."""
    median = float(np.median(timing.times))
    achieved = flops / median / 1e12
    config = spec.bert_config
    return {
        "sequences_per_second": spec.sequences_per_step / median,
        "step_time_median_s": median,
        "step_time_p90_s": float(np.percentile(timing.times, 90)),
        "step_time_mean_s": float(np.mean(timing.times)),
        "flops_per_step": int(flops),
        "achieved_tflops": achieved,
        "peak_matmul_tflops": peak,  # One device's.
        "mfu": achieved / (peak * replicas),
        "peak_memory_mb": timing.peak_mb,
        "peak_memory_source": timing.peak_source,
        "peak_rss_mb": timing.rss_mb,  # The whole process's resident peak (libraries, oneDNN).
        "peak_rss_source": timing.rss_source,
        "recompute_grad": spec.recompute_grad,
        "num_replicas": replicas,
        "task": spec.task,
        "mode": spec.mode,
        "precision": spec.precision,
        "use_xla": spec.use_xla,
        "batch_size": spec.batch_size,
        "max_seq_length": spec.max_seq_length,
        "num_accumulation_steps": spec.num_accumulation_steps,
        "sequences_per_step": spec.sequences_per_step,
        "num_warmup_steps": spec.num_warmup_steps,
        "num_steps": spec.num_steps,
        "model": {"num_hidden_layers": config.num_hidden_layers,
                  "hidden_size": config.hidden_size,
                  "num_attention_heads": config.num_attention_heads,
                  "intermediate_size": config.intermediate_size,
                  "vocab_size": config.vocab_size},
        "step_times_s": timing.times,
        "graph_build_s": timing.build_seconds,
        "load_average_before": list(timing.load_before),
        "load_average_after": list(timing.load_after),
        "loss": timing.last_loss,
        "machine": machine.machine_info(),
    }


TABLE_COLUMNS = (
    ("task", "task", "{}"), ("mode", "mode", "{}"), ("precision", "prec", "{}"),
    ("use_xla", "xla", "{}"), ("num_replicas", "replicas", "{}"), ("batch_size", "batch", "{}"),
    ("max_seq_length", "seq", "{}"),
    ("sequences_per_second", "seq/s", "{:.3f}"), ("step_time_median_s", "median s", "{:.3f}"),
    ("step_time_p90_s", "p90 s", "{:.3f}"), ("flops_per_step", "GFLOP/step", None),
    ("achieved_tflops", "TFLOP/s", "{:.3f}"), ("peak_matmul_tflops", "peak TFLOP/s", "{:.3f}"),
    ("mfu", "MFU", "{:.2f}"), ("peak_memory_mb", "peak MB", "{:.0f}"))


def format_table(results):
    """A fixed-width text table, one row per result dict."""
    header = [title for _, title, _ in TABLE_COLUMNS]
    rows = []
    for result in results:
        row = []
        for key, _, fmt in TABLE_COLUMNS:
            value = result[key]
            row.append(f"{value / 1e9:.1f}" if fmt is None else fmt.format(value))
        rows.append(row)
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True))
             for line in [header] + rows]
    return "\n".join(lines)


def write_json(result, path):
    """Writes `result` as indented JSON to `path` (whole or not at all)."""
    fileio.make_parent_dir(path)
    fileio.atomic_write_text(path, json.dumps(result, indent=2, sort_keys=True) + "\n")


def check_plotting_available():
    """Raises BertTfError unless matplotlib can be imported (checked before any run)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise BertTfError("--output_plot needs matplotlib; run `pip install matplotlib` or drop "
                          "--output_plot.") from None


def plot_batch_sweep(results, path):
    """Draws step time and throughput against batch size (one result per batch size) to `path`."""
    check_plotting_available()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = sorted(results, key=lambda r: r["batch_size"])
    batches = [r["batch_size"] for r in results]
    first = results[0]
    fig, (ax_time, ax_rate) = plt.subplots(1, 2, figsize=(10, 4))
    ax_time.plot(batches, [r["step_time_median_s"] for r in results], "o-", label="median")
    ax_time.plot(batches, [r["step_time_p90_s"] for r in results], "x--", label="p90")
    ax_time.set_xlabel("batch size")
    ax_time.set_ylabel("step time (s)")
    ax_time.legend()
    ax_rate.plot(batches, [r["sequences_per_second"] for r in results], "o-")
    ax_rate.set_xlabel("batch size")
    ax_rate.set_ylabel("sequences / s")
    fig.suptitle(f"{first['task']} {first['mode']} {first['precision']} "
                 f"seq {first['max_seq_length']}, {first['model']['num_hidden_layers']} layers "
                 f"x {first['model']['hidden_size']}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _parse_batch_sizes(text):
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) <= 0:
        raise BertTfError(f"--plot_batch_sizes: '{text}' is not a comma-separated list of "
                          "positive integers such as 1,2,4,8.")
    return sizes


def run(options, log=print):
    """The `scripts/benchmark.py` entry point: runs, prints the table, writes JSON / plot / trace.

    Args:
      options: `bert_tf.options.BenchmarkOptions` (the flags of scripts/benchmark.py).
      log: function taking one string.

    Returns:
      The result dict of the `--batch_size` run (with "batch_size_sweep" when plotting), or
      with --find_max_batch / --find_max_seq_length the search's dict.
    """
    from bert_tf import modeling

    config = modeling.BertConfig.from_json_file(options.bert_config_file)
    if options.max_position_embeddings:
        config.max_position_embeddings = options.max_position_embeddings
    if options.api == "tf2":
        return _run_tf2(options, config, log)
    spec = BenchmarkSpec.from_options(options, config)
    spec.validate()
    if options.find_max_batch and options.find_max_seq_length:
        raise BertTfError("--find_max_batch and --find_max_seq_length: pass one of them (the "
                          "other stays at --batch_size or --max_seq_length).")
    if options.find_max_batch or options.find_max_seq_length:
        return _run_search(options, spec, log)
    sweep_sizes = []
    if options.output_plot:
        check_plotting_available()
        sweep_sizes = _parse_batch_sizes(options.plot_batch_sizes)
    session_config = session_lib.session_config(use_xla=spec.use_xla)
    strategy = distribute.strategy_from_options(options.distribution)
    distributed = dict(strategy=strategy,
                       step_timeout_secs=options.distribution.step_timeout_secs,
                       startup_timeout_secs=options.distribution.startup_timeout_secs)

    profile = None
    if options.trace_file:
        profile = _profile_step(spec, session_config, options.trace_file, log)
    result = run_benchmark(spec, session_config, log=log, **distributed)
    if profile is not None:
        result["step_profile"] = profile
    results = [result]
    if sweep_sizes:
        results = _batch_size_sweep(spec, result, sweep_sizes, session_config, log, distributed)
        result = dict(result, batch_size_sweep=[
            {key: r[key] for key in RESULT_KEYS + ("batch_size",)} for r in results])
    log(format_table(results))
    if options.check_onednn and not result["machine"]["gpus"]:
        _add_onednn_report(result, spec.precision, log)
    _write_outputs(options, result, results, sweep_sizes, distribute.is_chief(strategy), log)
    return result


def _run_search(options, spec, log):
    """--find_max_batch / --find_max_seq_length: the search's dict, logged and written to
    --output_json."""
    from bert_tf.tools import batch_search  # It imports this module.

    if options.find_max_batch:
        found = batch_search.find_max_batch(spec, options.memory_limit_mb, log=log)
        log(f"largest batch at seq {spec.max_seq_length} within "
            f"{options.memory_limit_mb} MB: {found['max_batch_size']}")
    else:
        found = batch_search.find_max_seq_length(spec, options.memory_limit_mb, log=log)
        log(f"longest sequence at batch {spec.batch_size} within "
            f"{options.memory_limit_mb} MB: {found['max_seq_length']}")
    if options.output_json:
        write_json(found, options.output_json)
        log(f"wrote {options.output_json}")
    return found


def _profile_step(spec, session_config, trace_file, log):
    """--trace_file: profiles one step, logs its table, writes its Chrome trace; returns the
    profile as JSON-ready data (`step_profile.profile_summary`)."""
    from bert_tf.tools import step_profile  # It imports this module.

    rows = step_profile.profile_step(spec, session_config, trace_file=trace_file)
    log(step_profile.format_profile(rows))
    log(f"wrote the Chrome trace of one step to {trace_file}")
    return step_profile.profile_summary(rows)


def _batch_size_sweep(spec, result, sweep_sizes, session_config, log, distributed):
    """The results at each of `sweep_sizes`, in that order; `result` (the run at
    `spec.batch_size`) stands for its own size."""
    sweep = []
    for batch_size in sweep_sizes:
        if batch_size == spec.batch_size:
            sweep.append(result)
            continue
        sweep.append(run_benchmark(dataclasses.replace(spec, batch_size=batch_size),
                                   session_config, log=log, **distributed))
    return sweep


def _add_onednn_report(result, precision_name, log):
    """--check_onednn: which oneDNN kernels a matmul of this precision runs, into
    result["machine"]["onednn"], and logged."""
    report = machine.onednn_matmul_report(precision_name)
    result["machine"]["onednn"] = report
    log(f"oneDNN ISA: {report.get('isa')}; a {precision_name} matmul ran "
        f"{', '.join(report.get('kernels', [])) or 'no oneDNN primitive'} "
        f"(reduced precision on oneDNN: {report.get('low_precision_on_onednn')})")


def _write_outputs(options, result, results, sweep_sizes, writes_files, log):
    """--output_json and --output_plot, written by the chief (`writes_files`) only."""
    if not writes_files and (options.output_json or sweep_sizes):
        log("Not the chief: the chief writes --output_json and --output_plot.")
    elif options.output_json:
        write_json(result, options.output_json)
        log(f"wrote {options.output_json}")
    if sweep_sizes and writes_files:
        plot_batch_sweep(results, options.output_plot)
        log(f"wrote {options.output_plot}")


def _run_tf2(options, config, log):
    """`--api=tf2`: `tf2_benchmark.run_tf2_comparison`, its table, and --output_json."""
    from bert_tf.tools import tf2_benchmark

    spec = BenchmarkSpec(
        bert_config=config, task=options.task, mode=options.mode,
        batch_size=options.batch_size, max_seq_length=options.max_seq_length,
        num_warmup_steps=options.num_warmup_steps, num_steps=options.num_steps)
    result = tf2_benchmark.run_tf2_comparison(spec, log=log)
    log(tf2_benchmark.format_comparison(result))
    if options.output_json:
        write_json(result, options.output_json)
        log(f"wrote {options.output_json}")
    return result
