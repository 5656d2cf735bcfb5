"""Checkpoints that cannot be read, and writes that fail (a full disk).

Unreadable checkpoints. A disk error or a half-synced directory can leave the newest
checkpoint with a truncated `.data` shard, a missing shard or a damaged `.index`, while the
`checkpoint` state file still names it. `set_aside_unreadable(model_dir)` runs when training
starts (on the chief): it reads the newest checkpoint whole (`unreadable_reason`: every
tensor, whose CRCs TensorFlow checks), and while it cannot be read moves its files to
`model_dir/corrupt/`, logs one line and tries the next newest of `all_model_checkpoint_paths`;
the state file is then rewritten to name the newest whole one, so training resumes from it.
If none can be read, nothing is moved and one error says so.

Failed writes. TF writes a checkpoint's shards into `<prefix>-N_temp/` and renames them into
place before it atomically rewrites the state file, so a write that fails (no space left, a
quota, a read-only or vanished directory) leaves the older checkpoints and the state file as
they were; `write_failure_message` is the one line that says so, naming the last whole
checkpoint the same command resumes from.
"""

import errno
import os
import re

import tensorflow as tf
from absl import logging

from bert_tf.errors import BertTfError, short_tf_error

CORRUPT_DIR = "corrupt"
# errno values of a full disk, and the words TensorFlow's file system errors use for them.
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_WORDS = ("no space left on device", "disk quota exceeded")


def reader_of(prefix):
    """A reader of the checkpoint `prefix` (`get_tensor`, `has_tensor`,
    `get_variable_to_shape_map`).

    Not `tf.train.load_checkpoint`: that one takes a prefix for a directory when the
    filesystem says the prefix is one (ram://, whose directories are mere name prefixes).
    """
    return tf.compat.v1.train.NewCheckpointReader(prefix)


def unreadable_reason(prefix):
    """Why the checkpoint `prefix` cannot be read, or None when every tensor reads back.

    Reads every tensor once (one at a time), so a truncated or missing `.data` shard and a
    damaged `.index` are both found (reading only the index finds neither a short shard nor
    flipped bytes).
    """
    try:
        reader = reader_of(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, ValueError, IndexError, RuntimeError, OSError) as e:
        return short_tf_error(e)
    return None


def _move_files(prefix, target_dir):
    """Moves the files of checkpoint `prefix` (.index, .data-*, .meta) into `target_dir`."""
    tf.io.gfile.makedirs(target_dir)
    for path in tf.io.gfile.glob(prefix + ".*"):
        tf.io.gfile.rename(path, os.path.join(target_dir, os.path.basename(path)),
                           overwrite=True)


# TF's whole-file writes (graph.pbtxt, the `checkpoint` state, .meta) go through
# `<name>.tmp<32 hex digits>`, which a failed write (a full disk) leaves behind.
_TF_TEMP_FILE = re.compile(r".*\.tmp[0-9a-f]{32}$")
_CHECKPOINT_FILE = re.compile(r"^model\.ckpt-(\d+)\.")  # The Estimator's checkpoint names.


def remove_partial_writes(model_dir):
    """Deletes what failed or killed writes left in `model_dir`: TF's temporary files and the
    files of checkpoints newer than the newest one the state file names (written, but the
    state was never updated: nothing resumes from them, and the next save of that step
    would overwrite them anyway). Checkpoint shards' `_temp` directories: see
    `estimator._remove_partial_checkpoint_writes`."""
    state = tf.train.get_checkpoint_state(model_dir)
    # Without a state file, checkpoint files may be someone's copy: only temporary files go.
    newest = (_step(state.model_checkpoint_path) if state and state.model_checkpoint_path
              else None)
    for path in tf.io.gfile.glob(os.path.join(model_dir, "*")):
        name = os.path.basename(path)
        match = _CHECKPOINT_FILE.match(name)
        if _TF_TEMP_FILE.match(name) or (match and newest is not None and
                                         int(match.group(1)) > newest):
            if not tf.io.gfile.isdir(path):
                logging.info("Removing %s, left by a write that did not finish.", path)
                tf.io.gfile.remove(path)


