"""Training the way users run it: evaluation during training, the best checkpoint, early
stopping, preemption (SIGTERM), the released-checkpoint layout, frozen layers and the per-step
pre-training metrics (README "Training runs")."""

import glob
import json
import os
import signal
import time

import numpy as np
import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import PRETRAINING_TINY as TINY
from finetune_helpers import (
    ROOT,
    TOPICS,
    assert_ok,
    cluster_flags,
    kill_all,
    options,
    pretrain_options,
    read_key_values,
    run_script,
    start_workers,
    wait_workers,
    write_records,
    write_tiny_config,
)
from script_runner import start_python_script

from bert_tf import modeling
from bert_tf.runs import driver
from bert_tf.runs.pretraining import run_pretraining

tf1 = tf.compat.v1


def _topics(tmp_path, vocab_file, **values):
    """The task of a tiny classifier on the shipped topics set (food / sport)."""
    values = {"do_eval": True, **values}
    return options("classifier", task_name="tsv", text_a_column="sentence", data_dir=TOPICS,
                   vocab_file=vocab_file, bert_config_file=write_tiny_config(tmp_path),
                   output_dir=str(tmp_path / "out"), do_train=True, **values)


def _scalars(event_dir, tag):
    """{step: value} of the scalar summary `tag` in the event files of `event_dir`."""
    values = {}
    for path in glob.glob(os.path.join(event_dir, "events.out.tfevents.*")):
        for event in tf1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = value.simple_value
    return values


