"""Distribution strategies: building them from flags, what they are, their sessions, batches.

bert_tf trains on TensorFlow's own distributed engine (`tf.distribute`, graph mode):

  none          one device (the default).
  mirrored      `tf.compat.v1.distribute.MirroredStrategy` over this host's GPUs (`--num_gpus`),
                or its CPU devices when it has none. Synchronous: every replica computes the
                gradient of its share of the batch, the gradients are summed (all-reduce) and
                every replica applies the same update.
  multi_worker  `tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy` over several
                hosts (or processes) described by the `TF_CONFIG` environment variable, each
                with its local GPUs (or one CPU). The same synchronous algorithm, with
                collective all-reduces over gRPC between workers.
  tpu           `tf.compat.v1.distribute.experimental.TPUStrategy` behind the original TPU
                flags (`--use_tpu`, `--tpu_name`, ...). Wired but untested: no TPU was
                available to test on.

`--train_batch_size` is the global batch of one optimizer update; each replica gets
`train_batch_size / num_replicas` examples (`per_replica_batch_size`). Each worker (input
pipeline) reads its own share of the input (`shard_input_files`): whole files when there are
at least as many files as workers, else every n-th record, so no two workers read the same
records. Only the chief (TF_CONFIG's "chief" task, or worker 0 when there is none) writes
checkpoints and summaries; `output_dir` must be readable by every worker (a shared file system
or a bucket), because all workers resume from the chief's checkpoint.

TF_CONFIG is read by the multi_worker strategy only. Every other strategy runs one process that
is the chief whatever TF_CONFIG says (`strategy_from_flags` logs one line that it ignores it):
only a multi-worker strategy can make a process a non-chief, so no single process ever waits
for a chief that will never come.

How workers wait for each other, and never silently or forever, is `multi_worker`.
"""

import json
import os
import weakref

import tensorflow as tf
from absl import logging

from bert_tf.errors import BertTfError, short_tf_error

tf1 = tf.compat.v1

STRATEGY_NAMES = ("none", "mirrored", "multi_worker", "tpu")

# Session targets of the strategies built here that need one (TPU: the TPU's address).
_SESSION_TARGETS = weakref.WeakKeyDictionary()
# The in-process gRPC server of this multi-worker task, started once per process (and the
# TPU addresses whose TPU system this process initialized).
_SERVERS = {}


# ----------------------------------------------------------------------------- construction


def strategy_from_options(distribution):
    """The strategy for `--distribution_strategy` / `--use_tpu`, or None for one device.

    Args:
      distribution: `bert_tf.options.DistributionOptions`.

    Returns:
      A `tf.distribute` strategy (built in graph mode) or None.
    """
    name = distribution.distribution_strategy
    if distribution.use_tpu:
        if name not in ("none", "tpu"):
            raise BertTfError(f"--use_tpu contradicts --distribution_strategy={name}; pass only "
                              "one of them (--use_tpu means --distribution_strategy=tpu).")
        name = "tpu"
    if name != "multi_worker" and os.environ.get("TF_CONFIG"):
        logging.warning("TF_CONFIG is set but ignored: --distribution_strategy=%s runs this "
                        "process alone, as the chief; --distribution_strategy=multi_worker "
                        "would use TF_CONFIG's cluster.", name)
    return make_strategy(
        name, num_gpus=distribution.num_gpus, tpu_name=distribution.tpu_name,
        tpu_zone=distribution.tpu_zone, gcp_project=distribution.gcp_project,
        master=distribution.master, num_tpu_cores=distribution.num_tpu_cores,
        iterations_per_loop=distribution.iterations_per_loop)


