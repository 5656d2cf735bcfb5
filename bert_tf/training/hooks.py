"""The hooks and listeners of `Estimator.train`: progress, summaries, checkpoints, the loss and
weight checks, SIGTERM / SIGINT, evaluation during training and the multi-worker start-up.

Each is a `tf.compat.v1.train.SessionRunHook` (or `CheckpointSaverListener`) that
`Estimator.train` puts in its MonitoredSession, in an order that matters (see there).
"""

import datetime
import os
import signal
import sys
import threading
import time
import uuid

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import errors
from bert_tf.training import checkpoints


class RunAfterSessionCreatedHook(tf.compat.v1.train.SessionRunHook):
    """Runs an op (a dataset iterator's initializer) once the session exists."""

    def __init__(self, op):
        self._op = op

    def after_create_session(self, session, coord):
        session.run(self._op)


class WaitForWorkersHook(tf.compat.v1.train.SessionRunHook):
    """Waits, once the session exists, until every worker is there (a tiny all-reduce).

    Without it the first step of a worker that started early would count the others' start-up
    against the step timeout.
    """

    def __init__(self, barrier, num_replicas, run_options):
        self._barrier = barrier
        self._num_replicas = num_replicas
        self._run_options = run_options

    def after_create_session(self, session, coord):
        # A DeadlineExceededError goes to train(), whose message names the missing workers.
        logging.info("Waiting for all %d replicas to join.", self._num_replicas)
        session.run(self._barrier, options=self._run_options)
        logging.info("All %d replicas joined.", self._num_replicas)


class StartupTimesHook(tf.compat.v1.train.SessionRunHook):
    """Logs, after the first step, where the time before the training loop went.

    `Started the training loop in <t> s: graph <t> s, session <t> s, graph files and
    checkpoint <t> s, first step <t> s.` It must be the first hook: "session" ends when its
    `after_create_session` runs (variables initialized or restored, the initial checkpoint
    read), "graph files and checkpoint" when the first step starts (what the other hooks do
    on a new session: graph.pbtxt, the events file's graph, the step's checkpoint; with several
    workers also the wait for the others), and "first step" includes grappler's optimization
    of the step's graph.
    """

    def __init__(self, start_time):
        """`start_time`: `time.monotonic()` when training began (before the graph)."""
        self._times = [start_time]

    def begin(self):
        self._times.append(time.monotonic())

    def after_create_session(self, session, coord):
        self._times.append(time.monotonic())

    def before_run(self, run_context):
        if len(self._times) == 3:
            self._times.append(time.monotonic())

    def after_run(self, run_context, run_values):
        if len(self._times) == 4:
            self._times.append(time.monotonic())
            logging.info("%s", startup_line(self._times))


def startup_line(times):
    """The log line of `StartupTimesHook` from its five `time.monotonic()` readings."""
    phases = [b - a for a, b in zip(times, times[1:], strict=False)]
    names = ("graph", "session", "graph files and checkpoint", "first step")
    parts = ", ".join(f"{name} {secs:.1f} s" for name, secs in zip(names, phases, strict=True))
    return f"Started the training loop in {times[-1] - times[0]:.1f} s: {parts}."


class StepHook(tf.compat.v1.train.SessionRunHook):
    """A hook that reads the global step (`self._global_step`)."""

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()


class StopOnNonFiniteLossHook(StepHook):
    """Raises BertTfError when the loss is NaN or Inf, before that step can be checkpointed.

    By the time a step's loss is seen, its update has already been applied, so the weights in
    the session may be poisoned. This hook comes before the checkpoint saver in the hook list
    (its after_run raises first, so that step is not saved) and the exception skips the
    save-on-close, so the last checkpoint on disk is the last good one. (Like
    tf.compat.v1.train.NanTensorHook, but it also catches Inf and names the step.)
    """

    def __init__(self, loss, model_dir):
        self._loss = loss
        self._model_dir = model_dir

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        if np.all(np.isfinite(run_values.results)):
            return
        step = run_context.session.run(self._global_step)
        raise errors.BertTfError(
            f"Training diverged: the loss became {run_values.results} at step {step}, which was "
            f"not saved, so '{self._model_dir}' still holds the last good checkpoint "
            f"({tf.train.latest_checkpoint(self._model_dir)}); lower --learning_rate (and for "
            "fp16 use loss scaling) and run again to resume from it.")


