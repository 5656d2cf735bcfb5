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
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def _save(tmp_path, name, **objects):
    directory = tmp_path / name
    return tf.train.Checkpoint(**objects).save(str(directory / "ckpt")), str(directory)


class _ModelGarden:
    """A Model Garden encoder with random weights, its outputs, its weights (copies) and its
    checkpoint (`tf.train.Checkpoint(encoder=...).save`)."""

    def __init__(self, kind, size, directory):
        self.kind, self.sizes = kind, SIZES[size]
        self.encoder = _encoder(kind, self.sizes)
        self.inputs = _inputs(self.sizes)
        self.outputs = _model_garden_outputs(self.encoder, self.inputs)
        self.weights = [w.numpy() for w in self.encoder.weights]
        self.prefix = tf.train.Checkpoint(encoder=self.encoder).save(
            os.path.join(directory, "ckpt"))
        self.directory = directory


@pytest.fixture(scope="module")
def model_garden(tmp_path_factory):
    """`get(kind, size)`: the `_ModelGarden` of that encoder class and size, made once."""
    made = {}

    def get(kind, size):
        if (kind, size) not in made:
            made[kind, size] = _ModelGarden(kind, size,
                                            str(tmp_path_factory.mktemp(f"mg_{kind}_{size}")))
        return made[kind, size]

    return get


