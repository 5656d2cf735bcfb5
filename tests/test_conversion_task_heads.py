"""Task heads across frameworks: convert_tf_to_hf / convert_hf_to_tf with task=... .

The reference is transformers itself (no torch at test time): tests/fixtures/
make_task_head_reference.py fine-tuned, for each task, pretraining_tiny's encoder for a few
steps with bert_tf (run_task on the tiny data sets of fixtures/task_heads/, whose
99-word vocab.txt fits pretraining_tiny), kept the run's variables (task_heads/finetuned.npz),
converted the run's directory with `convert_tf_to_hf(task=...)`, loaded the result into the
task's transformers class (no missing or unexpected keys) and saved its logits, its
state_dict keys and the sha256 of each tensor. Here the same checkpoint is rebuilt and
converted: the output must be those keys and tensors (so transformers on it computes the
saved logits), and bert_tf on the checkpoint, and on its hf -> tf conversion, must compute the
same logits. The last tests take such a Hugging Face directory the way a user would: through
scripts/convert_checkpoint.py --direction=hf_to_tf and run_classifier.py / run_ner.py /
run_squad.py --do_predict.
"""

import hashlib
import json
import os
import shutil

import finetune_helpers
import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf
from finetune_helpers import assert_ok, load_json, options, run_script

from bert_tf import modeling
from bert_tf.errors import BertTfError
from bert_tf.runs import driver
from bert_tf.serving.predictor import Predictor
from bert_tf.tasks import classification, multiple_choice, ner, squad
from bert_tf.tools import conversion
from bert_tf.training import checkpoints

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
PRETRAINING_TINY = os.path.join(FIXTURES, "pretraining_tiny")
TASK_DATA = os.path.join(FIXTURES, "task_heads")
VOCAB_FILE = os.path.join(TASK_DATA, "vocab.txt")
REF = dict(np.load(os.path.join(FIXTURES, "task_heads_reference.npz")))
FINETUNED = dict(np.load(os.path.join(TASK_DATA, "finetuned.npz")))
with open(os.path.join(FIXTURES, "task_head_keys.json")) as _f:
    KEYS = json.load(_f)
# The label lists the runs of make_task_head_reference.TASKS wrote (None: the head has none).
LABELS = {"classifier": ["negative", "neutral", "positive"],
          "multi_label": ["food", "music", "sports", "travel"], "regression": None,
          "squad": None, "ner": ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"],
          "multiple_choice": None}
TASKS = sorted(LABELS)
# The runs' settings (make_task_head_reference.MAX_SEQ_LENGTH, SQUAD_SETTINGS).
MAX_SEQ_LENGTH = 24
SQUAD_SETTINGS = dict(doc_stride=8, max_query_length=8)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """(Google encoder tensors of pretraining_tiny, its bert_config.json)."""
    base = tmp_path_factory.mktemp("base")
    conversion.convert_hf_to_tf(PRETRAINING_TINY, str(base))
    tensors = checkpoints.read_tf_checkpoint(str(base / "bert_model.ckpt"))
    return ({name: value for name, value in tensors.items() if not name.startswith("cls/")},
            str(base / "bert_config.json"))


def _fine_tuned_tensors(task):
    """{TF variable name: value} of the fixture's fine-tuning run of `task`."""
    prefix = f"{task}/"
    return {name[len(prefix):]: value for name, value in FINETUNED.items()
            if name.startswith(prefix)}


def _fine_tuned_dir(path, task, encoder):
    """The fine-tuning run's model as make_task_head_reference.py converted it: its
    variables, bert_config.json, vocab.txt and (classifier, multi_label, ner) label_list.txt."""
    _, config_file = encoder
    path.mkdir(parents=True, exist_ok=True)
    checkpoints.write_tf_checkpoint(_fine_tuned_tensors(task), str(path / "bert_model.ckpt"))
    shutil.copy(config_file, path / "bert_config.json")
    shutil.copy(VOCAB_FILE, path / "vocab.txt")
    if LABELS[task]:
        (path / "label_list.txt").write_text("".join(f"{x}\n" for x in LABELS[task]))
    return path


