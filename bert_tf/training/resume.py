"""Exact resume: the input pipeline's position is saved with every checkpoint.

Without it a restarted run builds its `tf.data` pipeline afresh and reads the data from the
first record again, so a run preempted often trains on the first shards far more than on the
last. With `RunConfig(exact_resume=True)` (`--exact_resume`, on by default) every input
pipeline saves its iterator's state (position, shuffle and prefetch buffers: the serialized
`tf.data` iterator) at each checkpoint step, as
`input_state/model.ckpt-N.input-W-of-P.*` (pipeline W of P, one per worker; a directory of its
own, so that nothing but the checkpoint is ever named `model.ckpt-N.*`): every other worker at
the steps the chief's saver writes a checkpoint, the chief just before it writes `model.ckpt-N`,
once the other workers' states of step N are there (so no checkpoint lacks them). A
restarted run restores, in each pipeline, the state saved with the checkpoint it resumes from,
and then sees the batches an uninterrupted run would. The chief deletes the input states of
checkpoints that are no longer kept.

Under a multi-worker strategy each worker's pipeline is a plain iterator feeding its one
replica (`Estimator._get_features_and_labels`). With several replicas per worker (`mirrored`
on several devices, TPU), or when the checkpoint has no input state of this pipeline
(written with --exact_resume=false, by another version or another number of workers), the
input restarts from its first record, with a warning, as before.
"""

import os
import re
import time

import tensorflow as tf
from absl import logging

tf1 = tf.compat.v1


INPUT_STATE_DIR = "input_state"
# How long the chief waits for the other workers' input states before writing a checkpoint.
OTHER_WORKERS_WAIT_SECS = 30


def input_state_prefix(checkpoint_prefix, worker=0, num_workers=1):
    """Where the input state saved with checkpoint `checkpoint_prefix` lives."""
    directory, name = os.path.split(checkpoint_prefix)
    return os.path.join(directory, INPUT_STATE_DIR,
                        f"{name}.input-{worker}-of-{num_workers}")


class InitIteratorHook(tf1.train.SessionRunHook):
    """Initializes a dataset iterator once the session exists (the input starts afresh).

    `pipeline` and `num_pipelines`: which input pipeline (worker) of how many it reads.
    """

    def __init__(self, iterator, pipeline=0, num_pipelines=1):
        self.iterator = iterator
        self.pipeline = pipeline
        self.num_pipelines = num_pipelines

    def after_create_session(self, session, coord):
        session.run(self.iterator.initializer)


class _ResumableInputHook(InitIteratorHook):
    """Initializes the iterator, then restores the state saved with the checkpoint the session
    restored; saves the state before every checkpoint (as a saver listener)."""

    def __init__(self, hook, model_dir, other_workers_wait_secs=OTHER_WORKERS_WAIT_SECS):
        super().__init__(hook.iterator, hook.pipeline, hook.num_pipelines)
        self._model_dir = model_dir
        self._other_workers_wait_secs = other_workers_wait_secs
        self._not_awaited = set()  # Pipelines whose states did not show up in time.

    def _state_prefix(self, step):
        return input_state_prefix(os.path.join(self._model_dir, f"model.ckpt-{step}"),
                                  self.pipeline, self.num_pipelines)

    def save(self, session, step):
        """Saves the input state of checkpoint step `step`."""
        self._saver.save(session, self._state_prefix(step), write_meta_graph=False,
                         write_state=False)

    def wait_for_other_pipelines(self, step):
        """Waits until the other workers saved their input state of `step`, so that a
        checkpoint never exists without them (a kill in between would make that worker's
        input restart). A worker whose state does not appear within the hook's
        `other_workers_wait_secs` (a dead worker, or one whose --output_dir is not this one)
        is warned about once and not waited for again."""
        prefix = os.path.join(self._model_dir, f"model.ckpt-{step}")
        missing = {p: input_state_prefix(prefix, p, self.num_pipelines) + ".index"
                   for p in range(self.num_pipelines)
                   if p != self.pipeline and p not in self._not_awaited}
        timeout_secs = self._other_workers_wait_secs
        deadline = time.time() + timeout_secs
        while missing and time.time() < deadline:
            missing = {p: path for p, path in missing.items() if not tf.io.gfile.exists(path)}
            if missing:
                time.sleep(0.05)
        if missing:
            self._not_awaited.update(missing)
            logging.warning("--exact_resume: %s not written within %d s (do all workers share "
                            "--output_dir?); checkpoints no longer wait for these workers, and "
                            "a run resumed from them restarts their input from the first record.",
                            ", ".join(missing.values()), timeout_secs)

    def begin(self):
        # Only the iterator: the model's Saver never sees it, so checkpoints stay loadable by
        # code that builds no input pipeline (eval, export, --init_checkpoint). The iterator
        # saves itself (its serialized state under "<resource name>_STATE", the key the
        # deprecated make_saveable_from_iterator wrote, so older input states still restore).
        self._saver = tf1.train.Saver({self.iterator._iterator_resource.name: self.iterator},
                                      sharded=False, name="input_state_saver")

    def after_create_session(self, session, coord):
        super().after_create_session(session, coord)
        checkpoint = tf.train.latest_checkpoint(self._model_dir)
        if checkpoint is None:
            return
        state = input_state_prefix(checkpoint, self.pipeline, self.num_pipelines)
        if not tf.io.gfile.exists(state + ".index"):
            logging.warning("--exact_resume: %s has no saved input position (written with "
                            "--exact_resume=false or by another number of workers); the input "
                            "restarts from its first record.", os.path.basename(checkpoint))
            return
        try:
            self._saver.restore(session, state)
        except (tf.errors.OpError, ValueError) as e:
            session.run(self.iterator.initializer)
            logging.warning("--exact_resume: the input position saved with %s cannot be "
                            "restored (%s); the input restarts from its first record.",
                            os.path.basename(checkpoint), str(e).splitlines()[0][:200])
            return
        logging.info("Resuming the input where %s left it.", os.path.basename(checkpoint))

    def listener(self):
        return _SaveInputStateListener(self)


