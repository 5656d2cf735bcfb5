"""A small Estimator: the `tf.estimator` contract on top of `tf.compat.v1.train`.

`tf.estimator` is gone from TensorFlow >= 2.16. This module keeps its contract so code written for
the original BERT release ports with a changed import:

    model_fn(features, labels, mode, params) -> EstimatorSpec
    input_fn(params) -> tf.data.Dataset of (features, labels) or features; params["batch_size"]
        is set from the Estimator's train/eval/predict_batch_size (the TPUEstimator convention).
        `input_fn()` with no arguments works too.

Training runs in `tf.compat.v1.train.MonitoredTrainingSession`: it restores the latest checkpoint
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
finite are never written to a checkpoint (see `_StopOnNonFiniteLossHook`).

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
import contextvars
import dataclasses
import datetime
import inspect
import os
import signal
import sys
import threading
import time

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import errors, fileio
from bert_tf.training import checkpoints, distribute, resume
from bert_tf.training.faults import translate_faults

# True while a model_fn builds a graph whose variables are all restored from a checkpoint of
# the run (evaluate, predict with a checkpoint, export); see `restores_checkpoint`.
_RESTORES_CHECKPOINT = contextvars.ContextVar("restores_checkpoint", default=False)


def restores_checkpoint():
    """Whether the model_fn being called builds a graph whose variables will all be restored
    from a checkpoint (evaluate, export, and predict when model_dir has one).

    A model_fn can then skip initializing variables from a pre-trained checkpoint
    (`--init_checkpoint`): those initial values would be overwritten by the restore.
    """
    return _RESTORES_CHECKPOINT.get()


class ModeKeys:
    """The mode a model_fn is built for (the same strings as `tf.estimator.ModeKeys`)."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


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
    save_checkpoints_steps: int = 1000  # None: save only at the start and the end of train().
    keep_checkpoint_max: int = 5
    log_step_count_steps: int = 100
    save_summary_steps: int = 100  # None or 0: no graph summaries.
    tf_random_seed: int = None  # Graph-level seed; set it for repeatable runs.
    session_config: tf.compat.v1.ConfigProto = None  # Default: allow_soft_placement.
    train_distribute: object = None  # A tf.distribute strategy for train() (training.distribute).
    # Multi-worker only: seconds a training step may wait for the other workers before train()
    # stops with an error (a worker died or hangs). None: distribute.DEFAULT_STEP_TIMEOUT_SECS;
    # 0: wait forever.
    step_timeout_secs: float = None
    # Multi-worker only: seconds train() waits for the other workers of TF_CONFIG to start, and
    # as long again for them to join the first step. None: distribute.DEFAULT_STARTUP_TIMEOUT_SECS;
    # 0: wait forever.
    startup_timeout_secs: float = None
    # SIGTERM / SIGINT during train(): seconds to finish the step and write its checkpoint.
    preemption_grace_secs: float = 30.0
    # Save the input pipeline's position with every checkpoint and restore it on resume
    # (bert_tf.training.resume; one input pipeline, i.e. no train_distribute).
    exact_resume: bool = False

    @property
    def is_chief(self):
        """Whether this process writes checkpoints and summaries: always, except on the
        non-chief workers of a multi-worker `train_distribute` (TF_CONFIG alone never makes
        a non-chief, so a single process never waits for a chief)."""
        return distribute.is_chief(self.train_distribute)


ServingInputReceiver = collections.namedtuple(
    "ServingInputReceiver", ["features", "receiver_tensors", "receiver_tensors_alternatives",
                             "alternative_outputs"],
    defaults=[None, None])
ServingInputReceiver.__doc__ = """What a serving_input_receiver_fn returns: the features fed to
the model_fn, the tensors (a dict name -> tensor) that become the signatures' inputs, and
optionally {signature name: {name: tensor}}: more signatures with the "serving_default"
outputs and other input tensors (any graph tensor can be fed, e.g. an int64 placeholder that
is cast to the features' int32), and {signature name: {name: tensor}}: outputs such an
alternative signature returns besides those."""


