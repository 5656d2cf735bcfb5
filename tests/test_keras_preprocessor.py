"""bert_tf.keras.BertPreprocessor against run_classifier.py's features (FullTokenizer's ids,
`classification_features.convert_single_example`'s truncation and packing) on every line of
tests/data/multilingual.txt, cased and uncased, single texts and pairs, at a length that cuts
and one that does not; a strings-in Keras model (BertPreprocessor -> BertEncoderLayer -> Dense)
that fits, saves as .keras and exports for serving, then answers the same in a fresh process
that cannot import tensorflow_text (tests/keras_preprocessor_child.py) with its vocab file gone;
and bad input."""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from envs import ROOT, child_env

from bert_tf import keras as bert_keras
from bert_tf import tokenization
from bert_tf.data import classification_features
from bert_tf.errors import BertTfError

DATA = os.path.join(ROOT, "tests", "data")
TOPICS_TRAIN = os.path.join(ROOT, "data", "topics", "train.tsv")
SHORT, LONG = 16, 512  # LONG holds every pair of corpus lines whole
# A tiny random encoder: the preprocessor, not the encoder, is under test here.
TINY_CONFIG = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2,
               "num_attention_heads": 2, "intermediate_size": 64,
               "max_position_embeddings": SHORT}
OUTPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")


def _lines():
    with open(os.path.join(DATA, "multilingual.txt"), encoding="utf-8") as f:
        return f.read().splitlines()


def _reference(texts_a, texts_b, tokenizer, seq_length):
    """run_classifier.py's features of the rows (texts_b None: single texts), as arrays."""
    features = [classification_features.convert_single_example(
        i, classification_features.InputExample(str(i), a, b, "x"), ["x"], seq_length, tokenizer)
        for i, (a, b) in enumerate(zip(texts_a, texts_b or [None] * len(texts_a), strict=True))]
    return {"input_word_ids": np.array([f.input_ids for f in features], np.int32),
            "input_mask": np.array([f.input_mask for f in features], np.int32),
            "input_type_ids": np.array([f.segment_ids for f in features], np.int32)}


@pytest.mark.parametrize("do_lower_case", [True, False])
@pytest.mark.parametrize("seq_length", [SHORT, LONG])
def test_ids_equal_run_classifier_features_on_the_multilingual_corpus(vocab_file, do_lower_case,
                                                                      seq_length):
    lines = _lines()
    assert len(lines) == 3250
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    preprocessor = bert_keras.BertPreprocessor(vocab_file, do_lower_case, seq_length)
    # Pairs of consecutive lines, and pairs with an empty side.
    pairs_a, pairs_b = lines[:-1] + ["", lines[0], ""], lines[1:] + [lines[1], "", ""]
    cases = {"single": (lines, None), "pair": (pairs_a, pairs_b)}
    for kind, (texts_a, texts_b) in cases.items():
        inputs = tf.constant(texts_a) if texts_b is None else (tf.constant(texts_a),
                                                               tf.constant(texts_b))
        got = {key: value.numpy() for key, value in preprocessor(inputs).items()}
        expected = _reference(texts_a, texts_b, tokenizer, seq_length)
        for key in OUTPUT_KEYS:
            assert got[key].dtype == np.int32 and got[key].shape == (len(texts_a), seq_length)
            differing = np.flatnonzero((got[key] != expected[key]).any(axis=1))
            assert differing.size == 0, (kind, key, [texts_a[i] for i in differing[:3]])
        # The cut is exercised at SHORT (on both sides of many pairs), never needed at LONG.
        lengths = np.array([[len(tokenizer.tokenize(text)) for text in side]
                            for side in (texts_a, texts_b or [""] * len(texts_a))])
        packed = lengths.sum(axis=0) + np.where(lengths[1] > 0, 3, 2)
        cut = int((packed > seq_length).sum())
        assert (cut > 1000) if seq_length == SHORT else (cut == 0), (kind, cut)
        if texts_b is not None and seq_length == SHORT:
            assert (lengths.min(axis=0) > (seq_length - 3) // 2).sum() > 500


def _labelled_pairs():
    """16 labelled rows of data/topics: text, text_b (every other row empty: a single text)
    and label ids."""
    with open(TOPICS_TRAIN, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:17]
    labels = sorted({label for _, label in rows})
    texts = [text for text, _ in rows]
    texts_b = [texts[(i + 5) % len(texts)] if i % 2 else "" for i in range(len(texts))]
    return texts, texts_b, np.array([labels.index(label) for _, label in rows]), len(labels)


def _strings_model(vocab_file, num_labels):
    text = keras.Input(shape=(), dtype="string", name="text")
    text_b = keras.Input(shape=(), dtype="string", name="text_b")
    packed = bert_keras.BertPreprocessor(vocab_file, True, SHORT, name="preprocessor")(
        [text, text_b])
    pooled = bert_keras.BertEncoderLayer(TINY_CONFIG, name="encoder")(packed)["pooled_output"]
    return keras.Model([text, text_b], keras.layers.Dense(num_labels, name="logits")(pooled))


def test_strings_model_fits_saves_loads_without_tensorflow_text_and_exports(vocab_file,
                                                                            tmp_path):
    vocab_copy = str(tmp_path / "vocab.txt")
    shutil.copy(vocab_file, vocab_copy)
    texts, texts_b, label_ids, num_labels = _labelled_pairs()
    keras.utils.set_random_seed(3)
    model = _strings_model(vocab_copy, num_labels)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [w.numpy().copy() for w in model.trainable_weights]
    data = tf.data.Dataset.from_tensor_slices(((texts, texts_b), label_ids)).batch(8)
    losses = model.fit(data, epochs=1, verbose=0).history["loss"]  # 2 steps
    assert len(losses) == 1 and np.isfinite(losses).all()
    moved = max(np.abs(w.numpy() - b).max() for w, b in zip(model.trainable_weights, before,
                                                            strict=True))
    assert moved > 1e-4

    # Trained texts and others (Unicode, cut pairs) as the saved model will see them.
    lines = _lines()[:12]
    eval_texts = {"text": texts[:4] + lines[0::2], "text_b": texts_b[:4] + lines[1::2]}
    inputs = [tf.constant(eval_texts["text"]), tf.constant(eval_texts["text_b"])]
    expected = model.predict(inputs, verbose=0)
    expected_ids = model.get_layer("preprocessor")(inputs)["input_word_ids"].numpy()
    model.save(str(tmp_path / "model.keras"))
    model.export(str(tmp_path / "export"), verbose=False)
    os.remove(vocab_copy)  # The saved model carries its vocabulary.
    (tmp_path / "texts.json").write_text(json.dumps(eval_texts), encoding="utf-8")

    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "keras_preprocessor_child.py"),
         str(tmp_path / "model.keras"), str(tmp_path / "export"), str(tmp_path / "texts.json"),
         str(tmp_path / "out.npz")],
        env=child_env(), capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    child = json.loads(result.stdout.strip().splitlines()[-1])
    assert child["attempts"] == [] and not child["tensorflow_text_in_modules"], child
    assert child["at_export"] == {"tensorflow_text": False, "bert_tf": False}, child
    assert child["preprocessor"] == {"vocab_file": None, "do_lower_case": True,
                                     "seq_length": SHORT, "vocab_size": 30522}
    outputs = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(outputs["ids"], expected_ids)
    for name in ("keras", "serve", "serving_default"):
        np.testing.assert_array_equal(outputs[name], expected, err_msg=name)


