"""Encoder variants (relative positions, pre-LN, eps / activations, attention outputs,
head_mask, cross-attention) against independent references.

Two references:
- tests/fixtures/variants/*: tiny transformers 4.57 `BertModel`s (absolute,
  relative_key, relative_key_query) with random weights, their outputs,
  attention probabilities and head-masked outputs computed in float64 by
  tests/fixtures/make_variant_references.py. Here the weights go through our
  HF -> Google converter, so the converter mapping is tested too.
- tests/numpy_bert.py: a float64 numpy forward pass (pre-LN, relative
  positions, layer norm epsilon, activations, head masks, cross-attention).
"""

import json
import os

import numpy as np
import numpy_bert
import pytest
import safetensors.numpy
import tensorflow as tf
from envs import child_env
from script_runner import run_python_script

from bert_tf import modeling
from bert_tf.errors import BertTfError
from bert_tf.runs import extract_features
from bert_tf.tools import conversion
from bert_tf.training import checkpoints

tf1 = tf.compat.v1
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "variants")
TOLERANCE = 1e-4  # Max abs difference the issue allows.

TINY = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=40, type_vocab_size=2, max_position_embeddings=12)
HEAD_MASK = np.array([[1.0, 0.0, 0.5, 1.0], [0.25, 1.0, 0.0, 1.0]], np.float32)


