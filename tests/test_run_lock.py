"""The lock a run holds on its --output_dir: a second run on the directory stops with one line
before writing anything, a killed run's lock is taken over, and the lock goes when the run
ends (bert_tf.training.run_lock)."""

import json
import os
import signal
import socket
import subprocess
import time
import uuid

import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import PRETRAINING_TINY as TINY
from finetune_helpers import (
    TOPICS,
    assert_clean_error,
    assert_ok,
    run_script,
    write_records,
    write_tiny_config,
)
from script_runner import start_python_script

from bert_tf import errors
from bert_tf.training import run_lock

HOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hold_run_lock.py")


def _ram_dir():
    """A new directory on TensorFlow's in-memory filesystem."""
    path = f"ram://run_lock_{uuid.uuid4().hex}/out"
    tf.io.gfile.makedirs(path)
    return path


def _read_lock(output_dir):
    with tf.io.gfile.GFile(run_lock.lock_path(output_dir)) as f:
        return json.load(f)


def _write_lock(output_dir, pid, start_time, hostname=None):
    """Writes the lock record of another process, as `run_lock` writes its own."""
    record = dict(hostname=hostname or socket.gethostname(), pid=pid, start_time=start_time,
                  command="python scripts/run_classifier.py --output_dir=out",
                  taken_at="2024-01-02T03:04:05+00:00", token=uuid.uuid4().hex)
    with tf.io.gfile.GFile(run_lock.lock_path(output_dir), "w") as f:
        f.write(json.dumps(record))
    return record


def _dead_pid():
    """The pid of a process that has ended (and been waited for)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


# ------------------------------------------------------------------------------ in process


def test_hold_writes_the_lock_and_removes_it_on_a_remote_filesystem():
    output_dir = _ram_dir()
    with run_lock.hold(output_dir):
        record = _read_lock(output_dir)
        assert record["pid"] == os.getpid()
        assert record["hostname"] == socket.gethostname()
        assert record["start_time"] == run_lock.process_start_time(os.getpid())
        assert record["command"] and record["taken_at"]
        # A nested hold in the same process (runs called one inside another) shares it.
        with run_lock.hold(output_dir):
            assert _read_lock(output_dir) == record
        assert _read_lock(output_dir) == record
    assert not tf.io.gfile.exists(run_lock.lock_path(output_dir))
    assert tf.io.gfile.listdir(output_dir) == []
    with run_lock.hold(output_dir):  # Taken again by the next run of this process.
        pass


@pytest.mark.parametrize("error", [errors.BertTfError("bad input"),
                                   errors.Preempted(3, signal.SIGTERM), RuntimeError("bug")])
def test_the_lock_is_released_however_the_run_ends(error):
    output_dir = _ram_dir()
    with pytest.raises(type(error)), run_lock.hold(output_dir):
        raise error
    assert not tf.io.gfile.exists(run_lock.lock_path(output_dir))


def test_a_live_process_lock_stops_a_second_acquire():
    output_dir = _ram_dir()
    other = os.getppid()
    record = _write_lock(output_dir, other, run_lock.process_start_time(other))
    with pytest.raises(errors.BertTfError) as raised:
        with run_lock.hold(output_dir):
            pytest.fail("acquired a lock a live process holds")
    message = str(raised.value)
    for fragment in (output_dir, f"pid {other}", "scripts/run_classifier.py",
                     "2024-01-02T03:04:05", "another --output_dir",
                     run_lock.lock_path(output_dir)):
        assert fragment in message, message
    assert _read_lock(output_dir) == record


def test_a_lock_from_another_host_counts_as_live():
    output_dir = _ram_dir()
    record = _write_lock(output_dir, _dead_pid(), None, hostname="other-host.example")
    with pytest.raises(errors.BertTfError, match="another host") as raised:
        with run_lock.hold(output_dir):
            pass
    assert "other-host.example" in str(raised.value)
    assert f"delete {run_lock.lock_path(output_dir)}" in str(raised.value)
    assert _read_lock(output_dir) == record


@pytest.mark.parametrize("holder", ["dead pid", "pid reused by a later process"])
def test_a_stale_lock_is_taken_over_with_one_warning(holder, caplog):
    output_dir = _ram_dir()
    if holder == "dead pid":
        pid, start_time = _dead_pid(), None
    else:
        pid = os.getppid()
        start_time = run_lock.process_start_time(pid) - 1
    _write_lock(output_dir, pid, start_time)
    with run_lock.hold(output_dir):
        assert _read_lock(output_dir)["pid"] == os.getpid()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and f"pid {pid}" in warnings[0], warnings
    assert not tf.io.gfile.exists(run_lock.lock_path(output_dir))


# ---------------------------------------------------------------------------------- scripts


def _start_holder(output_dir, log):
    """A process holding the lock of `output_dir` through `run_lock`, as a running run does."""
    holder = start_python_script(HOLDER, [str(output_dir)], env=child_env(), output=log)
    deadline = time.monotonic() + 120
    while "held" not in log.read_text():
        assert holder.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the lock holder did not start"
        time.sleep(0.1)
    return holder


def _files(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def test_a_second_run_on_a_locked_output_dir_stops_and_writes_nothing(tmp_path, minilm_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / "eval_results.txt").write_text("global_step = 7\nloss = 1.25\n")
    (out / "notes.txt").write_text("kept\n")
    holder = _start_holder(out, tmp_path / "holder.log")
    try:
        before = _files(out)
        result = run_script(
            "run_classifier.py", "--task_name=tsv", "--text_a_column=sentence",
            f"--data_dir={TOPICS}",
            f"--vocab_file={os.path.join(minilm_dir, 'vocab.txt')}",
            f"--bert_config_file={write_tiny_config(tmp_path)}", f"--output_dir={out}",
            "--do_train", "--max_seq_length=16", "--num_train_steps=1")
        assert_clean_error(result, str(out), f"pid {holder.pid}", "hold_run_lock.py",
                           f"delete {out / run_lock.LOCK_FILE}")
        assert _files(out) == before
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait(timeout=60)


def test_a_killed_runs_lock_is_taken_over_and_the_rerun_trains(tmp_path):
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY))
    write_records(str(tmp_path / "train.tfrecord"), 32)
    out = tmp_path / "out"
    out.mkdir()
    holder = _start_holder(out, tmp_path / "holder.log")
    holder.send_signal(signal.SIGKILL)
    assert holder.wait(timeout=60) == -signal.SIGKILL
    assert (out / run_lock.LOCK_FILE).exists()

    result = run_script(
        "run_pretraining.py", f"--bert_config_file={config}",
        f"--input_file={tmp_path / 'train.tfrecord'}", f"--output_dir={out}",
        "--max_seq_length=16", "--max_predictions_per_seq=4", "--do_train",
        "--train_batch_size=8", "--num_train_steps=2")
    assert_ok(result)
    taken_over = [line for line in result.stderr.splitlines() if "Taking over the lock" in line]
    assert len(taken_over) == 1 and f"pid {holder.pid}" in taken_over[0], result.stderr[-3000:]
    assert (out / "model.ckpt-2.index").exists()
    assert not (out / run_lock.LOCK_FILE).exists()
