"""KerasHub presets in and out of bert_tf (bert_tf/tools/keras_hub_conversion.py) and as
`--init_checkpoint` / `load_checkpoint` sources (bert_tf/training/checkpoint_sources.py).

The reference is KerasHub itself: a `BertBackbone` (and a `BertTextClassifier`) made here with
every weight drawn at random, saved with `save_to_preset`, and read back with `from_preset`;
bert_tf's outputs on the same ids must equal KerasHub's within 1e-5.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

keras_hub = pytest.importorskip("keras_hub")

from bert_tf import keras as bert_keras  # noqa: E402 (after the importorskip)
from bert_tf import modeling, tf2  # noqa: E402
from bert_tf.errors import BertTfError  # noqa: E402
from bert_tf.tools import keras_hub_conversion  # noqa: E402
from bert_tf.training import checkpoint_sources, checkpoints, runner  # noqa: E402

TOLERANCE = 1e-5
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(95)]
TINY = dict(vocabulary_size=100, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32,
            max_sequence_length=24)
MINILM = dict(vocabulary_size=30522, num_layers=6, num_heads=12, hidden_dim=384,
              intermediate_dim=1536, max_sequence_length=512)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(checkpoint_sources.CACHE_ENV, str(tmp_path / "cache"))


def _randomize(model, seed):
    """Draws the weights KerasHub starts at constants: biases and layer-norm offsets from
    N(0, 0.05), layer-norm scales from 1 + N(0, 0.1); kernels and tables keep KerasHub's
    random initial values (truncated N(0, 0.02), as BERT's)."""
    rng = np.random.default_rng(seed)
    weights = []
    for w in model.get_weights():
        if np.all(w == 0):
            w = rng.normal(0, 0.05, w.shape)
        elif np.all(w == 1):
            w = 1 + rng.normal(0, 0.1, w.shape)
        weights.append(np.asarray(w, np.float32))
    model.set_weights(weights)


def _backbone(sizes, seed=0):
    backbone = keras_hub.models.BertBackbone(**sizes)
    _randomize(backbone, seed)
    return backbone


def _save_preset(backbone, directory, vocab=True, lowercase=True):
    backbone.save_to_preset(str(directory))
    if vocab:
        words = VOCAB + [f"x{i}" for i in range(backbone.vocabulary_size - len(VOCAB))]
        keras_hub.models.BertTokenizer(vocabulary=words, lowercase=lowercase).save_to_preset(
            str(directory))
    return str(directory)


def _inputs(vocab_size, seed=1, batch=2, length=9):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab_size, (batch, length)).astype(np.int32)
    mask = np.ones((batch, length), np.int32)
    mask[1, 6:] = 0
    segments = np.zeros((batch, length), np.int32)
    segments[:, 4:] = 1
    return ids, mask, segments


def _keras_hub_outputs(backbone, ids, mask, segments):
    out = backbone({"token_ids": ids, "segment_ids": segments, "padding_mask": mask})
    return np.asarray(out["sequence_output"]), np.asarray(out["pooled_output"])


