"""Writing outputs whole or not at all.

Every result file (eval_results.txt, predictions, JSON) is written to a
temporary name in the same directory and renamed into place, so a crash never
leaves a half-written file under the final name and an earlier complete file
survives until the new one is complete.
"""

import contextlib
import glob
import os
import tempfile

from bert_tf.errors import BertTfError


def is_remote(path):
    """Whether `path` names a file on a TensorFlow filesystem other than the local one
    (gs://, s3://, hdfs://, ram://, ...): such paths go through `tf.io.gfile` only."""
    return "://" in str(path)


def user_path(path):
    """`path` as the user typed it, with a leading `~` expanded for local paths."""
    if not path or is_remote(path):
        return path
    return os.path.expanduser(path)


def open_text(path, encoding="utf-8", newline=None):
    """Opens the text file `path` for reading, local or remote (`tf.io.gfile`); `encoding`
    and `newline` as for `open` ("utf-8-sig" drops a byte-order mark)."""
    if not is_remote(path):
        return open(path, encoding=encoding, newline=newline)
    import io

    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        return io.StringIO(f.read().decode(encoding), newline=newline)


def open_binary(path):
    """Opens `path` for reading bytes with seeks, local or remote (`tf.io.gfile`)."""
    if not is_remote(path):
        # A large buffer turns seeks over record data into moves inside the buffer.
        return open(path, "rb", buffering=1 << 20)
    import tensorflow as tf

    return tf.io.gfile.GFile(path, "rb")


def file_size(path):
    """The size of the file `path` in bytes, local or remote."""
    if not is_remote(path):
        return os.path.getsize(path)
    import tensorflow as tf

    return tf.io.gfile.stat(path).length


def is_file(path):
    """Whether `path` names an existing file (not a directory), local or remote."""
    if not is_remote(path):
        return os.path.isfile(path)
    import tensorflow as tf

    return tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)


def is_dir(path):
    """Whether `path` names an existing directory, local or remote."""
    if not is_remote(path):
        return os.path.isdir(path)
    import tensorflow as tf

    return tf.io.gfile.isdir(path)


def make_parent_dir(path):
    """Creates the directory that the file `path` goes into, local or remote."""
    import tensorflow as tf

    tf.io.gfile.makedirs(os.path.dirname(path) or ".")


def require_local(path, flag, what):
    """Raises `BertTfError` when `path` is on a remote filesystem, which `what` (e.g.
    "convert_checkpoint.py writes its files") cannot use; the message says how to do it."""
    if is_remote(path):
        raise BertTfError(f"--{flag}: '{path}' is on a remote filesystem, and {what} on the "
                          "local one only; use a local path, then copy the result (e.g. "
                          "gsutil cp -r).")


def ensure_output_dir(path, flag="output_dir"):
    """Creates directory `path` if needed; a clear error if it is a file or not writable."""
    import tensorflow as tf

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
    """Writes `text` to `path` via a temporary file and an atomic rename (on a remote
    filesystem through `tf.io.gfile`: the rename is as atomic as that filesystem makes it);
    the directory is created if needed."""
    if is_remote(path):
        import tensorflow as tf

        with replaced_on_success(path) as tmp, tf.io.gfile.GFile(tmp, "w") as f:
            f.write(text)
        return
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
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


def move_dir(source, target, last_file=None):
    """Renames the directory `source` to `target` (which must not exist).

    Locally that is one atomic rename. A remote filesystem has no such rename (an object
    store renames object by object; ram:// not at all), so there the files are copied one by
    one, `last_file` (a name relative to `source`, e.g. "saved_model.pb", the file readers
    look for) last, and `source` is then deleted: `target` is complete once `last_file` is.
    """
    import tensorflow as tf

    if not is_remote(target):
        tf.io.gfile.rename(source, target)
        return
    files = [os.path.join(directory, name) for directory, _, names in tf.io.gfile.walk(source)
             for name in names]
    files.sort(key=lambda path: os.path.relpath(path, source) == last_file)
    for path in files:
        copy = os.path.join(target, os.path.relpath(path, source))
        tf.io.gfile.makedirs(os.path.dirname(copy))
        tf.io.gfile.copy(path, copy, overwrite=True)
    directories = [directory for directory, _, _ in tf.io.gfile.walk(source)]
    for path in files + directories[::-1]:  # The deepest directories first: each is empty.
        tf.io.gfile.remove(path)


