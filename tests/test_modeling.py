"""Tests for bert_tf.modeling against a float64 numpy reference and the compatibility
contract (docs/compatibility.md)."""

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import numpy_bert
import pytest
import tensorflow as tf
from envs import ROOT, child_env
from finetune_helpers import tiny_config

from bert_tf import modeling
from bert_tf.errors import BertTfError

tf1 = tf.compat.v1

TINY = tiny_config(vocab_size=99, num_attention_heads=4, intermediate_size=37, type_vocab_size=3,
                   max_position_embeddings=40)


def _inputs(batch=3, seq=7, seed=0):
    rng = np.random.RandomState(seed)
    ids = rng.randint(0, TINY["vocab_size"], size=(batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    mask[1, 4:] = 0  # padded example
    mask[2, 6:] = 0
    segs = rng.randint(0, TINY["type_vocab_size"], size=(batch, seq)).astype(np.int32)
    return ids, mask, segs


def _run_model(config, ids, mask, segs, is_training=False, compute_dtype=tf.float32, seed=1):
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(seed)
        model = modeling.BertModel(config, is_training, tf.constant(ids), tf.constant(mask),
                                   tf.constant(segs), compute_dtype=compute_dtype)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            weights = {v.name[:-2]: sess.run(v) for v in tf1.global_variables()}
            layers, pooled = sess.run([model.get_all_encoder_layers(),
                                       model.get_pooled_output()])
    return weights, layers, pooled


def test_bert_model_matches_float64_numpy_reference():
    config = modeling.BertConfig(**{**TINY, "initializer_range": 0.2})
    ids, mask, segs = _inputs()
    weights, layers, pooled = _run_model(config, ids, mask, segs)
    ref_layers, ref_pooled = numpy_bert.bert_forward(weights, ids, mask, segs, num_heads=4)
    assert len(layers) == len(ref_layers) == 2
    for ours, ref in zip(layers, ref_layers, strict=True):
        np.testing.assert_allclose(ours, ref, atol=2e-5)
    np.testing.assert_allclose(pooled, ref_pooled, atol=2e-5)


def test_variable_names_and_shapes_follow_google_layout():
    config = modeling.BertConfig(**TINY)
    ids, mask, segs = _inputs()
    weights, _, _ = _run_model(config, ids, mask, segs)
    h, inter = 32, 37
    expected = {
        "bert/embeddings/word_embeddings": (99, h),
        "bert/embeddings/token_type_embeddings": (3, h),
        "bert/embeddings/position_embeddings": (40, h),
        "bert/embeddings/LayerNorm/gamma": (h,),
        "bert/embeddings/LayerNorm/beta": (h,),
        "bert/pooler/dense/kernel": (h, h),
        "bert/pooler/dense/bias": (h,),
    }
    for i in range(2):
        p = f"bert/encoder/layer_{i}/"
        for name in ("query", "key", "value"):
            expected[p + f"attention/self/{name}/kernel"] = (h, h)
            expected[p + f"attention/self/{name}/bias"] = (h,)
        expected[p + "attention/output/dense/kernel"] = (h, h)
        expected[p + "attention/output/dense/bias"] = (h,)
        expected[p + "intermediate/dense/kernel"] = (h, inter)
        expected[p + "intermediate/dense/bias"] = (inter,)
        expected[p + "output/dense/kernel"] = (inter, h)
        expected[p + "output/dense/bias"] = (h,)
        for ln in ("attention/output/LayerNorm", "output/LayerNorm"):
            expected[p + ln + "/gamma"] = (h,)
            expected[p + ln + "/beta"] = (h,)
    assert {k: v.shape for k, v in weights.items()} == expected


def test_dropout_only_when_training():
    config = modeling.BertConfig(**{**TINY, "hidden_dropout_prob": 0.3})
    ids, mask, segs = _inputs()
    graph = tf.Graph()
    with graph.as_default():
        for is_training, scope in ((False, "eval"), (True, "train")):
            model = modeling.BertModel(config, is_training, tf.constant(ids), tf.constant(mask),
                                       tf.constant(segs), scope=scope)
            out = model.get_sequence_output()
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                a, b = sess.run(out), sess.run(out)
            if is_training:
                assert np.abs(a - b).max() > 1e-3
            else:
                np.testing.assert_array_equal(a, b)


def _dropout_runs(build, runs, seed=7, feed=None):
    """Values of `build()` (a Tensor made in a fresh graph with graph seed `seed`) over
    `runs` session runs."""
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(seed)
        tensor = build()
        with tf1.Session() as sess:
            return [sess.run(tensor, feed) for _ in range(runs)]


def _dropout_scale(p):
    """modeling.dropout's 1 / (1 - p) for p rounded to the mask's 1/65536 resolution."""
    return np.float32(65536 / (65536 - round(p * 65536)))


def test_dropout_rate_scale_and_expectation():
    p = 0.1
    threshold = round(p * 65536)  # The mask's 1/65536 resolution: 6554.
    scale = _dropout_scale(p)
    (a, b) = _dropout_runs(lambda: modeling.dropout(tf.ones([1 << 20]), p), runs=2)
    n = a.size
    sigma = math.sqrt(p * (1 - p) / n)  # 2.9e-4
    for values in (a, b):
        dropped = np.mean(values == 0)
        assert abs(dropped - threshold / 65536) < 5 * sigma, dropped
        np.testing.assert_array_equal(np.unique(values), [0, scale])  # Kept: exactly 1/(1-p).
        assert abs(values.mean() - 1.0) < 5 * sigma * float(scale)  # Unbiased.
    # A new mask on every run, and not correlated with the last one.
    assert abs(np.mean((a == 0) & (b == 0)) - (threshold / 65536) ** 2) < 5 * sigma
    # The same graph seed gives the same sequence of masks in a new graph.
    (c, d) = _dropout_runs(lambda: modeling.dropout(tf.ones([1 << 20]), p), runs=2)
    np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(b, d)
    # Two dropouts of one tensor in one graph draw different masks.
    ((e, f),) = _dropout_runs(lambda: [modeling.dropout(tf.ones([1 << 20]), p)
                                       for _ in range(2)], runs=1)
    assert abs(np.mean((e == 0) & (f == 0)) - (threshold / 65536) ** 2) < 5 * sigma
    # Nothing to drop at 0 or None; a probability of 1 is an error, as in tf.nn.dropout.
    x = tf.ones([3])
    assert modeling.dropout(x, 0.0) is x and modeling.dropout(x, None) is x
    with pytest.raises(ValueError, match="dropout_prob"):
        modeling.dropout(x, 1.0)


def test_dropout_of_dynamic_odd_shapes_and_its_gradient():
    rng = np.random.RandomState(0)
    x_value = rng.uniform(1, 2, size=(3, 5, 7)).astype(np.float32)  # 105 values: odd.
    dy_value = rng.normal(size=x_value.shape).astype(np.float32)

    def build():
        x = tf1.placeholder(tf.float32, [None, None, 7])
        y = modeling.dropout(x, 0.3)
        assert y.shape.as_list() == [None, None, 7]
        return y, tf.gradients(y, x, grad_ys=tf.constant(dy_value))[0], x

    graph = tf.Graph()
    with graph.as_default():
        y, grad, x = build()
        scale = _dropout_scale(0.3)
        with tf1.Session() as sess:
            for _ in range(3):
                y_value, grad_value = sess.run([y, grad], {x: x_value})
                kept = y_value != 0
                np.testing.assert_allclose(y_value[kept], x_value[kept] * scale, rtol=1e-6)
                # The gradient is the same mask and scale applied to the incoming gradient.
                np.testing.assert_allclose(grad_value, np.where(kept, dy_value * scale, 0),
                                           rtol=1e-6)
                assert 0 < kept.sum() < kept.size


def test_attention_dropout_scales_the_context_like_the_probabilities():
    """Attention applies dropout's 1/(1-p) to the [B, N, F, D] context, not to the [B, N, F, T]
    probabilities: the context must equal the one computed from the scaled probabilities
    (same graph seed, so the same masks)."""
    rng = np.random.RandomState(1)
    x_value = rng.normal(size=(2, 6, 8)).astype(np.float32)

    def build(return_probs):
        x = tf.constant(x_value)
        with tf1.variable_scope("attention", initializer=tf1.random_normal_initializer(seed=2)):
            out = modeling.attention_layer(x, x, num_attention_heads=2, size_per_head=4,
                                           attention_probs_dropout_prob=0.4,
                                           do_return_attention_probs=return_probs)
        if not return_probs:
            return out
        context, probs = out
        graph = tf1.get_default_graph()
        value = graph.get_tensor_by_name("attention/value/BiasAdd:0")
        manual = tf.matmul(probs, tf.transpose(tf.reshape(value, [2, 6, 2, 4]), [0, 2, 1, 3]))
        return context, tf.reshape(tf.transpose(manual, [0, 2, 1, 3]), [2, 6, 8]), probs

    def values(return_probs):
        graph = tf.Graph()
        with graph.as_default():
            tf1.set_random_seed(5)
            tensors = build(return_probs)
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                return sess.run(tensors)

    context_with_probs, manual, probs = values(True)
    np.testing.assert_allclose(context_with_probs, manual, rtol=1e-5, atol=1e-6)
    scale = _dropout_scale(0.4)
    assert np.any(probs == 0) and np.all(probs.sum(-1) <= scale + 1e-5)
    np.testing.assert_allclose(values(False), context_with_probs, rtol=1e-5, atol=1e-6)


def test_bf16_compute_keeps_fp32_variables_and_tracks_fp32():
    config = modeling.BertConfig(**TINY)
    ids, mask, segs = _inputs()
    _, layers32, _ = _run_model(config, ids, mask, segs)
    weights, layers16, pooled16 = _run_model(config, ids, mask, segs, compute_dtype=tf.bfloat16)
    assert all(v.dtype == np.float32 for v in weights.values())
    assert layers16[-1].dtype == tf.bfloat16.as_numpy_dtype
    diff = np.abs(layers16[-1].astype(np.float32) - layers32[-1]).max()
    assert diff < 0.1, diff  # bf16 has 8 bits of mantissa; outputs are layer-normed (~unit scale)


def test_transformer_model_in_user_graph_2d_and_3d():
    batch, seq, hidden = 2, 5, 16
    x = np.random.RandomState(3).randn(batch, seq, hidden).astype(np.float32)
    input_mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32)
    graph = tf.Graph()
    with graph.as_default():
        inp = tf1.placeholder(tf.float32, [None, seq, hidden])
        mask = modeling.create_attention_mask_from_input_mask(inp, tf.constant(input_mask))
        with tf1.variable_scope("my_encoder"):
            out3d = modeling.transformer_model(inp, mask, hidden_size=hidden, num_hidden_layers=2,
                                               num_attention_heads=2, intermediate_size=32,
                                               hidden_dropout_prob=0.0,
                                               attention_probs_dropout_prob=0.0)
        with tf1.variable_scope("my_encoder", reuse=True):
            flat = tf.reshape(inp, [-1, hidden])
            out2d = modeling.transformer_model(flat, mask, hidden_size=hidden, num_hidden_layers=2,
                                               num_attention_heads=2, intermediate_size=32,
                                               hidden_dropout_prob=0.0,
                                               attention_probs_dropout_prob=0.0)
        names = [v.name for v in tf1.global_variables()]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            a, b = sess.run([out3d, out2d], {inp: x})
    assert a.shape == (batch, seq, hidden)
    assert b.shape == (batch * seq, hidden)
    np.testing.assert_allclose(a.reshape(-1, hidden), b, atol=1e-6)
    assert "my_encoder/layer_1/attention/self/query/kernel:0" in names
    assert len(names) == 2 * 16  # built once, reused for the 2-D call


def test_transformer_model_2d_without_mask_is_a_clear_error():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="needs attention_mask"):
            modeling.transformer_model(tf.zeros([10, 16]), hidden_size=16, num_attention_heads=2)


