"""Distribution strategies: building them from flags, their sessions, input sharding, batches.

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

No wait is silent or endless. A multi-worker worker waits at most `startup_timeout_secs`
(`--startup_timeout_secs`) for every other task of TF_CONFIG to start (`wait_for_workers`),
and as long again for them to join the first step; a later step waits for every worker at most
`step_timeout_secs` (`--step_timeout_secs`), so if one dies the others stop with a message
instead of hanging. While waiting, one short line every `PROGRESS_INTERVAL_SECS`.
"""

import dataclasses
import json
import os
import socket
import threading
import time
import weakref

import tensorflow as tf
from absl import logging

from bert_tf import options
from bert_tf.errors import BertTfError, short_tf_error

tf1 = tf.compat.v1

STRATEGY_NAMES = ("none", "mirrored", "multi_worker", "tpu")
# How long a multi-worker step may wait for the others, and how long workers wait for each
# other to start and to join the first step (see `options.DistributionOptions`).
DEFAULT_STEP_TIMEOUT_SECS = options.DistributionOptions.step_timeout_secs
DEFAULT_STARTUP_TIMEOUT_SECS = options.DistributionOptions.startup_timeout_secs
# Seconds between the progress lines of a wait.
PROGRESS_INTERVAL_SECS = 30

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
    ~2 s more per graph even for a tiny model, each function's source left in a temp file.

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


@dataclasses.dataclass(frozen=True)
class TrainingDeadlines:
    """How long each part of a multi-worker training run may wait for the other workers, in
    seconds (0: no limit).

    Attributes:
      startup: for every worker to start, and again for all of them to join the first step.
      step: per training step (as long as `startup` when the chief also evaluates, since the
        other workers' step waits for it).
      session: runs with no deadline of their own (initialization, checkpoint saves): the
        longer of the two, unbounded when either is.
    """

    startup: float
    step: float

    @classmethod
    def of(cls, step_timeout_secs, startup_timeout_secs, evaluates_while_training=False):
        """From `RunConfig`'s settings (None: the defaults of this module)."""
        step = DEFAULT_STEP_TIMEOUT_SECS if step_timeout_secs is None else step_timeout_secs
        startup = (DEFAULT_STARTUP_TIMEOUT_SECS if startup_timeout_secs is None
                   else startup_timeout_secs)
        if evaluates_while_training:
            step = 0 if 0 in (step, startup) else max(step, startup)
        return cls(startup=startup, step=step)

    @property
    def session(self):
        return max(self.startup, self.step) if self.startup and self.step else 0


def run_options(timeout_secs=None):
    """RunOptions for a multi-worker training step (or the start-up barrier).

    Args:
      timeout_secs: the run fails with DeadlineExceededError after this long (None or 0: no
        limit).
    """
    return tf1.RunOptions(timeout_in_ms=int((timeout_secs or 0) * 1000))


def cache_global_step_read(global_step):
    """Makes the hooks' reads of `global_step` plain reads of the variable.

    The hooks' standard read (`training_util._get_or_create_global_step_read`) falls back to
    the variable's initial value, which under a multi-worker strategy is a broadcast from the
    chief: a collective op. Collectives are matched across workers by step ids drawn, one per
    run, from a sequence per set of collective ops; the chief's own runs of that read (the
    checkpoint saver's) would then draw extra step ids from the training step's sequence, and
    every worker would wait forever in the next step. Call before any hook's begin().
    """
    graph = tf1.get_default_graph()
    # The collection that training_util._get_or_create_global_step_read looks in first.
    if not graph.get_collection("global_step_read_op_cache"):
        with graph.name_scope(None), graph.name_scope(global_step.op.name + "/"):
            graph.add_to_collection("global_step_read_op_cache",
                                    tf.identity(global_step, name="plain_read"))


def peer_addresses():
    """The other tasks of this multi-worker run, from TF_CONFIG.

    Returns:
      [(task name such as "worker 1", "host:port")] of every chief and worker task but this one.
    """
    cluster, task_type, task_index = parse_tf_config()
    return [(f"{job} {index}", address) for job in ("chief", "worker")
            for index, address in enumerate(cluster.get(job, []))
            if (job, index) != (task_type, task_index)]


def _accepts_connections(address, timeout_secs=2.0):
    """Whether something listens at `address` ("host:port", "[v6]:port", "grpc://host:port")."""
    host, _, port = address.split("://")[-1].rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_secs):
            return True
    except (OSError, ValueError):
        return False


def _describe(peers):
    return ", ".join(f"{name} at {address}" for name, address in peers)


def wait_for_workers(strategy, timeout_secs, what="training"):
    """Starts this worker's gRPC server, then waits until every other task listens on its port.

    Every worker starts its own server first, so they cannot wait on each other; a task
    listening means its process is up and has built its graph (servers start after that).

    Args:
      strategy: a multi-worker strategy.
      timeout_secs: the deadline in seconds (None or 0: no limit).
      what: what waits, for the messages, e.g. "training" or "benchmark".

    Returns:
      The session target of `strategy` (`session_target`).

    Raises:
      BertTfError: naming the tasks that did not start within `timeout_secs` and the fix.
    """
    target = session_target(strategy)
    peers = peer_addresses()
    start = last_log = time.monotonic()
    missing = [peer for peer in peers if not _accepts_connections(peer[1])]
    if missing:
        logging.info("Waiting %s for %s (TF_CONFIG) to start.", _limit(timeout_secs),
                     _describe(missing))
    while missing:
        now = time.monotonic()
        if timeout_secs and now - start >= timeout_secs:
            raise BertTfError(
                f"multi-worker {what} did not start: waited {timeout_secs:g} s for "
                f"{_describe(missing)} (from TF_CONFIG), which never accepted a connection; "
                "start every task of TF_CONFIG's cluster with the same command (each with its "
                "own task index), check those addresses, or raise --startup_timeout_secs.")
        if now - last_log >= PROGRESS_INTERVAL_SECS:
            logging.info("Still waiting for %s to start (%s).", _describe(missing),
                         _elapsed(now - start, timeout_secs))
            last_log = now
        time.sleep(0.5)
        missing = [peer for peer in missing if not _accepts_connections(peer[1])]
    logging.info("The other tasks of TF_CONFIG are up: %s.", _describe(peers))
    return target


