"""Sentence pooling (cls, mean, max, pooler; a layer; L2 normalized) against numpy on the
encoder's layers: the checkpoint Predictor, the embedding export (its recorded choice read
back), tf2.BertEncoder.embed and keras.SentencePoolingLayer; bad settings."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import encoder_export_options, write_tiny_config

from bert_tf import keras as bert_keras
from bert_tf import modeling, tf2, tokenization
from bert_tf.data import bert_inputs
from bert_tf.errors import BertTfError
from bert_tf.serving import backends
from bert_tf.serving.predictor import Predictor

SEQ = 32
LAYERS = 3
TEXTS = ["a cat", "the cat sat on the mat by the door of the old house in june",
         "rain again", "what a match it was, the keeper saved two penalties"]
# Every pooling of every layer, plain and normalized.
SPECS = [(pooling, layer, normalize) for pooling in ("cls", "mean", "max", "pooler")
         for layer in ((-1,) if pooling == "pooler" else (-1, -2, -3))
         for normalize in (False, True)]


def numpy_pool(layers, mask, pooled, pooling, layer, normalize):
    """The reference: float64 numpy on the encoder's layers [B, S, H] and the pooler's output."""
    hidden = np.asarray(layers[layer], np.float64)
    real = np.asarray(mask, bool)[..., None]  # [B, S, 1]
    if pooling == "cls":
        vectors = hidden[:, 0]
    elif pooling == "mean":
        vectors = (hidden * real).sum(1) / real.sum(1)
    elif pooling == "max":
        vectors = np.where(real, hidden, -np.inf).max(1)
    else:
        vectors = np.asarray(pooled, np.float64)
    if normalize:
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


@pytest.fixture(scope="module")
def model(tmp_path_factory, vocab_file):
    """A random 3-layer checkpoint, its config, and the packed TEXTS [B, S] with the encoder's
    layers and pooler output on them (a graph-mode BertModel, as the Predictor builds)."""
    directory = tmp_path_factory.mktemp("pooling")
    config_file = write_tiny_config(directory, num_hidden_layers=LAYERS)
    tf.random.set_seed(5)
    encoder = tf2.BertEncoder(config_file)
    # A non-zero pooler bias, so "pooler" is not tanh(W x) alone.
    bias = encoder.variables_by_name["bert/pooler/dense/bias"]
    bias.assign(tf.random.normal(bias.shape, seed=6))
    checkpoint = encoder.save_checkpoint(str(directory / "bert_model.ckpt"))
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    packed = [bert_inputs.pack_and_pad(tokenizer.tokenize(text), None, tokenizer, SEQ)
              for text in TEXTS]
    width = max(sum(p.input_mask) for p in packed)
    inputs = {name: np.asarray([getattr(p, name)[:width] for p in packed], np.int32)
              for name in ("input_ids", "input_mask", "segment_ids")}
    bert_config = modeling.BertConfig.from_json_file(config_file)

    def build(features):
        bert = modeling.BertModel(bert_config, False, features["input_ids"],
                                  features["input_mask"], features["segment_ids"])
        return {"layers": bert.get_all_encoder_layers(), "pooled": bert.get_pooled_output()}

    outputs = backends.GraphBackend(build, checkpoint)(inputs)
    return dict(directory=directory, config_file=config_file, checkpoint=checkpoint,
                encoder=encoder, inputs=inputs, **outputs)


def _expected(model, spec):
    return numpy_pool(model["layers"], model["inputs"]["input_mask"], model["pooled"], *spec)


def test_padding_would_change_max_and_mean(model):
    # So the max / mean tests can fail: pooled over the padding too, they would differ.
    assert (model["inputs"]["input_mask"] == 0).sum() > 20
    last = model["layers"][-1]
    assert np.abs(last.max(1) - _expected(model, ("max", -1, False))).max() > 1e-3
    assert np.abs(last.mean(1) - _expected(model, ("mean", -1, False))).max() > 1e-3


@pytest.mark.parametrize("spec", SPECS, ids=["-".join(map(str, s)) for s in SPECS])
def test_checkpoint_predictor_equals_numpy(model, vocab_file, spec):
    predictor = _checkpoint_predictor(model, vocab_file)
    pooling, layer, normalize = spec
    got = predictor.embed(TEXTS, pooling, pooling_layer=layer, normalize=normalize)
    assert got.shape == (len(TEXTS), 32) and got.dtype == np.float32
    np.testing.assert_allclose(got, _expected(model, spec), rtol=0, atol=1e-6)
    if normalize:
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


_PREDICTORS = {}


def _checkpoint_predictor(model, vocab_file):
    if "checkpoint" not in _PREDICTORS:
        _PREDICTORS["checkpoint"] = Predictor.from_checkpoint(
            model["checkpoint"], model["config_file"], vocab_file, "embed", max_seq_length=SEQ)
    return _PREDICTORS["checkpoint"]


def test_default_is_cls_of_the_last_layer(model, vocab_file):
    np.testing.assert_array_equal(_checkpoint_predictor(model, vocab_file).embed(TEXTS),
                                  _checkpoint_predictor(model, vocab_file).embed(
                                      TEXTS, "cls", pooling_layer=-1, normalize=False))


def test_export_records_its_pooling_and_answers_it(model, vocab_file, tmp_path):
    spec = pooling, layer, normalize = ("max", -2, True)
    path = _export(model, vocab_file, tmp_path, pooling=pooling, pooling_layer=layer,
                   normalize=normalize)
    with open(os.path.join(path, "assets.extra", "predict_config.json"), encoding="utf-8") as f:
        recorded = json.load(f)
    assert (recorded["pooling"], recorded["pooling_layer"], recorded["normalize"]) == spec
    predictor = Predictor.from_saved_model(path)
    np.testing.assert_allclose(predictor.embed(TEXTS), _expected(model, spec), rtol=0,
                               atol=1e-6)
    # Asked the export's own pooling explicitly, it answers; another one names the flags.
    predictor.embed(TEXTS[:1], pooling, pooling_layer=layer, normalize=normalize)
    with pytest.raises(BertTfError, match="re-export with scripts/export_encoder.py "
                                          r"--pooling=cls --pooling_layer=-1\.$"):
        predictor.embed(TEXTS, "cls", pooling_layer=-1, normalize=False)


def _export(model, vocab_file, tmp_path, **values):
    from bert_tf.serving import encoder_export

    return encoder_export.export_encoder(encoder_export_options(
        bert_config_file=model["config_file"], init_checkpoint=model["checkpoint"],
        vocab_file=vocab_file, export_dir=str(tmp_path / "export"), max_seq_length=SEQ,
        **values))


def test_tf2_embed_equals_numpy_on_its_layers(model):
    encoder, inputs = model["encoder"], model["inputs"]
    ids, mask = inputs["input_ids"], inputs["input_mask"]
    outputs = encoder(ids, mask)
    # The same weights as the checkpoint's graph: the same layers.
    np.testing.assert_allclose(outputs["encoder_outputs"][0], model["layers"][0], atol=1e-5)
    for spec in SPECS:
        pooling, layer, normalize = spec
        got = encoder.embed(ids, mask, pooling=pooling, pooling_layer=layer,
                            normalize=normalize)
        np.testing.assert_allclose(got, numpy_pool(
            [t.numpy() for t in outputs["encoder_outputs"]], mask,
            outputs["pooled_output"].numpy(), *spec), rtol=0, atol=1e-6)


def test_keras_pooling_layer_equals_numpy_and_saves(model, tmp_path):
    layer = bert_keras.BertEncoderLayer(model["config_file"])
    inputs = {key: keras.Input([None], dtype="int32", name=key) for key in bert_keras.INPUT_KEYS}
    encoded = layer(inputs)
    layer.load_checkpoint(model["checkpoint"])
    specs = [("max", -3, False), ("mean", -2, True), ("pooler", -1, True)]
    pooled = {"-".join(map(str, spec)): bert_keras.SentencePoolingLayer(*spec)(
        encoded, inputs["input_mask"]) for spec in specs}
    keras_model = keras.Model(inputs, {**pooled, "layers": encoded["encoder_outputs"],
                                       "pooled": encoded["pooled_output"]})
    data = model["inputs"]
    feed = {"input_word_ids": data["input_ids"], "input_mask": data["input_mask"],
            "input_type_ids": data["segment_ids"]}
    outputs = {name: np.asarray(value) if not isinstance(value, list)
               else [np.asarray(v) for v in value] for name, value in keras_model(feed).items()}
    for spec in specs:
        np.testing.assert_allclose(outputs["-".join(map(str, spec))], numpy_pool(
            outputs["layers"], data["input_mask"], outputs["pooled"], *spec), rtol=0,
            atol=1e-6)
    keras_model.save(str(tmp_path / "m.keras"))
    loaded = keras.models.load_model(str(tmp_path / "m.keras"))
    np.testing.assert_array_equal(np.asarray(loaded(feed)["mean--2-True"]),
                                  outputs["mean--2-True"])


def test_bad_settings_name_the_flag(model, vocab_file, tmp_path):
    with pytest.raises(BertTfError, match=r"^--pooling_layer=-4: use -1 \(the last layer\) to "
                                          r"-3 \(the first\)\.$"):
        _export(model, vocab_file, tmp_path, pooling="mean", pooling_layer=-4)
    with pytest.raises(BertTfError, match="^--pooling=pooler reads the last layer only"):
        _export(model, vocab_file, tmp_path, pooling="pooler", pooling_layer=-2)
    with pytest.raises(BertTfError, match=r"^--pooling_layer=0: use -1"):
        _export(model, vocab_file, tmp_path, pooling_layer=0)
    assert not (tmp_path / "export").exists()
    predictor = _checkpoint_predictor(model, vocab_file)
    with pytest.raises(BertTfError, match=r"^pooling_layer=-5: use -1 \(the last layer\) to -3"):
        predictor.embed(TEXTS, "mean", pooling_layer=-5)
    with pytest.raises(BertTfError, match="^pooling=sum: use one of cls, mean, max, pooler"):
        predictor.embed(TEXTS, "sum")
    with pytest.raises(BertTfError, match="^pooling_layer=-4"):
        model["encoder"].embed(model["inputs"]["input_ids"], pooling_layer=-4)
    with pytest.raises(BertTfError, match="^pooling=avg"):
        bert_keras.SentencePoolingLayer("avg")