def test_attention_layer_2d_needs_sizes():
    with tf.Graph().as_default():
        x = tf.zeros([6, 8])
        with pytest.raises(ValueError, match="batch_size"):
            modeling.attention_layer(x, x, num_attention_heads=2, size_per_head=4)
        out = modeling.attention_layer(x, x, num_attention_heads=2, size_per_head=4,
                                       batch_size=2, from_seq_length=3, to_seq_length=3,
                                       do_return_2d_tensor=True)
        assert out.shape.as_list() == [6, 8]


def test_masked_keys_get_zero_attention():
    """Changing a padded token must not change any real token's output."""
    config = modeling.BertConfig(**TINY)
    ids, mask, segs = _inputs()
    ids2 = ids.copy()
    ids2[1, 5] = (ids2[1, 5] + 1) % TINY["vocab_size"]  # position 5 of example 1 is padding
    graph = tf.Graph()
    with graph.as_default():
        ph = tf1.placeholder(tf.int32, ids.shape)
        model = modeling.BertModel(config, False, ph, tf.constant(mask), tf.constant(segs))
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            a = sess.run(model.get_sequence_output(), {ph: ids})
            b = sess.run(model.get_sequence_output(), {ph: ids2})
    np.testing.assert_allclose(a[1, :4], b[1, :4], atol=1e-6)


