"""Exact resume: the input pipeline's position is saved with every checkpoint.

Without it a restarted run builds its `tf.data` pipeline afresh and reads the data from the
first record again, so a run preempted often trains on the first shards far more than on the
last. With `RunConfig(exact_resume=True)` (`--exact_resume`, on by default) the chief saves
its iterator's state (position, shuffle and prefetch buffers: `tf.data`'s graph-mode
`make_saveable_from_iterator`) with each checkpoint, as `input_state/model.ckpt-N.input-0-of-1.*`
(a directory of its own, so that nothing but the checkpoint is ever named `model.ckpt-N.*`),
just before `model.ckpt-N` itself is written; a restarted run restores the state saved with
the checkpoint it resumes from, and then sees the batches an uninterrupted run would.
Input states of checkpoints that are no longer kept are deleted with them.

The file name holds the worker and the number of workers (input pipelines). The state is
saved for one input pipeline, i.e. training without a distribution strategy; under a strategy
(`mirrored`, `multi_worker`), or when the checkpoint has no input state of this run's shape
(written with --exact_resume=false, by another version or another number of workers), the
input restarts from its first record, with a warning, as before.
"""

import os
import re

import tensorflow as tf
from absl import logging

tf1 = tf.compat.v1


INPUT_STATE_DIR = "input_state"


def input_state_prefix(checkpoint_prefix, worker=0, num_workers=1):
    """Where the input state saved with checkpoint `checkpoint_prefix` lives."""
    directory, name = os.path.split(checkpoint_prefix)
    return os.path.join(directory, INPUT_STATE_DIR,
                        f"{name}.input-{worker}-of-{num_workers}")


class InitIteratorHook(tf1.train.SessionRunHook):
    """Initializes a dataset iterator once the session exists (the input starts afresh)."""

    def __init__(self, iterator):
        self.iterator = iterator

    def after_create_session(self, session, coord):
        session.run(self.iterator.initializer)


class _ResumableInputHook(InitIteratorHook):
    """Initializes the iterator, then restores the state saved with the checkpoint the session
    restored; saves the state before every checkpoint (as a saver listener)."""

    def __init__(self, iterator, model_dir):
        super().__init__(iterator)
        self._model_dir = model_dir

    def begin(self):
        saveable = tf1.data.experimental.make_saveable_from_iterator(self.iterator)
        # Only the iterator: the model's Saver never sees it, so checkpoints stay loadable by
        # code that builds no input pipeline (eval, export, --init_checkpoint).
        self._saver = tf1.train.Saver([saveable], sharded=False, name="input_state_saver")

    def after_create_session(self, session, coord):
        super().after_create_session(session, coord)
        checkpoint = tf.train.latest_checkpoint(self._model_dir)
        if checkpoint is None:
            return
        state = input_state_prefix(checkpoint)
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
        model_dir = self._hook._model_dir
        prefix = os.path.join(model_dir, f"model.ckpt-{global_step_value}")
        self._hook._saver.save(session, input_state_prefix(prefix), write_meta_graph=False,
                               write_state=False)

    def after_save(self, session, global_step_value):
        _delete_unkept_input_states(self._hook._model_dir)


def _delete_unkept_input_states(model_dir):
    state = tf.train.get_checkpoint_state(model_dir)
    kept = {os.path.basename(p) for p in (state.all_model_checkpoint_paths if state else ())}
    for path in tf.io.gfile.glob(os.path.join(model_dir, INPUT_STATE_DIR,
                                              "model.ckpt-*.input-*")):
        match = re.match(r"(model\.ckpt-\d+)\.input-", os.path.basename(path))
        if match and match.group(1) not in kept:
            tf.io.gfile.remove(path)


def resumable_input(input_hooks, saving_listeners, model_dir, strategy=None):
    """Makes training's input hooks restore and save the input position.

    Args:
      input_hooks: the hooks that start the input iterator (an `InitIteratorHook` among them).
      saving_listeners: the checkpoint listeners train() was given (or None).
      model_dir: the training directory.
      strategy: the training strategy (None: one input pipeline).

    Returns:
      (input hooks, saving listeners) to train with.
    """
    if strategy is not None:
        logging.warning("--exact_resume: not supported under a distribution strategy yet; a "
                        "resumed run restarts its input from the first record.")
        return input_hooks, saving_listeners
    hooks, listeners = [], list(saving_listeners or [])
    for hook in input_hooks:
        if type(hook) is InitIteratorHook:
            hook = _ResumableInputHook(hook.iterator, model_dir)
            listeners.insert(0, hook.listener())
        hooks.append(hook)
    return hooks, listeners
