"""A small Estimator: the `tf.estimator` contract on top of `tf.compat.v1.train`.

`tf.estimator` is gone from TensorFlow >= 2.16. This module keeps its contract so code written for
the original BERT release ports with a changed import:

    model_fn(features, labels, mode, params) -> EstimatorSpec
        A model_fn that also takes `purpose` gets a `Purpose`: why this graph is built (train,
        evaluate, predict here, export) and whether a checkpoint of the run is restored over it.
    input_fn(params) -> tf.data.Dataset of (features, labels) or features; params["batch_size"]
        is set from the Estimator's train/eval/predict_batch_size (the TPUEstimator convention).
        `input_fn()` with no arguments works too.

Training runs in a `tf.compat.v1.train.MonitoredSession`: it restores the latest checkpoint
in `model_dir` (so running the same command again continues where it stopped), saves
`model_dir/model.ckpt-N` every `save_checkpoints_steps` and at the end, writes TensorBoard
summaries (every summary in the graph, e.g. the learning rate and gradient norm that
`bert_tf.optimization` records, plus "loss", "global_step/sec" and "examples_per_sec") and logs
a progress line with loss, speed and ETA.

Checkpoints are crash safe: TF writes a new checkpoint's files before atomically renaming the
`checkpoint` state file, so a SIGKILL leaves the state file pointing at the previous, whole
checkpoint. TF rewrites a checkpoint's `.index` in place, though, so this module never re-saves
the step the state file already points at (the stock hook does so right after every restore).

A non-finite loss stops training with a `BertTfError` naming the step, and weights that are not
finite are never written to a checkpoint (see `hooks_lib.StopOnNonFiniteLossHook`).

Distribution: with `RunConfig(train_distribute=strategy)` (see `training.distribute`) `train`
builds the model once per replica through `strategy.extended.call_for_each_replica`, feeds each
replica its own batch of `train_batch_size / num_replicas` examples (the input_fn is called once
per worker with that batch size and, if it takes one, an `input_context` to shard by), logs and
checks the loss averaged over replicas, and runs the replicas' train ops together (the
optimizer all-reduces the gradients). Only the chief writes checkpoints and summaries; every
worker restores from the chief's checkpoint in model_dir. evaluate, predict and export run on
one device. Only a multi-worker strategy makes a process a non-chief: without one, train() is
the chief whatever TF_CONFIG says. A multi-worker train() waits at most
`RunConfig.startup_timeout_secs` for the other workers to start and as long again for them to
join the first step, then at most `step_timeout_secs` per step; each ends in a `BertTfError`.
"""

import collections
import contextlib
import dataclasses
import functools
import inspect
import os
import signal
import time

import tensorflow as tf
from absl import logging

from bert_tf import errors, fileio
from bert_tf import options as options_lib
from bert_tf.training import checkpoints, distribute, multi_worker, resume, serving_input
from bert_tf.training import hooks as hooks_lib
from bert_tf.training import session as session_lib
from bert_tf.training.faults import translate_faults

# The serving contract of `export_saved_model`, where tf.estimator users find it.
from bert_tf.training.serving_input import ServingInputReceiver, build_raw_serving_input_receiver_fn  # noqa: F401

# How long a closing training session waits for its input threads (MonitoredTrainingSession's).
_STOP_GRACE_PERIOD_SECS = 120


