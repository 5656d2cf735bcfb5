"""Runs on a remote TensorFlow filesystem: TF's in-memory `ram://` stands in for gs://.

ram:// lives inside one process, so these runs call the library in-process (as the scripts do
after parsing their flags). Everything a run reads and writes is on ram://: data, vocab,
config, checkpoints, summaries, eval results, exact-resume state, best/, corrupt/ and exports.
"""

import os
import signal
import threading
import time
import uuid

import pytest
import tensorflow as tf
from finetune_helpers import (
    TOPICS,
    assert_clean_error,
    options,
    pretrain_options,
    run_script,
    write_records,
    write_tiny_config,
)

from bert_tf import errors
from bert_tf.runs import driver
from bert_tf.runs.pretraining import run_pretraining


@pytest.fixture
def ram_dir():
    """A fresh ram:// directory (ram:// outlives the test in this process: a new name each)."""
    path = f"ram://test-{uuid.uuid4().hex}"
    tf.io.gfile.makedirs(path)
    return path


def _files(directory):
    return {os.path.relpath(os.path.join(d, name), directory)
            for d, _, names in tf.io.gfile.walk(directory) for name in names}


def _checkpoint_steps(directory):
    state = tf.train.get_checkpoint_state(directory)
    return [int(path.rsplit("-", 1)[1]) for path in state.all_model_checkpoint_paths]


def _pretrain_options(tmp_path, ram_dir, **overrides):
    """A function of overrides returning `PretrainOptions` whose every path is on ram://."""
    pretrain_options(tmp_path)  # Writes the tiny tmp_path/bert_config.json.
    local = write_records(str(tmp_path / "train.tfrecord"), num=16)
    tf.io.gfile.copy(local, f"{ram_dir}/train.tfrecord")
    tf.io.gfile.copy(str(tmp_path / "bert_config.json"), f"{ram_dir}/bert_config.json")
    values = dict(input_file=f"{ram_dir}/train.tfrecord",
                  bert_config_file=f"{ram_dir}/bert_config.json", output_dir=f"{ram_dir}/out",
                  num_train_steps=10, save_checkpoints_steps=5, eval_every_n_steps=5,
                  best_checkpoint_metric="masked_lm_loss", exact_resume=True)
    return lambda **more: pretrain_options(tmp_path, **{**values, **overrides, **more})


def test_pretraining_on_ram_trains_evaluates_and_resumes(tmp_path, ram_dir):
    run = _pretrain_options(tmp_path, ram_dir)
    out = f"{ram_dir}/out"
    first = run_pretraining(run())
    assert first["global_step"] == 10
    files = _files(out)
    for name in ("checkpoint", "model.ckpt-10.index", "eval_results.txt", "eval_history.jsonl",
                 "best/best_eval.json", "best/checkpoint"):
        assert name in files, sorted(files)
    assert any(name.startswith("events.out.tfevents") for name in files)
    assert any(name.startswith("input_state/model.ckpt-10.input") for name in files)
    with tf.io.gfile.GFile(f"{out}/eval_results.txt") as f:
        assert "masked_lm_accuracy = " in f.read()

    # The same command again: nothing is retrained, the results are the same.
    again = run_pretraining(run())
    assert again == first
    assert _checkpoint_steps(out)[-1] == 10


def test_pretraining_on_ram_stops_on_sigterm_and_resumes(tmp_path, ram_dir, caplog):
    run = _pretrain_options(tmp_path, ram_dir, num_train_steps=3000, save_checkpoints_steps=20,
                            eval_every_n_steps=0, best_checkpoint_metric=None)
    out = f"{ram_dir}/out"

    def stop_after_first_checkpoint():
        deadline = time.time() + 120
        while time.time() < deadline and not tf.io.gfile.exists(f"{out}/model.ckpt-20.index"):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_after_first_checkpoint, daemon=True).start()
    with pytest.raises(errors.Preempted) as stop:
        run_pretraining(run())
    assert 20 <= stop.value.step < 3000
    assert _checkpoint_steps(out)[-1] == stop.value.step

    # Resumes from the preempted step (shortened: 40 more steps), and not from 0.
    caplog.clear()
    caplog.set_level("INFO")
    resumed = run_pretraining(run(num_train_steps=stop.value.step + 40))
    assert resumed["global_step"] == stop.value.step + 40
    assert f"Restoring parameters from {out}/model.ckpt-{stop.value.step}" in caplog.text


