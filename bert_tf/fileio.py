"""Writing outputs whole or not at all.

Every result file (eval_results.txt, predictions, JSON) is written to a
temporary name in the same directory and renamed into place, so a crash never
leaves a half-written file under the final name and an earlier complete file
survives until the new one is complete.
"""

import os
import tempfile

import tensorflow as tf

from bert_tf.errors import BertTfError


def ensure_output_dir(path, flag="output_dir"):
    """Creates directory `path` if needed; a clear error if it is a file or not writable."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise BertTfError(f"--{flag}: '{path}' is a file, not a directory; pass a directory path.")
    try:
        tf.io.gfile.makedirs(path)
    except (OSError, tf.errors.OpError) as e:
        raise BertTfError(f"--{flag}: cannot create directory '{path}' ({e}); pass a writable "
                          "directory.") from None
    if "://" not in path and not os.access(path, os.W_OK):
        raise BertTfError(f"--{flag}: directory '{path}' is not writable; fix its permissions or "
                          "pass another directory.")
    return path


def atomic_write_text(path, text):
    """Writes `text` to `path` via a temporary file and an atomic rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def format_eval_results(results):
    """`key = value` lines, keys sorted, as the original run_*.py scripts write them."""
    return "".join(f"{key} = {results[key]}\n" for key in sorted(results))


def write_eval_results(output_dir, results, filename="eval_results.txt"):
    """Writes `results` (a dict) to `output_dir/filename` atomically; returns the path."""
    path = os.path.join(output_dir, filename)
    atomic_write_text(path, format_eval_results(results))
    return path
