"""Faults from the storage and the machine (README "Crashes"): corrupt records, corrupt
checkpoints, full disks, out of memory, and exact resume.

Each fault is injected for real where that is cheap (files cut or bytes flipped on disk, a
small tmpfs when running as root, an allocation no machine can make, SIGKILL) and through the
file API otherwise; the checks are what a user sees: one `error:` line (scripts) or one
BertTfError line naming the file or cause, the checkpoints left (all whole), and that the same
command then finishes at num_train_steps. The rows of tests/test_bad_inputs.py cover the
faults found before anything is written (a truncated --input_file, a corrupt --init_checkpoint).
"""

import json
import os
import random
import signal
import struct
import subprocess
import textwrap
import time

import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import PRETRAINING_TINY as TINY
from finetune_helpers import (
    assert_checkpoint_state_is_whole,
    max_difference,
    pretrain_options,
    weights_at,
    write_records,
)
from script_runner import run_python_script, start_python_script

from bert_tf.data import feature_cache, record_integrity
from bert_tf.errors import BertTfError
from bert_tf.runs.pretraining import run_pretraining
from bert_tf.training import checkpoints
from bert_tf.training.training_step import TrainingStep

tf1 = tf.compat.v1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "run_pretraining.py")
ENV = child_env()
NUM_RECORDS = 64


def _record_offsets(path):
    """Start offsets of every record, from the lengths TF's writer put in the headers (an
    independent walk: struct only, no CRC)."""
    data = open(path, "rb").read()
    offsets, offset = [], 0
    while offset < len(data):
        offsets.append(offset)
        offset += 12 + struct.unpack("<Q", data[offset:offset + 8])[0] + 4
    assert offset == len(data)
    return offsets


@pytest.fixture
def data(tmp_path):
    """A whole record file, a copy cut inside record 40 and a copy with one data byte of
    record 20 flipped."""
    good = write_records(str(tmp_path / "train.tfrecord"), num=NUM_RECORDS)
    raw = bytearray(open(good, "rb").read())
    offsets = _record_offsets(good)
    (tmp_path / "cut.tfrecord").write_bytes(bytes(raw[:offsets[40] + 30]))
    raw[offsets[20] + 12 + 5] ^= 0xFF
    (tmp_path / "flipped.tfrecord").write_bytes(bytes(raw))
    (tmp_path / "bert_config.json").write_text(json.dumps(TINY))
    return {"good": good, "cut": str(tmp_path / "cut.tfrecord"),
            "flipped": str(tmp_path / "flipped.tfrecord"), "offsets": offsets}


def _count(dataset):
    return sum(1 for _ in dataset)


# ------------------------------------------------------------------------------ corrupt records


def test_record_checks_find_the_cut_and_the_flipped_record(data):
    offsets = data["offsets"]
    # The CRC of a header TF wrote, recomputed.
    header = open(data["good"], "rb").read(12)
    assert record_integrity.masked_crc32c(header[:8]) == struct.unpack("<I", header[8:])[0]
    assert record_integrity.ends_with_whole_record(data["good"]) is True
    assert record_integrity.ends_with_whole_record(data["cut"]) is False
    assert record_integrity.ends_with_whole_record(data["flipped"]) is True  # Only its data is bad.
    # Record > window.
    assert record_integrity.ends_with_whole_record(data["good"], window=64) is None
    scan = record_integrity.scan_records(data["cut"])
    assert (scan.num_records, scan.bad_offset) == (40, offsets[40])
    assert record_integrity.scan_records(data["good"]).num_records == NUM_RECORDS
    # TF names the record (cut) or its data (flipped); both map back to the file.
    assert record_integrity.first_bad_offset(data["cut"]) == offsets[40]
    assert record_integrity.first_bad_offset(data["flipped"]) == offsets[20] + 12
    assert record_integrity.record_is_bad_at(data["flipped"], offsets[20] + 12)
    assert not record_integrity.record_is_bad_at(data["good"], offsets[20] + 12)
    assert not record_integrity.record_is_bad_at(data["flipped"], offsets[21] + 12)