def test_activations():
    xs = np.linspace(-4, 4, 17).astype(np.float32)
    with tf.Graph().as_default(), tf1.Session() as sess:
        exact = sess.run(modeling.gelu(tf.constant(xs)))
        approx = sess.run(modeling.get_activation("gelu_new")(tf.constant(xs)))
        assert modeling.get_activation("gelu_tanh") is modeling.get_activation("gelu_new")
    ref = np.array([0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in xs.astype(np.float64)])
    np.testing.assert_allclose(exact, ref, atol=1e-6)
    assert 1e-5 < np.abs(approx - ref).max() < 1e-2  # the tanh form is close but not equal
    assert modeling.get_activation("linear") is None
    assert modeling.get_activation("relu") is tf.nn.relu
    with pytest.raises(ValueError, match="Unsupported activation"):
        modeling.get_activation("swishy")


def test_assert_rank_message_names_tensor_and_rank():
    with tf.Graph().as_default():
        pattern = r"tensor `input_ids`.*actual rank `3`.*expected rank `2`"
        with pytest.raises(ValueError, match=pattern):
            modeling.BertModel(modeling.BertConfig(**TINY), False, tf.zeros([2, 3, 4], tf.int32))


def test_sequence_longer_than_max_positions_is_a_clear_error():
    config = modeling.BertConfig(**TINY)
    with tf.Graph().as_default():
        with pytest.raises(BertTfError, match=r"sequence length 41 .*max_position_embeddings \(40\)"
                                              r".*--max_seq_length"):
            modeling.BertModel(config, False, tf.zeros([1, 41], tf.int32))


