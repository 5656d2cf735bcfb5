"""`bert_tf.encoder.recompute.recompute_layer` on its own: the gradients of a recomputed layer
with variables and keyed dropout equal the plain graph's, and its extras are the forward's."""

import numpy as np
import tensorflow as tf

from bert_tf.encoder import dropout, ops, recompute

tf1 = tf.compat.v1


def _layer(x, key):
    with dropout.dropout_key_scope(key):
        hidden = ops.dense_layer(x, 6, activation=tf.tanh, name="inner")
        hidden = dropout.dropout(hidden, 0.4)
        out = ops.layer_norm(ops.dense_layer(hidden, 4, name="outer") + x)
    return out, {"hidden": hidden}


def _gradients(recomputed):
    x_value = np.random.RandomState(0).normal(size=(5, 4)).astype(np.float32)
    with tf.Graph().as_default():
        tf1.set_random_seed(1)
        x = tf.constant(x_value)
        key = tf.constant([5, 9], tf.int32)
        with tf1.variable_scope("layer", initializer=tf1.random_normal_initializer(seed=3)):
            if recomputed:
                out, extras = recompute.recompute_layer(_layer, [x, key])
            else:
                out, extras = _layer(x, key)
        weights = tf.constant(np.arange(20, dtype=np.float32).reshape(5, 4))
        loss = tf.reduce_sum(out * weights)
        variables = sorted(tf1.trainable_variables(), key=lambda v: v.name)
        grads = tf.gradients(loss, [x] + variables)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            values = sess.run({"out": out, "grads": grads, "hidden": extras["hidden"]})
        values["names"] = [v.name for v in variables]
    return values


def test_recompute_layer_gradients_equal_the_plain_graphs():
    plain, again = _gradients(False), _gradients(True)
    assert again["names"] == plain["names"]
    assert len(plain["names"]) == 6  # inner, outer and LayerNorm, no copies.
    np.testing.assert_allclose(again["out"], plain["out"], atol=1e-6)
    np.testing.assert_allclose(again["hidden"], plain["hidden"], atol=1e-6)
    assert (plain["hidden"] == 0).any()  # Dropout was on: its masks had to match.
    for name, got, want in zip(["x"] + plain["names"], again["grads"], plain["grads"],
                               strict=True):
        assert np.abs(want).max() > 0, name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_recompute_layer_gives_integer_inputs_no_gradient():
    with tf.Graph().as_default():
        x = tf.ones([2, 4])
        key = tf.constant([1, 2], tf.int32)
        with tf1.variable_scope("layer"):
            out, _ = recompute.recompute_layer(_layer, [x, key])
        grad_x, grad_key = tf.gradients(tf.reduce_sum(out), [x, key])
    assert grad_x is not None
    assert grad_key is None