def _step(prefix):
    match = re.search(r"-(\d+)$", prefix)
    return int(match.group(1)) if match else None


def set_aside_unreadable(model_dir):
    """Removes partial writes (`remove_partial_writes`), then moves unreadable newest
    checkpoints of `model_dir` to `model_dir/corrupt/` (see the module docstring).

    Returns:
      The prefix training resumes from (None when `model_dir` has no checkpoint).

    Raises:
      BertTfError: when the state file names checkpoints and none of them can be read.
    """
    remove_partial_writes(model_dir)
    # The state's paths are already joined with `model_dir` (TF stores them relative to it
    # when `model_dir` is relative), so they are used as they come.
    state = tf.train.get_checkpoint_state(model_dir)
    if state is None or not state.model_checkpoint_path:
        return None
    paths = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    unreadable = []
    for path in reversed(paths):
        reason = unreadable_reason(path)
        if reason is None:
            break
        unreadable.append((path, reason))
    else:
        names = ", ".join(os.path.basename(path) for path, _ in unreadable)
        raise BertTfError(
            f"--output_dir: no checkpoint in '{model_dir}' can be read ({names}; newest: "
            f"{unreadable[0][1]}); restore them from a copy, or move them away (or pass a new "
            "--output_dir) to train from the start.")
    if not unreadable:
        return path
    corrupt_dir = os.path.join(model_dir, CORRUPT_DIR)
    for bad, reason in unreadable:
        _move_files(bad, corrupt_dir)
        logging.warning("Checkpoint %s cannot be read (%s): moved it to %s/; resuming from %s.",
                        os.path.basename(bad), reason, corrupt_dir, os.path.basename(path))
    kept = [p for p in paths if p not in {bad for bad, _ in unreadable}]
    tf.compat.v1.train.update_checkpoint_state(model_dir, path, all_model_checkpoint_paths=kept)
    return path


def check_init_checkpoint(prefix, flag="init_checkpoint"):
    """Raises BertTfError naming `--flag` when the checkpoint `prefix` cannot be read whole."""
    reason = unreadable_reason(prefix)
    if reason is not None:
        raise BertTfError(f"--{flag}: checkpoint '{prefix}' cannot be read ({reason}); re-copy "
                          "it or pass another checkpoint.")


# ---------------------------------------------------------------------------- failed writes


def is_disk_full(error):
    """Whether `error` (an OSError or a TF error) says the disk or the quota is full."""
    if isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS:
        return True
    text = str(error).lower()
    return any(words in text for words in _DISK_FULL_WORDS)


def is_write_error(error):
    """Whether `error` is a file system error (as opposed to, say, a bad value)."""
    return isinstance(error, OSError) or is_disk_full(error) or isinstance(
        error, (tf.errors.ResourceExhaustedError, tf.errors.PermissionDeniedError,
                tf.errors.NotFoundError, tf.errors.UnavailableError,
                tf.errors.FailedPreconditionError, tf.errors.InternalError,
                tf.errors.UnknownError))


def write_failure_message(error, what, directory, model_dir=None):
    """The one line when writing `what` (e.g. "checkpoint 10") to `directory` failed.

    Args:
      error: the OSError or TF error the write raised.
      what: what was being written.
      directory: where.
      model_dir: the training directory whose last whole checkpoint the message names
        (default: `directory`).
    """
    if is_disk_full(error):
        cause = ("no space left on device" if "quota" not in str(error).lower()
                 else "disk quota exceeded")
        head = f"{cause} writing {what} to {directory}"
    else:
        detail = (error.strerror or str(error)) if isinstance(error, OSError) else \
            short_tf_error(error)
        head = f"cannot write {what} to {directory} ({detail})"
    latest = tf.train.latest_checkpoint(model_dir or directory)
    if latest:
        tail = (f"the last whole checkpoint is {os.path.basename(latest)} and the same command "
                "resumes from it")
    else:
        tail = "no checkpoint was written yet, so the same command starts from step 0"
    return f"{head}; {tail}."