def build_raw_serving_input_receiver_fn(feature_specs, default_batch_size=None):
    """Returns a serving_input_receiver_fn that feeds each feature from its own placeholder.

    Args:
      feature_specs: dict name -> anything with `.dtype` and `.shape` (a `tf.TensorSpec`, a
        tensor), e.g. {"input_ids": tf.TensorSpec([None, 128], tf.int32)}.
      default_batch_size: fills the leading dimension when it is None in a spec.
    """

    def serving_input_receiver_fn():
        placeholders = {}
        for name, spec in feature_specs.items():
            shape = tf.TensorShape(spec.shape)
            if shape.rank and shape[0] is None and default_batch_size is not None:
                shape = tf.TensorShape([default_batch_size]).concatenate(shape[1:])
            placeholders[name] = tf.compat.v1.placeholder(tf.as_dtype(spec.dtype), shape, name)
        return ServingInputReceiver(placeholders, placeholders)

    return serving_input_receiver_fn


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
        is_chief = distribute.is_chief(strategy)
        multi_worker = distribute.is_multi_worker(strategy)
        with tf.Graph().as_default(), _strategy_scope(strategy):
            self._set_seed()
            global_step = tf.compat.v1.train.get_or_create_global_step()
            if multi_worker:
                distribute.cache_global_step_read(global_step)
            features, labels, input_hooks = self._get_features_and_labels(
                input_fn, ModeKeys.TRAIN, strategy, saveable_input=self.config.exact_resume)
            if self.config.exact_resume:
                input_hooks, saving_listeners = resume.resumable_input(
                    input_hooks, saving_listeners, self.model_dir, is_chief,
                    self.config.save_checkpoints_steps or max_steps)
            spec = self._call_model_fn(features, labels, ModeKeys.TRAIN, strategy)
            if spec.loss is None or spec.train_op is None:
                raise ValueError("model_fn must return an EstimatorSpec with loss and train_op "
                                 "in TRAIN mode.")
            tf.compat.v1.summary.scalar("loss", spec.loss)
            scaffold = self._scaffold(spec, keep_checkpoint_max=self.config.keep_checkpoint_max)
            examples_per_step = spec.examples_per_step or _static_batch_size(features, strategy)
            # Order matters: the loss check must run before the checkpoint saver in the same step.
            # Every worker runs it (it fetches the loss reduced over all workers, so all of them
            # take part in that all-reduce at every step and stop at the same step).
            all_hooks = [*input_hooks, _StopOnNonFiniteLossHook(spec.loss, self.model_dir),
                         tf.compat.v1.train.StopAtStepHook(last_step=max_steps),
                         *(hooks or []), *(spec.training_hooks or [])]
            step_timeout = self.config.step_timeout_secs
            if step_timeout is None:
                step_timeout = distribute.DEFAULT_STEP_TIMEOUT_SECS
            startup_timeout = self.config.startup_timeout_secs
            if startup_timeout is None:
                startup_timeout = distribute.DEFAULT_STARTUP_TIMEOUT_SECS
            first_step_options = step_options = None
            if multi_worker:
                all_hooks.insert(0, _WaitForWorkersHook(
                    distribute.all_workers_barrier(strategy), strategy.num_replicas_in_sync,
                    distribute.run_options(startup_timeout)))
                # The first step also optimizes the graph on every worker, which takes a while.
                first_step_options = distribute.run_options(startup_timeout)
                if evaluate_every_n_steps:
                    # The other workers' step waits while the chief evaluates.
                    step_timeout = (0 if 0 in (step_timeout, startup_timeout)
                                    else max(step_timeout, startup_timeout))
                step_options = distribute.run_options(step_timeout)
            stop_on_signal = _StopOnSignalHook(
                distribute.any_worker_flag(strategy) if multi_worker else None, step_options)
            all_hooks.insert(0, stop_on_signal)
            if is_chief:
                all_hooks += self._chief_training_hooks(spec.loss, scaffold, max_steps,
                                                        examples_per_step, saving_listeners,
                                                        spec.training_metrics)
                if evaluate_fn is not None and evaluate_every_n_steps:
                    all_hooks.append(_EvaluateHook(evaluate_fn, evaluate_every_n_steps,
                                                   all_hooks[-1], stop_on_signal))
            options = first_step_options
            # Session creation (its variables' initialization waits for the chief's initial
            # values), the barrier and the first step are the start-up: logged while they wait.
            waiting = distribute.WaitingLog("the first step, which needs every worker",
                                            startup_timeout)
            try:
                if multi_worker:
                    distribute.wait_for_workers(strategy, startup_timeout)
                    waiting.start()
                # Runs without a deadline of their own (initialization, checkpoint saves) get
                # the longer one; a 0 (no limit) in either leaves them unbounded.
                session_timeout = (max(startup_timeout, step_timeout)
                                   if startup_timeout and step_timeout else 0)
                with _SignalHandlers(stop_on_signal, self.config.preemption_grace_secs), \
                        self._training_session(strategy, scaffold, all_hooks,
                                               session_timeout) as sess:
                    while not sess.should_stop():
                        sess.run(spec.train_op, options=options)
                        options = step_options
                        waiting.stop()
            except distribute.WORKER_FAILURE_ERRORS as e:
                if not multi_worker:
                    raise
                if options is first_step_options:
                    message = distribute.startup_failure_message(startup_timeout, e)
                else:
                    message = distribute.worker_failure_message(step_timeout, e,
                                                                model_dir=self.model_dir)
                raise errors.BertTfError(message) from None
            finally:
                waiting.stop()
        if stop_on_signal.stopped_at is not None:
            raise errors.Preempted(stop_on_signal.stopped_at,
                                   stop_on_signal.signal_number or signal.SIGTERM)
        logging.info("Finished training; latest checkpoint: %s", self.latest_checkpoint())
        return self

    def _training_session(self, strategy, scaffold, hooks, timeout_secs):
        """The MonitoredSession of train(): restores model_dir's latest checkpoint, or inits.

        `timeout_secs` bounds a multi-worker session's runs that set no deadline themselves.
        """
        if strategy is None:
            # Always the chief: a non-chief's session waits for a chief to initialize the
            # variables, and without a multi-worker strategy there is no other process.
            return tf.compat.v1.train.MonitoredTrainingSession(
                is_chief=True, checkpoint_dir=self.model_dir, scaffold=scaffold, hooks=hooks,
                save_checkpoint_secs=None, save_checkpoint_steps=None, save_summaries_steps=None,
                save_summaries_secs=None, log_step_count_steps=None, config=self._session_config)
        # Under a strategy every worker initializes or restores its own copy of the variables
        # (only the chief saves them), and a failed all-reduce leaves the collective runtime
        # aborted until the process restarts, so the session is not "recovered" by recreating it.
        return tf.compat.v1.train.SingularMonitoredSession(
            hooks=hooks, scaffold=scaffold, master=distribute.session_target(strategy),
            config=distribute.session_config(strategy, self._session_config, timeout_secs),
            checkpoint_dir=self.model_dir)

    def _chief_training_hooks(self, loss, scaffold, max_steps, examples_per_step,
                              saving_listeners, training_metrics=None):
        """Progress log, summaries and checkpoints: written by the chief only."""
        save_steps = self.config.save_checkpoints_steps or max_steps
        chief_hooks = []
        if self.config.log_step_count_steps:
            chief_hooks.append(_ProgressHook(loss, max_steps, examples_per_step,
                                             self.config.log_step_count_steps, self.model_dir,
                                             training_metrics))
        if self.config.save_summary_steps:
            chief_hooks.append(_SummarySaverHook(
                save_steps=self.config.save_summary_steps, output_dir=self.model_dir,
                scaffold=scaffold))
        listeners = [_RefuseNonFiniteWeightsListener(), *(saving_listeners or [])]
        chief_hooks.append(_CheckpointSaverHook(self.model_dir, save_steps=save_steps,
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
            spec = self._call_model_fn(features, labels, ModeKeys.EVAL, restores=True)
            metric_ops = dict(spec.eval_metric_ops or {})
            if spec.loss is not None and "loss" not in metric_ops:
                metric_ops["loss"] = tf.compat.v1.metrics.mean(spec.loss)
            update_ops = {key: update for key, (_, update) in metric_ops.items()}
            final_ops = {key: value for key, (value, _) in metric_ops.items()}
            final_ops["global_step"] = global_step
            final_hook = tf.compat.v1.train.FinalOpsHook(final_ops)
            session_creator = _restoring_session_creator(
                self._scaffold(spec), checkpoint_path, self._session_config, "evaluate")
            all_hooks = [*input_hooks, *(hooks or []), *(spec.evaluation_hooks or []), final_hook]
            num_batches = 0
            with tf.compat.v1.train.MonitoredSession(session_creator, hooks=all_hooks) as sess:
                while not sess.should_stop() and (steps is None or num_batches < steps):
                    sess.run(update_ops)
                    num_batches += 1
            results = final_hook.final_ops_values
            eval_dir = os.path.join(self.model_dir, "eval_" + name if name else "eval")
            write_scalar_summaries(eval_dir, results, int(results["global_step"]))
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
            spec = self._call_model_fn(features, None, ModeKeys.PREDICT,
                                       restores=checkpoint_path is not None)
            predictions = spec.predictions
            if isinstance(predictions, dict) and predict_keys is not None:
                predictions = {key: predictions[key] for key in predict_keys}
            session_creator = _restoring_session_creator(
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
            spec = self._call_model_fn(receiver.features, None, ModeKeys.PREDICT,
                                       restores=True)
            outputs_by_name = dict(spec.export_outputs or {})
            outputs_by_name.setdefault("serving_default", spec.predictions)
            outputs_by_name = {name: outputs if isinstance(outputs, dict) else {"output": outputs}
                               for name, outputs in outputs_by_name.items()}
            signatures = {name: _predict_signature_def(receiver_tensors, outputs)
                          for name, outputs in outputs_by_name.items()}
            extra_outputs = receiver.alternative_outputs or {}
            for name, inputs in (receiver.receiver_tensors_alternatives or {}).items():
                signatures[name] = _predict_signature_def(
                    inputs, {**outputs_by_name["serving_default"], **extra_outputs.get(name, {})})
            restore = _checkpoint_restorer(checkpoint_path, "export")
            try:
                with tf.compat.v1.Session(config=self._session_config) as sess:
                    restore(sess)
                    builder = tf.compat.v1.saved_model.Builder(temp_dir)
                    builder.add_meta_graph_and_variables(
                        sess, [tf.saved_model.SERVING], signature_def_map=signatures,
                        main_op=tf.compat.v1.tables_initializer(), strip_default_attrs=True)
                    builder.save()
            except BaseException:
                if tf.io.gfile.exists(temp_dir):  # A failed export leaves nothing behind.
                    tf.io.gfile.rmtree(temp_dir)
                raise
        fileio.move_dir(temp_dir, export_dir, last_file="saved_model.pb")
        logging.info("Exported %s to %s", checkpoint_path, export_dir)
        return export_dir

    # --------------------------------------------------------------------------------- helpers

    def _call_model_fn(self, features, labels, mode, strategy=None, restores=False):
        """Builds the model for `mode`, once per replica under `strategy`.

        `restores`: the graph's variables will all be restored from a checkpoint
        (`restores_checkpoint` says so to the model_fn).

        Under a strategy (TRAIN only) it returns the spec of the first replica with `loss`
        replaced by the mean of the replicas' losses (the same on every worker: an all-reduce),
        `train_op` by the group of the replicas' train ops and `examples_per_step` multiplied
        by the number of replicas.
        """
        if strategy is None:
            token = _RESTORES_CHECKPOINT.set(restores)
            try:
                return self._call_model_fn_once(features, labels, mode)
            finally:
                _RESTORES_CHECKPOINT.reset(token)
        specs = {}

        def replica_fn(replica_features, replica_labels):
            spec = self._call_model_fn_once(replica_features, replica_labels, mode)
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

    def _call_model_fn_once(self, features, labels, mode):
        """Calls the model_fn with the arguments it takes; checks that it returns a spec."""
        names = inspect.signature(self.model_fn).parameters
        kwargs = {"mode": mode}
        if "params" in names:
            kwargs["params"] = self._params_for(mode)
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
                return input_fn(**kwargs)
            # One argument under another name, e.g. `lambda p: ...`: it gets the params.
            return input_fn(candidates["params"])

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
                hooks.append(_RunAfterSessionCreatedHook(iterator.initializer))
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

    def _scaffold(self, spec, keep_checkpoint_max=5):
        """The model_fn's Scaffold, or a default one; both save with our Saver."""
        if not tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS):
            # Scaffold.finalize takes its saver from this collection when it has none of its own.
            tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SAVERS, _Saver(
                sharded=True, max_to_keep=keep_checkpoint_max, save_relative_paths=True))
        return spec.scaffold or tf.compat.v1.train.Scaffold()

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


def _tensor_info(tensor):
    """The TensorInfo proto of a dense `tensor` in a SignatureDef (what the deprecated
    `tf.compat.v1.saved_model.build_tensor_info` builds for one)."""
    if not isinstance(tensor, tf.Tensor):
        raise TypeError(f"export signatures take dense tensors; got {tensor!r}.")
    return tf.compat.v1.TensorInfo(name=tensor.name, dtype=tensor.dtype.as_datatype_enum,
                                   tensor_shape=tensor.shape.as_proto())


def _predict_signature_def(inputs, outputs):
    """`tf.compat.v1.saved_model.predict_signature_def(inputs, outputs)`, without its
    deprecation warning (it calls the deprecated `build_tensor_info`)."""
    return tf.compat.v1.saved_model.build_signature_def(
        inputs={key: _tensor_info(tensor) for key, tensor in inputs.items()},
        outputs={key: _tensor_info(tensor) for key, tensor in outputs.items()},
        method_name=tf.compat.v1.saved_model.PREDICT_METHOD_NAME)


class _Saver(tf.compat.v1.train.Saver):
    """The training Saver; it reads the kept checkpoints' times with `tf.io.gfile.stat`."""

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


# ------------------------------------------------------------------------------------------ hooks


class _RunAfterSessionCreatedHook(tf.compat.v1.train.SessionRunHook):
    """Runs an op (a dataset iterator's initializer) once the session exists."""

    def __init__(self, op):
        self._op = op

    def after_create_session(self, session, coord):
        session.run(self._op)


class _WaitForWorkersHook(tf.compat.v1.train.SessionRunHook):
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


class _StepHook(tf.compat.v1.train.SessionRunHook):
    """A hook that reads the global step (`self._global_step`)."""

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()


class _StopOnNonFiniteLossHook(_StepHook):
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


class _RefuseNonFiniteWeightsListener(tf.compat.v1.train.CheckpointSaverListener):
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


class _StopOnSignalHook(_StepHook):
    """Stops every worker after the same step: on SIGTERM / SIGINT to any of them (recorded
    by `_SignalHandlers`), or when the chief's evaluation asks to stop early.

    Without a strategy it stops the session after the current step; under a multi-worker
    strategy every worker all-reduces its [signal, early stop] flags after each step
    (`distribute.any_worker_flag`), so all workers stop after the same step (an early stop
    decided after step N takes effect after step N + 1 there). The chief's
    CheckpointSaverHook saves the last step when the session closes.
    """

    def __init__(self, any_worker=None, run_options=None):
        """`run_options`: those of a training step, so that the flags' all-reduce waits for a
        dead worker no longer than the step would (`--step_timeout_secs`)."""
        self.signal_number = None  # Set by _SignalHandlers.
        self.early_stop = False  # Set by _EvaluateHook.
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


class _SignalHandlers:
    """Routes SIGTERM / SIGINT to a `_StopOnSignalHook` while training (main thread only).

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


class _EvaluateHook(_StepHook):
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


class _CheckpointSaverHook(tf.compat.v1.train.CheckpointSaverHook):
    """CheckpointSaverHook that never rewrites the checkpoint the state file points at.

    The stock hook saves right after the session starts, i.e. re-saves model.ckpt-N after
    restoring it. TF truncates and rewrites a checkpoint's .index in place, so a kill during that
    save would break the only checkpoint `checkpoint` names. The weights at step N are the ones
    just restored, so that save is skipped.
    """

    def after_create_session(self, session, coord):
        """The stock hook's start (graph.pbtxt, the graph and meta graph in the events file,
        the step's checkpoint), with graph.pbtxt through `write_graph_text` (the stock
        pure-Python text_format took 1-3 s of every run for a BERT training graph on 2
        cores) and one GraphDef for it and the meta graph."""
        from tensorflow.python.framework import meta_graph

        del coord
        global_step = session.run(self._global_step_tensor)
        graph = tf.compat.v1.get_default_graph()
        graph_def = graph.as_graph_def(add_shapes=True)
        if self._save_graph_def:
            write_graph_text(graph_def, self._checkpoint_dir, "graph.pbtxt")
        saver = self._get_saver()
        self._summary_writer.add_graph(graph)
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


class _SummarySaverHook(tf.compat.v1.train.SummarySaverHook):
    """SummarySaverHook whose training steps all fetch the same tensors.

    The stock hook adds the merged summary to a step's fetches only every `save_steps`, and a
    session builds (and grappler optimizes) one executor per distinct set of fetches: the first
    summary-less step paid a second graph optimization and warm-up, ~2.4 s for MiniLM on 2
    cores. When every summary is a scalar this hook fetches them at every step and still
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