def make_strategy(name, num_gpus=None, tpu_name=None, tpu_zone=None, gcp_project=None,
                  master=None, num_tpu_cores=None, iterations_per_loop=1):
    """Builds the strategy `name` (one of STRATEGY_NAMES); None for "none".

    The strategy is created in graph mode, so that no eager-mode server or health-check
    thread is started: bert_tf runs it in `tf.compat.v1` sessions.

    Args:
      name: "none", "mirrored", "multi_worker" or "tpu".
      num_gpus: GPUs to use per host (the first ones); None: all. With no GPU, "mirrored"
        mirrors over the host's CPU devices (one unless logical CPU devices are configured).
      tpu_name, tpu_zone, gcp_project, master: locate the TPU (the original flags); tpu_name
        may be a Cloud TPU name or a grpc:// address.
      num_tpu_cores: checked against the TPU's cores.
      iterations_per_loop: accepted for the TPU strategy's steps_per_run.
    """
    if name not in STRATEGY_NAMES:
        raise BertTfError(f"--distribution_strategy: unknown value '{name}'; use one of "
                          f"{', '.join(STRATEGY_NAMES)}.")
    if num_gpus is not None and num_gpus < 0:
        raise BertTfError(f"--num_gpus must be 0 or more, got {num_gpus}.")
    if name == "none":
        return None
    if name == "tpu":
        return _make_tpu_strategy(tpu_name, tpu_zone, gcp_project, master, num_tpu_cores,
                                  iterations_per_loop)
    _select_gpus(num_gpus)
    if name == "mirrored":
        devices = [d.name for d in tf.config.list_logical_devices("GPU")]
        if not devices:
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        with tf.Graph().as_default():
            strategy = tf1.distribute.MirroredStrategy(devices)
        logging.info("MirroredStrategy over %d devices: %s", len(devices), ", ".join(devices))
        return strategy
    cluster, task_type, task_index = parse_tf_config()
    with tf.Graph().as_default():
        strategy = tf1.distribute.experimental.MultiWorkerMirroredStrategy()
    logging.info("MultiWorkerMirroredStrategy: this is %s %d of cluster %s; %d replicas in sync.",
                 task_type, task_index, cluster, strategy.num_replicas_in_sync)
    return strategy


def parse_tf_config():
    """Reads the `TF_CONFIG` environment variable of a multi-worker run.

    Returns:
      (cluster dict, task type, task index).

    Raises:
      BertTfError: when TF_CONFIG is missing, not JSON, or does not place this task.
    """
    example = ('TF_CONFIG=\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
               '"task": {"type": "worker", "index": 0}}\'')
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise BertTfError("--distribution_strategy=multi_worker needs the TF_CONFIG environment "
                          f"variable on every worker, e.g. {example} (index 1 on host2).")
    try:
        tf_config = json.loads(raw)
    except ValueError as e:
        raise BertTfError(f"TF_CONFIG is not valid JSON ({e}); set it like {example}.") from None
    cluster = tf_config.get("cluster") if isinstance(tf_config, dict) else None
    task = tf_config.get("task") if isinstance(tf_config, dict) else None
    if not isinstance(cluster, dict) or not ({"chief", "worker"} & set(cluster)):
        raise BertTfError(f"TF_CONFIG has no \"cluster\" with \"worker\" (or \"chief\") "
                          f"addresses; set it like {example}.")
    if not isinstance(task, dict) or task.get("type") not in cluster:
        raise BertTfError(f"TF_CONFIG's \"task\" {task} is not a job of its cluster "
                          f"{sorted(cluster)}; set it like {example}.")
    index = task.get("index", 0)
    if not isinstance(index, int) or not 0 <= index < len(cluster[task["type"]]):
        raise BertTfError(f"TF_CONFIG's task index {index} is out of range for the "
                          f"{len(cluster[task['type']])} '{task['type']}' addresses; use 0 to "
                          f"{len(cluster[task['type']]) - 1}.")
    return cluster, task["type"], index


