"""End-to-end tests of MLM + NSP pre-training (bert_tf.tasks.pretraining, run_pretraining.py)."""

import json
import os
import signal
import time

import numpy as np
import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import PRETRAINING_TINY as TINY
from finetune_helpers import pretrain_options, read_key_values, run_script, write_records
from script_runner import start_python_script

from bert_tf import modeling
from bert_tf.errors import BertTfError
from bert_tf.runs.pretraining import run_pretraining
from bert_tf.tasks import pretraining

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "run_pretraining.py")


def test_overfits_a_handful_of_instances_and_writes_eval_results(tmp_path):
    write_records(str(tmp_path / "train.tfrecord"), num=8)
    # One step: the loss at the start; then the same run resumes from step 1 to 150.
    first = run_pretraining(pretrain_options(tmp_path, num_train_steps=1))
    last = run_pretraining(pretrain_options(tmp_path, num_train_steps=150))
    assert last["global_step"] == 150
    assert last["masked_lm_loss"] < 0.5 * first["masked_lm_loss"], (first, last)
    assert last["masked_lm_accuracy"] > 0.9
    text = (tmp_path / "out" / "eval_results.txt").read_text()
    keys = [line.split(" = ")[0] for line in text.splitlines()]
    assert keys == sorted(["masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
                           "next_sentence_loss", "global_step", "loss"])
    assert tf.train.latest_checkpoint(str(tmp_path / "out")).endswith("model.ckpt-150")


def test_training_steps_fetch_one_set_of_tensors(tmp_path, session_run_fetches):
    """Pre-training's summaries are scalars, so its steps all run one executor (a second one
    costs another grappler pass over the training graph and a warm-up step)."""
    write_records(str(tmp_path / "train.tfrecord"), num=8)
    run_pretraining(pretrain_options(tmp_path, num_train_steps=6, do_eval=False,
                                     save_summary_steps=2, log_every_n_steps=2))
    steps = [names for names in session_run_fetches
             if any(name.startswith("AdamWeightDecayOptimizer") for name in names)]
    assert len(steps) == 6
    assert len(set(steps)) == 1


def test_masked_lm_loss_matches_numpy():
    rng = np.random.RandomState(0)
    config = modeling.BertConfig(**TINY)
    seq_out = rng.randn(2, 5, 32).astype(np.float32)
    table = rng.randn(64, 32).astype(np.float32) * 0.1
    positions = np.array([[1, 3], [0, 4]], np.int32)
    ids = np.array([[7, 9], [11, 0]], np.int32)
    weights = np.array([[1.0, 1.0], [1.0, 0.0]], np.float32)
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        loss, per_example, _ = pretraining.masked_lm_output(
            config, tf.constant(seq_out), tf.constant(table), tf.constant(positions),
            tf.constant(ids), tf.constant(weights))
        sess.run(tf.compat.v1.global_variables_initializer())
        names = sorted(v.name for v in tf.compat.v1.global_variables())
        values = {v.name: sess.run(v) for v in tf.compat.v1.global_variables()}
        loss, per_example = sess.run([loss, per_example])
    assert names == ["cls/predictions/output_bias:0",
                     "cls/predictions/transform/LayerNorm/beta:0",
                     "cls/predictions/transform/LayerNorm/gamma:0",
                     "cls/predictions/transform/dense/bias:0",
                     "cls/predictions/transform/dense/kernel:0"]
    # Reference: gather, dense + exact gelu, layer norm, tied decoder, log-softmax, weighted mean.
    from numpy_bert import gelu, layer_norm
    x = seq_out[np.arange(2)[:, None], positions].reshape(-1, 32).astype(np.float64)
    x = gelu(x @ values["cls/predictions/transform/dense/kernel:0"]
             + values["cls/predictions/transform/dense/bias:0"])
    x = layer_norm(x, values["cls/predictions/transform/LayerNorm/gamma:0"],
                   values["cls/predictions/transform/LayerNorm/beta:0"])
    logits = x @ table.T + values["cls/predictions/output_bias:0"]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ref = -log_probs[np.arange(4), ids.reshape(-1)]
    np.testing.assert_allclose(per_example, ref, rtol=1e-4)
    np.testing.assert_allclose(loss, (ref * weights.reshape(-1)).sum() / (3 + 1e-5), rtol=1e-4)


def test_records_of_another_length_are_a_clear_error(tmp_path):
    write_records(str(tmp_path / "train.tfrecord"), num=2, seq=16, preds=4)
    with pytest.raises(BertTfError, match=r"input_ids of length 16 but --max_seq_length=32"):
        run_pretraining(pretrain_options(tmp_path, max_seq_length=32))
    with pytest.raises(BertTfError, match=r"masked_lm_positions of length 4 but "
                                          r"--max_predictions_per_seq=5"):
        run_pretraining(pretrain_options(tmp_path, max_predictions_per_seq=5))
    with pytest.raises(BertTfError,
                       match=r"--input_file: pattern '.*nothing\*' matches no file"):
        run_pretraining(pretrain_options(tmp_path,
                                         input_file=str(tmp_path / "nothing*")))
    with pytest.raises(BertTfError, match=r"not divisible by --num_accumulation_steps=3"):
        run_pretraining(pretrain_options(tmp_path, num_accumulation_steps=3))