class _SaveInputStateListener(tf1.train.CheckpointSaverListener):
    """Saves the input state of step N just before checkpoint N (a kill between the two leaves
    a state nobody names, deleted later); deletes the states of dropped checkpoints."""

    def __init__(self, hook):
        self._hook = hook

    def before_save(self, session, global_step_value):
        self._hook.save(session, global_step_value)
        self._hook.wait_for_other_pipelines(global_step_value)

    def after_save(self, session, global_step_value):
        _delete_unkept_input_states(self._hook._model_dir)


class _WorkerInputStateHook(_ResumableInputHook):
    """A non-chief worker's input: restored like the chief's, and saved at the steps the
    chief's CheckpointSaverHook saves (every `save_steps` from the step the session started
    at, and the last step when the session ends); all workers are at the same step."""

    def __init__(self, hook, model_dir, save_steps):
        super().__init__(hook, model_dir)
        self._timer = tf1.train.SecondOrStepTimer(every_steps=save_steps)

    def begin(self):
        super().begin()
        self._global_step = tf1.train.get_global_step()

    def after_create_session(self, session, coord):
        super().after_create_session(session, coord)
        step = session.run(self._global_step)
        self._timer.update_last_triggered_step(step)
        if not tf.io.gfile.exists(self._state_prefix(step) + ".index"):  # A fresh start.
            self.save(session, step)

    def before_run(self, run_context):
        return tf1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        # The fetched step may be read before this run's increment: check the one after it.
        if self._timer.should_trigger_for_step(run_values.results + 1):
            step = run_context.session.run(self._global_step)
            if self._timer.should_trigger_for_step(step):
                self._timer.update_last_triggered_step(step)
                self.save(run_context.session, step)

    def end(self, session):
        step = session.run(self._global_step)
        if step != self._timer.last_triggered_step():
            self.save(session, step)


def _delete_unkept_input_states(model_dir):
    """Deletes the input states of checkpoints no longer kept; not those of steps after the
    newest checkpoint (another worker's state for a checkpoint the chief is about to write)."""
    state = tf.train.get_checkpoint_state(model_dir)
    kept = {os.path.basename(p) for p in (state.all_model_checkpoint_paths if state else ())}
    newest = max((int(name.rsplit("-", 1)[1]) for name in kept), default=-1)
    for path in tf.io.gfile.glob(os.path.join(model_dir, INPUT_STATE_DIR,
                                              "model.ckpt-*.input-*")):
        match = re.match(r"(model\.ckpt-(\d+))\.input-", os.path.basename(path))
        if match and match.group(1) not in kept and int(match.group(2)) < newest:
            tf.io.gfile.remove(path)


def resumable_input(input_hooks, saving_listeners, model_dir, is_chief, save_steps,
                    other_workers_wait_secs=OTHER_WORKERS_WAIT_SECS):
    """Makes training's input hooks restore and save the input position.

    Args:
      input_hooks: the hooks that start the input iterator: an `InitIteratorHook` for an
        iterator whose state can be saved, another hook for the strategy's own iterator.
      saving_listeners: the checkpoint listeners train() was given (or None).
      model_dir: the training directory.
      is_chief: whether this process writes the checkpoints.
      save_steps: the chief's checkpoint interval in steps.
      other_workers_wait_secs: how long the chief waits before a checkpoint for the other
        workers' input states (no longer than a step may take: a dead worker writes none).

    Returns:
      (input hooks, saving listeners) to train with.
    """
    hooks, listeners = [], list(saving_listeners or [])
    saveable = any(type(hook) is InitIteratorHook for hook in input_hooks)
    if input_hooks and not saveable:
        logging.warning("--exact_resume: not supported with several replicas per worker (or on "
                        "TPU) yet; a resumed run restarts its input from the first record.")
    for hook in input_hooks:
        if type(hook) is InitIteratorHook:
            if is_chief:
                hook = _ResumableInputHook(hook, model_dir, other_workers_wait_secs)
                listeners.insert(0, hook.listener())
            else:
                hook = _WorkerInputStateHook(hook, model_dir, save_steps)
        hooks.append(hook)
    return hooks, listeners
