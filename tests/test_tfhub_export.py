"""scripts/export_tfhub.py: the encoder and preprocessor SavedModels in TF Hub's BERT interfaces.

In a fresh tf-keras process that cannot import tensorflow_text (tests/tfhub_child.py):
hub.KerasLayer(preprocessor) -> hub.KerasLayer(encoder, trainable=True) fine-tunes on data/topics,
and the preprocessors' ids equal FullTokenizer's on every line of tests/data/multilingual.txt,
cased and uncased. Here: the encoder's outputs against tf2.BertEncoder, and bad input."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import (
    ROOT,
    TOPICS,
    assert_clean_error,
    assert_ok,
    run_script,
    write_tiny_config,
)

from bert_tf import tf2, tokenization
from bert_tf.data import classification_features
from bert_tf.serving import tfhub_export

SEQ_LENGTH = 32


def _minilm_flags(minilm_converted):
    return [f"--bert_config_file={minilm_converted}/bert_config.json",
            f"--init_checkpoint={minilm_converted}/bert_model.ckpt",
            f"--vocab_file={minilm_converted}/vocab.txt"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory, minilm_converted):
    root = tmp_path_factory.mktemp("tfhub")
    paths = {name: str(root / name) for name in ("encoder", "uncased", "cased")}
    assert_ok(run_script("export_tfhub.py", *_minilm_flags(minilm_converted), "--do_lower_case",
                         f"--export_path={paths['encoder']}",
                         f"--preprocessor_export_path={paths['uncased']}",
                         f"--seq_length={SEQ_LENGTH}"))
    tfhub_export.export_preprocessor(os.path.join(minilm_converted, "vocab.txt"), False,
                                     paths["cased"], SEQ_LENGTH)
    return paths


@pytest.fixture(scope="module")
def child(exported, minilm_converted):
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "tfhub_child.py"), exported["encoder"],
         exported["uncased"], exported["cased"], os.path.join(minilm_converted, "vocab.txt"),
         os.path.join(TOPICS, "train.tsv")],
        env=child_env(TF_USE_LEGACY_KERAS="1"), capture_output=True, text=True, timeout=900,
        check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_hub_keras_layers_fine_tune_under_tf_keras(child):
    assert child["keras_module"].startswith("tf_keras")
    assert child["trainable_weights"] == 103
    assert child["loss_after"] < 0.5 * child["loss_before"], child
    assert child["weights_moved"] > 1e-5


@pytest.mark.parametrize("casing", ["uncased", "cased"])
def test_preprocessor_ids_equal_full_tokenizers_on_every_line(child, casing):
    agreement = child[casing]
    assert agreement["lines"] == 3250
    assert agreement["by_word"] == agreement["lines"]
    assert agreement["packed"] == agreement["lines"]


def test_models_load_without_tensorflow_text_and_carry_the_hub_attributes(child):
    assert child["tensorflow_text_loaded"] is False
    assert child["encoder_attributes"] == {"vocab_file": "vocab.txt", "do_lower_case": True,
                                           "variables": 103, "regularization_losses": 0}


def test_encoder_outputs_equal_bert_encoders(exported, minilm_converted):
    encoder = tf2.BertEncoder(os.path.join(minilm_converted, "bert_config.json"))
    encoder.load_checkpoint(os.path.join(minilm_converted, "bert_model.ckpt"))
    preprocessor = tf.saved_model.load(exported["uncased"])
    inputs = preprocessor(tf.constant(["the match went to extra time.", "fresh basil pesto"]))
    assert inputs["input_word_ids"].shape == (2, SEQ_LENGTH)
    loaded = tf.saved_model.load(exported["encoder"])
    outputs = loaded(inputs, training=False)
    expected = encoder(inputs["input_word_ids"], inputs["input_mask"], inputs["input_type_ids"])
    np.testing.assert_allclose(outputs["pooled_output"], expected["pooled_output"], atol=1e-5)
    np.testing.assert_array_equal(outputs["default"], outputs["pooled_output"])
    assert len(outputs["encoder_outputs"]) == 6
    dropped = loaded(inputs, training=True)["pooled_output"]
    assert np.abs(dropped - outputs["pooled_output"]).max() > 1e-3
    served = loaded.signatures["serving_default"](**inputs)
    np.testing.assert_allclose(served["pooled_output"], outputs["pooled_output"], atol=1e-6)


def test_checkpoint_of_another_config_is_one_error_line(tmp_path, minilm_converted):
    flags = _minilm_flags(minilm_converted)
    flags[0] = f"--bert_config_file={write_tiny_config(tmp_path)}"
    result = run_script("export_tfhub.py", *flags, f"--export_path={tmp_path / 'encoder'}")
    assert_clean_error(result, f"{minilm_converted}/bert_model.ckpt",
                       "bert/embeddings/word_embeddings", "bert_config.json")
    assert not (tmp_path / "encoder").exists()


def test_missing_vocab_and_used_export_path_are_one_error_line(tmp_path, exported,
                                                               minilm_converted):
    flags = _minilm_flags(minilm_converted)
    missing = run_script("export_tfhub.py", *flags[:2], f"--vocab_file={tmp_path}/none.txt",
                         f"--export_path={tmp_path / 'encoder'}")
    assert_clean_error(missing, "--vocab_file", "none.txt")
    used = run_script("export_tfhub.py", *flags, f"--export_path={tmp_path / 'encoder'}",
                      f"--preprocessor_export_path={exported['cased']}")
    assert_clean_error(used, "--preprocessor_export_path", "already holds a SavedModel")


@pytest.mark.parametrize("seq_length", [12, 64])
def test_bert_pack_inputs_takes_any_seq_length(exported, minilm_converted, seq_length):
    """As TF Hub's callers pass it (`hub.KerasLayer(p.bert_pack_inputs, arguments=dict(
    seq_length=...))`), longer and shorter than the export's: run_classifier.py's features."""
    preprocessor = tf.saved_model.load(exported["uncased"])
    first = ["The match went to extra time after a goalless first half.", "fresh basil pesto"]
    second = ["Fresh basil, pine nuts and parmesan make a pesto.", "extra time"]
    packed = preprocessor.bert_pack_inputs(
        [preprocessor.tokenize(tf.constant(texts)) for texts in (first, second)],
        seq_length=seq_length)
    tokenizer = tokenization.FullTokenizer(os.path.join(minilm_converted, "vocab.txt"))
    examples = [classification_features.InputExample(str(i), a, b, "0")
                for i, (a, b) in enumerate(zip(first, second, strict=True))]
    features = classification_features.convert_examples_to_features(examples, ["0"], seq_length,
                                                                    tokenizer)
    for key, field in (("input_word_ids", "input_ids"), ("input_mask", "input_mask"),
                       ("input_type_ids", "segment_ids")):
        assert packed[key].shape == (2, seq_length), key
        np.testing.assert_array_equal(packed[key], [getattr(f, field) for f in features], key)