def _script(args, timeout):
    """Runs run_pretraining.py with `args`; returns (exit status, its stdout and stderr)."""
    result = run_script("run_pretraining.py", *args, timeout=timeout)
    return result.returncode, result.stdout + result.stderr


def test_script_killed_with_sigkill_resumes_to_num_train_steps(tmp_path):
    write_records(str(tmp_path / "train.tfrecord"), num=64)
    (tmp_path / "bert_config.json").write_text(json.dumps(TINY))
    out = tmp_path / "out"
    args = [f"--bert_config_file={tmp_path / 'bert_config.json'}",
            f"--input_file={tmp_path / 'train.tfrecord'}", f"--output_dir={out}",
            "--max_seq_length=16", "--max_predictions_per_seq=4", "--do_train",
            "--train_batch_size=8", "--num_train_steps=100000", "--num_warmup_steps=10",
            "--save_checkpoints_steps=20", "--log_every_n_steps=10", "--learning_rate=1e-3"]
    def checkpoint_step():
        latest = tf.train.latest_checkpoint(str(out))
        return int(latest.rsplit("-", 1)[1]) if latest else -1

    # Its output goes to a file: nobody reads a pipe while it trains, and a full pipe blocks it.
    proc = start_python_script(SCRIPT, args, env=child_env(), output=tmp_path / "killed.log")
    deadline = time.time() + 180
    while time.time() < deadline and checkpoint_step() < 20:  # step 0 is saved at the start
        time.sleep(0.2)
    assert checkpoint_step() >= 20, "no checkpoint after training steps before the deadline"
    time.sleep(1.0)  # let it get into the next interval, possibly mid-save
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = checkpoint_step()
    assert killed_at >= 20

    target = killed_at + 30
    returncode, log = _script([a if not a.startswith("--num_train_steps") else
                               f"--num_train_steps={target}" for a in args], timeout=300)
    assert returncode == 0, log[-3000:]
    assert f"from step {killed_at}" in log
    final = tf.train.latest_checkpoint(str(out))
    assert final.endswith(f"model.ckpt-{target}")
    assert int(tf.train.load_variable(final, "global_step")) == target


def test_script_bad_config_is_one_line_error(tmp_path):
    write_records(str(tmp_path / "train.tfrecord"), num=2)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**TINY, "num_attention_heads": 3}))
    returncode, log = _script([f"--bert_config_file={bad}",
                               f"--input_file={tmp_path / 'train.tfrecord'}",
                               f"--output_dir={tmp_path / 'out'}", "--do_train"], timeout=120)
    assert returncode == 2
    assert "Traceback" not in log
    assert "error: " in log and "not a multiple of num_attention_heads (3)" in log


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_script_use_xla_trains_and_evaluates_through_xla(tmp_path, precision):
    write_records(str(tmp_path / "train.tfrecord"), num=16)
    (tmp_path / "bert_config.json").write_text(json.dumps(TINY))

    def train_and_evaluate(output_dir, *flags, ran_ops_file=None):
        result = run_script(
            "run_pretraining.py", f"--bert_config_file={tmp_path / 'bert_config.json'}",
            f"--input_file={tmp_path / 'train.tfrecord'}", f"--output_dir={output_dir}",
            "--max_seq_length=16", "--max_predictions_per_seq=4", "--do_train", "--do_eval",
            "--train_batch_size=8", "--eval_batch_size=8", "--num_train_steps=10",
            "--num_warmup_steps=2", "--max_eval_steps=2", "--random_seed=1",
            f"--precision={precision}", *flags, ran_ops_file=ran_ops_file)
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
        return read_key_values(output_dir / "eval_results.txt")

    ran_ops_file = tmp_path / "ran_ops.json"
    # tests/ran_ops.py runs the script and writes the op types of the kernels that ran.
    compiled = train_and_evaluate(tmp_path / "xla", "--use_xla", ran_ops_file=ran_ops_file)
    # Compiled clusters ran (an _XlaCompile and an _XlaRun kernel each), whatever TF logs.
    assert {"_XlaCompile", "_XlaRun"} <= set(json.loads(ran_ops_file.read_text()))
    assert compiled["global_step"] == 10
    # XLA's fusions round differently, but train the same model: the same seeded run without
    # it ends at the same losses.
    plain = train_and_evaluate(tmp_path / "plain")
    for name in ("loss", "masked_lm_loss", "next_sentence_loss"):
        assert compiled[name] == pytest.approx(plain[name], rel=1e-3), name