class ModeKeys:
    """The mode a model_fn is built for (the same strings as `tf.estimator.ModeKeys`)."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


@dataclasses.dataclass(frozen=True)
class Purpose:
    """Why the Estimator builds this graph, for a model_fn that takes a `purpose` argument.

    A model_fn can skip what the purpose makes useless: initializing variables from a
    pre-trained checkpoint when the run's own checkpoint is restored over them, or the last
    layer's rows no output reads in a graph that runs here (`Estimator.predict`) rather than in
    a serving runtime (an export).
    """

    name: str  # "train", "evaluate", "predict" (Estimator.predict, in this process), "export".
    mode: str  # The `ModeKeys` value the model_fn also gets.
    # Every variable will be restored from a checkpoint of the run (evaluation, export, and
    # prediction when model_dir has one).
    restores_checkpoint: bool

    @property
    def is_training(self):
        return self.mode == ModeKeys.TRAIN

    @property
    def is_export(self):
        return self.name == "export"

    @classmethod
    def of(cls, mode, restores_checkpoint=False, export=True):
        """The purpose of a graph built for `mode`; a PREDICT graph is an export's unless
        `export` is False (as for a model_fn called directly, outside the Estimator)."""
        name = {ModeKeys.TRAIN: "train", ModeKeys.EVAL: "evaluate",
                ModeKeys.PREDICT: "export" if export else "predict"}[mode]
        return cls(name, mode, restores_checkpoint)


def purpose_from_mode(model_fn):
    """Decorates `model_fn(features, labels, mode, params, purpose)` so that it is also a
    model_fn of Google's four arguments: called without `purpose` (outside the Estimator),
    it gets `Purpose.of(mode)`. The Estimator, which reads the signature, still passes its
    own."""

    @functools.wraps(model_fn)
    def model_fn_with_purpose(features, labels, mode, params, purpose=None):
        return model_fn(features, labels, mode, params, purpose or Purpose.of(mode))

    return model_fn_with_purpose


_SPEC_FIELDS = ("mode", "predictions", "loss", "train_op", "eval_metric_ops", "export_outputs",
                "training_hooks", "evaluation_hooks", "prediction_hooks", "scaffold",
                "examples_per_step", "training_metrics")


class EstimatorSpec(collections.namedtuple("EstimatorSpec", _SPEC_FIELDS)):
    """What a model_fn returns.

    Fields as in `tf.estimator.EstimatorSpec`, plus `examples_per_step`: the number of examples one
    global step consumes (an int), for the examples/sec summary. Leave it None to use the static
    batch dimension of the features; set it when one step is more than one batch (gradient
    accumulation). Under a distribution strategy the model_fn runs once per replica and this is
    the count of one replica (the Estimator multiplies it by the replicas). `training_metrics`
    (TRAIN) maps a name to a float32 scalar computed on the training batch: the chief logs
    them with the progress line and writes them to TensorBoard every `log_step_count_steps`
    (under a strategy: averaged over the chief's own replicas). `eval_metric_ops`
    maps a name to a `(value, update_op)` pair from
    `tf.compat.v1.metrics`; `export_outputs` maps a signature name to a tensor or dict of tensors.
    """

    def __new__(cls, mode, predictions=None, loss=None, train_op=None, eval_metric_ops=None,
                export_outputs=None, training_hooks=None, evaluation_hooks=None,
                prediction_hooks=None, scaffold=None, examples_per_step=None,
                training_metrics=None):
        return super().__new__(cls, mode, predictions, loss, train_op, eval_metric_ops,
                               export_outputs, training_hooks, evaluation_hooks, prediction_hooks,
                               scaffold, examples_per_step, training_metrics)


@dataclasses.dataclass
class RunConfig:
    """How an Estimator runs; `model_dir` may be given here or to the Estimator."""

    model_dir: str = None
    # The defaults are the run_*.py flags' (`options.RunOptions`).
    # None: save only at the start and the end of train().
    save_checkpoints_steps: int = options_lib.RunOptions.save_checkpoints_steps
    keep_checkpoint_max: int = options_lib.RunOptions.keep_checkpoint_max
    log_step_count_steps: int = options_lib.RunOptions.log_every_n_steps
    # None or 0: no graph summaries.
    save_summary_steps: int = options_lib.RunOptions.save_summary_steps
    tf_random_seed: int = None  # Graph-level seed; set it for repeatable runs.
    session_config: tf.compat.v1.ConfigProto = None  # Default: allow_soft_placement.
    train_distribute: object = None  # A tf.distribute strategy for train() (training.distribute).
    # Multi-worker only: seconds a training step may wait for the other workers before train()
    # stops with an error (a worker died or hangs). None: multi_worker.DEFAULT_STEP_TIMEOUT_SECS;
    # 0: wait forever.
    step_timeout_secs: float = None
    # Multi-worker only: seconds train() waits for the other workers of TF_CONFIG to start, and
    # as long again for them to join the first step. None:
    # multi_worker.DEFAULT_STARTUP_TIMEOUT_SECS; 0: wait forever.
    startup_timeout_secs: float = None
    # SIGTERM / SIGINT during train(): seconds to finish the step and write its checkpoint.
    preemption_grace_secs: float = options_lib.RunOptions.preemption_grace_secs
    # Save the input pipeline's position with every checkpoint and restore it on resume
    # (bert_tf.training.resume; one input pipeline, i.e. no train_distribute). Off unless
    # asked here (code ported from tf.estimator never saved it); the run_*.py flag is on.
    exact_resume: bool = False

    @property
    def is_chief(self):
        """Whether this process writes checkpoints and summaries: always, except on the
        non-chief workers of a multi-worker `train_distribute` (TF_CONFIG alone never makes
        a non-chief, so a single process never waits for a chief)."""
        return distribute.is_chief(self.train_distribute)


@dataclasses.dataclass
class _TrainingGraph:
    """What `Estimator.train` built: the op one step runs, its scaffold and hooks, the hook
    that stops on SIGTERM / SIGINT, and the session.run deadlines of the first and the later
    steps (`multi_worker.session_run_deadline`)."""

    train_op: tf.Operation
    scaffold: tf.compat.v1.train.Scaffold
    hooks: list
    stop_on_signal: object
    first_step_options: object
    step_options: object


class Estimator:
    """Trains, evaluates, predicts with and exports a model_fn (see the module docstring)."""

    def __init__(self, model_fn, model_dir=None, config=None, params=None, train_batch_size=None,
                 eval_batch_size=None, predict_batch_size=None):
        self.config = config or RunConfig()
        self.model_dir = model_dir or self.config.model_dir
        if not self.model_dir:
            raise errors.BertTfError("Estimator: no model_dir given; pass model_dir (the output "
                                     "directory for checkpoints and summaries).")
        self.model_fn = model_fn
        self.params = dict(params or {})
        self._batch_sizes = {ModeKeys.TRAIN: train_batch_size, ModeKeys.EVAL: eval_batch_size,
                             ModeKeys.PREDICT: predict_batch_size}
        self._session_config = (self.config.session_config or
                                tf.compat.v1.ConfigProto(allow_soft_placement=True))

    def latest_checkpoint(self):
        """Path prefix of the newest whole checkpoint in model_dir, or None."""
        return tf.train.latest_checkpoint(self.model_dir)

    def batch_per_replica(self, mode):
        """Examples one replica computes per session run in `mode` (None: not set)."""
        batch = self._batch_sizes.get(mode)
        strategy = self.config.train_distribute if mode == ModeKeys.TRAIN else None
        return batch if batch is None or strategy is None else (
            batch // strategy.num_replicas_in_sync)

    # ----------------------------------------------------------------------------------- train

    @translate_faults(ModeKeys.TRAIN)
    def train(self, input_fn, max_steps, hooks=None, saving_listeners=None, evaluate_fn=None,
              evaluate_every_n_steps=0):
        """Trains until global_step reaches `max_steps` or input_fn runs out; returns self.

        Args:
          input_fn, max_steps, hooks, saving_listeners: as `tf.estimator.Estimator.train`.
          evaluate_fn: `evaluate_fn(step, checkpoint_path) -> stop`, called on the chief
            every `evaluate_every_n_steps` steps with that step's checkpoint (saved for it);
            returning True stops training after that step.
          evaluate_every_n_steps: see `evaluate_fn` (0: never).

        Raises:
          errors.Preempted: SIGTERM or SIGINT (to any worker) stopped training after the
            current step, whose checkpoint the chief wrote (within
            `RunConfig.preemption_grace_secs`, else the process exits at once).
        """
        strategy = self.config.train_distribute
        if strategy is not None and not isinstance(
                strategy, (tf.distribute.Strategy, tf.compat.v1.distribute.Strategy)):
            raise TypeError(f"RunConfig.train_distribute must be a tf.distribute strategy, got "
                            f"{type(strategy).__name__}.")
        if self.config.is_chief if strategy is None else distribute.is_chief(strategy):
            checkpoints.set_aside_unreadable(self.model_dir)  # Before anything reads one.
        start_step = self._checkpoint_step()
        if start_step >= max_steps:
            logging.info("Checkpoint in %s is at step %d >= max_steps=%d; nothing to train.",
                         self.model_dir, start_step, max_steps)
            return self
        logging.info("Training %s from step %d to %d.", self.model_dir, start_step, max_steps)
        several_workers = distribute.is_multi_worker(strategy)
        deadlines = multi_worker.TrainingDeadlines.of(
            self.config.step_timeout_secs, self.config.startup_timeout_secs,
            evaluates_while_training=several_workers and bool(evaluate_every_n_steps))
        with tf.Graph().as_default(), _strategy_scope(strategy):
            self._set_seed()
            run = self._training_graph(input_fn, max_steps, strategy, deadlines, hooks,
                                       saving_listeners, evaluate_fn, evaluate_every_n_steps)
            self._run_training_loop(run, strategy, deadlines)
        if run.stop_on_signal.stopped_at is not None:
            raise errors.Preempted(run.stop_on_signal.stopped_at,
                                   run.stop_on_signal.signal_number or signal.SIGTERM)
        logging.info("Finished training; latest checkpoint: %s", self.latest_checkpoint())
        return self

    def _training_graph(self, input_fn, max_steps, strategy, deadlines, hooks,
                        saving_listeners, evaluate_fn, evaluate_every_n_steps):
        """Builds the training graph in the default graph: its train op, scaffold and hooks."""
        start_time = time.monotonic()  # The start-up log's "graph" phase begins here.
        is_chief = distribute.is_chief(strategy)
        several_workers = distribute.is_multi_worker(strategy)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        if several_workers:
            multi_worker.cache_global_step_read(global_step)
        features, labels, input_hooks = self._get_features_and_labels(
            input_fn, ModeKeys.TRAIN, strategy, saveable_input=self.config.exact_resume)
        if self.config.exact_resume:
            # A worker that died just before a checkpoint stops the others within a step's
            # deadline: its input state, which never comes, is not waited for longer.
            wait_secs = resume.OTHER_WORKERS_WAIT_SECS
            if several_workers and deadlines.step:
                wait_secs = min(wait_secs, deadlines.step)
            input_hooks, saving_listeners = resume.resumable_input(
                input_hooks, saving_listeners, self.model_dir, is_chief,
                self.config.save_checkpoints_steps or max_steps, wait_secs)
        spec = self._call_model_fn(features, labels, Purpose.of(ModeKeys.TRAIN), strategy)
        if spec.loss is None or spec.train_op is None:
            raise ValueError("model_fn must return an EstimatorSpec with loss and train_op "
                             "in TRAIN mode.")
        tf.compat.v1.summary.scalar("loss", spec.loss)
        scaffold = self._scaffold(spec, keep_checkpoint_max=self.config.keep_checkpoint_max,
                                  self_initializing=strategy is None)
        # A multi-worker step waits for the others at most `deadlines.step` (the first step,
        # which also optimizes the graph on every worker, `deadlines.startup`).
        first_step_options = step_options = None
        if several_workers:
            first_step_options = multi_worker.session_run_deadline(deadlines.startup)
            step_options = multi_worker.session_run_deadline(deadlines.step)
        stop_on_signal = hooks_lib.StopOnSignalHook(
            multi_worker.any_worker_flag(strategy) if several_workers else None, step_options)
        # Order matters: the loss check must run before the checkpoint saver in the same step.
        # Every worker runs it (it fetches the loss reduced over all workers, so all of them
        # take part in that all-reduce at every step and stop at the same step).
        all_hooks = [hooks_lib.StartupTimesHook(start_time), stop_on_signal, *input_hooks,
                     hooks_lib.StopOnNonFiniteLossHook(spec.loss, self.model_dir),
                     tf.compat.v1.train.StopAtStepHook(last_step=max_steps),
                     *(hooks or []), *(spec.training_hooks or [])]
        if several_workers:
            all_hooks.insert(2, hooks_lib.WaitForWorkersHook(
                multi_worker.all_workers_barrier(strategy), strategy.num_replicas_in_sync,
                multi_worker.session_run_deadline(deadlines.startup)))
        if is_chief:
            all_hooks += self._chief_training_hooks(
                spec.loss, scaffold, max_steps,
                spec.examples_per_step or _static_batch_size(features, strategy),
                saving_listeners, spec.training_metrics)
            if evaluate_fn is not None and evaluate_every_n_steps:
                all_hooks.append(hooks_lib.EvaluateHook(evaluate_fn, evaluate_every_n_steps,
                                                        all_hooks[-1], stop_on_signal))
        return _TrainingGraph(spec.train_op, scaffold, all_hooks, stop_on_signal,
                              first_step_options, step_options)

    def _run_training_loop(self, run, strategy, deadlines):
        """Runs `run.train_op` until a hook stops the session; a multi-worker failure to start
        or to keep up is one `BertTfError`."""
        several_workers = distribute.is_multi_worker(strategy)
        options = run.first_step_options
        # Session creation (its variables' initialization waits for the chief's initial
        # values), the barrier and the first step are the start-up: logged while they wait.
        waiting = multi_worker.WaitingLog("the first step, which needs every worker",
                                          deadlines.startup)
        try:
            if several_workers:
                multi_worker.wait_for_workers(strategy, deadlines.startup)
                waiting.start()
            with hooks_lib.SignalHandlers(run.stop_on_signal, self.config.preemption_grace_secs), \
                    self._training_session(strategy, run.scaffold, run.hooks,
                                           deadlines.session) as sess:
                while not sess.should_stop():
                    sess.run(run.train_op, options=options)
                    options = run.step_options
                    waiting.stop()
        except multi_worker.WORKER_FAILURE_ERRORS as e:
            if not several_workers:
                raise
            if options is run.first_step_options:
                message = multi_worker.startup_failure_message(deadlines.startup, e)
            else:
                message = multi_worker.worker_failure_message(deadlines.step, e,
                                                              model_dir=self.model_dir)
            raise errors.BertTfError(message) from None
        finally:
            waiting.stop()

    def _training_session(self, strategy, scaffold, hooks, timeout_secs):
        """The MonitoredSession of train(): restores model_dir's latest checkpoint, or inits.

        `timeout_secs` bounds a multi-worker session's runs that set no deadline themselves.
        """
        config = session_lib.training_session_config(self._session_config,
                                                     tf.compat.v1.get_default_graph())
        if strategy is None:
            # Always the chief: a non-chief's session waits for a chief to initialize the
            # variables, and without a multi-worker strategy there is no other process. What
            # MonitoredTrainingSession(is_chief=True) builds, with our hooks doing its saving.
            return tf.compat.v1.train.MonitoredSession(
                session_lib.SelfInitializingSessionCreator(
                    scaffold=scaffold, checkpoint_dir=self.model_dir, config=config),
                hooks=hooks, stop_grace_period_secs=_STOP_GRACE_PERIOD_SECS)
        # Under a strategy every worker initializes or restores its own copy of the variables
        # (only the chief saves them), and a failed all-reduce leaves the collective runtime
        # aborted until the process restarts, so the session is not "recovered" by recreating it.
        return tf.compat.v1.train.SingularMonitoredSession(
            hooks=hooks, scaffold=scaffold, master=distribute.session_target(strategy),
            config=distribute.session_config(strategy, config, timeout_secs),
            checkpoint_dir=self.model_dir)

    def _chief_training_hooks(self, loss, scaffold, max_steps, examples_per_step,
                              saving_listeners, training_metrics=None):
        """Progress log, summaries and checkpoints: written by the chief only."""
        save_steps = self.config.save_checkpoints_steps or max_steps
        hooks_lib.open_summary_writer(self.model_dir)  # Before the hooks' begin() opens it.
        chief_hooks = []
        if self.config.log_step_count_steps:
            chief_hooks.append(hooks_lib.ProgressHook(loss, max_steps, examples_per_step,
                                                      self.config.log_step_count_steps,
                                                      self.model_dir, training_metrics))
        if self.config.save_summary_steps:
            chief_hooks.append(hooks_lib.SummarySaverHook(
                save_steps=self.config.save_summary_steps, output_dir=self.model_dir,
                scaffold=scaffold))
        listeners = [hooks_lib.RefuseNonFiniteWeightsListener(), *(saving_listeners or [])]
        chief_hooks.append(hooks_lib.CheckpointSaverHook(self.model_dir, save_steps=save_steps,
                                                         scaffold=scaffold, listeners=listeners))
        return chief_hooks

    # -------------------------------------------------------------------------------- evaluate

    @translate_faults(ModeKeys.EVAL)
    def evaluate(self, input_fn, steps=None, name=None, checkpoint_path=None, hooks=None):
        """Evaluates a checkpoint until input_fn runs out or after `steps` batches.

        Returns:
          dict: each eval_metric_ops value, "loss" (mean over batches) and "global_step". The
          scalars are also written as summaries to model_dir/eval (or model_dir/eval_<name>).
        """
        checkpoint_path = self._require_checkpoint(checkpoint_path, "evaluate")
        with tf.Graph().as_default():
            self._set_seed()
            global_step = tf.compat.v1.train.get_or_create_global_step()
            features, labels, input_hooks = self._get_features_and_labels(input_fn, ModeKeys.EVAL)
            spec = self._call_model_fn(features, labels, Purpose.of(ModeKeys.EVAL, True))
            metric_ops = dict(spec.eval_metric_ops or {})
            if spec.loss is not None and "loss" not in metric_ops:
                metric_ops["loss"] = tf.compat.v1.metrics.mean(spec.loss)
            update_ops = {key: update for key, (_, update) in metric_ops.items()}
            final_ops = {key: value for key, (value, _) in metric_ops.items()}
            final_ops["global_step"] = global_step
            final_hook = tf.compat.v1.train.FinalOpsHook(final_ops)
            session_creator = session_lib.restoring_session_creator(
                self._scaffold(spec), checkpoint_path, self._session_config, "evaluate")
            all_hooks = [*input_hooks, *(hooks or []), *(spec.evaluation_hooks or []), final_hook]
            num_batches = 0
            with tf.compat.v1.train.MonitoredSession(session_creator, hooks=all_hooks) as sess:
                while not sess.should_stop() and (steps is None or num_batches < steps):
                    sess.run(update_ops)
                    num_batches += 1
            results = final_hook.final_ops_values
            eval_dir = os.path.join(self.model_dir, "eval_" + name if name else "eval")
            hooks_lib.write_scalar_summaries(eval_dir, results, int(results["global_step"]))
        logging.info("Evaluation of %s over %d batches: %s", checkpoint_path, num_batches,
                     ", ".join(f"{k} = {v}" for k, v in sorted(results.items())))
        return results

    # --------------------------------------------------------------------------------- predict

    @translate_faults(ModeKeys.PREDICT)
    def predict(self, input_fn, predict_keys=None, hooks=None, checkpoint_path=None,
                yield_single_examples=True):
        """Yields predictions: one per example (a dict, or an array if predictions is a tensor).

        Uses the latest checkpoint in model_dir; with none, variables keep their initializers
        (so a model_fn that calls tf.compat.v1.train.init_from_checkpoint predicts with those
        weights, as extract_features does). With yield_single_examples=False, yields batches.
        """
        checkpoint_path = checkpoint_path or self.latest_checkpoint()
        if checkpoint_path is None:
            logging.warning("No checkpoint in %s; predicting with initialized variables.",
                            self.model_dir)
        graph = tf.Graph()
        with graph.as_default():
            self._set_seed()
            tf.compat.v1.train.get_or_create_global_step()
            features, _, input_hooks = self._get_features_and_labels(input_fn, ModeKeys.PREDICT)
            spec = self._call_model_fn(features, None, Purpose.of(
                ModeKeys.PREDICT, restores_checkpoint=checkpoint_path is not None, export=False))
            predictions = spec.predictions
            if isinstance(predictions, dict) and predict_keys is not None:
                predictions = {key: predictions[key] for key in predict_keys}
            session_creator = session_lib.restoring_session_creator(
                self._scaffold(spec), checkpoint_path, self._session_config, "predict")
            sess = tf.compat.v1.train.MonitoredSession(
                session_creator, hooks=[*input_hooks, *(hooks or []),
                                        *(spec.prediction_hooks or [])])
        # The graph is the default only while it runs, never while the caller holds a result, so
        # the caller's own TF code (eager or another graph) runs unaffected between yields.
        try:
            while True:
                with graph.as_default():
                    if sess.should_stop():
                        break
                    try:
                        batch = sess.run(predictions)
                    except tf.errors.OutOfRangeError:
                        break
                if not yield_single_examples:
                    yield batch
                    continue
                yield from _split_batch(batch)
        finally:
            with graph.as_default():
                sess.close()

    # ---------------------------------------------------------------------------------- export

    @translate_faults("export")
    def export_saved_model(self, export_dir_base, serving_input_receiver_fn,
                           checkpoint_path=None):
        """Writes a SavedModel of the PREDICT graph to export_dir_base/<timestamp>; returns it.

        The signature "serving_default" has the receiver tensors as inputs and the predictions
        (or the model_fn's export_outputs) as outputs; each of the receiver's
        `receiver_tensors_alternatives` adds a signature with the same outputs.
        `tf.saved_model.load(path).signatures["serving_default"](**inputs)` runs it in TF2.
        The model is written to a temporary directory and renamed, so the final name never
        holds a partial export.
        """
        checkpoint_path = self._require_checkpoint(checkpoint_path, "export")
        tf.io.gfile.makedirs(export_dir_base)
        timestamp = int(time.time())
        while tf.io.gfile.exists(os.path.join(export_dir_base, str(timestamp))):
            timestamp += 1
        export_dir = os.path.join(export_dir_base, str(timestamp))
        temp_dir = os.path.join(export_dir_base, f"temp-{timestamp}")
        with tf.Graph().as_default():
            tf.compat.v1.train.get_or_create_global_step()
            receiver = serving_input_receiver_fn()
            receiver_tensors = receiver.receiver_tensors
            if not isinstance(receiver_tensors, dict):
                receiver_tensors = {"input": receiver_tensors}
            spec = self._call_model_fn(receiver.features, None,
                                       Purpose.of(ModeKeys.PREDICT, True))
            outputs_by_name = dict(spec.export_outputs or {})
            outputs_by_name.setdefault("serving_default", spec.predictions)
            outputs_by_name = {name: outputs if isinstance(outputs, dict) else {"output": outputs}
                               for name, outputs in outputs_by_name.items()}
            signatures = {name: serving_input.predict_signature_def(receiver_tensors, outputs)
                          for name, outputs in outputs_by_name.items()}
            extra_outputs = receiver.alternative_outputs or {}
            for name, inputs in (receiver.receiver_tensors_alternatives or {}).items():
                signatures[name] = serving_input.predict_signature_def(
                    inputs, {**outputs_by_name["serving_default"], **extra_outputs.get(name, {})})
            restore = session_lib.checkpoint_restorer(checkpoint_path, "export")
            # Run on load after the weights are restored: lookup tables, and the weight
            # copies cast once of a reduced-precision export (`precision.weights_cast_once`).
            main_op = tf.group(tf.compat.v1.tables_initializer(),
                               tf.compat.v1.local_variables_initializer())
            try:
                with tf.compat.v1.Session(config=self._session_config) as sess:
                    restore(sess)
                    builder = tf.compat.v1.saved_model.Builder(temp_dir)
                    builder.add_meta_graph_and_variables(
                        sess, [tf.saved_model.SERVING], signature_def_map=signatures,
                        main_op=main_op, strip_default_attrs=True)
                    builder.save()
            except BaseException:
                if tf.io.gfile.exists(temp_dir):  # A failed export leaves nothing behind.
                    tf.io.gfile.rmtree(temp_dir)
                raise
        fileio.move_dir(temp_dir, export_dir, last_file="saved_model.pb")
        logging.info("Exported %s to %s", checkpoint_path, export_dir)
        return export_dir

    # --------------------------------------------------------------------------------- helpers

    def _call_model_fn(self, features, labels, purpose, strategy=None):
        """Builds the model for `purpose` (a `Purpose`), once per replica under `strategy`.

        Under a strategy (TRAIN only) it returns the spec of the first replica with `loss`
        replaced by the mean of the replicas' losses (the same on every worker: an all-reduce),
        `train_op` by the group of the replicas' train ops and `examples_per_step` multiplied
        by the number of replicas.
        """
        if strategy is None:
            return self._call_model_fn_once(features, labels, purpose)
        specs = {}

        def replica_fn(replica_features, replica_labels):
            spec = self._call_model_fn_once(replica_features, replica_labels, purpose)
            replica_id = tf.get_static_value(
                tf.distribute.get_replica_context().replica_id_in_sync_group)
            specs[len(specs) if replica_id is None else int(replica_id)] = spec
            return spec.loss, spec.train_op, dict(spec.training_metrics or {})

        losses, train_ops, metrics = distribute.call_for_each_replica(
            strategy, replica_fn, args=(features, labels))
        spec = specs[min(specs)]
        examples = spec.examples_per_step

        def local_mean(value):
            # Over this worker's replicas only: the chief alone fetches the metrics, so a
            # cross-worker all-reduce would wait forever for the other workers.
            values = strategy.experimental_local_results(value)
            return tf.add_n(list(values)) / float(len(values))

        return spec._replace(
            loss=strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None),
            train_op=strategy.group(train_ops),
            training_metrics={name: local_mean(v) for name, v in metrics.items()} or None,
            examples_per_step=None if examples is None else
            examples * strategy.num_replicas_in_sync)

    def _call_model_fn_once(self, features, labels, purpose):
        """Calls the model_fn with the arguments it takes; checks that it returns a spec."""
        names = inspect.signature(self.model_fn).parameters
        kwargs = {"mode": purpose.mode}
        if "params" in names:
            kwargs["params"] = self._params_for(purpose.mode)
        if "purpose" in names:
            kwargs["purpose"] = purpose
        if "config" in names:
            kwargs["config"] = self.config
        spec = self.model_fn(features, labels, **kwargs)
        if not isinstance(spec, EstimatorSpec):
            raise TypeError(f"model_fn must return a bert_tf.training.estimator.EstimatorSpec, got "
                            f"{type(spec).__name__}.")
        return spec

    def _params_for(self, mode):
        params = dict(self.params)
        if self._batch_sizes[mode] is not None:
            params["batch_size"] = self._batch_sizes[mode]
        return params

    def _get_features_and_labels(self, input_fn, mode, strategy=None, saveable_input=False):
        """Calls input_fn; returns (features, labels or None, hooks that start its iterator).

        With `saveable_input` the iterator's state can be saved (`bert_tf.training.resume`): always
        without a strategy, and under one that trains one replica per worker.

        Under a strategy the input_fn is called once per worker with params["batch_size"] set
        to the per-replica batch and, if it has such a parameter, `input_context` (a
        `tf.distribute.InputContext`: which input pipeline this is, for sharding); it must
        return a dataset of per-replica batches. Features and labels are then per-replica
        values. An input_fn without `input_context` gets every n-th batch of what it returns,
        n being the number of workers, so that workers do not train on the same batches.
        """
        names = inspect.signature(input_fn).parameters
        params = self._params_for(mode)
        if strategy is not None:
            params["batch_size"] = distribute.per_replica_batch_size(
                self._batch_sizes[mode], strategy, flag=f"{mode}_batch_size")
            logging.info("Global batch %d over %d replicas: %d examples per replica.",
                         self._batch_sizes[mode], strategy.num_replicas_in_sync,
                         params["batch_size"])
        candidates = {"params": params, "mode": mode, "config": self.config}

        def call_input_fn(input_context=None):
            kwargs = {key: value for key, value in candidates.items() if key in names}
            if "input_context" in names:
                kwargs["input_context"] = input_context
            if kwargs or not names:
                result = input_fn(**kwargs)
            else:
                # One argument under another name, e.g. `lambda p: ...`: it gets the params.
                result = input_fn(candidates["params"])
            if isinstance(result, tf.data.Dataset):
                return session_lib.session_dataset(result)
            return result

        hooks = []
        if strategy is not None:
            def dataset_fn(input_context):
                dataset = call_input_fn(input_context)
                if not isinstance(dataset, tf.data.Dataset):
                    raise TypeError("Under a distribution strategy input_fn must return a "
                                    f"tf.data.Dataset, got {type(dataset).__name__}.")
                if "input_context" not in names and input_context.num_input_pipelines > 1:
                    dataset = dataset.shard(input_context.num_input_pipelines,
                                            input_context.input_pipeline_id)
                return dataset

            if saveable_input and distribute.one_replica_per_worker(strategy):
                # One plain iterator per worker: its state can be saved (exact resume); the
                # strategy's own iterator holds multi-device state that cannot.
                input_context, host = distribute.worker_input_context(strategy)
                with tf.device(host):
                    iterator = tf.compat.v1.data.make_initializable_iterator(
                        dataset_fn(input_context))
                    result = iterator.get_next()
                hooks.append(resume.InitIteratorHook(iterator, input_context.input_pipeline_id,
                                                     input_context.num_input_pipelines))
            else:
                iterator = strategy.make_input_fn_iterator(dataset_fn)
                hooks.append(hooks_lib.RunAfterSessionCreatedHook(iterator.initializer))
                result = iterator.get_next()
        else:
            result = call_input_fn()
            if isinstance(result, tf.data.Dataset):
                iterator = tf.compat.v1.data.make_initializable_iterator(result)
                hooks.append(resume.InitIteratorHook(iterator))
                result = iterator.get_next()
        if isinstance(result, (tuple, list)) and len(result) == 2:
            return result[0], result[1], hooks
        return result, None, hooks

    def _scaffold(self, spec, keep_checkpoint_max=5, self_initializing=True):
        """The model_fn's Scaffold, or a default one; both save with our Saver.

        `self_initializing`: the session initializes or restores every variable itself
        (`session_lib.SelfInitializingSessionCreator`), so the default Scaffold leaves out the
        readiness reports that only a worker waiting on another process runs.
        """
        if not tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS):
            # Scaffold.finalize takes its saver from this collection when it has none of its own.
            tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SAVERS, _Saver(
                sharded=True, max_to_keep=keep_checkpoint_max, save_relative_paths=True))
        if spec.scaffold is not None:
            return spec.scaffold
        if self_initializing:
            return session_lib.self_initializing_scaffold()
        return tf.compat.v1.train.Scaffold()

    def _set_seed(self):
        if self.config.tf_random_seed is not None:
            tf.compat.v1.set_random_seed(self.config.tf_random_seed)

    def _checkpoint_step(self):
        checkpoint = self.latest_checkpoint()
        if checkpoint is None:
            return 0
        reader = checkpoints.reader_of(checkpoint)
        if not reader.has_tensor("global_step"):
            raise errors.BertTfError(f"model_dir '{self.model_dir}' holds checkpoint "
                                     f"'{checkpoint}' without a global_step, so training cannot "
                                     "resume from it; use a new output directory and pass this "
                                     "checkpoint as --init_checkpoint.")
        return int(reader.get_tensor("global_step"))

    def _require_checkpoint(self, checkpoint_path, action):
        if checkpoint_path is None and self.config.is_chief:
            checkpoints.set_aside_unreadable(self.model_dir)
        checkpoint_path = checkpoint_path or self.latest_checkpoint()
        if checkpoint_path is None:
            raise errors.BertTfError(f"Cannot {action}: no checkpoint in model_dir "
                                     f"'{self.model_dir}'; train first or point --output_dir at "
                                     "a directory with model.ckpt-* files.")
        return checkpoint_path


class _Saver(tf.compat.v1.train.Saver):
    """The training Saver; it reads the kept checkpoints' times with `tf.io.gfile.stat`, and
    builds a finalized graph's MetaGraphDef (each checkpoint's .meta) once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._meta_graph = None  # (graph, export arguments, MetaGraphDef) of the last export.

    def export_meta_graph(self, filename=None, **kwargs):
        """As `tf.compat.v1.train.Saver.export_meta_graph`. Once the graph is finalized (as it
        is while a session runs it), its MetaGraphDef cannot change, so each later checkpoint
        writes the one built for the first: building it serialized the whole graph again at
        every save."""
        graph = tf.compat.v1.get_default_graph()
        if not graph.finalized or kwargs.get("save_debug_info"):
            return super().export_meta_graph(filename, **kwargs)
        if self._meta_graph is not None and self._meta_graph[:2] == (graph, kwargs):
            meta_graph_def = self._meta_graph[2]
            if filename:
                tf.io.write_graph(meta_graph_def, os.path.dirname(filename),
                                  os.path.basename(filename), as_text=kwargs.get("as_text", False))
            return meta_graph_def
        meta_graph_def = super().export_meta_graph(filename, **kwargs)
        self._meta_graph = (graph, kwargs, meta_graph_def)
        return meta_graph_def

    def recover_last_checkpoints(self, checkpoint_paths):
        """As `tf.compat.v1.train.Saver.recover_last_checkpoints` (which a restoring session
        calls), without the deprecated `get_checkpoint_mtimes`: each checkpoint's time is the
        mtime of its .index file (V1: of the file itself); missing ones are skipped."""
        checkpoints_with_mtimes = []
        for path in checkpoint_paths:
            for name in (path + ".index", path):
                try:
                    mtime = tf.io.gfile.stat(name).mtime_nsec / 1e9
                except tf.errors.NotFoundError:
                    continue
                checkpoints_with_mtimes.append((path, mtime))
                break
        self.set_last_checkpoints_with_time(checkpoints_with_mtimes)


# ---------------------------------------------------------------------------------- small helpers


def _strategy_scope(strategy):
    return contextlib.nullcontext() if strategy is None else strategy.scope()


def _static_batch_size(features, strategy=None):
    """Examples per step: the static leading dimension of the first feature that has one
    (times the replicas under a strategy), else None."""
    if strategy is not None:
        batch = _static_batch_size(strategy.experimental_local_results(features)[0])
        return None if batch is None else batch * strategy.num_replicas_in_sync
    for tensor in tf.nest.flatten(features):
        if tensor.shape.rank and tensor.shape[0] is not None:
            return int(tensor.shape[0])
    return None


def _split_batch(batch):
    """Yields the examples of a batch: a dict of arrays with one leading dim, or one array."""
    if not isinstance(batch, dict):
        yield from batch
        return
    sizes = {key: len(value) for key, value in batch.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"predictions have different batch sizes {sizes}; use "
                         "yield_single_examples=False.")
    for i in range(next(iter(sizes.values()))):
        yield {key: value[i] for key, value in batch.items()}


def run_config(run, strategy=None):
    """The `RunConfig` of a training run.

    Args:
      run: `bert_tf.options.RunOptions` (checkpointing, logging, seed, XLA, step
        timeout).
      strategy: the tf.distribute strategy that trains (None: one device).
    """
    return RunConfig(
        save_checkpoints_steps=run.save_checkpoints_steps,
        keep_checkpoint_max=run.keep_checkpoint_max,
        log_step_count_steps=run.log_every_n_steps,
        save_summary_steps=run.save_summary_steps,
        tf_random_seed=run.random_seed, train_distribute=strategy,
        step_timeout_secs=run.distribution.step_timeout_secs,
        startup_timeout_secs=run.distribution.startup_timeout_secs,
        preemption_grace_secs=run.preemption_grace_secs,
        exact_resume=run.exact_resume,
        session_config=session_lib.session_config(use_xla=run.use_xla))