def _tf_to_hf(tf_dir, hf_dir, task):
    conversion.convert_tf_to_hf(str(tf_dir / "bert_config.json"),
                                str(tf_dir / "bert_model.ckpt"), str(hf_dir), task=task)


def _tensor_digest(value):
    """make_task_head_reference.tensor_digest: sha256 of the shape and float32 bytes."""
    value = np.ascontiguousarray(value, dtype=np.float32)
    return hashlib.sha256(f"{list(value.shape)}".encode() + value.tobytes()).hexdigest()


def _reference_logits(task):
    if task == "squad":
        return np.stack([REF["squad/start_logits"], REF["squad/end_logits"]])
    return REF[f"{task}/logits"]


def _bert_tf_logits(model_dir, task):
    """bert_tf's head for `task` on the checkpoint in `model_dir`, on the fixture's inputs."""
    config = modeling.BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
    prefix = "choice_" if task == "multiple_choice" else ""
    outputs = len(REF[f"{task}/hf_bias"])
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


def test_fixture_checkpoints_are_fine_tuned(encoder):
    """Every run moved the encoder away from pretraining_tiny's, and has its head."""
    base, _ = encoder
    for task in TASKS:
        tensors = _fine_tuned_tensors(task)
        assert "global_step" not in tensors and not any("adam" in name for name in tensors)
        head = conversion.TASK_HEADS[task].names()
        assert {google for google, _ in head} <= set(tensors), task
        assert set(base) <= set(tensors), task
        moved = [name for name in base if name.startswith("bert/embeddings/") or
                 name.startswith("bert/encoder/") and name.endswith("/kernel")]
        assert len(moved) == 5 + 2 * 6, moved
        for name in moved:
            # 10 AdamW steps at 5e-3 moved each of these by 0.07 or more (its largest entry
            # change; biases the loss ignores, such as the attention keys', stay put).
            assert np.abs(tensors[name] - base[name]).max() > 1e-2, (task, name)


@pytest.mark.parametrize("task", TASKS)
def test_task_head_converts_to_what_transformers_computed(tmp_path, encoder, task):
    tf_dir = _fine_tuned_dir(tmp_path / "tf", task, encoder)
    hf_dir = tmp_path / "hf"
    _tf_to_hf(tf_dir, hf_dir, task)
    expected = KEYS[task]
    # transformers loaded the generator's conversion with nothing missing or unexpected.
    assert expected["loading_info"] == {"missing_keys": [], "mismatched_keys": [],
                                        "unexpected_keys": []}
    ours = safetensors.numpy.load_file(str(hf_dir / "model.safetensors"))
    assert sorted(ours) == expected["state_dict_keys"]
    # The tensors transformers computed the reference with, as it held them after loading.
    for key, value in ours.items():
        assert value.dtype == np.float32, key
        assert _tensor_digest(value) == expected["tensor_digest"][key], key
    head = conversion.TASK_HEADS[task].hf_name
    assert np.array_equal(ours[f"{head}.weight"], REF[f"{task}/hf_weight"])
    assert np.array_equal(ours[f"{head}.bias"], REF[f"{task}/hf_bias"])
    hf_config = json.loads((hf_dir / "config.json").read_text())
    assert hf_config["architectures"] == [expected["class"]]
    assert hf_config.get("problem_type") == expected["problem_type"]
    if LABELS[task]:
        assert hf_config["id2label"] == expected["id2label"]
        assert hf_config["num_labels"] == expected["num_labels"] == len(LABELS[task])
    assert (hf_dir / "vocab.txt").read_bytes() == open(VOCAB_FILE, "rb").read()

    # bert_tf on the fine-tuned checkpoint computes transformers' logits on its conversion.
    reference = _reference_logits(task)
    diff = np.abs(_bert_tf_logits(str(tf_dir), task).reshape(reference.shape) - reference)
    print(task, "max abs diff against transformers:", diff.max())
    assert diff.max() <= 1e-4, diff.max()
    # Not trivially close: the same head on the encoder before fine-tuning is far off, so an
    # encoder converted wrong by as much as a few fine-tuning steps move it would show. (The
    # pooled-output heads of a model fine-tuned from pretraining_tiny's saturated random
    # encoder give nearly the same logits for every input, so their spread proves nothing.)
    base_dir = tmp_path / "base"
    base_dir.mkdir()
    head = {name: value for name, value in _fine_tuned_tensors(task).items()
            if not name.startswith("bert/")}
    checkpoints.write_tf_checkpoint({**encoder[0], **head}, str(base_dir / "bert_model.ckpt"))
    shutil.copy(encoder[1], base_dir / "bert_config.json")
    off = np.abs(_bert_tf_logits(str(base_dir), task).reshape(reference.shape) - reference)
    print(task, "max abs diff with the encoder before fine-tuning:", off.max())
    assert off.max() > 1e-2, off.max()


