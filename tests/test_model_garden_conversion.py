"""Model Garden checkpoints both ways: convert_checkpoint.py --direction=model_garden_to_tf
and tf_to_model_garden (bert_tf/tools/model_garden_conversion.py).

The reference is TensorFlow Model Garden itself (tf-models-official, a test-only dependency):
its `networks.BertEncoder` and `networks.BertEncoderV2` with random weights made here, saved
the way Model Garden saves them (`tf.train.Checkpoint(encoder=...)`, `BertClassifier` under
`model=`, and its TF Hub export, `export_tfhub_lib.export_model`). bert_tf's outputs on the
converted checkpoints must equal Model Garden's on the same inputs within 1e-5, both ways,
for a 2-layer config and MiniLM's sizes (6 layers, hidden 384, 12 heads, intermediate 1536,
vocab 30522); the MiniLM case of bert_tf -> Model Garden uses the real MiniLM weights.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import assert_clean_error, assert_ok, run_script

from bert_tf import modeling, tf2
from bert_tf.errors import BertTfError
from bert_tf.tools import model_garden_conversion as mgc
from bert_tf.training import checkpoints

networks = pytest.importorskip(
    "official.nlp.modeling.networks", reason="tf-models-official is not installed")
models = pytest.importorskip("official.nlp.modeling.models")
activations = pytest.importorskip("official.modeling.activations")

TOLERANCE = 1e-5
SMALL = dict(vocab_size=99, hidden_size=32, num_layers=2, num_attention_heads=4, inner_dim=64,
             max_sequence_length=40, type_vocab_size=2)
MINILM = dict(vocab_size=30522, hidden_size=384, num_layers=6, num_attention_heads=12,
              inner_dim=1536, max_sequence_length=512, type_vocab_size=2)
SIZES = {"small": SMALL, "minilm": MINILM}
ENCODERS = {"v2": networks.BertEncoderV2, "v1": networks.BertEncoder}


def exact_gelu(x):
    """bert_tf's "gelu" (the erf form), for a Model Garden encoder's inner_activation."""
    return tf.nn.gelu(x, approximate=False)



def _encoder(kind, sizes, seed=0, **kwargs):
    """A Model Garden encoder with random weights (its own initializers, seeded)."""
    tf.keras.utils.set_random_seed(seed)
    if kind == "v1":
        kwargs["dict_outputs"] = True
    encoder = ENCODERS[kind](**sizes, **kwargs)
    encoder(_inputs(sizes))  # builds the variables
    return encoder


def _inputs(sizes, batch=2, length=9):
    rng = np.random.RandomState(1)
    ids = rng.randint(0, sizes["vocab_size"], [batch, length]).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, length - 3:] = 0  # padding in the second example
    types = np.zeros_like(ids)
    types[:, length // 2:] = 1
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def _model_garden_outputs(model, inputs):
    outputs = model(inputs, training=False)
    return outputs["sequence_output"].numpy(), outputs["pooled_output"].numpy()


def _bert_tf_outputs(output_dir, inputs):
    """tf2.BertEncoder on the converted directory's bert_config.json and checkpoint."""
    encoder = tf2.BertEncoder(os.path.join(output_dir, "bert_config.json"))
    encoder.load_checkpoint(os.path.join(output_dir, "bert_model.ckpt"))
    outputs = encoder(inputs["input_word_ids"], inputs["input_mask"], inputs["input_type_ids"])
    return outputs["sequence_output"].numpy(), outputs["pooled_output"].numpy()


def _graph_mode_outputs(output_dir, inputs):
    """Graph-mode modeling.BertModel restored from the converted checkpoint by name."""
    config = modeling.BertConfig.from_json_file(os.path.join(output_dir, "bert_config.json"))
    with tf.Graph().as_default():
        model = modeling.BertModel(config, is_training=False,
                                   input_ids=tf.constant(inputs["input_word_ids"]),
                                   input_mask=tf.constant(inputs["input_mask"]),
                                   token_type_ids=tf.constant(inputs["input_type_ids"]))
        modeling.init_from_checkpoint(os.path.join(output_dir, "bert_model.ckpt"))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return sess.run([model.get_sequence_output(), model.get_pooled_output()])