class _ProgressHook(tf.compat.v1.train.StepCounterHook):
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


def _checkpoint_restorer(checkpoint_path, action):
    """A function of a session that restores every variable of the default graph from
    `checkpoint_path`; one in the released layout (no global_step, e.g. --export_release_dir or
    an --init_checkpoint) restores at step 0. Built before the graph is finalized.

    Raises:
      BertTfError: naming the checkpoint when it lacks a variable of the model (`action`,
        e.g. "export", says what could not be done).
    """
    reader = checkpoints.reader_of(checkpoint_path)
    variables = tf.compat.v1.global_variables()
    global_step = tf.compat.v1.train.get_global_step()
    missing = [v.op.name for v in variables
               if not reader.has_tensor(v.op.name) and v is not global_step]
    if missing:
        raise errors.BertTfError(
            f"Cannot {action}: checkpoint '{checkpoint_path}' has no {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''} ({len(missing)} variables of the model); "
            f"{action} a checkpoint trained for this task.")
    step_saved = reader.has_tensor(global_step.op.name)
    saver = tf.compat.v1.train.Saver(
        variables if step_saved else [v for v in variables if v is not global_step],
        sharded=True)

    def restore(sess):
        if not step_saved:
            sess.run(global_step.initializer)
        saver.restore(sess, checkpoint_path)

    return restore