@pytest.mark.parametrize("task", TASKS)
def test_task_head_round_trip_hf_tf_hf_is_bit_exact(tmp_path, encoder, task):
    tf_dir = _fine_tuned_dir(tmp_path / "tf", task, encoder)
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


# ------------------------------------------------- a Hugging Face model through the scripts

def _read_conll_predictions(path):
    """[(words, predicted tags)] of a run_ner.py test_predictions.txt."""
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in [*f, "\n"]:
            if not line.strip():
                if words:
                    sentences.append((words, tags))
                words, tags = [], []
                continue
            word, _, predicted = line.split()
            words.append(word)
            tags.append(predicted)
    return sentences


def _squad_questions(path):
    return [(qa["id"], qa["question"], paragraph["context"])
            for article in load_json(path)["data"] for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]]


def _reorder_hf_labels(hf_dir, order):
    """Makes `hf_dir` the same model with its outputs in `order` (old output indices), as one
    fine-tuned with Hugging Face in another label order would be; returns its labels."""
    path = str(hf_dir / "model.safetensors")
    tensors = safetensors.numpy.load_file(path)
    for key in ("classifier.weight", "classifier.bias"):
        tensors[key] = np.ascontiguousarray(tensors[key][order])
    safetensors.numpy.save_file(tensors, path, metadata={"format": "pt"})
    config = json.loads((hf_dir / "config.json").read_text())
    labels = [config["id2label"][str(i)] for i in order]
    config["id2label"] = {str(i): label for i, label in enumerate(labels)}
    config["label2id"] = {label: i for i, label in enumerate(labels)}
    (hf_dir / "config.json").write_text(json.dumps(config))
    return labels


def _only(path, source):
    """A data dir at `path` holding only the file `source` (no train file to take labels from)."""
    path.mkdir()
    shutil.copy(source, path)
    return str(path)