def _limit(timeout_secs):
    return f"up to {timeout_secs:g} s" if timeout_secs else "without a limit"


def _elapsed(seconds, timeout_secs):
    return f"{seconds:.0f} s of {timeout_secs:g} s" if timeout_secs else f"{seconds:.0f} s"


def startup_failure_message(timeout_secs, error, what="training"):
    """The one-line message when a multi-worker run fails before its first step completes.

    Args:
      timeout_secs: the start-up deadline (`--startup_timeout_secs`).
      error: the `tf.errors.OpError` raised (one of WORKER_FAILURE_ERRORS).
      what: what did not start, e.g. "training" or "benchmark".
    """
    peers = peer_addresses()
    gone = [peer for peer in peers if not _accepts_connections(peer[1])]
    if isinstance(error, tf.errors.DeadlineExceededError):
        cause = f"not every worker joined within {timeout_secs:g} s"
    else:
        cause = f"a worker dropped out ({type(error).__name__})"
    if gone:
        who = f"{_describe(gone)} (from TF_CONFIG) no longer accepts connections"
    elif not peers:
        who = "TF_CONFIG names no other task"
    else:
        verb = "accepts" if len(peers) == 1 else "accept"
        who = (f"{_describe(peers)} (from TF_CONFIG) {verb} connections but did not join, so "
               "check they run the same command with the same TF_CONFIG cluster and see the "
               "same --output_dir")
    return (f"multi-worker {what} did not start: {cause}; {who}. Start every task with the same "
            "command and TF_CONFIG cluster (each with its own task index), or raise "
            "--startup_timeout_secs if start-up is just slow.")


class WaitingLog:
    """While a blocking call runs, logs `Still waiting for <what> (N s of T s).` every
    `PROGRESS_INTERVAL_SECS` from a thread; use as a context manager or start() / stop()."""

    def __init__(self, what, timeout_secs, interval_secs=PROGRESS_INTERVAL_SECS):
        self._what = what
        self._timeout_secs = timeout_secs
        self._interval_secs = interval_secs
        self._done = threading.Event()
        self._thread = None

    def start(self):
        start = time.monotonic()

        def log_until_done():
            while not self._done.wait(self._interval_secs):
                logging.info("Still waiting for %s (%s).", self._what,
                             _elapsed(time.monotonic() - start, self._timeout_secs))

        self._thread = threading.Thread(target=log_until_done, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._done.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()


def all_workers_barrier(strategy):
    """An op that completes once every replica of every worker runs it (a tiny all-reduce).

    Returns:
      A scalar float32 tensor: the number of replicas (they each contribute 1).
    """
    return _sum_over_all_replicas(strategy, lambda: tf.constant(1.0))


def _sum_over_all_replicas(strategy, make_value):
    """The sum of `make_value()` over every replica of every worker (an all-reduce), as this
    worker's first replica holds it."""
    def replica_fn():
        def merge_fn(strategy, value):
            return strategy.extended.reduce_to(tf.distribute.ReduceOp.SUM, value, value)
        return tf.distribute.get_replica_context().merge_call(merge_fn, args=(make_value(),))

    per_replica = strategy.extended.call_for_each_replica(
        tf.autograph.experimental.do_not_convert(replica_fn))  # see call_for_each_replica
    return strategy.experimental_local_results(per_replica)[0]


# What a multi-worker run raises when a peer is gone: its step timed out (DeadlineExceeded) or
# lost the connection (Unavailable, Cancelled).
WORKER_FAILURE_ERRORS = (tf.errors.DeadlineExceededError, tf.errors.UnavailableError,
                         tf.errors.CancelledError)


def worker_failure_message(timeout_secs, error, model_dir=None, what="training"):
    """The one-line message when a multi-worker step fails because a peer is gone.

    Args:
      timeout_secs: the time limit of the step that failed.
      error: the `tf.errors.OpError` the step raised (one of WORKER_FAILURE_ERRORS).
      model_dir: where the chief's checkpoints are (training resumes from the last), or None.
      what: what stopped, e.g. "training" or "benchmark".
    """
    if isinstance(error, tf.errors.DeadlineExceededError):
        cause = f"a step got no answer from the other workers within {timeout_secs:g} s"
    else:
        cause = f"a step lost the connection to another worker ({type(error).__name__})"
    restart = "restart every worker with the same command"
    if model_dir is not None:
        restart = (f"the last checkpoint is {tf.train.latest_checkpoint(model_dir)}; {restart} "
                   "to resume from it")
    return (f"multi-worker {what} stopped: {cause}, so a worker died or hangs (if steps are "
            f"just slow, raise --step_timeout_secs); {restart}.")


# ---------------------------------------------------------------------------- input sharding


def any_worker_flag(strategy, size=2):
    """A placeholder each worker feeds (0.0 or 1.0 each) and its sum over all replicas.

    Run every step, it tells every worker at once whether any of them raised a flag (e.g.
    got SIGTERM), so that all stop after the same step.

    Returns:
      (flags placeholder [size] with default zeros, float32 [size]: the sum over replicas).
    """
    flag = tf1.placeholder_with_default(tf.zeros([size]), [size], name="stop_requested")
    return flag, _sum_over_all_replicas(strategy, lambda: tf.identity(flag))
