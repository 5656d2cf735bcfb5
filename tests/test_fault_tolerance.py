"""Crashes at bad moments: SIGKILLed training resumes, outputs are whole or absent.

Builds on tests/test_estimator.py (a kill while the Estimator writes a checkpoint, NaN stops)
and tests/test_pretraining.py (one SIGKILL of run_pretraining.py, then resume). Here the real
script is killed several times (once while TensorFlow writes a checkpoint, once at a random
moment), the `checkpoint` state file is checked after every kill, and the result files are
checked to be written whole (temporary name + rename) even when the process dies mid-write.
"""

import json
import os
import random
import signal
import textwrap
import time

import numpy as np
import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import PRETRAINING_TINY as TINY
from finetune_helpers import (
    assert_checkpoint_state_is_whole,
    pretrain_options,
    write_records,
)
from script_runner import run_python_code, run_python_script, start_python_script

from bert_tf import fileio
from bert_tf.errors import BertTfError
from bert_tf.runs.pretraining import run_pretraining
from bert_tf.training import estimator as estimator_lib

tf1 = tf.compat.v1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "run_pretraining.py")
# Runs a script and SIGKILLs it inside the real save of one step (see the file).
KILL_DURING_SAVE = os.path.join(ROOT, "tests", "kill_during_save.py")
ENV = child_env()


@pytest.mark.slow
def test_script_killed_during_a_checkpoint_write_and_at_random_resumes(tmp_path):
    write_records(str(tmp_path / "train.tfrecord"), num=64)
    (tmp_path / "bert_config.json").write_text(json.dumps(TINY))
    out = str(tmp_path / "out")
    total_steps = 24
    args = [f"--bert_config_file={tmp_path / 'bert_config.json'}",
            f"--input_file={tmp_path / 'train.tfrecord'}", f"--output_dir={out}",
            "--max_seq_length=16", "--max_predictions_per_seq=4", "--do_train",
            "--train_batch_size=8", f"--num_train_steps={total_steps}", "--num_warmup_steps=2",
            "--save_checkpoints_steps=3", "--keep_checkpoint_max=2", "--log_every_n_steps=3",
            "--learning_rate=1e-3"]

    # 1. Killed inside TF's save of model.ckpt-6 (shards written, not yet merged into place):
    #    the state still names the whole model.ckpt-3.
    killed = run_python_script(KILL_DURING_SAVE, ["6", SCRIPT, *args], env=ENV, cwd=ROOT)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert os.listdir(os.path.join(out, "model.ckpt-6_temp"))  # It did die mid-save.
    assert not [name for name in os.listdir(out) if name.startswith("model.ckpt-6.")]
    assert assert_checkpoint_state_is_whole(out) == 3

    # 2. Killed at a random moment after it saved once more. The run is made long enough that
    #    the kill always lands mid-training, however fast the machine is.
    def with_steps(steps):
        return [f"--num_train_steps={steps}" if a.startswith("--num_train_steps=") else a
                for a in args]

    rng = random.Random(5)
    proc = start_python_script(SCRIPT, with_steps(100000), env=ENV, cwd=ROOT)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and tf.train.latest_checkpoint(out).endswith("-3"):
            assert proc.poll() is None
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.0))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    resumed_from = assert_checkpoint_state_is_whole(out)
    assert resumed_from > 3

    # 3. Rerun: it resumes from the last whole checkpoint and ends at num_train_steps.
    target = resumed_from + 6
    final = run_python_script(SCRIPT, with_steps(target), env=ENV, cwd=ROOT)
    assert final.returncode == 0, final.stderr[-3000:]
    assert f"from step {resumed_from} to {target}" in final.stderr
    assert assert_checkpoint_state_is_whole(out) == target
    assert not [name for name in os.listdir(out) if name.endswith("_temp")]