class RefuseNonFiniteWeightsListener(tf.compat.v1.train.CheckpointSaverListener):
    """Raises BertTfError instead of saving trainable weights that hold NaN or Inf.

    Catches what the loss check cannot: an update from non-finite gradients after a finite loss.
    Only trainable variables are checked (gradient accumulators or loss-scale state may hold
    Inf transiently by design).
    """

    def begin(self):
        self._weights_finite = tf.reduce_all([
            tf.reduce_all(tf.math.is_finite(v)) for v in tf.compat.v1.trainable_variables()
            if v.dtype.base_dtype.is_floating] or [True])

    def before_save(self, session, global_step_value):
        if not session.run(self._weights_finite):
            raise errors.BertTfError(
                f"Training diverged: the weights hold NaN or Inf at step {global_step_value}, so "
                "they were not saved; lower --learning_rate (and for fp16 use loss scaling) and "
                "run again to resume from the last good checkpoint.")


class StopOnSignalHook(StepHook):
    """Stops every worker after the same step: on SIGTERM / SIGINT to any of them (recorded
    by `SignalHandlers`), or when the chief's evaluation asks to stop early.

    Without a strategy it stops the session after the current step; under a multi-worker
    strategy every worker all-reduces its [signal, early stop] flags after each step
    (`multi_worker.any_worker_flag`), so all workers stop after the same step (an early stop
    decided after step N takes effect after step N + 1 there). The chief's
    CheckpointSaverHook saves the last step when the session closes.
    """

    def __init__(self, any_worker=None, run_options=None):
        """`run_options`: those of a training step, so that the flags' all-reduce waits for a
        dead worker no longer than the step would (`--step_timeout_secs`)."""
        self.signal_number = None  # Set by SignalHandlers.
        self.early_stop = False  # Set by EvaluateHook.
        self.stopped_at = None  # The step a signal (to any worker) stopped training after.
        self._flag, self._any = any_worker if any_worker is not None else (None, None)
        self._run_options = run_options

    @property
    def single_process(self):
        return self._any is None

    def after_run(self, run_context, run_values):
        if self._any is not None:
            # Its own run after the step's: launched in the same run as the step's all-reduces,
            # the collectives could start in another order on each worker and deadlock.
            flags = [1.0 if self.signal_number else 0.0, 1.0 if self.early_stop else 0.0]
            results = run_context.session.run(self._any, feed_dict={self._flag: flags},
                                              options=self._run_options)
            signalled, early_stop = (float(x) > 0 for x in results)
        else:
            signalled, early_stop = self.signal_number is not None, self.early_stop
        if signalled and self.stopped_at is None:
            self.stopped_at = int(run_context.session.run(self._global_step))
            logging.info("Stopping after step %d: %s.", self.stopped_at,
                         "a worker got a stop signal" if self.signal_number is None else
                         f"got signal {self.signal_number}")
        if signalled or early_stop:
            run_context.request_stop()


class SignalHandlers:
    """Routes SIGTERM / SIGINT to a `StopOnSignalHook` while training (main thread only).

    After `grace_secs` without the session closing, or on a second signal, the process exits
    at once with 128 + the signal number: the newest whole checkpoint stays the one named in
    the `checkpoint` state file.
    """

    def __init__(self, hook, grace_secs):
        self._hook = hook
        self._grace_secs = grace_secs
        self._previous = {}
        self._done = threading.Event()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info):
        self._done.set()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame):
        del frame
        if self._hook.signal_number is not None:
            os._exit(128 + signum)
        self._hook.signal_number = signum
        threading.Thread(target=self._exit_after_grace, args=(signum,), daemon=True).start()

    def _exit_after_grace(self, signum):
        if not self._done.wait(self._grace_secs):
            sys.stderr.write(f"error: got signal {signum} but the current step and its "
                             f"checkpoint did not finish within --preemption_grace_secs="
                             f"{self._grace_secs:g}; the newest whole checkpoint is the one "
                             "the checkpoint state file names.\n")
            sys.stderr.flush()
            os._exit(128 + signum)


class EvaluateHook(StepHook):
    """Every `every_n_steps` steps (chief only): saves that step's checkpoint through the
    chief's saver hook, calls `evaluate_fn(step, checkpoint_path)` and stops training when it
    returns True (through `stop_hook`, so that every worker stops)."""

    def __init__(self, evaluate_fn, every_n_steps, saver_hook, stop_hook):
        self._evaluate_fn, self._every_n_steps = evaluate_fn, every_n_steps
        self._saver_hook, self._stop_hook = saver_hook, stop_hook
        self._last_evaluated = None

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        # The step read before this run's update: only a run that may have completed a
        # multiple of every_n_steps (with accumulation, not every run updates) reads it again.
        if (int(run_values.results) + 1) % self._every_n_steps:
            return
        session = run_context.session
        step = int(session.run(self._global_step))
        if step % self._every_n_steps or step == self._last_evaluated:
            return
        self._last_evaluated = step
        self._saver_hook._save(session, step)  # A no-op if this step is saved already.
        checkpoint_path = f"{self._saver_hook._save_path}-{step}"
        if self._evaluate_fn(step, checkpoint_path):
            self._stop_hook.early_stop = True
            if self._stop_hook.single_process:
                run_context.request_stop()


