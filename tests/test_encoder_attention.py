"""`bert_tf.encoder.attention` on its own: the masks against numpy, and multi-head attention on
2-D inputs against a numpy softmax attention (absolute and relative_key positions)."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.encoder import attention
from bert_tf.encoder.settings import AttentionConfig

tf1 = tf.compat.v1
B, F, T, N, D = 2, 3, 4, 2, 3
INPUT_MASK = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.int32)


def _run(fetches, feed_dict=None):
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        return sess.run(fetches, feed_dict)


def test_mask_from_input_mask_repeats_the_key_mask_for_every_query():
    with tf.Graph().as_default():
        mask = _run(attention.create_attention_mask_from_input_mask(
            tf.zeros([B, F, 5]), tf.constant(INPUT_MASK)))
    assert mask.dtype == np.float32
    np.testing.assert_array_equal(mask, np.repeat(INPUT_MASK[:, None, :], F, axis=1))


def test_mask_of_packed_positions_keeps_each_example_to_itself():
    position_ids = np.array([[0, 1, 2, 0, 1, 0], [0, 1, 0, 1, 2, 3]], np.int32)
    input_mask = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], np.int32)
    with tf.Graph().as_default():
        mask = _run(attention.create_attention_mask_from_packed_positions(
            tf.constant(position_ids), tf.constant(input_mask)))
    # Each token's example number, counted by hand; 0 on padding.
    examples = np.array([[1, 1, 1, 2, 2, 0], [1, 1, 2, 2, 2, 2]])
    expected = (examples[:, :, None] == examples[:, None, :]) & (examples[:, None, :] > 0)
    np.testing.assert_array_equal(mask, expected.astype(np.float32))


def test_padding_free_index_lists_the_real_tokens_of_the_flat_batch():
    with tf.Graph().as_default():
        index = _run(attention.padding_free_index(tf.constant(INPUT_MASK)))
    assert index.dtype == np.int32
    np.testing.assert_array_equal(index[:, 0], np.flatnonzero(INPUT_MASK.reshape(-1)))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _attend(position_embedding_type, head_mask=None):
    rng = np.random.RandomState(0)
    from_2d = rng.normal(size=(B * F, 5)).astype(np.float32)
    to_2d = rng.normal(size=(B * T, 6)).astype(np.float32)
    mask = np.repeat(INPUT_MASK[:, None, :], F, axis=1)
    config = AttentionConfig(N, D, 0.0, 0.5, position_embedding_type, 8)
    with tf.Graph().as_default():
        context, probs = attention.attention(tf.constant(from_2d), tf.constant(to_2d),
                                             tf.constant(mask), config, B, F, T,
                                             head_mask=head_mask)
        variables = {v.name: v for v in tf1.global_variables()}
        values = _run({"context": context, "probs": probs, **variables})
    w = {name.split(":")[0]: value for name, value in values.items()}

    def heads(x, name, length):
        y = x @ w[f"{name}/kernel"] + w[f"{name}/bias"]
        return y.reshape(B, length, N, D).transpose(0, 2, 1, 3)

    q, k, v = heads(from_2d, "query", F), heads(to_2d, "key", T), heads(to_2d, "value", T)
    scores = q @ k.transpose(0, 1, 3, 2)
    if position_embedding_type == "relative_key":
        table = w["distance_embedding"]
        distance = np.arange(F)[:, None] - np.arange(T)[None, :]
        scores += np.einsum("bnfd,ftd->bnft", q, table[distance + 8 - 1])
    scores = scores / np.sqrt(D) + (1.0 - mask[:, None]) * -10000.0
    probs = _softmax(scores)
    if head_mask is not None:
        probs = probs * np.asarray(head_mask)[None, :, None, None]
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(B * F, N * D)
    return values, probs, context, w


@pytest.mark.parametrize("position_embedding_type", ["absolute", "relative_key"])
def test_attention_matches_numpy_softmax_attention(position_embedding_type):
    values, probs, context, w = _attend(position_embedding_type)
    assert values["context"].shape == (B * F, N * D)
    assert values["probs"].shape == (B, N, F, T)
    np.testing.assert_allclose(values["probs"], probs, atol=1e-5)
    np.testing.assert_allclose(values["context"], context, atol=1e-5)
    assert np.all(values["probs"][0, :, :, 3] < 1e-4)  # Padding gets no attention.
    if position_embedding_type == "relative_key":
        assert w["distance_embedding"].shape == (2 * 8 - 1, D)
    else:
        assert "distance_embedding" not in w


def test_attention_head_mask_multiplies_each_heads_probabilities():
    values, probs, context, _ = _attend("absolute", head_mask=[1.0, 0.0])
    assert np.all(values["probs"][:, 1] == 0.0)
    np.testing.assert_allclose(values["context"], context, atol=1e-5)
    with pytest.raises(ValueError, match=r"head_mask must have shape \[num_attention_heads\]"):
        _attend("absolute", head_mask=[[1.0, 0.0]])