def _restoring_session_creator(scaffold, checkpoint_path, session_config, action):
    """A ChiefSessionCreator whose session holds `checkpoint_path`'s weights, also when the
    checkpoint is in the released layout (no global_step; see `_restore_checkpoint`)."""
    if checkpoint_path is None or checkpoints.reader_of(checkpoint_path).has_tensor(
            "global_step"):
        return tf.compat.v1.train.ChiefSessionCreator(
            scaffold=scaffold, checkpoint_filename_with_path=checkpoint_path,
            config=session_config)
    # Initialized, then restored by name: the init op runs before init_fn.
    restore = _checkpoint_restorer(checkpoint_path, action)
    scaffold = tf.compat.v1.train.Scaffold(init_fn=lambda _, sess: restore(sess),
                                           copy_from_scaffold=scaffold)
    return tf.compat.v1.train.ChiefSessionCreator(scaffold=scaffold, config=session_config)


def progress_line(step, max_steps, loss, steps_per_sec, examples_per_sec=None):
    """`step 120/1000 loss=3.21 steps/sec=4.1 examples/sec=131 ETA 0:03:34` (ETA at this rate)."""
    eta_secs = max(max_steps - step, 0) / steps_per_sec if steps_per_sec > 0 else 0
    speed = f"steps/sec={steps_per_sec:.3g}"
    if examples_per_sec is not None:
        speed += f" examples/sec={examples_per_sec:.0f}"
    return (f"step {step}/{max_steps} loss={loss:.4g} {speed} "
            f"ETA {datetime.timedelta(seconds=round(eta_secs))}")


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