@pytest.mark.parametrize("task", ["classifier", "ner", "squad"])
def test_hugging_face_fine_tuned_model_predicts_through_the_scripts(tmp_path, encoder, task):
    """The Hugging Face conversion of a fine-tuned model, converted back by
    convert_checkpoint.py --task and predicting through its run_*.py --do_predict, gives the
    original checkpoint's predictions (bert_tf.serving.predictor on it, in process). The
    scripts only predict, so they keep their weights packed (TF_ONEDNN_ASSUME_FROZEN_WEIGHTS);
    this process does not."""
    tf_dir = _fine_tuned_dir(tmp_path / "tf", task, encoder)
    hf_dir, converted, out = tmp_path / "hf", tmp_path / "converted", tmp_path / "out"
    _tf_to_hf(tf_dir, hf_dir, task)
    if LABELS[task]:
        # Not the sorted order a train file would give: the outputs keep their own labels.
        labels = _reorder_hf_labels(hf_dir, np.arange(len(LABELS[task]))[::-1])
        assert labels != LABELS[task] and sorted(labels) == sorted(LABELS[task])
    assert_ok(run_script("convert_checkpoint.py", "--direction=hf_to_tf", f"--task={task}",
                         f"--hf_dir={hf_dir}", f"--output_dir={converted}"))
    # Only what the Hugging Face directory carried: its config, vocab, weights and labels.
    common = [f"--vocab_file={converted / 'vocab.txt'}", "--do_predict",
              f"--bert_config_file={converted / 'bert_config.json'}",
              f"--init_checkpoint={converted}", f"--output_dir={out}",
              f"--max_seq_length={MAX_SEQ_LENGTH}", "--predict_batch_size=4"]
    original = Predictor.from_checkpoint(
        str(tf_dir / "bert_model.ckpt"), str(tf_dir / "bert_config.json"), VOCAB_FILE, task,
        max_seq_length=MAX_SEQ_LENGTH, batch_size=4,
        **(SQUAD_SETTINGS if task == "squad" else {}))

    if LABELS[task]:
        assert (converted / "label_list.txt").read_text().split() == labels
    if task == "classifier":
        test_file = os.path.join(TASK_DATA, "classifier", "test.tsv")
        _assert_predicted_with_packed_weights(run_script(
            "run_classifier.py", *common, "--task_name=tsv",
            f"--data_dir={_only(tmp_path / 'data', test_file)}", "--text_a_column=sentence"))
        with open(out / "test_results.tsv", encoding="utf-8") as f:
            got = np.array([[float(x) for x in line.split("\t")] for line in f])
        with open(test_file, encoding="utf-8") as f:
            texts = [line.split("\t")[0] for line in f][1:]
        expected = np.array([[r["probabilities"][label] for label in labels]
                             for r in original.predict(texts)])
        assert got.shape == (len(texts), len(labels))
        assert len(set(expected.argmax(axis=1))) > 1  # The model tells the texts apart.
        np.testing.assert_allclose(got, expected, atol=1e-5)
    elif task == "ner":
        test_file = os.path.join(TASK_DATA, "ner", "test.txt")
        _assert_predicted_with_packed_weights(run_script(
            "run_ner.py", *common, f"--data_dir={_only(tmp_path / 'data', test_file)}"))
        got = _read_conll_predictions(out / "test_predictions.txt")
        expected = original.tag([" ".join(words) for words, _ in got])
        # The tiny model tags every word "O" after its 10 steps; "O" is the last output of
        # the reordered head, so a head read in the train file's order, or a wrong head,
        # would show.
        assert [tags for _, tags in got] == [r["tags"] for r in expected]
        assert len(got) == 6 and labels[0] != "O"
    else:
        predict_file = os.path.join(TASK_DATA, "squad", "test.json")
        _assert_predicted_with_packed_weights(run_script(
            "run_squad.py", *common, f"--predict_file={predict_file}",
            *(f"--{name}={value}" for name, value in SQUAD_SETTINGS.items())))
        questions = _squad_questions(predict_file)
        answers = load_json(out / "predictions.json")
        nbest = load_json(out / "nbest_predictions.json")
        expected = original.answer([q for _, q, _ in questions], [c for _, _, c in questions])
        assert list(answers) == [qid for qid, _, _ in questions]
        assert list(answers.values()) == [r["answer"] for r in expected]
        assert len(set(answers.values())) > 1
        for qid, record in zip(answers, expected, strict=True):
            assert [e["text"] for e in nbest[qid]] == [e["text"] for e in record["nbest"]]
            for key in ("start_logit", "end_logit", "probability"):
                np.testing.assert_allclose([e[key] for e in nbest[qid]],
                                           [e[key] for e in record["nbest"]], atol=1e-5)


def _assert_predicted_with_packed_weights(result):
    assert_ok(result)
    assert finetune_helpers.PACKED_WEIGHTS_LINE in result.stderr, result.stderr[-3000:]


def test_labels_other_than_the_heads_are_a_clear_error(tmp_path, encoder):
    """Predicting with a head whose label_list.txt orders the outputs otherwise than --labels
    would put every probability under the wrong label: it stops first."""
    tf_dir = _fine_tuned_dir(tmp_path / "tf", "classifier", encoder)
    with pytest.raises(BertTfError, match="--labels=negative,neutral,positive") as error:
        driver.run_task(options(
            "classifier", task_name="tsv", data_dir=os.path.join(TASK_DATA, "classifier"),
            text_a_column="sentence", labels=["positive", "neutral", "negative"],
            vocab_file=VOCAB_FILE, bert_config_file=str(tf_dir / "bert_config.json"),
            init_checkpoint=str(tf_dir / "bert_model.ckpt"), output_dir=str(tmp_path / "out"),
            do_predict=True, max_seq_length=MAX_SEQ_LENGTH))
    assert "--init_checkpoint" in str(error.value)
    assert not (tmp_path / "out").exists()
