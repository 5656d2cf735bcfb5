"""Task heads across frameworks: convert_tf_to_hf / convert_hf_to_tf with task=... .

The reference is transformers itself (no torch at test time): tests/fixtures/
make_task_head_reference.py built, for each task, a Google checkpoint (pretraining_tiny's
encoder + random head weights, kept in the fixture), converted it with
`convert_tf_to_hf(task=...)`, loaded the result into the task's transformers class (no missing
or unexpected keys) and saved its logits, its state_dict keys and its head tensors. Here the
same checkpoint is rebuilt and converted: the output must be those keys and tensors (so
transformers on it computes the saved logits), and bert_tf on the checkpoint, and on its
hf -> tf conversion, must compute the same logits.
"""

import json
import os
import shutil

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf

from bert_tf import conversion, modeling
from bert_tf.tasks import classification, multiple_choice, ner, squad

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
PRETRAINING_TINY = os.path.join(FIXTURES, "pretraining_tiny")
REF = dict(np.load(os.path.join(FIXTURES, "task_heads_reference.npz")))
with open(os.path.join(FIXTURES, "task_head_keys.json")) as _f:
    KEYS = json.load(_f)
# The label lists of make_task_head_reference.TASKS (None: the head has no label list).
LABELS = {"classifier": ["negative", "neutral", "positive"],
          "multi_label": ["food", "music", "sports", "travel"], "regression": None,
          "squad": None, "ner": ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"],
          "multiple_choice": None}
TASKS = sorted(LABELS)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """(Google encoder tensors of pretraining_tiny, its bert_config.json)."""
    base = tmp_path_factory.mktemp("base")
    conversion.convert_hf_to_tf(PRETRAINING_TINY, str(base))
    tensors = conversion.read_tf_checkpoint(str(base / "bert_model.ckpt"))
    return ({name: value for name, value in tensors.items() if not name.startswith("cls/")},
            str(base / "bert_config.json"))


def _fine_tuned_dir(path, task, encoder):
    """A run's output directory as make_task_head_reference.py wrote it for `task`."""
    tensors, config_file = encoder
    google_weights, google_bias = (name for name, _ in conversion.TASK_HEADS[task].names())
    conversion.write_tf_checkpoint(
        {**tensors, google_weights: REF[f"{task}/weights"], google_bias: REF[f"{task}/bias"]},
        str(path / "bert_model.ckpt"))
    shutil.copy(config_file, path / "bert_config.json")
    if LABELS[task]:
        (path / "label_list.txt").write_text("".join(f"{x}\n" for x in LABELS[task]))
    return path


def _tf_to_hf(tf_dir, hf_dir, task):
    conversion.convert_tf_to_hf(str(tf_dir / "bert_config.json"),
                                str(tf_dir / "bert_model.ckpt"), str(hf_dir), task=task)


def _reference_logits(task):
    if task == "squad":
        return np.stack([REF["squad/start_logits"], REF["squad/end_logits"]])
    return REF[f"{task}/logits"]


def _bert_tf_logits(model_dir, task):
    """bert_tf's head for `task` on the checkpoint in `model_dir`, on the fixture's inputs."""
    config = modeling.BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
    prefix = "choice_" if task == "multiple_choice" else ""
    outputs = len(REF[f"{task}/bias"])
    with tf.Graph().as_default():
        inputs = [tf.constant(REF[f"{prefix}{key}"].reshape(-1, REF["input_ids"].shape[-1]))
                  for key in ("input_ids", "input_mask", "segment_ids")]
        model = modeling.BertModel(config, False, *inputs)
        if task == "squad":
            logits = tf.stack(squad.squad_logits(model.get_sequence_output()))
        elif task == "ner":
            logits = ner.token_logits(model.get_sequence_output(), outputs, False)
        elif task == "multiple_choice":
            logits = multiple_choice.choice_logits(model.get_pooled_output(), 3, False)
        else:
            logits = classification.classifier_logits(model.get_pooled_output(), outputs, False)
        _, not_initialized = modeling.init_from_checkpoint(
            os.path.join(model_dir, "bert_model.ckpt"), log=False)
        assert not_initialized == []
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return sess.run(logits)


@pytest.mark.parametrize("task", TASKS)
def test_task_head_converts_to_what_transformers_computed(tmp_path, encoder, task):
    tf_dir = _fine_tuned_dir(tmp_path, task, encoder)
    hf_dir = tmp_path / "hf"
    _tf_to_hf(tf_dir, hf_dir, task)
    expected = KEYS[task]
    # transformers loaded the generator's conversion with nothing missing or unexpected.
    assert expected["loading_info"] == {"missing_keys": [], "mismatched_keys": [],
                                        "unexpected_keys": []}
    ours = safetensors.numpy.load_file(str(hf_dir / "model.safetensors"))
    assert sorted(ours) == expected["state_dict_keys"]
    # The tensors transformers computed the reference with: the head as it held it, the
    # encoder as pretraining_tiny (saved by transformers) has it.
    head = conversion.TASK_HEADS[task].hf_name
    assert np.array_equal(ours[f"{head}.weight"], REF[f"{task}/hf_weight"])
    assert np.array_equal(ours[f"{head}.bias"], REF[f"{task}/hf_bias"])
    saved = safetensors.numpy.load_file(os.path.join(PRETRAINING_TINY, "model.safetensors"))
    for key in ours:
        if key.startswith("bert."):
            assert np.array_equal(ours[key], saved[key]), key
    hf_config = json.loads((hf_dir / "config.json").read_text())
    assert hf_config["architectures"] == [expected["class"]]
    assert hf_config.get("problem_type") == expected["problem_type"]
    if LABELS[task]:
        assert hf_config["id2label"] == expected["id2label"]
        assert hf_config["num_labels"] == expected["num_labels"] == len(LABELS[task])

    # bert_tf on the fine-tuned checkpoint computes transformers' logits on its conversion.
    reference = _reference_logits(task)
    assert np.ptp(reference) > 1.0  # Not trivially close: the logits differ a lot.
    diff = np.abs(_bert_tf_logits(str(tf_dir), task).reshape(reference.shape) - reference)
    print(task, "max abs diff against transformers:", diff.max())
    assert diff.max() <= 1e-4, diff.max()  # Measured <= 2e-6 (float32 against float64).


@pytest.mark.parametrize("task", TASKS)
def test_task_head_round_trip_hf_tf_hf_is_bit_exact(tmp_path, encoder, task):
    tf_dir = _fine_tuned_dir(tmp_path, task, encoder)
    hf_dir, back, again = tmp_path / "hf", tmp_path / "back", tmp_path / "again"
    _tf_to_hf(tf_dir, hf_dir, task)
    conversion.convert_hf_to_tf(str(hf_dir), str(back), task=task)
    _tf_to_hf(back, again, task)
    first = safetensors.numpy.load_file(str(hf_dir / "model.safetensors"))
    second = safetensors.numpy.load_file(str(again / "model.safetensors"))
    assert sorted(first) == sorted(second)
    for key, value in first.items():
        assert second[key].dtype == value.dtype and np.array_equal(second[key], value), key
    assert json.loads((again / "config.json").read_text()) == json.loads(
        (hf_dir / "config.json").read_text())
    if LABELS[task]:
        assert (back / "label_list.txt").read_text().split() == LABELS[task]
    # The hf -> tf directory predicts as the original run: the same logits.
    reference = _reference_logits(task)
    diff = np.abs(_bert_tf_logits(str(back), task).reshape(reference.shape) - reference)
    assert diff.max() <= 1e-4, diff.max()