def write_graph_text(graph_def, directory, name):
    """Writes `graph_def` as a text proto to directory/name (atomically, as
    `tf.io.write_graph(..., as_text=True)` does); returns the path.

    With upb protobuf (`api_implementation.Type() == "upb"`) `str(message)` is its C text
    encoder: ~10x faster than `text_format.MessageToString` and parsed back to the same
    GraphDef (only the order of map entries and the spelling of floats may differ). Other
    protobuf builds and big-endian hosts (whose tensor contents tf.io.write_graph swaps)
    go through `tf.io.write_graph`.
    """
    from google.protobuf.internal import api_implementation
    from tensorflow.python.lib.io import file_io

    if api_implementation.Type() != "upb" or sys.byteorder == "big":
        return tf.io.write_graph(graph_def, directory, name, as_text=True)
    tf.io.gfile.makedirs(directory)
    path = os.path.join(directory, name)
    file_io.atomic_write_string_to_file(path, str(graph_def))
    return path


def write_scalar_summaries(directory, values, step):
    """Writes each scalar in `values` as a TensorBoard summary at `step` under `directory`."""
    writer = tf.compat.v1.summary.FileWriter(directory)
    summary = tf.compat.v1.Summary(value=[
        tf.compat.v1.Summary.Value(tag=key, simple_value=float(value))
        for key, value in sorted(values.items()) if np.ndim(value) == 0])
    writer.add_summary(summary, step)
    writer.close()