def _max_diff(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def _save(tmp_path, name, **objects):
    directory = tmp_path / name
    return tf.train.Checkpoint(**objects).save(str(directory / "ckpt")), str(directory)


@pytest.mark.parametrize("size", ["small", "minilm"])
@pytest.mark.parametrize("kind", ["v2", "v1"])
def test_model_garden_to_tf_outputs(tmp_path, kind, size):
    """(a) Model Garden -> bert_tf: same sequence and pooled outputs, hidden_act gelu_new."""
    sizes = SIZES[size]
    encoder = _encoder(kind, sizes)
    inputs = _inputs(sizes)
    expected = _model_garden_outputs(encoder, inputs)
    prefix, directory = _save(tmp_path, "mg", encoder=encoder)
    assert mgc.is_model_garden(prefix) and mgc.is_model_garden(directory)
    out = str(tmp_path / "tf")
    mgc.convert_model_garden_to_tf(directory, out)
    with open(os.path.join(out, "bert_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["hidden_act"] == "gelu_new"  # Model Garden's default, the tanh form
    assert {key: config[key] for key in ("vocab_size", "hidden_size", "num_hidden_layers",
                                         "num_attention_heads", "intermediate_size")} == {
        "vocab_size": sizes["vocab_size"], "hidden_size": sizes["hidden_size"],
        "num_hidden_layers": sizes["num_layers"],
        "num_attention_heads": sizes["num_attention_heads"],
        "intermediate_size": sizes["inner_dim"]}
    assert config["layer_norm_eps"] == 1e-12
    assert _max_diff(_bert_tf_outputs(out, inputs), expected) < TOLERANCE
    if size == "small":
        assert _max_diff(_graph_mode_outputs(out, inputs), expected) < TOLERANCE


def _restored(kind, sizes, prefix, activation):
    """A fresh Model Garden encoder (other seed) restored from `prefix`, every object used."""
    encoder = _encoder(kind, sizes, seed=7, inner_activation=activation)
    tf.train.Checkpoint(encoder=encoder).read(prefix).assert_consumed()
    return encoder


@pytest.mark.parametrize("kind", ["v2", "v1"])
def test_tf_to_model_garden_small(tmp_path, kind):
    """(b) bert_tf -> Model Garden, a random 2-layer bert_tf encoder with exact-erf GELU."""
    config = modeling.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=64,
                                 max_position_embeddings=40, type_vocab_size=2)
    source = tmp_path / "tf"
    source.mkdir()
    (source / "bert_config.json").write_text(config.to_json_string())
    bert = tf2.BertEncoder(config)
    bert.save_checkpoint(str(source / "bert_model.ckpt"))
    out = str(tmp_path / "mg")
    prefix = mgc.convert_tf_to_model_garden(str(source / "bert_config.json"),
                                            str(source / "bert_model.ckpt"), out)
    inputs = _inputs(SMALL)
    encoder = _restored(kind, SMALL, prefix, exact_gelu)
    assert _max_diff(_model_garden_outputs(encoder, inputs),
                     _bert_tf_outputs(str(source), inputs)) < TOLERANCE


@pytest.fixture(scope="module")
def minilm_model_garden(minilm_converted, tmp_path_factory):
    """The real MiniLM weights (Google layout) converted to Model Garden, and bert_tf's
    outputs on them."""
    out = str(tmp_path_factory.mktemp("minilm_mg"))
    prefix = mgc.convert_tf_to_model_garden(
        os.path.join(minilm_converted, "bert_config.json"),
        os.path.join(minilm_converted, "bert_model.ckpt"), out)
    return prefix, _bert_tf_outputs(minilm_converted, _inputs(MINILM))


@pytest.mark.parametrize("kind", ["v2", "v1"])
def test_tf_to_model_garden_minilm(minilm_model_garden, kind):
    """(b) bert_tf -> Model Garden on MiniLM's trained weights ("gelu": exact erf). Model
    Garden's default tanh GELU would differ by more than the tolerance: the activation in
    bert_config.json is what the Model Garden user must build the encoder with."""
    prefix, expected = minilm_model_garden
    inputs = _inputs(MINILM)
    encoder = _restored(kind, MINILM, prefix, exact_gelu)
    assert _max_diff(_model_garden_outputs(encoder, inputs), expected) < TOLERANCE
    if kind == "v2":
        tanh = _restored(kind, MINILM, prefix, activations.gelu)
        assert _max_diff(_model_garden_outputs(tanh, inputs), expected) > TOLERANCE