def _inputs(batch=3, seq=9, seed=0):
    rng = np.random.RandomState(seed)
    ids = rng.randint(0, TINY["vocab_size"], size=(batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    mask[1, 5:] = 0
    mask[2, 8:] = 0
    segs = np.zeros((batch, seq), np.int32)
    segs[:, 4:] = 1
    return ids, mask, segs


def _randomize(sess, seed=1):
    """Gives every variable random values of unit-ish scale (layer norms included), so
    each weight visibly moves the outputs; returns them by name."""
    rng = np.random.RandomState(seed)
    weights = {}
    for var in tf1.global_variables():
        shape = var.shape.as_list()
        name = var.name[:-2]
        if name.endswith("/gamma"):
            value = 1.0 + 0.3 * rng.randn(*shape)
        elif name.endswith(("/beta", "/bias")):
            value = 0.2 * rng.randn(*shape)
        elif name.endswith("/kernel"):
            value = 1.5 * rng.randn(*shape) / np.sqrt(shape[0])
        else:  # Embedding and distance tables.
            value = 0.7 * rng.randn(*shape)
        var.load(value.astype(np.float32), sess)
        weights[name] = value.astype(np.float32)
    return weights


def _run_bert(config, ids, mask, segs, head_mask=None):
    """Builds BertModel (eval mode), randomizes it; returns (weights, layers, pooled, probs)."""
    with tf.Graph().as_default():
        model = modeling.BertModel(config, False, tf.constant(ids), tf.constant(mask),
                                   tf.constant(segs), head_mask=head_mask)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            weights = _randomize(sess)
            layers, pooled, probs = sess.run([model.get_all_encoder_layers(),
                                              model.get_pooled_output(),
                                              model.get_all_attention_probs()])
    return weights, layers, pooled, probs


def _max_diff(ours, ref):
    return max(float(np.abs(np.asarray(a, np.float64) - b).max())
               for a, b in zip(ours, ref, strict=True))


# --- Against transformers (fixtures), weights moved by our converter ---------------------------

@pytest.mark.parametrize("variant", ["absolute", "relative_key", "relative_key_query"])
def test_matches_transformers_with_attentions_and_head_mask(variant, tmp_path):
    hf_dir = os.path.join(FIXTURES, variant)
    ref = dict(np.load(os.path.join(hf_dir, "reference.npz")))
    conversion.convert_hf_to_tf(hf_dir, str(tmp_path))
    config = modeling.BertConfig.from_json_file(str(tmp_path / "bert_config.json"))
    hf_config = json.load(open(os.path.join(hf_dir, "config.json")))
    assert config.position_embedding_type == variant
    assert config.layer_norm_eps == hf_config["layer_norm_eps"]

    runs = {"": None, "masked_": ref["head_mask"], "masked1d_": ref["head_mask"][0]}
    fetches = {}
    with tf.Graph().as_default():
        inputs = [tf.constant(ref[k]) for k in ("input_ids", "input_mask", "token_type_ids")]
        for prefix, head_mask in runs.items():
            # One set of variables, three models: the later ones reuse "bert/*".
            with tf1.variable_scope(tf1.get_variable_scope(), reuse=bool(prefix)):
                model = modeling.BertModel(config, False, *inputs, scope="bert",
                                           head_mask=head_mask)
            fetches[prefix] = (model.get_all_encoder_layers(), model.get_pooled_output(),
                               model.get_all_attention_probs())
        _, not_initialized = modeling.init_from_checkpoint(str(tmp_path / "bert_model.ckpt"),
                                                           log=False)
        assert not_initialized == []
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            results = sess.run(fetches)

    for prefix, (layers, pooled, probs) in results.items():
        assert len(probs) == 2 and probs[0].shape == (2, 4, 9, 9)  # [B, N, F, T]
        assert _max_diff(layers, ref[prefix + "hidden_states"]) <= TOLERANCE, prefix
        assert _max_diff([pooled], [ref[prefix + "pooler_output"]]) <= TOLERANCE, prefix
        assert _max_diff(probs, ref[prefix + "attentions"]) <= TOLERANCE, prefix
    # The head mask really removes heads (and the reference is not trivially unchanged).
    for layer, (probs, layer_mask) in enumerate(zip(results["masked_"][2], ref["head_mask"],
                                                    strict=True)):
        assert (probs.max(axis=(0, 2, 3)) == 0).tolist() == (layer_mask == 0).tolist(), layer
    assert np.abs(ref["masked_hidden_states"] - ref["hidden_states"]).max() > 0.05


def test_relative_fixtures_differ_from_absolute():
    """The relative terms move the outputs well beyond the tolerance (a meaningful test)."""
    refs = {v: np.load(os.path.join(FIXTURES, v, "reference.npz"))["attentions"]
            for v in ("absolute", "relative_key", "relative_key_query")}
    assert np.abs(refs["relative_key"] - refs["relative_key_query"]).max() > 0.05
    assert np.abs(refs["absolute"] - refs["relative_key"]).max() > 0.05


# --- Against the float64 numpy reference -------------------------------------------------------

@pytest.mark.parametrize("variant", [
    dict(layer_norm_type="pre"),
    dict(layer_norm_type="pre", position_embedding_type="relative_key_query", hidden_act="swish",
         layer_norm_eps=1e-3),
    dict(position_embedding_type="relative_key", hidden_act="relu"),
    dict(position_embedding_type="relative_key_query", hidden_act="silu", layer_norm_eps=0.5),
    dict(hidden_act="gelu_new", layer_norm_type="pre", head_mask=HEAD_MASK),
    dict(position_embedding_type="relative_key", head_mask=HEAD_MASK[0]),
], ids=["pre", "pre-relkq-swish-eps", "relk-relu", "relkq-silu-eps0.5", "pre-headmask2d",
        "relk-headmask1d"])
def test_bert_model_variants_match_float64_numpy(variant):
    variant = dict(variant)
    head_mask = variant.pop("head_mask", None)
    config = modeling.BertConfig(**TINY, **variant)
    ids, mask, segs = _inputs()
    weights, layers, pooled, probs = _run_bert(config, ids, mask, segs, head_mask=head_mask)
    ref_layers, ref_pooled, ref_probs = numpy_bert.bert_forward(
        weights, ids, mask, segs, num_heads=4, return_attention_probs=True,
        head_mask=head_mask, **variant)
    assert _max_diff(layers, ref_layers) <= TOLERANCE
    assert _max_diff([pooled], [ref_pooled]) <= TOLERANCE
    assert _max_diff(probs, ref_probs) <= TOLERANCE
    if variant.get("layer_norm_eps", 1e-12) > 0.1:
        # The epsilon is really used: the default one gives other outputs.
        default_eps = dict(variant, layer_norm_eps=1e-12)
        other, _ = numpy_bert.bert_forward(weights, ids, mask, segs, num_heads=4, **default_eps)
        assert _max_diff(layers, other) > 100 * TOLERANCE


def test_variant_variable_names_and_shapes():
    ids, mask, segs = _inputs()
    base, _, _, _ = _run_bert(modeling.BertConfig(**TINY), ids, mask, segs)
    pre, _, _, _ = _run_bert(modeling.BertConfig(**TINY, layer_norm_type="pre"), ids, mask, segs)
    assert {k: v.shape for k, v in pre.items()} == {
        **{k: v.shape for k, v in base.items()},
        "bert/encoder/LayerNorm/gamma": (32,), "bert/encoder/LayerNorm/beta": (32,)}

    rel, _, _, _ = _run_bert(modeling.BertConfig(**TINY, position_embedding_type="relative_key"),
                             ids, mask, segs)
    expected = {k: v.shape for k, v in base.items() if "position_embeddings" not in k}
    for i in range(2):
        # [2 * max_position_embeddings - 1, size_per_head]
        expected[f"bert/encoder/layer_{i}/attention/self/distance_embedding"] = (23, 8)
    assert {k: v.shape for k, v in rel.items()} == expected


def test_attention_probs_are_the_softmax_the_encoder_builds_anyway():
    """Default path: returning the probabilities adds no op to the graph."""
    ids, mask, segs = _inputs()
    with tf.Graph().as_default():
        model = modeling.BertModel(modeling.BertConfig(**TINY), False, tf.constant(ids),
                                   tf.constant(mask), tf.constant(segs))
        probs = model.get_all_attention_probs()
        assert [p.op.type for p in probs] == ["Softmax", "Softmax"]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            values = sess.run(probs)
    for value in values:
        assert value.shape == (3, 4, 9, 9)
        np.testing.assert_allclose(value.sum(-1), 1.0, atol=1e-5)
        assert np.all(value[1, :, :, 5:] == 0)  # Padded keys of example 1.


def test_cross_attention_matches_numpy_in_user_graph():
    batch, seq, enc_seq, hidden, enc_hidden = 2, 6, 5, 16, 24
    rng = np.random.RandomState(5)
    x = rng.randn(batch, seq, hidden).astype(np.float32)
    enc = rng.randn(batch, enc_seq, enc_hidden).astype(np.float32)
    causal = np.tril(np.ones((seq, seq), np.float32))[None].repeat(batch, 0)  # [B, S, S]
    enc_mask = np.ones((batch, seq, enc_seq), np.float32)
    enc_mask[1, :, 3:] = 0  # Padded encoder positions of example 1.
    kwargs = dict(hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=20, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0, do_return_all_layers=True)
    for layer_norm_type in ("post", "pre"):
        with tf.Graph().as_default():
            inp = tf1.placeholder(tf.float32, [None, seq, hidden])
            enc_inp = tf1.placeholder(tf.float32, [None, enc_seq, enc_hidden])
            with tf1.variable_scope("decoder"):
                out3d = modeling.transformer_model(
                    inp, tf.constant(causal),
                    variant=modeling.LayerVariant(layer_norm_type=layer_norm_type),
                    computation=modeling.Computation(
                        head_mask=HEAD_MASK, encoder_output=enc_inp,
                        encoder_attention_mask=tf.constant(enc_mask)), **kwargs)
            with tf1.variable_scope("decoder", reuse=True):
                out2d = modeling.transformer_model(
                    tf.reshape(inp, [-1, hidden]), tf.constant(causal),
                    variant=modeling.LayerVariant(layer_norm_type=layer_norm_type),
                    computation=modeling.Computation(
                        head_mask=HEAD_MASK, encoder_output=tf.reshape(enc_inp, [-1, enc_hidden]),
                        encoder_attention_mask=tf.constant(enc_mask)), **kwargs)
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                weights = _randomize(sess)
                a, b = sess.run([out3d, out2d], {inp: x, enc_inp: enc})
        shapes = {k: v.shape for k, v in weights.items()}
        p = "decoder/layer_1/crossattention/"
        assert shapes[p + "self/query/kernel"] == (hidden, hidden)
        assert shapes[p + "self/key/kernel"] == shapes[p + "self/value/kernel"] == (enc_hidden,
                                                                                    hidden)
        assert shapes[p + "output/dense/kernel"] == (hidden, hidden)
        assert shapes[p + "output/LayerNorm/gamma"] == (hidden,)
        assert len(shapes) == 2 * 26 + (2 if layer_norm_type == "pre" else 0)

        ref, _ = numpy_bert.encoder_forward(
            weights, x, (1.0 - causal[:, None]) * -10000.0, 4, prefix="decoder/",
            layer_norm_type=layer_norm_type, head_mask=HEAD_MASK, encoder_output=enc,
            encoder_mask_add=(1.0 - enc_mask[:, None]) * -10000.0)
        assert _max_diff(a, ref) <= TOLERANCE, layer_norm_type
        np.testing.assert_allclose(b[-1], a[-1].reshape(-1, hidden), atol=1e-6)
        # Causal: the first position does not see the later ones.
        no_cross, _ = numpy_bert.encoder_forward(
            weights, x, (1.0 - causal[:, None]) * -10000.0, 4, prefix="decoder/",
            layer_norm_type=layer_norm_type, head_mask=HEAD_MASK, encoder_output=enc * 0.0)
        assert _max_diff(a, no_cross) > 0.05  # The encoder output matters.


# --- Config keys, activations, errors ----------------------------------------------------------

def test_config_keys_defaults_and_round_trip(tmp_path):
    config = modeling.BertConfig(vocab_size=10)
    assert (config.position_embedding_type, config.layer_norm_type, config.layer_norm_eps) == (
        "absolute", "post", 1e-12)
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps({**TINY, "position_embedding_type": "relative_key_query",
                                "layer_norm_type": "pre", "layer_norm_eps": 1e-6,
                                "hidden_act": "swish"}))
    config = modeling.BertConfig.from_json_file(str(path))
    again = modeling.BertConfig.from_dict(json.loads(config.to_json_string()))
    assert (again.position_embedding_type, again.layer_norm_type, again.layer_norm_eps,
            again.hidden_act) == ("relative_key_query", "pre", 1e-6, "swish")


@pytest.mark.parametrize("key, value, pattern", [
    ("position_embedding_type", "rotary",
     r"unknown position_embedding_type 'rotary'; use one of absolute, relative_key, "
     r"relative_key_query"),
    ("layer_norm_type", "sandwich", r"unknown layer_norm_type 'sandwich'; use one of post, pre"),
    ("layer_norm_eps", -1.0, r"'layer_norm_eps' must be a small positive number"),
    ("layer_norm_eps", "1e-12", r"'layer_norm_eps' must be a small positive number"),
    ("hidden_act", "mish", r"unknown hidden_act 'mish'; use one of .*silu, swish"),
])
def test_bad_variant_values_name_the_file(tmp_path, key, value, pattern):
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps({**TINY, key: value}))
    with pytest.raises(BertTfError, match=pattern) as info:
        modeling.BertConfig.from_json_file(str(path))
    assert str(path) in str(info.value)


