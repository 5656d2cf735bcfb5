"""`bert_tf.encoder.transformer` on its own: `transformer_layers` against the float64 numpy
encoder for 3-D and 2-D inputs, the last layer at a few positions, the head masks per layer,
`QueryRows`, and the refusals of settings the layers cannot compute."""

import numpy as np
import numpy_bert
import pytest
import tensorflow as tf

from bert_tf.encoder import ops, transformer
from bert_tf.encoder.settings import Computation, LayerConfig, LayerVariant

tf1 = tf.compat.v1
B, S, H, N, L = 2, 4, 8, 2, 2
X = np.random.RandomState(0).normal(size=(B, S, H)).astype(np.float32)
INPUT_MASK = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], np.float32)
MASK = np.repeat(INPUT_MASK[:, None, :], S, axis=1)


def _layer(position_embedding_type="absolute"):
    return LayerConfig(H, N, 12, ops.get_activation("gelu"), 0.0, 0.0, 0.5,
                       LayerVariant(position_embedding_type=position_embedding_type,
                                    max_position_embeddings=8))


def _build(computation=None, two_d=False, return_all=True):
    """(outputs, probs, variables) of the layers under bert/encoder, as numpy."""
    with tf.Graph().as_default():
        inputs = tf.constant(X.reshape(B * S, H) if two_d else X)
        with tf1.variable_scope("bert/encoder"):
            outputs, probs = transformer.transformer_layers(
                inputs, tf.constant(MASK), _layer(), L, computation or Computation(),
                return_all=return_all)
        variables = {v.name.split(":")[0]: v for v in tf1.global_variables()}
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            return sess.run([outputs, probs, variables])


def _reference(w, head_mask=None):
    return numpy_bert.encoder_forward(w, X, (1.0 - MASK[:, None]) * -10000.0, N,
                                      head_mask=head_mask)


def test_transformer_layers_match_the_numpy_encoder_for_3d_input():
    outputs, probs, w = _build()
    want_outputs, want_probs = _reference(w)
    assert len(outputs) == L and len(probs) == L
    for got, want in zip(outputs + probs, want_outputs + want_probs, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-4)
    assert outputs[0].shape == (B, S, H) and probs[0].shape == (B, N, S, S)


def test_a_2d_input_gives_2d_outputs_and_return_all_false_the_last_only():
    outputs, _, w = _build(two_d=True)
    want = _reference(w)[0]
    assert [o.shape for o in outputs] == [(B * S, H)] * L
    np.testing.assert_allclose(outputs[-1], want[-1].reshape(B * S, H), atol=1e-4)
    last, _, w = _build(return_all=False)  # New random weights: its own reference.
    assert last.shape == (B, S, H)
    np.testing.assert_allclose(last, _reference(w)[0][-1], atol=1e-4)


def test_output_positions_compute_the_last_layer_at_those_rows():
    positions = np.array([[0, 2], [3, 1]], np.int32)
    with tf.Graph().as_default():
        computation = Computation(output_positions=tf.constant(positions))
        with tf1.variable_scope("bert/encoder"):
            outputs, probs = transformer.transformer_layers(
                tf.constant(X), tf.constant(MASK), _layer(), L, computation)
        w = {v.name.split(":")[0]: v for v in tf1.global_variables()}
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            outputs, probs, w = sess.run([outputs, probs, w])
    want_outputs, want_probs = _reference(w)
    assert outputs[-1].shape == (B, 2, H) and probs[-1].shape == (B, N, 2, S)
    rows = np.arange(B)[:, None]
    np.testing.assert_allclose(outputs[-1], want_outputs[-1][rows, positions], atol=1e-4)
    np.testing.assert_allclose(outputs[0], want_outputs[0], atol=1e-4)


def test_head_mask_per_layer_shapes():
    with tf.Graph().as_default():
        assert transformer.head_mask_per_layer(None, 3, N) == [None] * 3
        shared = transformer.head_mask_per_layer(tf.constant([1.0, 0.0]), 3, N)
        per_layer = transformer.head_mask_per_layer(np.eye(3, N), 3, N)
        assert len(shared) == 3 and all(m.shape.as_list() == [N] for m in shared)
        assert [m.shape.as_list() for m in per_layer] == [[N]] * 3
        with tf1.Session() as sess:
            np.testing.assert_array_equal(sess.run(per_layer), np.eye(3, N))


@pytest.mark.parametrize("mask", [np.ones([3]), np.ones([2, N]), np.ones([3, N, 1])])
def test_head_mask_per_layer_refuses_other_shapes(mask):
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match=r"head_mask must have shape \[num_hidden_layers, "
                                             rf"num_attention_heads\] = \[3, {N}\] or \[{N}\]"):
            transformer.head_mask_per_layer(mask, 3, N)


def test_a_head_mask_through_the_layers_matches_numpy():
    head_mask = np.array([[1.0, 0.0], [0.5, 1.0]], np.float32)
    outputs, probs, w = _build(Computation(head_mask=head_mask))
    want_outputs, _ = _reference(w, head_mask=head_mask)
    np.testing.assert_allclose(outputs[-1], want_outputs[-1], atol=1e-4)
    assert np.all(probs[0][:, 1] == 0.0)


def test_query_rows_flatten_positions_into_the_batch_rows():
    with tf.Graph().as_default():
        rows = transformer.QueryRows.of(tf.constant([[0, 2], [3, 1]]), tf.constant(MASK), B, S)
        with tf1.Session() as sess:
            flat, mask = sess.run([rows.flat, rows.mask])
    assert rows.count == 2
    np.testing.assert_array_equal(flat, [0, 2, 7, 5])
    np.testing.assert_array_equal(mask, MASK[np.arange(B)[:, None], [[0, 2], [3, 1]]])


def test_refusals_name_what_cannot_be_computed():
    with tf.Graph().as_default():
        x2d = tf.constant(X.reshape(B * S, H))
        with pytest.raises(ValueError, match="2-D input_tensor .* needs attention_mask"):
            transformer.transformer_layers(x2d, None, _layer(), L, Computation())
        with pytest.raises(ValueError, match=r"width of the input tensor \(8\) != hidden size "
                                             r"\(16\)"):
            transformer.transformer_layers(
                tf.zeros([B, S, 8]), None,
                LayerConfig(16, N, 12, None, 0.0, 0.0, 0.5), L, Computation())
        encoder = tf.zeros([B, 3, H])
        with pytest.raises(ValueError, match="token_index .* self-attention only"):
            transformer.transformer_layers(
                tf.constant(X), None, _layer(), L,
                Computation(token_index=tf.zeros([3, 1], tf.int32), encoder_output=encoder))
        with pytest.raises(ValueError, match="output_positions works with self-attention and "
                                             "absolute position embeddings only"):
            transformer.transformer_layers(
                tf.constant(X), None, _layer("relative_key"), L,
                Computation(output_positions=tf.zeros([B, 1], tf.int32)))
        with pytest.raises(ValueError, match="2-D encoder_output .* needs "
                                             "encoder_attention_mask"):
            transformer.transformer_layers(
                tf.constant(X), None, _layer(), L,
                Computation(encoder_output=tf.zeros([B * 3, H])))