def _read_config(directory):
    with open(os.path.join(directory, "bert_config.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("size", ["small", "minilm"])
@pytest.mark.parametrize("kind", ["v2", "v1"])
def test_model_garden_to_tf_and_back(model_garden, tmp_path, kind, size):
    """(a) Model Garden -> bert_tf: the same sequence and pooled outputs, sizes read from the
    shapes, hidden_act gelu_new; (d) back to Model Garden: every weight bit for bit."""
    source = model_garden(kind, size)
    assert mgc.is_model_garden(source.prefix) and mgc.is_model_garden(source.directory)
    out = str(tmp_path / "tf")
    mgc.convert_model_garden_to_tf(source.directory, out)
    config, sizes = _read_config(out), source.sizes
    assert config["hidden_act"] == "gelu_new"  # Model Garden's default, the tanh form
    assert config["layer_norm_eps"] == 1e-12
    assert [config[key] for key in ("vocab_size", "hidden_size", "num_hidden_layers",
                                    "num_attention_heads", "intermediate_size",
                                    "max_position_embeddings", "type_vocab_size")] == [
        sizes[key] for key in ("vocab_size", "hidden_size", "num_layers", "num_attention_heads",
                               "inner_dim", "max_sequence_length", "type_vocab_size")]
    assert _max_diff(_bert_tf_outputs(out, source.inputs), source.outputs) < TOLERANCE
    if size == "small":
        assert _max_diff(_graph_mode_outputs(out, source.inputs), source.outputs) < TOLERANCE

    back = mgc.convert_tf_to_model_garden(os.path.join(out, "bert_config.json"),
                                          os.path.join(out, "bert_model.ckpt"),
                                          str(tmp_path / "mg"))
    for weight in source.encoder.weights:
        weight.assign(tf.zeros_like(weight))
    tf.train.Checkpoint(encoder=source.encoder).read(back).assert_consumed()
    for weight, original in zip(source.encoder.weights, source.weights, strict=True):
        assert np.array_equal(weight.numpy(), original), weight.name
    assert _read_config(str(tmp_path / "mg")) == config


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
def test_tf_to_model_garden_minilm(minilm_model_garden, model_garden, kind):
    """(b) bert_tf -> Model Garden on MiniLM's trained weights ("gelu": exact erf). Model
    Garden's default tanh GELU would differ by more than the tolerance: the activation in
    bert_config.json is what the Model Garden user must build the encoder with."""
    prefix, expected = minilm_model_garden
    inputs = _inputs(MINILM)
    encoder = _restored(kind, MINILM, prefix, exact_gelu)
    assert _max_diff(_model_garden_outputs(encoder, inputs), expected) < TOLERANCE
    if kind == "v2":
        tanh = model_garden(kind, "minilm").encoder  # built with Model Garden's default
        tf.train.Checkpoint(encoder=tanh).read(prefix).assert_consumed()
        assert _max_diff(_model_garden_outputs(tanh, inputs), expected) > TOLERANCE


def _classifier(kind, seed, num_classes=3, **kwargs):
    encoder = _encoder(kind, SMALL, seed=seed, **kwargs)
    classifier = models.BertClassifier(encoder, num_classes=num_classes)
    classifier(_inputs(SMALL))
    return classifier


def _bert_tf_logits(output_dir, inputs):
    """bert_tf's classifier head (bert_tf/tasks/heads.py: pooled @ output_weights^T +
    output_bias) on tf2.BertEncoder's pooled output."""
    head = checkpoints.read_tf_checkpoint(os.path.join(output_dir, "bert_model.ckpt"),
                                          ["output_weights", "output_bias"])
    pooled = _bert_tf_outputs(output_dir, inputs)[1]
    return pooled @ head["output_weights"].T + head["output_bias"]


@pytest.mark.parametrize("kind", ["v2", "v1"])
def test_classifier_both_ways(tmp_path, kind):
    """(c) BertClassifier <-> bert_tf's classifier head: logits within 1e-5 both ways, and
    there and back bit for bit."""
    inputs = _inputs(SMALL)
    classifier = _classifier(kind, seed=3)
    expected = classifier(inputs, training=False).numpy()
    prefix, directory = _save(tmp_path, "mg", model=classifier)
    out = str(tmp_path / "tf")
    mgc.convert_model_garden_to_tf(prefix, out, task="classifier")
    assert _max_diff([_bert_tf_logits(out, inputs)], [expected]) < TOLERANCE
    assert tf.train.latest_checkpoint(out) == os.path.join(out, "bert_model.ckpt")

    back = mgc.convert_tf_to_model_garden(os.path.join(out, "bert_config.json"), out,
                                          str(tmp_path / "mg_back"), task="classifier")
    restored = _classifier(kind, seed=11)
    tf.train.Checkpoint(model=restored).read(back).assert_existing_objects_matched()
    assert _max_diff([restored(inputs, training=False).numpy()], [expected]) < TOLERANCE
    for weight, original in zip(restored.weights, classifier.weights, strict=True):
        assert np.array_equal(weight.numpy(), original.numpy()), weight.name


def test_tf_to_tf_through_model_garden_is_exact(tmp_path):
    """(d) bert_tf -> Model Garden -> bert_tf: every tensor and the config unchanged."""
    config = modeling.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=64,
                                 max_position_embeddings=40, type_vocab_size=2,
                                 hidden_act="relu")
    source = tmp_path / "tf"
    source.mkdir()
    (source / "bert_config.json").write_text(config.to_json_string())
    (source / "vocab.txt").write_text("".join(f"w{i}\n" for i in range(99)))
    tf2.BertEncoder(config).save_checkpoint(str(source / "bert_model.ckpt"))
    mg, back = str(tmp_path / "mg"), str(tmp_path / "back")
    mgc.convert_tf_to_model_garden(str(source / "bert_config.json"),
                                   str(source / "bert_model.ckpt"), mg)
    mgc.convert_model_garden_to_tf(mg, back)
    original = checkpoints.read_tf_checkpoint(str(source / "bert_model.ckpt"))
    converted = checkpoints.read_tf_checkpoint(os.path.join(back, "bert_model.ckpt"))
    assert sorted(converted) == sorted(original)
    for name, value in original.items():
        assert np.array_equal(converted[name], value), name
    assert _read_config(back)["hidden_act"] == "relu"
    assert (tmp_path / "back" / "vocab.txt").read_text() == (source / "vocab.txt").read_text()


def test_tfhub_saved_model(tmp_path):
    """(e) A TF Hub SavedModel made by Model Garden's own export (export_tfhub_lib), whose
    variables/ name the weights variables/0, variables/1, ...: outputs, vocab and casing."""
    encoders = pytest.importorskip("official.nlp.configs.encoders")
    export_tfhub_lib = pytest.importorskip("official.nlp.tools.export_tfhub_lib")
    encoder_config = encoders.EncoderConfig(type="bert", bert=encoders.BertEncoderConfig(
        vocab_size=99, hidden_size=32, num_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=40, type_vocab_size=2))
    tf.keras.utils.set_random_seed(5)
    encoder = encoders.build_encoder(encoder_config)
    prefix, _ = _save(tmp_path, "mg", encoder=encoder)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"w{i}\n" for i in range(99)))
    export = str(tmp_path / "hub")
    export_tfhub_lib.export_model(export, encoder_config=encoder_config,
                                  model_checkpoint_path=prefix, with_mlm=False,
                                  vocab_file=str(vocab), do_lower_case=False)
    stored = [name for name, _ in tf.train.list_variables(os.path.join(export, "variables",
                                                                       "variables"))]
    assert "variables/0/.ATTRIBUTES/VARIABLE_VALUE" in stored  # not the encoder's paths
    assert mgc.is_model_garden(export)
    tensors, config, vocab_file, do_lower_case = mgc.read_model_garden(export)
    assert config["num_hidden_layers"] == 2 and config["hidden_act"] == "gelu_new"
    assert len(tensors) == 5 + 16 * 2 + 2
    assert open(vocab_file, encoding="utf-8").read() == vocab.read_text()
    assert do_lower_case is False
    out = str(tmp_path / "tf")
    mgc.convert_model_garden_to_tf(export, out)
    inputs = _inputs(SMALL)
    expected = _model_garden_outputs(tf.saved_model.load(export), inputs)
    assert _max_diff(_bert_tf_outputs(out, inputs), expected) < TOLERANCE
    assert (tmp_path / "tf" / "vocab.txt").read_text() == vocab.read_text()