def enable_xla_cpu_jit():
    """Lets sessions with XLA auto-clustering compile clusters on the CPU as well.

    TF's `--tf_xla_cpu_global_jit` flag fixes the CPU device's clustering policy when TF first
    creates its devices (which listing devices, reading a checkpoint or an eager op may do), so
    this must run before that; scripts do it while parsing `--use_xla`. TF may have parsed
    TF_XLA_FLAGS at import already, so the parsed flag is also set directly where TF exposes it.
    """
    xla_flags = os.environ.get("TF_XLA_FLAGS", "")
    if "--tf_xla_cpu_global_jit" not in xla_flags:
        os.environ["TF_XLA_FLAGS"] = (xla_flags + " --tf_xla_cpu_global_jit").strip()
    try:
        from tensorflow.python import pywrap_tfe

        pywrap_tfe.TF_SetTfXlaCpuGlobalJit(True)
    except (ImportError, AttributeError):  # another TF build: the environment variable remains
        pass


def session_config(use_xla=False, intra_op_parallelism_threads=0,
                   inter_op_parallelism_threads=0):
    """The session ConfigProto every run uses.

    Args:
      use_xla: turn on XLA auto-clustering (global_jit_level ON_1); on CPU see
        `enable_xla_cpu_jit`, which this calls (in time only before TF creates its devices).
      intra_op_parallelism_threads: threads inside one op (0: one per core).
      inter_op_parallelism_threads: ops run concurrently (0: TF's default).

    Returns:
      tf.compat.v1.ConfigProto with allow_soft_placement.
    """
    config = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=intra_op_parallelism_threads,
        inter_op_parallelism_threads=inter_op_parallelism_threads)
    if use_xla:
        config.graph_options.optimizer_options.global_jit_level = (
            tf.compat.v1.OptimizerOptions.ON_1)
        enable_xla_cpu_jit()
    return config


def run_config(run_options, strategy=None):
    """The `RunConfig` of a training run.

    Args:
      run_options: `bert_tf.options.RunOptions` (checkpointing, logging, seed, XLA, step
        timeout).
      strategy: the tf.distribute strategy that trains (None: one device).
    """
    return RunConfig(
        save_checkpoints_steps=run_options.save_checkpoints_steps,
        keep_checkpoint_max=run_options.keep_checkpoint_max,
        log_step_count_steps=run_options.log_every_n_steps,
        save_summary_steps=run_options.save_summary_steps,
        tf_random_seed=run_options.random_seed, train_distribute=strategy,
        step_timeout_secs=run_options.distribution.step_timeout_secs,
        startup_timeout_secs=run_options.distribution.startup_timeout_secs,
        preemption_grace_secs=run_options.preemption_grace_secs,
        exact_resume=run_options.exact_resume,
        session_config=session_config(use_xla=run_options.use_xla))