def test_config_json_round_trip_keeps_unknown_keys(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps({**TINY, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
                                "some_future_key": [1, 2]}))
    config = modeling.BertConfig.from_json_file(str(path))
    assert config.hidden_size == 32 and config.some_future_key == [1, 2]
    again = modeling.BertConfig.from_dict(json.loads(config.to_json_string()))
    assert again.to_dict() == config.to_dict()


@pytest.mark.parametrize("content, pattern", [
    (None, r"does not exist"),
    ("{not json", r"not valid JSON"),
    ("[1, 2]", r"must hold a JSON object"),
    (json.dumps({**TINY, "num_attention_heads": 5}), r"hidden_size \(32\) is not a multiple of "
                                                     r"num_attention_heads \(5\)"),
    (json.dumps({**TINY, "hidden_size": -32}), r"'hidden_size' must be a positive integer"),
    (json.dumps({k: v for k, v in TINY.items() if k != "vocab_size"}),
     r"'vocab_size' must be a positive integer, got None"),
    (json.dumps({**TINY, "hidden_act": "swishy"}), r"unknown hidden_act 'swishy'"),
])
def test_bad_config_files_name_the_file(tmp_path, content, pattern):
    path = tmp_path / "bert_config.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(BertTfError, match=pattern) as info:
        modeling.BertConfig.from_json_file(str(path))
    assert str(path) in str(info.value)


def test_shipped_configs_are_valid_and_sized_as_documented():
    sizes = {"tiny": (2, 128, 2, 512), "mini": (4, 256, 4, 1024), "small": (4, 512, 8, 2048),
             "medium": (8, 512, 8, 2048), "base": (12, 768, 12, 3072),
             "large": (24, 1024, 16, 4096)}
    for name, (layers, hidden, heads, inter) in sizes.items():
        path = os.path.join(ROOT, "configs", f"bert_{name}.json")  # Not cwd-relative.
        config = modeling.BertConfig.from_json_file(path)
        got = (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
               config.intermediate_size)
        assert got == (layers, hidden, heads, inter), name
        assert (config.vocab_size, config.type_vocab_size, config.max_position_embeddings,
                config.hidden_act) == (30522, 2, 512, "gelu")


def test_help_shows_shapes():
    out = subprocess.run([sys.executable, "-c",
                          "from bert_tf import modeling; help(modeling.transformer_model)"],
                         capture_output=True, text=True,
                         env=child_env(PAGER="cat", TERM="dumb", PATH="/usr/bin:/bin"),
                         check=True).stdout
    assert re.search(r"\[B, S, H\]", out) and re.search(r"\[B\*S, H\]", out)


def test_embedding_lookup_gradient_and_no_resource_gather():
    """The word-embedding gradient is the numpy reference's (each used row sums the output
    gradients of its positions), and a BertModel graph reads its tables with plain Gathers:
    a ResourceGather would make TF copy the whole [V, H] table on every later read and update
    (the weight decay, Adam), several passes over it per training step."""
    ids, mask, segs = _inputs()
    weights = np.random.RandomState(3).randn(*ids.shape, 32).astype(np.float32)
    with tf.Graph().as_default():
        output, table = modeling.embedding_lookup(tf.constant(ids), TINY["vocab_size"], 32)
        grad = tf.gradients(tf.reduce_sum(output * weights), [table])[0]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            looked_up, table_value, grad_value = sess.run(
                [output, table, tf.convert_to_tensor(grad)])
    np.testing.assert_array_equal(looked_up, table_value[ids])
    expected = np.zeros((TINY["vocab_size"], 32), np.float64)
    np.add.at(expected, ids.ravel(), weights.reshape(-1, 32))
    np.testing.assert_allclose(grad_value, expected, rtol=1e-6, atol=1e-6)
    with tf.Graph().as_default() as graph:
        modeling.BertModel(modeling.BertConfig(**TINY), True, tf.constant(ids),
                           tf.constant(mask), tf.constant(segs))
    assert "ResourceGather" not in {op.type for op in graph.get_operations()}
