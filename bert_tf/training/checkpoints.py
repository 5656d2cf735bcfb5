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
import tempfile

import tensorflow as tf
from absl import logging

from bert_tf import fileio, modeling, optimization
from bert_tf.errors import BertTfError, short_tf_error

tf1 = tf.compat.v1

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
    """Deletes what failed or killed writes left in `model_dir`: TF's temporary files, the
    `model.ckpt-N_temp/` directories a save writes its shards into before renaming them into
    place (they never hold anything a checkpoint needs), and the files of checkpoints newer
    than the newest one the state file names (written, but the state was never updated:
    nothing resumes from them, and the next save of that step would overwrite them)."""
    state = tf.train.get_checkpoint_state(model_dir)
    # Without a state file, checkpoint files may be someone's copy: only temporary files go.
    newest = (_step(state.model_checkpoint_path) if state and state.model_checkpoint_path
              else None)
    for path in tf.io.gfile.glob(os.path.join(model_dir, "*")):
        name = os.path.basename(path)
        match = _CHECKPOINT_FILE.match(name)
        if name.endswith("_temp") and tf.io.gfile.isdir(path):
            logging.info("Removing %s, left by a save that did not finish.", path)
            tf.io.gfile.rmtree(path)
        elif _TF_TEMP_FILE.match(name) or (match and newest is not None and
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
    write_state(model_dir, path, kept)
    return path


def write_state(directory, newest, prefixes=None):
    """Writes `directory`'s `checkpoint` state file, naming `newest` its latest checkpoint and
    `prefixes` (default: `newest` alone) all of them, relative to `directory` (so the
    directory can be moved), whole or not at all. Checkpoints must lie in `directory`."""
    names = [os.path.basename(prefix) for prefix in (prefixes or [newest])]
    fileio.atomic_write_text(os.path.join(directory, "checkpoint"), "".join(
        [f'model_checkpoint_path: "{os.path.basename(newest)}"\n'] +
        [f'all_model_checkpoint_paths: "{name}"\n' for name in names]))


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


def write_tf_checkpoint(tensors, checkpoint_prefix):
    """Writes numpy arrays as a TF V2 checkpoint with exactly the given names.

    Files appear all at once: they are written in a temporary directory beside
    the target and moved into place (data before index).

    Args:
      tensors: dict variable name -> numpy array.
      checkpoint_prefix: e.g. "OUT/bert_model.ckpt".
    """
    out_dir = os.path.dirname(os.path.abspath(checkpoint_prefix))
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".tmp_ckpt_") as tmp_dir:
        tmp_prefix = os.path.join(tmp_dir, os.path.basename(checkpoint_prefix))
        with tf.Graph().as_default():
            # Placeholders feed the values at init time, so big tables never
            # become graph constants (a GraphDef is limited to 2 GB).
            feeds, variables = {}, {}
            for name, value in tensors.items():
                placeholder = tf1.placeholder(tf.as_dtype(value.dtype), value.shape)
                variables[name] = tf1.get_variable(name, initializer=placeholder)
                feeds[placeholder] = value
            saver = tf1.train.Saver(var_list=variables, write_version=tf1.train.SaverDef.V2)
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer(), feed_dict=feeds)
                saver.save(sess, tmp_prefix, write_meta_graph=False, write_state=False)
        produced = sorted(os.listdir(tmp_dir), key=lambda f: f.endswith(".index"))
        for file_name in produced:
            os.replace(os.path.join(tmp_dir, file_name), os.path.join(out_dir, file_name))


def read_tf_checkpoint(checkpoint, names=None):
    """Reads variables of a TF checkpoint into numpy arrays.

    Args:
      checkpoint: checkpoint prefix (".../bert_model.ckpt") or a directory with
        a `checkpoint` state file.
      names: variables to read (those absent are left out); default all.

    Returns:
      dict variable name -> numpy array.

    Raises:
      BertTfError: if the checkpoint cannot be read.
    """
    prefix = resolve_checkpoint(checkpoint) if tf.io.gfile.isdir(checkpoint) else checkpoint
    try:
        reader = reader_of(prefix)
    except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as e:
        raise BertTfError(f"--init_checkpoint: cannot read checkpoint '{checkpoint}' "
                          f"({str(e).splitlines()[0]}); pass a checkpoint prefix such as "
                          "'.../bert_model.ckpt' whose .index file exists.") from None
    stored = reader.get_variable_to_shape_map()
    if names is None:
        names = stored
    else:
        # Optimizer slots, global_step and fine-tuning heads are not part of BERT.
        skipped = sorted(name for name in set(stored) - set(names)
                         if not optimization.is_optimizer_state(name))
        if skipped:
            logging.warning("Not converted (not BERT pre-training variables): %s",
                            ", ".join(skipped))
    return {name: reader.get_tensor(name) for name in names if name in stored}


# Variables of fine-tuning heads: the classifier's top-level output_weights / output_bias and
# everything under cls/ (the pre-training, SQuAD and NER heads).
_HEAD_PREFIXES = ("cls/", "output_")