def _history(output_dir):
    with open(os.path.join(output_dir, "eval_history.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_eval_every_n_steps_keeps_the_best_checkpoint_and_uses_it(tmp_path, vocab_file):
    out = str(tmp_path / "out")
    results = driver.run_task(_topics(
        tmp_path, vocab_file, num_train_steps=30, eval_every_n_steps=10,
        best_checkpoint_metric="eval_loss", save_checkpoints_steps=1000))
    history = _history(out)
    assert [entry["global_step"] for entry in history] == [10, 20, 30]
    # TensorBoard: every metric under eval/ at each of those steps.
    for metric in ("eval_loss", "eval_accuracy", "accuracy"):
        assert {10, 20, 30} <= set(_scalars(os.path.join(out, "eval"), metric)), metric
    # eval_loss: lower is better, the first of equals wins.
    best_step = min(history, key=lambda entry: entry["eval_loss"])["global_step"]
    with open(os.path.join(out, "best", "best_eval.json"), encoding="utf-8") as f:
        best = json.load(f)
    assert best["global_step"] == best_step
    assert best["checkpoint"] == f"model.ckpt-{best_step}"
    assert os.path.exists(os.path.join(out, "best", f"model.ckpt-{best_step}.index"))
    assert tf.train.latest_checkpoint(os.path.join(out, "best")).endswith(
        f"model.ckpt-{best_step}")
    # Only the best checkpoint is kept in best/.
    assert len(glob.glob(os.path.join(out, "best", "*.index"))) == 1
    # The final results come from the best checkpoint, not the latest (step 30).
    assert results["global_step"] == best_step
    assert results["eval_loss"] == pytest.approx(best["eval_loss"], abs=1e-6)
    assert read_key_values(os.path.join(out, "eval_results.txt"))["global_step"] == best_step


def test_early_stopping_stops_where_the_patience_rule_says(tmp_path, vocab_file):
    out = str(tmp_path / "out")
    # A learning rate this small leaves the predictions (and accuracy) unchanged: a plateau.
    values = dict(num_train_steps=40, eval_every_n_steps=2, learning_rate=1e-12,
                  best_checkpoint_metric="eval_accuracy", early_stopping_patience=2,
                  save_checkpoints_steps=1000)
    driver.run_task(_topics(tmp_path, vocab_file, **values))
    history = _history(out)
    # Best at the first evaluation (step 2); steps 4 and 6 do not improve: stop after 6.
    assert [entry["global_step"] for entry in history] == [2, 4, 6]
    assert tf.train.latest_checkpoint(out).endswith("model.ckpt-6")
    # The same command again trains no further.
    driver.run_task(_topics(tmp_path, vocab_file, **values))
    assert tf.train.latest_checkpoint(out).endswith("model.ckpt-6")
    assert len(_history(out)) == 3


def test_frozen_layers_do_not_move_and_have_no_slots(tmp_path, vocab_file):
    out = str(tmp_path / "out")
    driver.run_task(_topics(tmp_path, vocab_file, num_train_steps=5,
                            freeze_layers=1, do_eval=False))
    start = tf.train.load_checkpoint(os.path.join(out, "model.ckpt-0"))
    end = tf.train.load_checkpoint(tf.train.latest_checkpoint(out))
    names = [name for name in end.get_variable_to_shape_map()
             if not name.endswith(("adam_m", "adam_v")) and name != "global_step"]
    frozen = [n for n in names if n.startswith(("bert/embeddings/", "bert/encoder/layer_0/"))]
    trained = [n for n in names if n not in frozen]
    assert frozen and trained
    for name in frozen:
        np.testing.assert_array_equal(start.get_tensor(name), end.get_tensor(name), name)
        assert not end.has_tensor(name + "/adam_m"), name
    moved = [n for n in trained if not np.array_equal(start.get_tensor(n), end.get_tensor(n))]
    assert len(moved) > 0.9 * len(trained), sorted(set(trained) - set(moved))
    assert all(end.has_tensor(name + "/adam_m") for name in trained)


def test_release_checkpoint_has_the_model_only_and_loads(tmp_path, vocab_file):
    out = str(tmp_path / "out")
    driver.run_task(_topics(tmp_path, vocab_file, num_train_steps=2,
                            do_eval=False))
    training = tf.train.latest_checkpoint(out)
    release = tmp_path / "release"
    assert_ok(run_script("export_checkpoint.py", f"--init_checkpoint={out}",
                         f"--bert_config_file={tmp_path / 'bert_config.json'}",
                         f"--vocab_file={vocab_file}", f"--output_dir={release}"))
    assert sorted(os.listdir(release)) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "vocab.txt"]
    released = dict(tf.train.list_variables(str(release / "bert_model.ckpt")))
    stored = dict(tf.train.list_variables(training))
    model = {name: shape for name, shape in stored.items()
             if not name.endswith(("/adam_m", "/adam_v")) and name != "global_step"}
    assert released == model
    assert "output_weights" in released and "bert/pooler/dense/kernel" in released

    def data_size(prefix):
        return sum(os.path.getsize(path) for path in glob.glob(prefix + ".data-*"))

    assert data_size(str(release / "bert_model.ckpt")) < 0.4 * data_size(training)

    # The same outputs through modeling.init_from_checkpoint.
    config = modeling.BertConfig.from_json_file(str(release / "bert_config.json"))
    ids = np.array([[101, 2023, 2003, 102]], dtype=np.int32)

    def pooled(checkpoint):
        with tf.Graph().as_default():
            model_ = modeling.BertModel(config, False, tf.constant(ids))
            modeling.init_from_checkpoint(checkpoint)
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                return sess.run(model_.get_pooled_output())

    np.testing.assert_array_equal(pooled(training), pooled(str(release / "bert_model.ckpt")))

    encoder_only = tmp_path / "encoder_only"
    assert_ok(run_script("export_checkpoint.py", f"--init_checkpoint={training}",
                         f"--bert_config_file={tmp_path / 'bert_config.json'}",
                         f"--output_dir={encoder_only}", "--keep_heads=false"))
    names = dict(tf.train.list_variables(str(encoder_only / "bert_model.ckpt")))
    assert names == {k: v for k, v in model.items() if not k.startswith(("cls/", "output_"))}
    assert_ok(run_script("convert_checkpoint.py", "--direction=tf_to_hf",
                         f"--bert_config_file={release / 'bert_config.json'}",
                         f"--init_checkpoint={release / 'bert_model.ckpt'}",
                         f"--output_dir={tmp_path / 'hf'}"))
    assert os.path.exists(tmp_path / "hf" / "model.safetensors")


def test_pretraining_logs_masked_lm_and_next_sentence_metrics_per_step(tmp_path, caplog):
    write_records(str(tmp_path / "train.tfrecord"), num=16)
    caplog.set_level("INFO")
    run_pretraining(pretrain_options(
        tmp_path, num_train_steps=6, log_every_n_steps=2, do_eval=False))
    out = str(tmp_path / "out")
    # Written with the progress line's speed summary, every --log_every_n_steps steps.
    logged_steps = sorted(_scalars(out, "global_step/sec"))
    assert len(logged_steps) >= 2 and set(np.diff(logged_steps)) == {2}, logged_steps
    for tag in ("masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss",
                "next_sentence_accuracy"):
        values = _scalars(out, tag)
        assert sorted(values) == logged_steps, (tag, values)
        assert all(np.isfinite(v) for v in values.values())
        if tag.endswith("accuracy"):
            assert all(0.0 <= v <= 1.0 for v in values.values())
    progress = [r.getMessage() for r in caplog.records if "/6 loss=" in r.getMessage()]
    assert len(progress) == len(logged_steps), progress
    assert all("masked_lm_accuracy=" in line and "next_sentence_loss=" in line
               for line in progress), progress


def _pretraining_args(tmp_path, steps):
    (tmp_path / "bert_config.json").write_text(json.dumps(TINY))
    return [f"--bert_config_file={tmp_path / 'bert_config.json'}",
            f"--input_file={tmp_path / 'train.tfrecord'}", f"--output_dir={tmp_path / 'out'}",
            "--max_seq_length=16", "--max_predictions_per_seq=4", "--do_train",
            "--train_batch_size=8", f"--num_train_steps={steps}", "--num_warmup_steps=1",
            "--save_checkpoints_steps=100000", "--log_every_n_steps=1"]


def _checkpoint_steps(output_dir):
    state = tf.train.get_checkpoint_state(output_dir)
    return [int(path.rsplit("-", 1)[1]) for path in state.all_model_checkpoint_paths]


def test_sigterm_saves_the_current_step_and_the_same_command_resumes(tmp_path):
    write_records(str(tmp_path / "train.tfrecord"), num=16)
    args = _pretraining_args(tmp_path, steps=3000)
    env = child_env()
    log_path = tmp_path / "run.log"
    process = start_python_script(os.path.join(ROOT, "scripts", "run_pretraining.py"), args,
                                  env=env, output=log_path)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and "step 7/3000" not in log_path.read_text():
            assert process.poll() is None, log_path.read_text()[-3000:]
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        signalled = time.time()
        process.wait(timeout=60)
        took = time.time() - signalled
    finally:
        if process.poll() is None:
            process.kill()
    text = log_path.read_text()
    assert process.returncode == 143, text[-3000:]
    assert took < 30, took  # --preemption_grace_secs
    lines = [line for line in text.splitlines() if line.startswith("preempted at step ")]
    assert len(lines) == 1 and "checkpoint saved, run the same command to resume" in lines[0]
    step = int(lines[0].split()[3].rstrip(":"))
    assert 7 <= step < 3000
    assert "Traceback" not in text
    # The newest checkpoint is the step it was at (not a save_checkpoints_steps multiple).
    assert _checkpoint_steps(str(tmp_path / "out")) == [0, step]
    assert tf.train.load_variable(str(tmp_path / "out"), "global_step") == step

    # The same command (with a near end) resumes from that step: no step trained twice.
    args = _pretraining_args(tmp_path, steps=step + 5)
    result = run_script("run_pretraining.py", *args)
    assert_ok(result)
    assert f"from step {step} to {step + 5}" in result.stderr
    assert _checkpoint_steps(str(tmp_path / "out")) == [0, step, step + 5]


@pytest.mark.slow
def test_sigterm_to_the_second_worker_stops_both_with_the_chiefs_checkpoint(cluster_data,
                                                                            tmp_path):
    out = tmp_path / "out"
    args = cluster_flags(cluster_data, out, steps=100000, distribution_strategy="multi_worker",
                         step_timeout_secs=120, save_checkpoints_steps=100000,
                         log_every_n_steps=1)
    workers = start_workers(args, str(tmp_path))
    (chief, chief_log_path), (worker, _) = workers
    try:
        deadline = time.time() + 300
        while time.time() < deadline and "step 5/100000" not in open(chief_log_path).read():
            assert chief.poll() is None and worker.poll() is None, open(chief_log_path).read()
            time.sleep(0.2)
        worker.send_signal(signal.SIGTERM)
        results = wait_workers(workers, timeout=90)
    finally:
        kill_all(workers)
    steps = set()
    for returncode, log in results:
        assert returncode == 143, log[-3000:]
        lines = [line for line in log.splitlines() if line.startswith("preempted at step ")]
        assert len(lines) == 1, log[-3000:]
        steps.add(int(lines[0].split()[3].rstrip(":")))
    assert len(steps) == 1
    step = steps.pop()
    assert tf.train.latest_checkpoint(str(out)).endswith(f"model.ckpt-{step}")
    # Both resume with the same command and end at num_train_steps.
    args = cluster_flags(cluster_data, out, steps=step + 3, distribution_strategy="multi_worker",
                         step_timeout_secs=120, save_checkpoints_steps=100000,
                         log_every_n_steps=1)
    for returncode, log in wait_workers(start_workers(args, str(tmp_path)), timeout=400):
        assert returncode == 0, log[-3000:]
        assert f"from step {step} to {step + 3}" in log
    assert tf.train.load_variable(str(out), "global_step") == step + 3