def test_diverging_loss_names_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    write_records(str(tmp_path / "train.tfrecord"), num=16)
    (tmp_path / "bert_config.json").write_text(json.dumps(TINY))
    values = dict(do_eval=False, learning_rate=1e-3, num_train_steps=2, num_warmup_steps=0,
                  save_checkpoints_steps=2, iterations_per_loop=1, log_every_n_steps=1,
                  save_summary_steps=0)
    run_pretraining(pretrain_options(tmp_path, **values))
    # Far too large a learning rate: weights overflow to Inf, then the loss is NaN.
    values.update(learning_rate=1e38, num_train_steps=50)
    with pytest.raises(BertTfError, match=r"Training diverged: .* at step \d+.*lower "
                                          r"--learning_rate") as error:
        run_pretraining(pretrain_options(tmp_path, **values))
    assert "\n" not in str(error.value)
    assert assert_checkpoint_state_is_whole(str(tmp_path / "out")) == 2


# --------------------------------------------------------------------- outputs: whole or absent


_KILLED_BEFORE_RENAME = textwrap.dedent("""
    import os, signal, sys
    from bert_tf import fileio
    def crash(*args):  # The temporary file is complete; the process dies before the rename.
        os.kill(os.getpid(), signal.SIGKILL)
    os.replace = crash
    fileio.write_eval_results(sys.argv[1], {"loss": 9.0, "global_step": 99})
""")


def test_eval_results_survive_a_crash_while_rewriting_them(tmp_path):
    path = fileio.write_eval_results(str(tmp_path), {"loss": 1.5, "global_step": 10})
    before = open(path).read()
    assert before == "global_step = 10\nloss = 1.5\n"
    killed = run_python_code(_KILLED_BEFORE_RENAME, [str(tmp_path)], env=ENV, cwd=ROOT,
                             timeout=60)
    assert killed.returncode == -signal.SIGKILL
    assert open(path).read() == before  # The final name still holds the whole old file.


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = str(tmp_path / "predictions.json")
    fileio.atomic_write_text(path, "old\n")

    class DiskFull(OSError):
        pass

    def fail(_):
        raise DiskFull("No space left on device")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(DiskFull):
        fileio.atomic_write_text(path, "new\n" * 1000)
    assert open(path).read() == "old\n"
    assert os.listdir(tmp_path) == ["predictions.json"]


def _linear_model_fn(features, labels, mode):
    w = tf1.get_variable("w", [1, 1], initializer=tf1.ones_initializer())
    predictions = tf.matmul(features["x"], w)
    if mode == estimator_lib.ModeKeys.PREDICT:
        return estimator_lib.EstimatorSpec(mode, predictions={"y": predictions})
    loss = tf.reduce_mean(tf.square(predictions - labels))
    train_op = tf1.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=tf1.train.get_global_step())
    return estimator_lib.EstimatorSpec(mode, loss=loss, train_op=train_op)


def test_failed_export_leaves_no_model_under_a_final_name(tmp_path, monkeypatch):
    estimator = estimator_lib.Estimator(_linear_model_fn, str(tmp_path / "model"),
                                        train_batch_size=2)
    x = np.ones([4, 1], np.float32)
    estimator.train(lambda params: tf.data.Dataset.from_tensor_slices(({"x": x}, x)).repeat()
                    .batch(2), max_steps=1)
    receiver = estimator_lib.build_raw_serving_input_receiver_fn(
        {"x": tf.TensorSpec([None, 1], tf.float32)})
    export_base = tmp_path / "export"
    first = estimator.export_saved_model(str(export_base), receiver)

    def fail(self, *args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(tf1.saved_model.Builder, "save", fail)
    # One line naming the cause (issue 16), not the OSError's traceback.
    with pytest.raises(BertTfError, match="no space left on device writing the export"):
        estimator.export_saved_model(str(export_base), receiver)
    # Only the earlier, complete export; the failed one left neither a final nor a temp dir.
    assert os.listdir(export_base) == [os.path.basename(first)]
    assert tf.saved_model.contains_saved_model(first)