def test_silu_and_swish_activations():
    xs = np.linspace(-6, 6, 25)
    with tf.Graph().as_default(), tf1.Session() as sess:
        for name in ("silu", "swish"):
            got = sess.run(modeling.get_activation(name)(tf.constant(xs, tf.float32)))
            np.testing.assert_allclose(got, xs / (1 + np.exp(-xs)), atol=1e-6)


def test_bad_head_mask_and_long_relative_sequence_are_clear_errors():
    ids, mask, segs = _inputs()
    config = modeling.BertConfig(**TINY)
    for head_mask in (np.ones([3, 4]), np.ones([5]), np.ones([2, 4, 1])):
        with tf.Graph().as_default():
            with pytest.raises(ValueError, match=r"head_mask must have shape \[num_hidden_layers, "
                                                 r"num_attention_heads\] = \[2, 4\] or \[4\]"):
                modeling.BertModel(config, False, tf.constant(ids), head_mask=head_mask)
    relative = modeling.BertConfig(**TINY, position_embedding_type="relative_key")
    with tf.Graph().as_default():
        with pytest.raises(BertTfError, match=r"sequence length 13 .*max_position_embeddings "
                                              r"\(12\)"):
            modeling.BertModel(relative, False, tf.zeros([1, 13], tf.int32))
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="Unknown layer_norm_type 'sandwich'"):
            modeling.transformer_model(tf.zeros([1, 3, 8]), hidden_size=8, num_attention_heads=2,
                                       variant=modeling.LayerVariant(layer_norm_type="sandwich"))