def export_release_checkpoint(init_checkpoint, bert_config_file, output_dir, vocab_file=None,
                              keep_heads=True, bert_config=None):
    """Writes the layout Google released: `output_dir/bert_model.ckpt.*` with the model
    variables only, `bert_config.json` and (with `vocab_file`) `vocab.txt`.

    Optimizer state (`<var>/adam_m`, `<var>/adam_v`, LAMB's step, the loss scale) and
    `global_step` are dropped, so the checkpoint is about a third of a training checkpoint
    with AdamW; gradient accumulators are never saved. `keep_heads=False` also drops the task
    heads (`cls/*`, `output_*`) for an encoder-only release.

    Args:
      init_checkpoint: a training checkpoint prefix, or a directory (its latest checkpoint).
      bert_config_file: the model's bert_config.json (copied as is).
      output_dir: where to write; created if needed.
      vocab_file: vocab.txt to copy, or None.
      keep_heads: keep the task heads' variables.
      bert_config: the run's `BertConfig` when it differs from `bert_config_file`
        (--max_position_embeddings); written instead of the copy.

    Returns:
      The names of the variables written.
    """
    fileio.require_local(output_dir, "output_dir", "export_checkpoint.py writes")
    fileio.require_file(bert_config_file, flag="bert_config_file", what="BERT config file")
    file_config = modeling.BertConfig.from_json_file(bert_config_file)  # A bad one stops here.
    if vocab_file:
        fileio.require_file(vocab_file, flag="vocab_file", what="vocab file")
    tensors = read_tf_checkpoint(resolve_checkpoint(init_checkpoint))
    _check_table_sizes(tensors, bert_config or file_config, bert_config_file)
    kept = {name: value for name, value in tensors.items()
            if not optimization.is_optimizer_state(name)
            and (keep_heads or not name.startswith(_HEAD_PREFIXES))}
    write_tf_checkpoint(kept, os.path.join(output_dir, "bert_model.ckpt"))
    if bert_config is None:
        fileio.copy_file(bert_config_file, os.path.join(output_dir, "bert_config.json"))
    else:
        fileio.atomic_write_text(os.path.join(output_dir, "bert_config.json"),
                                 bert_config.to_json_string())
    if vocab_file:
        fileio.copy_file(vocab_file, os.path.join(output_dir, "vocab.txt"))
    logging.info("Wrote %s/bert_model.ckpt: %d variables (%d dropped: optimizer state%s).",
                 output_dir, len(kept), len(tensors) - len(kept),
                 "" if keep_heads else " and task heads")
    return sorted(kept)


# Tables whose rows a config sets (a grown vocabulary or more positions change them).
_TABLE_ROWS = (("bert/embeddings/word_embeddings", "vocab_size"),
               ("bert/embeddings/position_embeddings", "max_position_embeddings"))


def _check_table_sizes(tensors, bert_config, bert_config_file):
    """Raises BertTfError if the checkpoint's word or position table has another number of
    rows than `bert_config` says (a config from before the tables grew)."""
    for name, key in _TABLE_ROWS:
        if name in tensors and tensors[name].shape[0] != getattr(bert_config, key):
            raise BertTfError(
                f"--bert_config_file {bert_config_file}: {key} is {getattr(bert_config, key)} "
                f"but the checkpoint's {name} has {tensors[name].shape[0]} rows; pass the "
                f"config the checkpoint was trained with (\"{key}\": {tensors[name].shape[0]}).")


def resolve_checkpoint(init_checkpoint):
    """Returns the checkpoint prefix for `--init_checkpoint` (a prefix, or a directory), or
    for a checkpoint of another library (a KerasHub preset, a Hugging Face model directory:
    `checkpoint_sources`) the prefix of its Google-layout conversion.

    Raises:
      BertTfError: if no checkpoint is found there.
    """
    if not init_checkpoint:
        raise BertTfError("--init_checkpoint: no checkpoint given; pass a checkpoint prefix "
                          "such as '.../bert_model.ckpt'.")
    from bert_tf.training import checkpoint_sources  # It writes its conversions through here.

    converted = checkpoint_sources.resolve(init_checkpoint)
    if converted is not None:
        return converted.prefix
    if tf.io.gfile.isdir(init_checkpoint):
        latest = tf.train.latest_checkpoint(init_checkpoint)
        if latest is None:
            raise BertTfError(f"--init_checkpoint: directory '{init_checkpoint}' has no "
                              "checkpoint; pass a prefix such as '.../bert_model.ckpt'.")
        return latest
    if not tf.io.gfile.exists(init_checkpoint + ".index"):
        raise BertTfError(f"--init_checkpoint: checkpoint '{init_checkpoint}' does not exist "
                          f"('{init_checkpoint}.index' is missing); pass a checkpoint prefix "
                          "such as '.../bert_model.ckpt', without '.index'.")
    return init_checkpoint