def copy_file(source, target):
    """Copies `source` to `target` whole (through a temporary name), local or remote; nothing
    when they are the same file."""
    import tensorflow as tf

    if not is_remote(source) and not is_remote(target) and (
            os.path.abspath(source) == os.path.abspath(target)):
        return
    with replaced_on_success(target) as tmp:
        tf.io.gfile.copy(source, tmp, overwrite=True)


@contextlib.contextmanager
def replaced_on_success(path):
    """Yields a temporary path beside `path` to write the whole file to; when the block ends
    without an error the file is renamed to `path` (replacing an earlier one), else removed,
    so `path` never holds a half-written file. Local or remote."""
    import tensorflow as tf

    make_parent_dir(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        yield tmp
        tf.io.gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.remove(tmp)
        raise


class _Aborted(Exception):  # noqa: N818 (a signal to the contexts, never raised out)
    """Passed to `replaced_on_success` contexts so that they remove their files."""


class WholeFiles:
    """Several files written at once, each whole or not at all (`replaced_on_success`):
    `files` are open on temporary names; `close()` renames every one into place, `abort()`
    removes them, leaving earlier files under the final names as they were.

    Args:
      paths: the final names.
      open_fn: opens a temporary name for writing (e.g. `tf.io.TFRecordWriter`); the result
        is a context manager that closes the file.
    """

    def __init__(self, paths, open_fn):
        self._stack = contextlib.ExitStack()
        temporary = [self._stack.enter_context(replaced_on_success(path)) for path in paths]
        self.files = [self._stack.enter_context(open_fn(path)) for path in temporary]

    def close(self):
        self._stack.close()

    def abort(self):
        self._stack.__exit__(_Aborted, _Aborted(), None)


def append_line(path, line):
    """Appends `line` and a newline to the text file `path` (created if missing), synced to
    disk before it returns, so a crash right after keeps it."""
    if is_remote(path):
        import tensorflow as tf

        with tf.io.gfile.GFile(path, "a") as f:
            f.write(line + "\n")
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def format_eval_results(results, header=()):
    """`key = value` lines, keys sorted, as the original run_*.py scripts write them, after
    the `header` lines (each written as `# line`, e.g. settings that shaped the results)."""
    return "".join(f"# {line}\n" for line in header) + "".join(
        f"{key} = {results[key]}\n" for key in sorted(results))


def write_eval_results(output_dir, results, filename="eval_results.txt", header=()):
    """Writes `results` (a dict) to `output_dir/filename` atomically, after the `header` lines
    (`format_eval_results`); returns the path."""
    path = os.path.join(output_dir, filename)
    atomic_write_text(path, format_eval_results(results, header))
    return path


def expand_input_files(input_file, flag="input_file",
                       what="files (comma-separated, globs allowed)"):
    """Expands a comma-separated list of files and glob patterns, in order, without repeats.

    Raises:
      BertTfError: naming `--flag` and the pattern when a pattern matches no file, or a file
        is missing.
    """
    patterns = [p.strip() for p in (input_file or "").split(",") if p.strip()]
    if not patterns:
        raise BertTfError(f"--{flag}: no input given; pass {what}.")
    paths = []
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            if "://" in pattern:
                import tensorflow as tf

                matches = [p for p in sorted(tf.io.gfile.glob(pattern))
                           if not tf.io.gfile.isdir(p)]
            else:
                matches = [p for p in sorted(glob.glob(pattern)) if os.path.isfile(p)]
            if not matches:
                raise BertTfError(f"--{flag}: pattern '{pattern}' matches no files; check the "
                                  "pattern and the directory.")
            paths.extend(matches)
        else:
            if "://" not in pattern:
                require_file(pattern, flag=flag, what="input file")
            paths.append(pattern)
    return list(dict.fromkeys(paths))


def require_file(path, flag=None, what="file"):
    """Raises `BertTfError` unless `path` names an existing file.

    Args:
      path: the path to check.
      flag: the command-line flag that gave the path, named in the message.
      what: what the file is, e.g. "BERT config" or "vocab file".

    Returns:
      `path`, so the call can be used inline.
    """
    source = f"--{flag}" if flag else what
    if not path:
        raise BertTfError(f"{source}: no {what} given; pass the path of the {what}.")
    if not is_file(path):
        raise BertTfError(f"{source}: {what} '{path}' does not exist or is not a file; "
                          "check the path.")
    return path
