"""Multi-worker coordination: no wait between workers is silent or endless.

A multi-worker worker (see `distribute`) waits at most `startup_timeout_secs`
(`--startup_timeout_secs`) for every other task of TF_CONFIG to start (`wait_for_workers`), and
as long again for them to join the first step; a later step waits for every worker at most
`step_timeout_secs` (`--step_timeout_secs`, `TrainingDeadlines`, `session_run_deadline`), so if
one dies the others stop with a message naming what to do (`startup_failure_message`,
`worker_failure_message`) instead of hanging. While waiting, one short line every
`PROGRESS_INTERVAL_SECS` (`WaitingLog`). Flags every worker must agree on each step (a stop
request) are summed over all replicas (`any_worker_flag`, `all_workers_barrier`).
"""

import dataclasses
import socket
import threading
import time

import tensorflow as tf
from absl import logging

from bert_tf import options
from bert_tf.errors import BertTfError
from bert_tf.training import distribute

tf1 = tf.compat.v1

# How long a multi-worker step may wait for the others, and how long workers wait for each
# other to start and to join the first step (see `options.DistributionOptions`).
DEFAULT_STEP_TIMEOUT_SECS = options.DistributionOptions.step_timeout_secs
DEFAULT_STARTUP_TIMEOUT_SECS = options.DistributionOptions.startup_timeout_secs
# Seconds between the progress lines of a wait.
PROGRESS_INTERVAL_SECS = 30


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


def session_run_deadline(timeout_secs=None):
    """The `tf.compat.v1.RunOptions` (a session.run's options) that give a multi-worker
    training step (or the start-up barrier) its deadline.

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
    cluster, task_type, task_index = distribute.parse_tf_config()
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
    target = distribute.session_target(strategy)
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