def test_cut_file_is_one_line_or_skipped_with_skip_corrupt_records(data):
    files = [data["good"], data["cut"]]
    with pytest.raises(BertTfError) as error:
        record_integrity.check_record_files(files, "input_file")
    message = str(error.value)
    assert "\n" not in message
    for fragment in ("--input_file", data["cut"], f"byte {data['offsets'][40]}", "re-copy",
                     "--skip_corrupt_records"):
        assert fragment in message
    limits = record_integrity.check_record_files(files, "input_file", skip_corrupt_records=True)
    assert limits == {data["cut"]: 40}
    flipped = record_integrity.check_record_files([data["flipped"]], skip_corrupt_records=True)
    assert flipped == {data["flipped"]: 20}
    # The pipeline reads exactly the whole records before the bad one.
    assert _count(record_integrity.read_files(files, limits)) == NUM_RECORDS + 40
    assert _count(record_integrity.read_files([data["flipped"]], flipped)) == 20


def test_damaged_record_met_while_training_names_the_file_then_skip_trains_on(data, tmp_path):
    # The cheap check passes (the file ends with a whole record); TF meets the bad record.
    values = dict(input_file=data["flipped"], do_eval=False, num_train_steps=6,
                  save_checkpoints_steps=3, log_every_n_steps=3, save_summary_steps=0)
    with pytest.raises(BertTfError) as error:
        run_pretraining(pretrain_options(tmp_path, **values))
    message = str(error.value)
    assert "\n" not in message
    for fragment in ("--input_file", data["flipped"], f"byte {data['offsets'][20] + 12}",
                     "--skip_corrupt_records"):
        assert fragment in message
    assert_checkpoint_state_is_whole(str(tmp_path / "out"))
    values.update(do_eval=True, max_eval_steps=2, skip_corrupt_records=True)
    results = run_pretraining(pretrain_options(tmp_path, **values))
    assert results["global_step"] == 6


def test_corrupt_cached_features_are_rebuilt(tmp_path):
    path = str(tmp_path / "train.tf_record")
    builds = []

    def write():
        builds.append(1)
        write_records(path, num=8)

    assert feature_cache.cached_tfrecord_file(path, {"k": 1}, write) is False
    assert feature_cache.cached_tfrecord_file(path, {"k": 1}, write) is True  # Reused.
    raw = bytearray(open(path, "rb").read())
    raw[40] ^= 0xFF  # Same size: the sidecar's size check cannot see it.
    open(path, "wb").write(bytes(raw))
    assert feature_cache.cached_tfrecord_file(path, {"k": 1}, write) is False
    assert len(builds) == 2 and record_integrity.first_bad_offset(path) is None


# -------------------------------------------------------------------------- corrupt checkpoints


def _train(tmp_path, steps, **values):
    values = dict(input_file=str(tmp_path / "train.tfrecord"), do_eval=False,
                  num_train_steps=steps, save_checkpoints_steps=3, log_every_n_steps=3,
                  save_summary_steps=0, keep_checkpoint_max=5, **values)
    return run_pretraining(pretrain_options(tmp_path, **values))


def _cut(path, fraction=3):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // fraction)


def test_unreadable_newest_checkpoint_is_set_aside_and_training_resumes(data, tmp_path):
    out = str(tmp_path / "out")
    _train(tmp_path, 6)
    _cut(os.path.join(out, "model.ckpt-6.data-00000-of-00001"))
    assert checkpoints.unreadable_reason(os.path.join(out, "model.ckpt-6"))
    assert checkpoints.unreadable_reason(os.path.join(out, "model.ckpt-3")) is None
    _train(tmp_path, 9)
    corrupt = sorted(os.listdir(os.path.join(out, "corrupt")))
    assert corrupt and all(name.startswith("model.ckpt-6.") for name in corrupt)
    assert assert_checkpoint_state_is_whole(out) == 9
    state = tf.train.get_checkpoint_state(out)
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "model.ckpt-0", "model.ckpt-3", "model.ckpt-6", "model.ckpt-9"]  # 6 trained again.

    # None whole: one error, nothing moved.
    for step in (0, 3, 6, 9):
        os.remove(os.path.join(out, f"model.ckpt-{step}.index"))
    before = sorted(os.listdir(out))
    with pytest.raises(BertTfError, match=r"--output_dir: no checkpoint in .* can be read "
                                          r"\(model.ckpt-9, model.ckpt-6"):
        _train(tmp_path, 12)
    assert sorted(os.listdir(out)) == before