class CheckpointSaverHook(tf.compat.v1.train.CheckpointSaverHook):
    """CheckpointSaverHook that never rewrites the checkpoint the state file points at.

    The stock hook saves right after the session starts, i.e. re-saves model.ckpt-N after
    restoring it. TF truncates and rewrites a checkpoint's .index in place, so a kill during that
    save would break the only checkpoint `checkpoint` names. The weights at step N are the ones
    just restored, so that save is skipped.
    """

    def after_create_session(self, session, coord):
        """The stock hook's start (graph.pbtxt, the graph and meta graph in the events file,
        the step's checkpoint), with graph.pbtxt through `write_graph_text` (the stock
        pure-Python text_format took seconds of every run for a BERT training graph) and one
        GraphDef for the three (`FileWriter.add_graph` serializes the graph again)."""
        from tensorflow.core.util import event_pb2
        from tensorflow.python.framework import meta_graph

        del coord
        global_step = session.run(self._global_step_tensor)
        graph = tf.compat.v1.get_default_graph()
        graph_def = graph.as_graph_def(add_shapes=True)
        if self._save_graph_def:
            write_graph_text(graph_def, self._checkpoint_dir, "graph.pbtxt")
        saver = self._get_saver()
        # The event add_graph writes, from the GraphDef at hand.
        self._summary_writer.add_event(event_pb2.Event(
            wall_time=time.time(), graph_def=graph_def.SerializeToString()))
        self._summary_writer.add_meta_graph(meta_graph.create_meta_graph_def(
            graph_def=graph_def, saver_def=saver.saver_def if saver else None))
        self._save(session, global_step)  # The checkpoint of the state at `global_step`.
        self._timer.update_last_triggered_step(global_step)

    def _save(self, session, step):
        latest = tf.train.latest_checkpoint(self._checkpoint_dir)
        if latest and os.path.basename(latest) == f"{os.path.basename(self._save_path)}-{step}":
            return False
        try:
            return super()._save(session, step)
        except (tf.errors.OpError, OSError) as e:
            if not checkpoints.is_write_error(e):
                raise
            checkpoints.remove_partial_writes(self._checkpoint_dir)  # Gives the space back.
            raise errors.BertTfError(checkpoints.write_failure_message(
                e, f"checkpoint {step}", self._checkpoint_dir)) from None


class SummarySaverHook(tf.compat.v1.train.SummarySaverHook):
    """SummarySaverHook whose training steps all fetch the same tensors.

    The stock hook adds the merged summary to a step's fetches only every `save_steps`, and a
    session builds (and grappler optimizes) one executor per distinct set of fetches: the first
    summary-less step paid a second graph optimization and warm-up, seconds of a short run.
    When every summary is a scalar this hook fetches them at every step and still
    writes them every `save_steps`. bert_tf's own scalars (loss, learning rate, gradient norm)
    are computed by the step anyway; a scalar of something the step does not compute (say a
    norm over all weights) now runs every step. Any other summary (a histogram, an image)
    keeps the stock behaviour.
    """

    def begin(self):
        super().begin()
        self._every_step_summaries = None  # The scaffold's summary op exists once the session does.

    def before_run(self, run_context):
        run_args = super().before_run(run_context)
        if self._every_step_summaries is None:
            summaries = self._get_summary_op() or []
            scalars = all(_is_scalar_summary(tensor.op) for tensor in summaries)
            self._every_step_summaries = summaries if scalars else []
        if self._every_step_summaries and "summary" not in run_args.fetches:
            # after_run writes a summary only on the steps it requested one.
            run_args.fetches["summary"] = self._every_step_summaries
        return run_args


def _is_scalar_summary(op):
    """Whether a summary op is a ScalarSummary, or merges only those."""
    if op.type == "MergeSummary":
        return all(_is_scalar_summary(tensor.op) for tensor in op.inputs)
    return op.type == "ScalarSummary"