def _max_diff(ours, theirs, mask):
    """Largest difference over the real tokens of `[B, S, H]` outputs (or `[B, H]`)."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    if ours.ndim == 3:
        keep = mask.astype(bool)
        return float(np.max(np.abs(ours[keep] - theirs[keep])))
    return float(np.max(np.abs(ours - theirs)))


def _check_equal(outputs, reference, mask, what):
    sequence, pooled = outputs
    differences = (_max_diff(sequence, reference[0], mask), _max_diff(pooled, reference[1], mask))
    print(f"{what}: max |diff| sequence {differences[0]:.2e}, pooled {differences[1]:.2e}")
    assert max(differences) < TOLERANCE, (what, differences)


def _tf2_outputs(encoder, ids, mask, segments):
    out = tf.function(lambda *args: encoder(*args))(ids, mask, segments)
    return out["sequence_output"].numpy(), out["pooled_output"].numpy()


def _graph_outputs(config, init_checkpoint, ids, mask, segments):
    """Graph mode `BertModel` started from `--init_checkpoint` as a run resolves it."""
    with tf.Graph().as_default():
        model = modeling.BertModel(config, is_training=False, input_ids=tf.constant(ids),
                                   input_mask=tf.constant(mask),
                                   token_type_ids=tf.constant(segments))
        modeling.init_from_checkpoint(runner.resolve_init_checkpoint(init_checkpoint))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return sess.run([model.get_sequence_output(), model.get_pooled_output()])


def test_minilm_preset_into_tf2_encoder_load_checkpoint(tmp_path, caplog):
    backbone = _backbone(MINILM)
    preset = _save_preset(backbone, tmp_path / "preset")
    ids, mask, segments = _inputs(MINILM["vocabulary_size"])
    reference = _keras_hub_outputs(backbone, ids, mask, segments)
    del backbone
    config = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                  num_attention_heads=12, intermediate_size=1536, hidden_act="gelu_tanh",
                  type_vocab_size=2)
    encoder = tf2.BertEncoder(config)
    with caplog.at_level("INFO"):
        assert encoder.load_checkpoint(preset) == []
    read_lines = [record.getMessage() for record in caplog.records
                  if "is a KerasHub preset" in record.getMessage()]
    assert len(read_lines) == 1 and "gelu_tanh" in read_lines[0], read_lines
    _check_equal(_tf2_outputs(encoder, ids, mask, segments), reference, mask,
                 "MiniLM-sized preset, tf2.BertEncoder.load_checkpoint")


def test_tiny_preset_converted_has_config_vocab_and_outputs(tmp_path):
    backbone = _backbone(TINY)
    preset = _save_preset(backbone, tmp_path / "preset")
    ids, mask, segments = _inputs(TINY["vocabulary_size"])
    prefix = keras_hub_conversion.convert_keras_hub_to_tf(preset, str(tmp_path / "tf"))
    with open(tmp_path / "tf" / "bert_config.json") as f:
        written = json.load(f)
    assert written["hidden_act"] == "gelu_tanh" and written["layer_norm_eps"] == 1e-12
    assert (tmp_path / "tf" / "vocab.txt").read_text() == (
        tmp_path / "preset" / "assets" / "tokenizer" / "vocabulary.txt").read_text()
    encoder = tf2.BertEncoder(str(tmp_path / "tf" / "bert_config.json"))
    assert encoder.load_checkpoint(prefix) == []
    _check_equal(_tf2_outputs(encoder, ids, mask, segments),
                 _keras_hub_outputs(backbone, ids, mask, segments), mask,
                 "tiny preset, convert_keras_hub_to_tf")


def test_tiny_preset_through_keras_layer_and_init_checkpoint(tmp_path):
    backbone = _backbone(TINY)
    preset = _save_preset(backbone, tmp_path / "preset")
    ids, mask, segments = _inputs(TINY["vocabulary_size"])
    reference = _keras_hub_outputs(backbone, ids, mask, segments)
    converted = checkpoint_sources.resolve(preset)
    assert converted.do_lower_case is True and converted.vocab_file
    config = modeling.BertConfig.from_json_file(converted.bert_config_file)

    layer = bert_keras.BertEncoderLayer(config)
    assert layer.load_checkpoint(os.path.join(preset, "model.weights.h5")) == []
    out = layer({"input_word_ids": ids, "input_mask": mask, "input_type_ids": segments})
    _check_equal((out["sequence_output"], out["pooled_output"]), reference, mask,
                 "tiny preset, keras.BertEncoderLayer")
    _check_equal(_graph_outputs(config, preset, ids, mask, segments), reference, mask,
                 "tiny preset, --init_checkpoint")
    # Resolved again: the same conversion, not a new one.
    assert checkpoint_sources.resolve(preset).prefix == converted.prefix
    assert len(os.listdir(checkpoint_sources.cache_dir())) == 1


def _bert_tf_checkpoint(directory, seed=3):
    """A bert_tf encoder with random weights (tanh GELU, as KerasHub computes), saved in
    Google's layout with its config and a vocab.txt."""
    os.makedirs(directory, exist_ok=True)
    config = dict(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, hidden_act="gelu_tanh", max_position_embeddings=24,
                  type_vocab_size=2, layer_norm_eps=1e-12)
    config_file = os.path.join(directory, "bert_config.json")
    with open(config_file, "w") as f:
        json.dump(config, f)
    with open(os.path.join(directory, "vocab.txt"), "w") as f:
        f.write("\n".join(VOCAB) + "\n")
    encoder = tf2.BertEncoder(config_file)
    rng = np.random.default_rng(seed)
    for name, variable in encoder.variables_by_name.items():
        scale = 0.1 if name.endswith(("gamma", "beta", "bias")) else 0.02
        value = rng.normal(0, scale, variable.shape) + name.endswith("gamma")
        variable.assign(value.astype(np.float32))
    return encoder, config_file, encoder.save_checkpoint(os.path.join(directory,
                                                                      "bert_model.ckpt"))