def test_script_and_bad_inputs(model_garden, tmp_path):
    """convert_checkpoint.py both ways; (f) a --bert_config_file of another size, a
    checkpoint that is not Model Garden's, a task BertClassifier lacks: one line each."""
    source = model_garden("v2", "small")
    out, mg = str(tmp_path / "tf"), str(tmp_path / "mg")
    assert_ok(run_script("convert_checkpoint.py", "--direction=model_garden_to_tf",
                         f"--init_checkpoint={source.directory}", f"--output_dir={out}"))
    config_file = os.path.join(out, "bert_config.json")
    assert_ok(run_script("convert_checkpoint.py", "--direction=tf_to_model_garden",
                         f"--bert_config_file={config_file}",
                         f"--init_checkpoint={out}/bert_model.ckpt", f"--output_dir={mg}"))
    assert mgc.is_model_garden(mg)

    wrong = dict(_read_config(out), num_hidden_layers=3)
    wrong_file = tmp_path / "bert_config.json"
    wrong_file.write_text(json.dumps(wrong))
    assert_clean_error(
        run_script("convert_checkpoint.py", "--direction=model_garden_to_tf",
                   f"--init_checkpoint={source.prefix}", f"--bert_config_file={wrong_file}",
                   f"--output_dir={tmp_path / 'x'}"),
        str(wrong_file), "num_hidden_layers is 3", "has 2")
    google = os.path.join(out, "bert_model.ckpt")  # Google layout: no object graph
    assert not mgc.is_model_garden(google) and not mgc.is_model_garden(out)
    assert not mgc.is_model_garden(str(tmp_path / "missing"))
    with pytest.raises(BertTfError, match=f"checkpoint '{google}' has no Model Garden "
                       "BertEncoder / BertEncoderV2"):
        mgc.convert_model_garden_to_tf(google, str(tmp_path / "y"))
    with pytest.raises(BertTfError, match="--task=squad: Model Garden's counterpart"):
        mgc.convert_model_garden_to_tf(source.prefix, str(tmp_path / "z"), task="squad")
    with pytest.raises(BertTfError, match="0 classifier heads"):
        mgc.convert_model_garden_to_tf(source.prefix, str(tmp_path / "z"), task="classifier")
