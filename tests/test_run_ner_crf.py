"""run_ner.py --use_crf end to end on the shipped CoNLL files (tiny model): it learns as well as
the plain head, and its export, its checkpoint's Predictor and --do_predict give the same tags."""

import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import (
    DATA,
    assert_clean_error,
    only_export,
    options,
    run_script,
    write_tiny_config,
)

from bert_tf import tokenization
from bert_tf.data import ner as ner_data
from bert_tf.errors import BertTfError
from bert_tf.runs import driver
from bert_tf.serving import backends
from bert_tf.serving.predictor import Predictor

NER_DATA = os.path.join(DATA, "ner")
LABELS = ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-PER"]
# test_run_ner.py's settings: the plain head fits the 3 training sentences (F1 1.0 on them
# with seeds 1-8) in 40 steps.
SETTINGS = dict(do_train=True, do_eval=True, max_seq_length=48, train_batch_size=2,
                num_train_steps=40, learning_rate=3e-3, eval_batch_size=2, random_seed=1)


def _data_dir(tmp_path):
    """train.txt and test.txt as shipped; dev.txt a copy of train.txt."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for name in ("train.txt", "test.txt"):
        shutil.copy(os.path.join(NER_DATA, name), data_dir / name)
    shutil.copy(os.path.join(NER_DATA, "train.txt"), data_dir / "dev.txt")
    return data_dir


def _sentences(path):
    """[(words, tags of the last column)] of a predictions file ("word gold predicted")."""
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in [*f, "\n"]:
            if line.strip():
                fields = line.split()
                words.append(fields[0])
                tags.append(fields[-1])
            elif words:
                sentences.append((words, tags))
                words, tags = [], []
    return sentences


def runs_options(runs):
    """The options both runs share."""
    return {key: runs[key] for key in ("data_dir", "vocab_file", "bert_config_file",
                                       *SETTINGS)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, vocab_file):
    """The plain head and the CRF trained the same steps with the same seed; the CRF run
    also predicts the test file and exports."""
    tmp_path = tmp_path_factory.mktemp("ner_crf")
    common = dict(data_dir=str(_data_dir(tmp_path)), vocab_file=vocab_file,
                  bert_config_file=write_tiny_config(tmp_path), **SETTINGS)
    plain = driver.run_task(options("ner", output_dir=str(tmp_path / "plain"), **common))
    crf_dir, export_dir = tmp_path / "crf", tmp_path / "export"
    crf = driver.run_task(options(
        "ner", output_dir=str(crf_dir), use_crf=True, do_predict=True,
        export_dir=str(export_dir), **common))
    return dict(plain=plain, crf=crf, crf_dir=str(crf_dir), export=only_export(export_dir),
                tmp_path=tmp_path, **common)


def test_crf_learns_at_least_as_well_as_the_plain_head(runs):
    # Seed 1: both 1.0 after 40 steps; after 8 steps 0.43 plain, 0.57 CRF.
    assert runs["crf"]["f1"] >= runs["plain"]["f1"] > 0.5
    assert runs["crf"]["global_step"] == runs["plain"]["global_step"] == 40
    variables = dict(tf.train.list_variables(runs["crf_dir"]))
    assert variables["cls/ner/output_weights"] == [7, 32]
    assert variables["cls/ner/crf/transitions"] == [7, 7]
    assert variables["cls/ner/crf/start_transitions"] == [7]
    assert variables["cls/ner/crf/end_transitions"] == [7]
    plain_variables = dict(tf.train.list_variables(os.path.join(runs["tmp_path"], "plain")))
    assert not any(name.startswith("cls/ner/crf") for name in plain_variables)
    # The transitions were trained (they start at zero).
    transitions = tf.train.load_variable(runs["crf_dir"], "cls/ner/crf/transitions")
    assert np.abs(transitions).max() > 1e-3


def test_export_and_checkpoint_tag_as_do_predict(runs):
    predicted = _sentences(os.path.join(runs["crf_dir"], "test_predictions.txt"))
    assert predicted and all(tag in LABELS for _, tags in predicted for tag in tags)
    texts = [" ".join(words) for words, _ in predicted]
    expected = [tags for _, tags in predicted]
    exported = Predictor.from_saved_model(runs["export"], batch_size=2)
    assert exported.config.settings == {"use_crf": True}
    assert [result["tags"] for result in exported.tag(texts)] == expected
    # The checkpoint says it has a CRF: no setting needed.
    from_checkpoint = Predictor.from_checkpoint(
        runs["crf_dir"], runs["bert_config_file"], runs["vocab_file"], "ner",
        max_seq_length=48)
    assert from_checkpoint.config.settings == {"use_crf": True}
    assert [result["tags"] for result in from_checkpoint.tag(texts)] == expected


def test_evaluating_a_crf_checkpoint_without_use_crf_is_one_line(runs):
    with pytest.raises(BertTfError, match=r"--use_crf: checkpoint .*model\.ckpt-40 has a CRF"):
        driver.run_task(options(
            "ner", **{**runs_options(runs), "do_train": False, "do_eval": True},
            output_dir=runs["crf_dir"]))


def test_export_signature_takes_label_mask_and_returns_viterbi_tags(runs):
    session, signature = backends.load_serving_session(runs["export"])
    assert set(signature.inputs) == {"input_ids", "input_mask", "segment_ids", "label_mask"}
    assert set(signature.outputs) == {"tag_ids"}
    tokenizer = tokenization.FullTokenizer(runs["vocab_file"], do_lower_case=True)
    examples = ner_data.read_conll(os.path.join(NER_DATA, "test.txt"), "test")
    features = [ner_data.convert_single_example(i, example, LABELS, 48, tokenizer)
                for i, example in enumerate(examples)]
    feeds = {signature.inputs[name].name: np.asarray([getattr(f, name) for f in features])
             for name in signature.inputs}
    with session:
        tag_ids = session.run(signature.outputs["tag_ids"].name, feeds)
    predicted = _sentences(os.path.join(runs["crf_dir"], "test_predictions.txt"))
    for feature, ids, (_, tags) in zip(features, tag_ids, predicted, strict=True):
        assert ner_data.word_predictions(ids, feature.label_mask, LABELS) == tags
        # Off the first pieces the CRF answers 0.
        assert not np.any(ids[np.asarray(feature.label_mask) == 0])


def test_checkpoint_transitions_of_another_label_count_is_one_line(runs, tmp_path):
    """--use_crf from a checkpoint whose CRF has 3 tags, on data with 7."""
    prefix = str(tmp_path / "other" / "model.ckpt")
    with tf.Graph().as_default():
        tf.compat.v1.get_variable("cls/ner/crf/transitions", [3, 3])
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(session, prefix)
    result = run_script(
        "run_ner.py", f"--data_dir={runs['data_dir']}", f"--vocab_file={runs['vocab_file']}",
        f"--bert_config_file={runs['bert_config_file']}", f"--init_checkpoint={prefix}",
        f"--output_dir={tmp_path / 'out'}", "--do_train", "--use_crf")
    line = assert_clean_error(result, "--use_crf", prefix, "3 tags", "7")
    assert "pass a checkpoint" in line
    assert not os.path.exists(tmp_path / "out" / "checkpoint")


@pytest.mark.parametrize("kind", ["onnx", "tflite"])
def test_onnx_and_tflite_tag_as_do_predict(runs, kind, tmp_path):
    predicted = _sentences(os.path.join(runs["crf_dir"], "test_predictions.txt"))
    path = str(tmp_path / f"model.{kind}")
    if kind == "onnx":
        pytest.importorskip("onnxruntime")
        from bert_tf.serving import onnx_export

        onnx_export.export_onnx(runs["export"], path)
        predictor = Predictor.from_onnx(path, batch_size=2)
    else:
        pytest.importorskip("ai_edge_litert")
        from bert_tf.serving import tflite_export

        tflite_export.export_tflite(runs["export"], path)
        predictor = Predictor.from_tflite(path, batch_size=2)
    assert predictor.config.settings == {"use_crf": True}
    tags = [result["tags"] for result in predictor.tag([" ".join(w) for w, _ in predicted])]
    assert tags == [tags for _, tags in predicted]


def test_hugging_face_conversion_says_the_crf_is_not_converted(runs, tmp_path, caplog):
    from bert_tf.tools import conversion

    caplog.set_level(logging.WARNING)
    conversion.convert_tf_to_hf(runs["bert_config_file"], runs["crf_dir"], str(tmp_path / "hf"),
                                vocab_file=runs["vocab_file"], task="ner")
    warned = [record.getMessage() for record in caplog.records
              if "not converted" in record.getMessage()]
    assert len(warned) == 1 and "BertForTokenClassification" in warned[0]
    assert "cls/ner/crf/transitions" in warned[0] and "/adam_m" not in warned[0]
    assert os.path.exists(tmp_path / "hf" / "model.safetensors")