def _select_gpus(num_gpus):
    """Makes only the first `num_gpus` GPUs visible (before TF's runtime starts)."""
    if num_gpus is None:
        return
    gpus = tf.config.list_physical_devices("GPU")
    if num_gpus > len(gpus):
        raise BertTfError(f"--num_gpus={num_gpus} but this host has {len(gpus)} GPU(s); pass "
                          f"--num_gpus={len(gpus)} or less.")
    try:
        tf.config.set_visible_devices(gpus[:num_gpus], "GPU")
    except RuntimeError:  # The runtime already started; fine if it sees the same GPUs.
        if len(tf.config.list_logical_devices("GPU")) != num_gpus:
            raise BertTfError(f"--num_gpus={num_gpus}: TensorFlow already started with other "
                              "GPUs; set CUDA_VISIBLE_DEVICES instead.") from None


def _make_tpu_strategy(tpu_name, tpu_zone, gcp_project, master, num_tpu_cores,
                       iterations_per_loop):
    """TPUStrategy for the original TPU flags. Untested: no TPU was available."""
    tpu = tpu_name or master
    if not tpu:
        raise BertTfError("--use_tpu: no TPU given; pass --tpu_name (a Cloud TPU name or a "
                          "grpc:// address) or --master.")
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu, zone=tpu_zone, project=gcp_project)
        target = resolver.master()
        with tf.Graph().as_default():
            strategy = tf1.distribute.experimental.TPUStrategy(
                resolver, steps_per_run=max(int(iterations_per_loop or 1), 1))
    except (ValueError, ImportError, RuntimeError, tf.errors.OpError) as e:
        raise BertTfError(f"--tpu_name: cannot reach TPU '{tpu}' ({short_tf_error(e)}); "
                          "check --tpu_name, --tpu_zone and --gcp_project.") from None
    if num_tpu_cores and strategy.num_replicas_in_sync != num_tpu_cores:
        raise BertTfError(f"--num_tpu_cores={num_tpu_cores} but TPU '{tpu}' has "
                          f"{strategy.num_replicas_in_sync} cores; pass "
                          f"--num_tpu_cores={strategy.num_replicas_in_sync}.")
    _SESSION_TARGETS[strategy] = target
    return strategy


# ----------------------------------------------------------------------- what a strategy is


def num_replicas(strategy):
    """Replicas that train in sync (1 without a strategy)."""
    return 1 if strategy is None else strategy.num_replicas_in_sync


def is_multi_worker(strategy):
    """Whether `strategy` spans several workers (processes or hosts)."""
    return strategy is not None and (strategy.num_replicas_in_sync >
                                     len(strategy.extended.worker_devices))


def is_tpu(strategy):
    """Whether `strategy` is a TPU strategy."""
    return isinstance(strategy, tf1.distribute.experimental.TPUStrategy)


def is_chief(strategy):
    """Whether this process writes checkpoints and summaries under `strategy`.

    Always without a strategy or with a one-process one, whatever TF_CONFIG says: only a
    multi-worker strategy makes non-chiefs (TF_CONFIG's workers other than the chief).
    """
    return strategy is None or strategy.extended.should_checkpoint


def one_replica_per_worker(strategy):
    """Whether each worker of `strategy` (a process) trains exactly one replica: then a
    worker's input can be one plain iterator feeding its replica (`worker_input_context`)."""
    return (strategy is not None and not is_tpu(strategy)
            and len(strategy.extended.worker_devices) == 1)


def worker_input_context(strategy):
    """(`tf.distribute.InputContext` of this worker's input pipeline, its host CPU device).

    The context `strategy.make_input_fn_iterator` would give this worker: pipeline
    `input_pipeline_id` of `num_input_pipelines` (one per worker).
    """
    extended = strategy.extended
    if hasattr(extended, "_make_input_context"):  # Multi-worker: which worker this is.
        context = extended._make_input_context()
    else:
        context = tf.distribute.InputContext(num_replicas_in_sync=num_replicas(strategy))
    host = tf.DeviceSpec.from_string(extended.worker_devices[0]).replace(
        device_type="CPU", device_index=0)
    return context, host.to_string()