def test_truncated_init_checkpoint_is_named(data, tmp_path):
    _train(tmp_path, 1)
    prefix = str(tmp_path / "out" / "model.ckpt-1")
    _cut(prefix + ".data-00000-of-00001")
    with pytest.raises(BertTfError, match=r"--init_checkpoint: checkpoint '.*model.ckpt-1' "
                                          r"cannot be read .*re-copy it"):
        run_pretraining(pretrain_options(
            tmp_path, output_dir=str(tmp_path / "other"), init_checkpoint=prefix))
    assert not os.path.exists(tmp_path / "other")


# ---------------------------------------------------------------------------------- full disks


def test_failed_checkpoint_write_is_one_line_and_loses_nothing(data, tmp_path, monkeypatch):
    """The error TF raises when the disk fills while it writes a checkpoint's shards, injected
    where TF writes them (tmpfs: the test below)."""
    out = str(tmp_path / "out")
    original_save = tf1.train.Saver.save

    def full_disk(self, sess, save_path, global_step=None, *args, **kwargs):
        step = sess.run(global_step) if hasattr(global_step, "op") else global_step
        if step == 6 and "input" not in save_path:
            os.makedirs(f"{save_path}-6_temp")  # What TF has written when the disk fills.
            raise tf.errors.ResourceExhaustedError(
                None, None, f"{save_path}-6_temp/part-00000-of-00001.data-00000-of-00001."
                "tempstate123; No space left on device")
        return original_save(self, sess, save_path, global_step, *args, **kwargs)

    monkeypatch.setattr(tf1.train.Saver, "save", full_disk)
    with pytest.raises(BertTfError) as error:
        _train(tmp_path, 9)
    assert str(error.value) == (
        f"no space left on device writing checkpoint 6 to {out}; the last whole checkpoint is "
        "model.ckpt-3 and the same command resumes from it.")
    assert assert_checkpoint_state_is_whole(out) == 3
    assert not [name for name in os.listdir(out) if "temp" in name]
    monkeypatch.setattr(tf1.train.Saver, "save", original_save)
    _train(tmp_path, 9)
    assert assert_checkpoint_state_is_whole(out) == 9


def _mounted_tmpfs(path, size):
    os.makedirs(path)
    completed = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                               capture_output=True, text=True)
    return completed.returncode == 0