# --- Converter: the variant weights and config keys both ways ----------------------------------

def test_converter_round_trips_distance_embeddings_and_config_keys(tmp_path):
    hf_dir = os.path.join(FIXTURES, "relative_key_query")
    conversion.convert_hf_to_tf(hf_dir, str(tmp_path / "tf"))
    conversion.convert_tf_to_hf(str(tmp_path / "tf" / "bert_config.json"),
                                str(tmp_path / "tf" / "bert_model.ckpt"), str(tmp_path / "hf"))
    original = safetensors.numpy.load_file(os.path.join(hf_dir, "model.safetensors"))
    back = safetensors.numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    back = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in back.items()}
    original.pop("embeddings.position_ids", None)
    assert set(back) == set(original)
    for key, value in original.items():
        assert np.array_equal(back[key], value), key
    assert back["encoder.layer.1.attention.self.distance_embedding.weight"].shape == (31, 4)
    hf_config = json.load(open(tmp_path / "hf" / "config.json"))
    assert hf_config["position_embedding_type"] == "relative_key_query"
    assert hf_config["layer_norm_eps"] == 1e-3


def test_converter_round_trips_pre_ln_final_layer_norm(tmp_path):
    config = modeling.BertConfig(**TINY, layer_norm_type="pre",
                                 position_embedding_type="relative_key")
    ids, mask, segs = _inputs()
    with tf.Graph().as_default():
        modeling.BertModel(config, False, tf.constant(ids), tf.constant(mask), tf.constant(segs))
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            weights = _randomize(sess)
            tf1.train.Saver().save(sess, str(tmp_path / "tf" / "bert_model.ckpt"),
                                   write_meta_graph=False)
    (tmp_path / "tf" / "bert_config.json").write_text(config.to_json_string())
    conversion.convert_tf_to_hf(str(tmp_path / "tf" / "bert_config.json"),
                                str(tmp_path / "tf" / "bert_model.ckpt"), str(tmp_path / "hf"))
    hf = safetensors.numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    np.testing.assert_array_equal(hf["bert.encoder.LayerNorm.weight"],
                                  weights["bert/encoder/LayerNorm/gamma"])
    conversion.convert_hf_to_tf(str(tmp_path / "hf"), str(tmp_path / "tf2"))
    again = modeling.BertConfig.from_json_file(str(tmp_path / "tf2" / "bert_config.json"))
    assert (again.layer_norm_type, again.position_embedding_type) == ("pre", "relative_key")
    back = checkpoints.read_tf_checkpoint(str(tmp_path / "tf2" / "bert_model.ckpt"))
    assert set(back) == set(weights)
    for name, value in weights.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)