def call_for_each_replica(strategy, fn, args=()):
    """Calls `fn(*args)` once per replica of `strategy` in its replica context.

    On a TPU through `strategy.run`, which compiles the step (untested: no TPU).
    `fn` runs as written, as it does without a strategy: the strategies would otherwise
    AutoGraph-convert it and everything it calls (the whole model_fn) when the step is built,
    seconds more per graph even for a tiny model, each function's source left in a temp file.

    Returns:
      `fn`'s results as per-replica values.
    """
    fn = tf.autograph.experimental.do_not_convert(fn)
    if is_tpu(strategy):
        return strategy.run(fn, args=args)
    return strategy.extended.call_for_each_replica(fn, args=args)


def per_replica_batch_size(global_batch_size, strategy, flag="train_batch_size",
                           num_accumulation_steps=1):
    """Examples each replica computes per run: global batch / accumulation steps / replicas.

    Args:
      global_batch_size: examples per optimizer update over all replicas (`--{flag}`).
      strategy: a strategy or None.
      flag: the flag that set the global batch, named in the error.
      num_accumulation_steps: micro-batches per update (`--num_accumulation_steps`).

    Raises:
      BertTfError: when the batch does not split evenly.
    """
    replicas = num_replicas(strategy)
    if global_batch_size % (replicas * num_accumulation_steps):
        split = f"{replicas} replicas"
        if num_accumulation_steps > 1:
            split += f" x --num_accumulation_steps={num_accumulation_steps}"
        raise BertTfError(
            f"--{flag}={global_batch_size} is not divisible by the {split} of this run; it is "
            "the global batch, split evenly over replicas (and micro-batches), so pass a "
            f"multiple of {replicas * num_accumulation_steps}.")
    return global_batch_size // (replicas * num_accumulation_steps)


# ------------------------------------------------------------------------------- sessions


def session_target(strategy):
    """The `master` a session of `strategy` connects to ("" for an in-process session).

    Multi-worker strategies need this process's gRPC server (started here, once per
    process, on the port TF_CONFIG gives this task); a TPU strategy needs the TPU's address.
    """
    if strategy is None:
        return ""
    if strategy in _SESSION_TARGETS:
        target = _SESSION_TARGETS[strategy]
        if is_tpu(strategy) and target not in _SERVERS:
            # Graph-mode TPU programs need the TPU system initialized once per process.
            with tf.Graph().as_default(), tf1.Session(target) as session:
                session.run(tf1.tpu.initialize_system())
            _SERVERS[target] = None
        return target
    if not is_multi_worker(strategy):
        return ""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    key = (resolver.task_type, resolver.task_id)
    if key not in _SERVERS:
        _SERVERS[key] = tf.distribute.Server(
            resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
            protocol=resolver.rpc_layer or "grpc",
            config=session_config(strategy, tf1.ConfigProto(allow_soft_placement=True)),
            start=True)
        logging.info("Started the gRPC server of %s %d: %s", *key, _SERVERS[key].target)
    return _SERVERS[key].target


def session_config(strategy, config, timeout_secs=None):
    """`config` updated for `strategy` (collective group leader, device filters, ...).

    Args:
      strategy: a strategy or None.
      config: a `tf.compat.v1.ConfigProto`.
      timeout_secs: multi-worker only: the deadline of every run of the session that sets
        none itself, e.g. the variables' initialization, which waits for the chief's initial
        values (None or 0: no limit).
    """
    if strategy is None:
        return config
    config = strategy.update_config_proto(config)
    # Launch the step's all-reduces (gradients, loss, input end-of-data check) in one fixed
    # order on every worker: launched in different orders they can wait on each other forever.
    config.experimental.collective_deterministic_sequential_execution = True
    if is_multi_worker(strategy) and timeout_secs:
        config.operation_timeout_in_ms = int(timeout_secs * 1000)
    return config