@pytest.mark.slow
def test_disk_full_on_a_small_tmpfs(data, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the injected fault above covers the path")
    mount = str(tmp_path / "tmpfs")
    if not _mounted_tmpfs(mount, "24m"):
        pytest.skip("mount -t tmpfs failed (no CAP_SYS_ADMIN in this container)")
    try:
        out = os.path.join(mount, "out")
        _train(tmp_path, 3, output_dir=out)
        sizes = {name: os.path.getsize(os.path.join(out, name)) for name in os.listdir(out)}
        one_checkpoint = sum(size for name, size in sizes.items()
                             if name.startswith("model.ckpt-3."))
        events = sum(size for name, size in sizes.items() if name.startswith("events"))
        # Room for the next start (graph.pbtxt rewritten, a new events file) and half a
        # checkpoint: the run fails while it writes checkpoint 6.
        free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
        room = sizes["graph.pbtxt"] + events + one_checkpoint // 2
        with open(os.path.join(mount, "filler"), "wb") as f:
            f.write(b"\0" * max(free - room, 0))
        args = [f"--bert_config_file={tmp_path / 'bert_config.json'}",
                f"--input_file={data['good']}", f"--output_dir={out}", "--max_seq_length=16",
                "--max_predictions_per_seq=4", "--do_train", "--train_batch_size=8",
                "--num_train_steps=9", "--save_checkpoints_steps=3", "--log_every_n_steps=3",
                "--save_summary_steps=0", "--learning_rate=3e-3", "--random_seed=1",
                "--num_warmup_steps=5"]
        failed = run_python_script(SCRIPT, args, env=ENV, cwd=ROOT)
        errors = [line for line in failed.stderr.splitlines() if line.startswith("error: ")]
        assert failed.returncode == 2 and len(errors) == 1, failed.stderr[-3000:]
        assert "Traceback" not in failed.stderr
        assert errors[0].startswith("error: no space left on device writing ")
        assert f"to {out}; the last whole checkpoint is model.ckpt-" in errors[0]
        assert assert_checkpoint_state_is_whole(out) >= 3
        os.remove(os.path.join(mount, "filler"))
        _train(tmp_path, 9, output_dir=out)  # The same command, now with space.
        assert assert_checkpoint_state_is_whole(out) == 9
        assert not [n for n in os.listdir(out) if "temp" in n or ".tmp" in n]
    finally:
        # Lazy: this process's cached summary writers may still hold files open there.
        subprocess.run(["umount", "-l", mount], check=False)


# --------------------------------------------------------------------------------- out of memory


class _AllocateTooMuch(tf1.train.SessionRunHook):
    """Adds a real allocation of 16 TiB to step `step`'s run: TF's own OOM error."""

    def __init__(self, step):
        self._step, self._runs = step, 0

    def begin(self):
        self._size = tf1.placeholder(tf.int32, [])
        self._huge = tf.reduce_sum(tf.fill([self._size, 1024, 1024], 1.0))

    def before_run(self, run_context):
        self._runs += 1
        if self._runs == self._step:
            return tf1.train.SessionRunArgs(self._huge, feed_dict={self._size: 2 ** 22})
        return None


class _HostMemoryError(tf1.train.SessionRunHook):

    def after_run(self, run_context, run_values):
        raise MemoryError()


@pytest.mark.parametrize("hook, cause, resume", [
    (lambda: _AllocateTooMuch(2), "out of memory (OOM when allocating tensor with shape["
                                  "4194304,1024,1024]", True),
    (_HostMemoryError, "out of memory on the host (MemoryError)", False)])
def test_out_of_memory_names_the_batch_and_the_fixes(data, tmp_path, monkeypatch, hook, cause,
                                                     resume):
    original = TrainingStep.spec

    def train_spec(self, *args, **kwargs):
        spec = original(self, *args, **kwargs)
        return spec._replace(training_hooks=[*(spec.training_hooks or []), hook()])

    monkeypatch.setattr(TrainingStep, "spec", train_spec)
    with pytest.raises(BertTfError) as error:
        _train(tmp_path, 6, num_accumulation_steps=2)
    message = str(error.value)
    assert message.startswith(cause) and "\n" not in message
    for fragment in ("a batch of 4 examples per replica", "--num_accumulation_steps",
                     "smaller --train_batch_size", "--precision=bf16"):
        assert fragment in message
    assert assert_checkpoint_state_is_whole(str(tmp_path / "out")) == 0
    if resume:  # The same command, without the fault, finishes.
        monkeypatch.setattr(TrainingStep, "spec", original)
        _train(tmp_path, 6, num_accumulation_steps=2)
        assert assert_checkpoint_state_is_whole(str(tmp_path / "out")) == 6


# ---------------------------------------------------------------------------------- exact resume


_TOTAL_STEPS = 24
# Runs run_pretraining.py with each training step slowed down, so that a kill at a random
# moment lands mid-training however fast the machine is.
_SLOWED = textwrap.dedent("""
    import runpy, sys, time
    from tensorflow.python.training import monitored_session
    run = monitored_session._MonitoredSession.run
    def slow_run(self, *args, **kwargs):
        time.sleep(0.05)
        return run(self, *args, **kwargs)
    monitored_session._MonitoredSession.run = slow_run
    sys.argv = [{script!r}, *sys.argv[1:]]
    runpy.run_path({script!r}, run_name="__main__")
""").format(script=SCRIPT)


def _resume_values(tmp_path, out, **values):
    # Three shards: the training input shuffles their order and reads them in parallel.
    shards = [str(tmp_path / "train.tfrecord")]
    for seed in (1, 2):
        shards.append(str(tmp_path / f"train-{seed}.tfrecord"))
        if not os.path.exists(shards[-1]):
            write_records(shards[-1], num=24, seed=seed)
    return dict(input_file=",".join(shards), output_dir=str(out),
                do_eval=False, num_train_steps=_TOTAL_STEPS, num_warmup_steps=4,
                save_checkpoints_steps=4, keep_checkpoint_max=20, log_every_n_steps=10,
                save_summary_steps=0, learning_rate=3e-3, random_seed=7, **values)


def _step(model_dir):
    prefix = tf.train.latest_checkpoint(str(model_dir))
    return -1 if prefix is None else int(prefix.rsplit("-", 1)[1])


@pytest.mark.slow
def test_exact_resume_after_two_sigkills_matches_an_uninterrupted_run(data, tmp_path,
                                                                      monkeypatch):
    straight = tmp_path / "straight"
    run_pretraining(pretrain_options(tmp_path, **_resume_values(tmp_path,
                                                                straight)))
    killed = tmp_path / "killed"
    values = _resume_values(tmp_path, killed)
    args = [f"--{k}={v}" for k, v in values.items()]
    args.append(f"--bert_config_file={tmp_path / 'bert_config.json'}")
    args += ["--max_seq_length=16", "--max_predictions_per_seq=4", "--do_train",
             "--train_batch_size=8"]
    slowed = tmp_path / "slowed_run_pretraining.py"
    slowed.write_text(_SLOWED)
    rng = random.Random(16)
    steps_at_kill = [0]
    for _ in range(2):
        # A fork of tests/script_runner.py's preloaded Python: no TensorFlow import to wait for.
        proc = start_python_script(str(slowed), args, env=ENV, cwd=ROOT)
        try:
            deadline = time.time() + 300
            # Wait until this run saved a checkpoint of its own, then kill at a random moment.
            while time.time() < deadline and _step(killed) <= steps_at_kill[-1]:
                assert proc.poll() is None
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.5))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        steps_at_kill.append(assert_checkpoint_state_is_whole(str(killed)))
    assert 0 < steps_at_kill[1] < steps_at_kill[2] < _TOTAL_STEPS, steps_at_kill
    run_pretraining(pretrain_options(tmp_path, **values))  # The same command.
    reference = weights_at(str(straight), _TOTAL_STEPS)
    # A resume that changed even one batch differs by > 1e-2 (below).
    assert max_difference(weights_at(str(killed), _TOTAL_STEPS), reference) <= 1e-6

    # Today's behaviour (--exact_resume=false), stopped cleanly at step 12 by the same
    # command: the resumed run reads the data from the first record again, so it trains on
    # other batches than the uninterrupted run and ends elsewhere.
    restarted = tmp_path / "restarted"
    old = pretrain_options(tmp_path, **_resume_values(tmp_path, restarted, exact_resume=False))
    original = TrainingStep.spec

    def stopping_train_spec(self, *args, **kwargs):
        spec = original(self, *args, **kwargs)
        return spec._replace(training_hooks=[*(spec.training_hooks or []),
                                             tf1.train.StopAtStepHook(last_step=12)])

    monkeypatch.setattr(TrainingStep, "spec", stopping_train_spec)
    run_pretraining(old)
    assert assert_checkpoint_state_is_whole(str(restarted)) == 12
    monkeypatch.setattr(TrainingStep, "spec", original)
    run_pretraining(old)
    assert max_difference(weights_at(str(restarted), _TOTAL_STEPS), reference) > 1e-2


def test_a_resume_by_another_number_of_workers_restarts_the_input_with_a_warning(
        data, tmp_path, caplog):
    out = tmp_path / "out"
    values = {**_resume_values(tmp_path, out), "num_train_steps": 4}
    run_pretraining(pretrain_options(tmp_path, **values))
    states = out / "input_state"
    assert sorted(os.listdir(states)) == [
        f"model.ckpt-{step}.input-0-of-1.{ext}" for step in (0, 4)
        for ext in ("data-00000-of-00001", "index")]
    for name in os.listdir(states):  # As if two workers had written the checkpoints.
        os.rename(states / name, states / name.replace("-of-1.", "-of-2."))
    caplog.set_level("WARNING")
    values.update(num_train_steps=6)
    run_pretraining(pretrain_options(tmp_path, **values))
    assert _step(out) == 6
    warnings = [r.getMessage() for r in caplog.records if "--exact_resume" in r.getMessage()]
    assert len(warnings) == 1 and "model.ckpt-4 has no saved input position" in warnings[0]
    assert "restarts from its first record" in warnings[0]