def test_a_missing_vocab_file_is_one_line_naming_it(tmp_path):
    missing = str(tmp_path / "no_vocab.txt")
    with pytest.raises(BertTfError) as error:
        bert_keras.BertPreprocessor(missing, True, 128)
    message = str(error.value)
    assert missing in message and "\n" not in message


def test_a_vocab_without_cls_is_one_line_naming_the_file(vocab_file, tmp_path):
    no_cls = str(tmp_path / "no_cls.txt")
    with open(vocab_file, encoding="utf-8") as f:
        tokens = [line for line in f if line.strip() != "[CLS]"]
    with open(no_cls, "w", encoding="utf-8") as f:
        f.writelines(tokens)
    with pytest.raises(BertTfError, match=r"\[CLS\]") as error:
        bert_keras.BertPreprocessor(no_cls, True, 128)
    assert no_cls in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("arguments, named", [
    ({"do_lower_case": "yes"}, "do_lower_case"), ({"seq_length": 2}, "seq_length"),
    ({"seq_length": 16.0}, "seq_length"),
])
def test_bad_settings_name_the_argument(vocab_file, arguments, named):
    settings = {"vocab_file": vocab_file, "do_lower_case": True, "seq_length": 16, **arguments}
    with pytest.raises(BertTfError, match=named):
        bert_keras.BertPreprocessor(**settings)


def test_inputs_that_are_not_one_or_two_string_segments_are_named(vocab_file):
    preprocessor = bert_keras.BertPreprocessor(vocab_file, True, 16)
    text = tf.constant(["a", "b"])
    with pytest.raises(BertTfError, match="3 segments"):
        preprocessor((text, text, text))
    with pytest.raises(BertTfError, match="segment 0 is int32"):
        preprocessor(tf.constant([[101, 102]]))
    with pytest.raises(BertTfError, match=r"segment 1 is string of shape \(2, 2\)"):
        preprocessor((text, tf.constant([["a", "b"], ["c", "d"]])))
    with pytest.raises(BertTfError, match=r"segment 0 is string of shape \(\)"):
        preprocessor(("a pair", "of scalars"))  # A tuple is segments; a list of str, a batch.
    np.testing.assert_array_equal(preprocessor(["a", "b"])["input_word_ids"],
                                  preprocessor(text)["input_word_ids"])
    with pytest.raises(BertTfError, match="have 2 and 1 rows"):
        preprocessor((text, tf.constant(["a"])))