def test_bert_tf_to_preset_from_preset_and_back_bit_for_bit(tmp_path):
    encoder, config_file, prefix = _bert_tf_checkpoint(str(tmp_path / "tf"))
    preset = str(tmp_path / "preset")
    keras_hub_conversion.convert_tf_to_keras_hub(config_file, prefix, preset)
    backbone = keras_hub.models.BertBackbone.from_preset(preset)
    ids, mask, segments = _inputs(100)
    _check_equal(_tf2_outputs(encoder, ids, mask, segments),
                 _keras_hub_outputs(backbone, ids, mask, segments), mask,
                 "bert_tf -> preset -> BertBackbone.from_preset")
    tokenizer = keras_hub.models.BertTokenizer.from_preset(preset)
    assert tokenizer.lowercase and tokenizer.vocabulary == VOCAB

    back = keras_hub_conversion.convert_keras_hub_to_tf(preset, str(tmp_path / "back"))
    original = checkpoints.read_tf_checkpoint(prefix)
    again = checkpoints.read_tf_checkpoint(back)
    assert sorted(again) == sorted(original)
    for name, value in original.items():
        assert again[name].dtype == value.dtype and np.array_equal(again[name], value), name


def test_preset_to_tf_and_back_keeps_every_h5_weight_bit_for_bit(tmp_path):
    preset = _save_preset(_backbone(TINY), tmp_path / "preset")
    prefix = keras_hub_conversion.convert_keras_hub_to_tf(preset, str(tmp_path / "tf"))
    again = str(tmp_path / "again")
    keras_hub_conversion.convert_tf_to_keras_hub(str(tmp_path / "tf" / "bert_config.json"),
                                                 prefix, again)
    import h5py

    def datasets(path):
        found = {}
        with h5py.File(path) as f:
            f.visititems(lambda name, obj: found.__setitem__(name, obj[()])
                         if isinstance(obj, h5py.Dataset) else None)
        return found

    original, written = (datasets(os.path.join(p, "model.weights.h5")) for p in (preset, again))
    assert sorted(written) == sorted(original)
    for name, value in original.items():
        assert np.array_equal(written[name], value), name