class ProgressHook(tf.compat.v1.train.StepCounterHook):
    """StepCounterHook that also records "examples_per_sec" and logs loss, speed and ETA.

    Every `every_n_steps` global steps it writes the "global_step/sec" and "examples_per_sec"
    summaries and logs e.g. `step 120/1000 loss=3.21 steps/sec=4.1 examples/sec=131 ETA 0:03:34`.
    Rates are over the last interval; examples/sec = steps/sec * examples_per_step. The
    `training_metrics` (name -> scalar) of that step are logged after it and written as
    summaries too.
    """

    def __init__(self, loss, max_steps, examples_per_step, every_n_steps, output_dir,
                 training_metrics=None):
        super().__init__(every_n_steps=every_n_steps, output_dir=output_dir)
        self._loss = loss
        self._max_steps = max_steps
        self._examples_per_step = examples_per_step
        self._metrics = dict(training_metrics or {})
        self._last_loss = None
        self._last_metrics = {}

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(
            [self._global_step_tensor, self._loss, self._metrics])

    def after_run(self, run_context, run_values):
        stale_global_step, self._last_loss, self._last_metrics = run_values.results
        # The step read races with the update, so two runs can read the same value; that is not
        # the "global step has not been increased" the parent warns about, so silence it.
        self._last_global_step = None
        super().after_run(run_context, run_values._replace(results=stale_global_step))

    def _log_and_record(self, elapsed_steps, elapsed_time, global_step):
        steps_per_sec = elapsed_steps / elapsed_time
        examples_per_sec = (None if self._examples_per_step is None
                            else steps_per_sec * self._examples_per_step)
        if self._summary_writer is not None:
            values = [tf.compat.v1.Summary.Value(tag=self._summary_tag,
                                                 simple_value=steps_per_sec)]
            if examples_per_sec is not None:
                values.append(tf.compat.v1.Summary.Value(tag="examples_per_sec",
                                                         simple_value=examples_per_sec))
            values += [tf.compat.v1.Summary.Value(tag=name, simple_value=float(value))
                       for name, value in sorted(self._last_metrics.items())]
            self._summary_writer.add_summary(tf.compat.v1.Summary(value=values), global_step)
        line = progress_line(global_step, self._max_steps, self._last_loss, steps_per_sec,
                             examples_per_sec)
        metrics = " ".join(f"{name}={value:.4g}"
                           for name, value in sorted(self._last_metrics.items()))
        logging.info("%s", f"{line} {metrics}" if metrics else line)


def progress_line(step, max_steps, loss, steps_per_sec, examples_per_sec=None):
    """`step 120/1000 loss=3.21 steps/sec=4.1 examples/sec=131 ETA 0:03:34` (ETA at this rate)."""
    eta_secs = max(max_steps - step, 0) / steps_per_sec if steps_per_sec > 0 else 0
    speed = f"steps/sec={steps_per_sec:.3g}"
    if examples_per_sec is not None:
        speed += f" examples/sec={examples_per_sec:.0f}"
    return (f"step {step}/{max_steps} loss={loss:.4g} {speed} "
            f"ETA {datetime.timedelta(seconds=round(eta_secs))}")


def write_graph_text(graph_def, directory, name):
    """Writes `graph_def` as a text proto to directory/name (atomically, as
    `tf.io.write_graph(..., as_text=True)` does); returns the path.

    With upb protobuf (`api_implementation.Type() == "upb"`) `str(message)` is its C text
    encoder: an order of magnitude faster than `text_format.MessageToString` and parsed back
    to the same GraphDef (only the order of map entries and the spelling of floats may
    differ). Other protobuf builds and big-endian hosts (whose tensor contents
    tf.io.write_graph swaps) go through `tf.io.write_graph`.
    """
    from google.protobuf.internal import api_implementation
    from tensorflow.python.lib.io import file_io

    if api_implementation.Type() != "upb" or sys.byteorder == "big":
        return tf.io.write_graph(graph_def, directory, name, as_text=True)
    tf.io.gfile.makedirs(directory)
    path = os.path.join(directory, name)
    file_io.atomic_write_string_to_file(path, str(graph_def))
    return path


def open_summary_writer(directory):
    """Opens `tf.compat.v1.summary.FileWriterCache`'s writer for `directory` with no graph.

    The stock hooks take their writer from that cache, which opens it with the default graph:
    a serialization of the whole training graph before it is final, whose event
    CheckpointSaverHook's graph event then supersedes. Opened first under an empty graph, the
    writer records an empty graph event instead; a writer already open is kept.
    """
    with tf.Graph().as_default():
        return tf.compat.v1.summary.FileWriterCache.get(directory)


def write_scalar_summaries(directory, values, step):
    """Writes each scalar in `values` as a TensorBoard summary at `step` under `directory`."""
    # An event file is named by the second it is opened in: without a suffix of its own, a
    # second write within that second (an evaluation, then the final one) replaces the first.
    writer = tf.compat.v1.summary.FileWriter(directory,
                                             filename_suffix=f".{uuid.uuid4().hex[:12]}")
    summary = tf.compat.v1.Summary(value=[
        tf.compat.v1.Summary.Value(tag=key, simple_value=float(value))
        for key, value in sorted(values.items()) if np.ndim(value) == 0])
    writer.add_summary(summary, step)
    writer.close()