def test_pretraining_on_ram_sets_an_unreadable_checkpoint_aside(tmp_path, ram_dir):
    run = _pretrain_options(tmp_path, ram_dir, eval_every_n_steps=0, best_checkpoint_metric=None)
    out = f"{ram_dir}/out"
    run_pretraining(run())
    data_file = f"{out}/model.ckpt-10.data-00000-of-00001"
    with tf.io.gfile.GFile(data_file, "rb") as f:
        data = f.read()
    tf.io.gfile.remove(data_file)  # ram:// appends to a file written again.
    with tf.io.gfile.GFile(data_file, "wb") as f:
        f.write(data[:len(data) // 2])  # Truncated, as by a half-synced copy.

    result = run_pretraining(run(num_train_steps=15))
    assert result["global_step"] == 15
    assert "corrupt/model.ckpt-10.index" in _files(out)
    assert _checkpoint_steps(out)[-1] == 15


def test_classifier_on_ram_trains_predicts_exports_and_resumes(tmp_path, ram_dir, minilm_dir):
    for name in ("train.tsv", "dev.tsv"):
        tf.io.gfile.copy(os.path.join(TOPICS, name), f"{ram_dir}/data/{name}")
    tf.io.gfile.copy(os.path.join(TOPICS, "test.tsv"),
                     f"{ram_dir}/data/test.tsv")
    tf.io.gfile.copy(os.path.join(minilm_dir, "vocab.txt"), f"{ram_dir}/vocab.txt")
    tf.io.gfile.copy(write_tiny_config(tmp_path), f"{ram_dir}/bert_config.json")
    values = dict(task_name="tsv", text_a_column="sentence", data_dir=f"{ram_dir}/data",
                  vocab_file=f"{ram_dir}/vocab.txt", bert_config_file=f"{ram_dir}/bert_config.json",
                  output_dir=f"{ram_dir}/out", export_dir=f"{ram_dir}/export", do_train=True,
                  do_eval=True, do_predict=True, num_train_steps=6, save_checkpoints_steps=3,
                  eval_every_n_steps=3, best_checkpoint_metric="eval_accuracy",
                  max_seq_length=24)
    first = driver.run_task(options("classifier", **values))
    files = _files(f"{ram_dir}/out")
    for name in ("model.ckpt-6.index", "eval_results.txt", "test_results.tsv", "label_list.txt",
                 "best/best_eval.json", "train.tf_record.meta.json"):
        assert name in files, sorted(files)
    exports = tf.io.gfile.listdir(f"{ram_dir}/export")
    assert len(exports) == 1
    export = f"{ram_dir}/export/{exports[0].strip('/')}"
    assert {"saved_model.pb", "assets.extra/vocab.txt",
            "variables/variables.index"} <= _files(export)
    assert not [name for name in exports if name.startswith("temp-")]
    loaded = tf.saved_model.load(export)
    probabilities = loaded.signatures["serving_default"](
        input_ids=tf.constant([[101, 2054, 102]]), input_mask=tf.constant([[1, 1, 1]]),
        segment_ids=tf.constant([[0, 0, 0]]))["probabilities"]
    assert probabilities.shape == (1, 2)

    # The same command again: the cached features are reused and nothing is retrained.
    again = driver.run_task(options("classifier", **values))
    assert again == first
    assert _checkpoint_steps(f"{ram_dir}/out")[-1] == 6


@pytest.mark.parametrize("script, args", [
    ("prepare_corpus.py", ["--input_file=data/corpus/eval.txt", "--output_dir=gs://b/corpus"]),
    ("export_checkpoint.py", ["--init_checkpoint=no/such/checkpoint",
                              "--bert_config_file=configs/bert_tiny.json",
                              "--output_dir=gs://b/release"]),
    ("convert_checkpoint.py", ["--direction=hf_to_tf", "--hf_dir=no/such/dir",
                               "--output_dir=gs://b/converted"]),
])
def test_local_only_outputs_say_so_before_any_work(script, args):
    result = run_script(script, *args)
    assert_clean_error(result, "--output_dir: 'gs://b/", "remote filesystem")