def test_classifier_head_both_ways(tmp_path):
    classifier = keras_hub.models.BertTextClassifier(backbone=_backbone(TINY), num_classes=3,
                                                     preprocessor=None)
    _randomize(classifier, seed=5)
    preset = str(tmp_path / "classifier")
    classifier.save_to_preset(preset)
    keras_hub.models.BertTokenizer(vocabulary=VOCAB, lowercase=True).save_to_preset(preset)
    ids, mask, segments = _inputs(100)
    inputs = {"token_ids": ids, "segment_ids": segments, "padding_mask": mask}
    reference = np.asarray(classifier(inputs))

    prefix = keras_hub_conversion.convert_keras_hub_to_tf(preset, str(tmp_path / "tf"),
                                                          task="classifier")
    assert tf.train.latest_checkpoint(str(tmp_path / "tf")) == prefix
    tensors = checkpoints.read_tf_checkpoint(prefix)
    encoder = tf2.BertEncoder(str(tmp_path / "tf" / "bert_config.json"))
    encoder.load_checkpoint(prefix)
    pooled = _tf2_outputs(encoder, ids, mask, segments)[1]
    logits = pooled @ tensors["output_weights"].T + tensors["output_bias"]
    difference = float(np.max(np.abs(logits - reference)))
    print(f"BertTextClassifier -> bert_tf: max |diff| logits {difference:.2e}")
    assert difference < TOLERANCE

    again = str(tmp_path / "again")
    keras_hub_conversion.convert_tf_to_keras_hub(str(tmp_path / "tf" / "bert_config.json"),
                                                 prefix, again, task="classifier")
    loaded = keras_hub.models.TextClassifier.from_preset(again)
    assert isinstance(loaded, keras_hub.models.BertTextClassifier)
    difference = float(np.max(np.abs(np.asarray(loaded(inputs)) - reference)))
    print(f"bert_tf -> BertTextClassifier.from_preset: max |diff| logits {difference:.2e}")
    assert difference < TOLERANCE


def test_preset_of_another_architecture_is_one_line(tmp_path):
    roberta = keras_hub.models.RobertaBackbone(vocabulary_size=60, num_layers=1, num_heads=2,
                                               hidden_dim=8, intermediate_dim=16,
                                               max_sequence_length=16)
    preset = str(tmp_path / "roberta")
    roberta.save_to_preset(preset)
    config_path = os.path.join(preset, "config.json")
    for call in (lambda: keras_hub_conversion.convert_keras_hub_to_tf(preset,
                                                                      str(tmp_path / "o")),
                 lambda: tf2.BertEncoder(_bert_tf_checkpoint(str(tmp_path / "t"))[1])
                 .load_checkpoint(preset)):
        with pytest.raises(BertTfError) as raised:
            call()
        message = str(raised.value)
        assert "\n" not in message and config_path in message
        assert "'RobertaBackbone', not 'BertBackbone'" in message


def test_preset_without_vocabulary_is_one_line(tmp_path):
    preset = _save_preset(_backbone(TINY), tmp_path / "preset", vocab=False)
    with pytest.raises(BertTfError) as raised:
        keras_hub_conversion.convert_keras_hub_to_tf(preset, str(tmp_path / "tf"))
    message = str(raised.value)
    assert "\n" not in message and preset in message and "vocabulary.txt" in message


def test_weights_that_do_not_fit_config_json_are_one_line(tmp_path):
    preset = _save_preset(_backbone(TINY), tmp_path / "preset")
    config_path = os.path.join(preset, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["config"]["hidden_dim"] = 32
    with open(config_path, "w") as f:
        json.dump(config, f)
    with pytest.raises(BertTfError) as raised:
        keras_hub_conversion.convert_keras_hub_to_tf(preset, str(tmp_path / "tf"))
    message = str(raised.value)
    assert "\n" not in message and "model.weights.h5" in message and "[100, 32]" in message


def test_a_config_keras_hub_cannot_compute_is_one_line(tmp_path):
    _, config_file, prefix = _bert_tf_checkpoint(str(tmp_path / "tf"))
    with open(config_file) as f:
        config = json.load(f)
    with open(config_file, "w") as f:
        json.dump(dict(config, hidden_act="relu"), f)
    with pytest.raises(BertTfError) as raised:
        keras_hub_conversion.convert_tf_to_keras_hub(config_file, prefix, str(tmp_path / "p"))
    assert "\n" not in str(raised.value) and "hidden_act is 'relu'" in str(raised.value)
