"""The lock a run holds on its `--output_dir`, so that two runs never write there at once.

Two runs on one output directory (an orphaned run and its restart, or one command started
twice) would both write checkpoints, and each would restore the other's. So the chief of a
training / evaluation / prediction run holds `output_dir/.bert_tf.lock` from the moment the
directory exists until the run ends, by any path (its end, an error, a preemption, an
exception). The lock is a small JSON file: the holder's host name, pid and process start time,
its command line and when it took the lock.

A run that finds a lock:
  - of a process on this host that is gone (or whose pid now belongs to a process started at
    another time): the lock is stale (the run was killed); it takes the lock over with a
    warning naming the dead process;
  - of a live process, or of a process on another host (which cannot be checked from here):
    it stops with `BertTfError`, before writing anything, naming the other run and the fix.

The directory may be remote (gs://, or ram:// in tests), so the lock is read and written only
through `tf.io.gfile`; it is created as atomically as the filesystem allows: written under a
temporary name, renamed into place only if no lock exists, and read back to confirm.
"""

import contextlib
import datetime
import json
import os
import shlex
import socket
import sys
import uuid

import tensorflow as tf
from absl import logging

from bert_tf.errors import BertTfError

LOCK_FILE = ".bert_tf.lock"

# Lock paths this process holds -> how many nested `hold`s hold each.
_held = {}


def lock_path(output_dir):
    """The lock file of `output_dir`."""
    if "://" not in output_dir:
        output_dir = os.path.abspath(output_dir)
    return os.path.join(output_dir.rstrip("/"), LOCK_FILE)


def process_start_time(pid):
    """The start time of process `pid` in clock ticks after boot (field 22 of
    /proc/<pid>/stat), or None where there is no /proc or no such process."""
    fields = _proc_stat_fields(pid)
    return int(fields[19]) if fields else None


def _proc_stat_fields(pid):
    """The fields of /proc/<pid>/stat from the third (the state) on, or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or ")".
    return stat[stat.rfind(")") + 1:].split()


def process_is_running(pid, start_time=None):
    """Whether process `pid` on this host is alive and, when `start_time` is given and this
    system tells start times, is the process that started then (not a later one given the
    same pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # Alive, under another user.
    except OSError:
        return False
    fields = _proc_stat_fields(pid)
    if fields is None:
        return True  # No /proc (macOS, ...): a live pid is all we can tell.
    # A zombie ("Z", "X") is a killed process its parent has not waited for yet.
    if fields[0] in ("Z", "X"):
        return False
    return start_time is None or int(fields[19]) == start_time


def _this_process():
    """The lock record of this process, with a fresh token to recognise its own lock by."""
    pid = os.getpid()
    return {
        "hostname": socket.gethostname(),
        "pid": pid,
        "start_time": process_start_time(pid),
        "command": shlex.join([os.path.basename(sys.executable), *sys.argv]),
        "taken_at": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "token": uuid.uuid4().hex,
    }


def _is_this_process(holder):
    return (holder.get("hostname") == socket.gethostname() and holder.get("pid") == os.getpid()
            and holder.get("start_time") == process_start_time(os.getpid()))


def _read(path):
    """The lock record at `path`, or None if there is no lock."""
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            text = f.read()
    except tf.errors.NotFoundError:
        return None
    try:
        holder = json.loads(text)
        if not isinstance(holder, dict) or not isinstance(holder.get("pid"), int):
            raise ValueError("not a lock record")
    except ValueError:
        raise BertTfError(
            f"--output_dir {os.path.dirname(path)} has a lock file {path} that is not a run's "
            "lock record; if no other run uses this directory, delete that file and rerun."
        ) from None
    return holder


def _create(path, record):
    """Puts `record` at `path` unless a lock is there; returns whether it did."""
    # Not named `<lock>.*`: some filesystems (ram://) match a path as a prefix of others.
    tmp = os.path.join(os.path.dirname(path),
                       f".bert_tf_lock_{record['pid']}_{record['token'][:8]}.tmp")
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(json.dumps(record, indent=2) + "\n")
    try:
        tf.io.gfile.rename(tmp, path, overwrite=False)
    except tf.errors.AlreadyExistsError:
        return False
    finally:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.remove(tmp)
    # Where the filesystem checks and renames in two steps, the last of two racing runs wins:
    # read back which one that was.
    current = _read(path)
    return current is not None and current.get("token") == record["token"]


def _describe(holder):
    command = " ".join(str(holder.get("command") or "an unknown command").split())
    return (f"pid {holder.get('pid')} on {holder.get('hostname')} ({command}), holding it since "
            f"{holder.get('taken_at')}")


def _refuse(output_dir, path, holder):
    """The error for `output_dir`, locked by the live (or uncheckable) `holder`."""
    fix = ("wait for it to finish or stop it, or pass another --output_dir; if you are sure it "
           f"is no longer running, delete {path}")
    if holder.get("hostname") != socket.gethostname():
        return BertTfError(
            f"--output_dir {output_dir} is locked by a run on another host, which cannot be "
            f"checked from here: {_describe(holder)}. Two runs on one directory overwrite "
            f"each other's checkpoints: {fix}.")
    return BertTfError(
        f"--output_dir {output_dir} is in use by another run: {_describe(holder)}. Two runs on "
        f"one directory overwrite each other's checkpoints: {fix}.")


def _is_stale(holder):
    """Whether `holder` is a process of this host that is no longer running."""
    return (holder.get("hostname") == socket.gethostname()
            and not process_is_running(holder["pid"], holder.get("start_time")))


def acquire(output_dir):
    """Takes the lock of `output_dir` (an existing directory) for this process.

    Returns:
      The lock record, to pass to `release`.

    Raises:
      BertTfError: another live run, or a run on another host, holds it.
    """
    path = lock_path(output_dir)
    record = _this_process()
    # A few rounds: a lock may vanish or appear between reading it and creating ours.
    for _ in range(3):
        if _create(path, record):
            return record
        holder = _read(path)
        if holder is None:
            continue
        if _is_this_process(holder):
            return holder  # Left by this process (a `hold` that could not remove it).
        if not _is_stale(holder):
            raise _refuse(output_dir, path, holder)
        logging.warning("Taking over the lock of --output_dir %s from a run that is no longer "
                        "running: %s.", output_dir, _describe(holder))
        try:
            tf.io.gfile.remove(path)
        except tf.errors.NotFoundError:
            pass  # Another restart removed it first; the next round tells who created one.
    holder = _read(path)
    raise _refuse(output_dir, path, holder or record)


def release(output_dir, record):
    """Removes the lock of `output_dir` if it is still the one `acquire` wrote as `record`."""
    path = lock_path(output_dir)
    try:
        holder = _read(path)
    except BertTfError:
        holder = None
    if holder is None or holder.get("token") != record["token"]:
        logging.warning("The lock %s was removed or taken over by another run while this run "
                        "held it; leaving it as it is.", path)
        return
    tf.io.gfile.remove(path)


@contextlib.contextmanager
def hold(output_dir):
    """Holds the lock of `output_dir` (an existing directory) while the `with` body runs,
    releasing it however the body ends. Nested `hold`s of one directory in this process share
    the outermost one's lock.

    Raises:
      BertTfError: another live run, or a run on another host, holds the lock (on entry).
    """
    path = lock_path(output_dir)
    if path in _held:
        _held[path] += 1
        try:
            yield
        finally:
            _held[path] -= 1
        return
    record = acquire(output_dir)
    _held[path] = 1
    try:
        yield
    finally:
        del _held[path]
        release(output_dir, record)