# --- extract_features.py --output_attentions ---------------------------------------------------

@pytest.mark.slow  # Runs the script in a subprocess (imports TensorFlow again): ~20 s.
def test_extract_features_writes_attentions(tmp_path):
    """The script's attentions equal the numpy reference's, per example and unpadded, here
    for a relative-position pre-LN model (so the config keys reach the script too)."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "quick", "fox", "dog", "a", "b"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    config = modeling.BertConfig(**dict(TINY, vocab_size=len(vocab)), layer_norm_type="pre",
                                 position_embedding_type="relative_key_query")
    (tmp_path / "bert_config.json").write_text(config.to_json_string())
    with tf.Graph().as_default():
        modeling.BertModel(config, False, tf1.placeholder(tf.int32, [None, None]))
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            weights = _randomize(sess)
            tf1.train.Saver().save(sess, str(tmp_path / "bert_model.ckpt"))
    (tmp_path / "input.txt").write_text("the quick fox\na b ||| the dog dog\n")
    flags = [f"--input_file={tmp_path / 'input.txt'}", f"--vocab_file={tmp_path / 'vocab.txt'}",
             f"--bert_config_file={tmp_path / 'bert_config.json'}",
             f"--init_checkpoint={tmp_path / 'bert_model.ckpt'}", "--max_seq_length=10",
             "--layers=-1,0"]
    script = os.path.join(REPO, "scripts", "extract_features.py")
    out = tmp_path / "out.jsonl"
    result = run_python_script(script, [*flags, f"--output_file={out}", "--output_attentions"],
                               env=child_env())
    assert result.returncode == 0, result.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]

    token_ids = [[2, 4, 5, 6, 3], [2, 8, 9, 3, 4, 7, 7, 3]]  # [CLS] ... [SEP] (... [SEP])
    segments = [[0] * 5, [0] * 4 + [1] * 4]
    for record, ids, segs in zip(records, token_ids, segments, strict=True):
        assert [f["token"] for f in record["features"]] == [vocab[i] for i in ids]
        assert [a["index"] for a in record["attentions"]] == [-1, 0]
        _, _, ref_probs = numpy_bert.bert_forward(
            weights, np.array([ids]), np.ones([1, len(ids)], np.int32), np.array([segs]),
            num_heads=4, return_attention_probs=True, layer_norm_type="pre",
            position_embedding_type="relative_key_query")
        for entry, ref in zip(record["attentions"], (ref_probs[-1], ref_probs[0]), strict=True):
            values = np.array(entry["values"])
            assert values.shape == (4, len(ids), len(ids))  # [heads, tokens, tokens]
            assert np.abs(values - ref[0]).max() <= TOLERANCE
    # Without the flag the output is the original format, with no "attentions" key.
    plain = tmp_path / "plain.jsonl"
    extract_features.run_extract_features(
        str(tmp_path / "input.txt"), str(plain), str(tmp_path / "vocab.txt"),
        str(tmp_path / "bert_config.json"), str(tmp_path / "bert_model.ckpt"), layers="-1",
        max_seq_length=10)
    assert all("attentions" not in json.loads(line) for line in plain.read_text().splitlines())
