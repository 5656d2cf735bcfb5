"""Recomputing encoder layers in the backward pass (`recompute_grad`): the same gradients and
the same training as the plain graph, dropout on, on one device and on two replicas."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from envs import ROOT, child_env
from finetune_helpers import tiny_config

from bert_tf import modeling

tf1 = tf.compat.v1

CONFIG = tiny_config(vocab_size=99, num_attention_heads=4, intermediate_size=37,
                     type_vocab_size=3, max_position_embeddings=40, num_hidden_layers=3,
                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def _inputs(batch=3, seq=9, seed=0):
    rng = np.random.RandomState(seed)
    ids = rng.randint(0, CONFIG["vocab_size"], size=(batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    mask[1, 5:] = 0
    segs = rng.randint(0, CONFIG["type_vocab_size"], size=(batch, seq)).astype(np.int32)
    return ids, mask, segs


def _build(recompute_grad, compute_dtype=tf.float32):
    """A BERT in the current graph with a loss on every output; (loss, variables, grads)."""
    ids, mask, segs = _inputs()
    model = modeling.BertModel(modeling.BertConfig(**CONFIG), True, tf.constant(ids),
                               tf.constant(mask), tf.constant(segs),
                               compute_dtype=compute_dtype, recompute_grad=recompute_grad)
    weights = tf.constant(np.random.RandomState(1).randn(9, CONFIG["hidden_size"]), tf.float32)
    loss = (tf.reduce_sum(tf.cast(model.get_sequence_output(), tf.float32) * weights)
            + tf.reduce_sum(tf.cast(model.get_pooled_output(), tf.float32) ** 2))
    tvars = tf1.trainable_variables()
    grads = tf.gradients(loss, tvars)  # The word embeddings' are IndexedSlices.
    return loss, tvars, [tf.convert_to_tensor(grad) for grad in grads]


def _run(recompute_grad, values=None, steps=0, compute_dtype=tf.float32, seed=3):
    """(weights by name, loss, gradients by name, losses of `steps` SGD steps), in a fresh
    graph with graph seed `seed`, starting from `values` (weights by name) if given."""
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(seed)
        loss, tvars, grads = _build(recompute_grad, compute_dtype)
        train = tf1.train.GradientDescentOptimizer(1e-3).apply_gradients(zip(grads, tvars))
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            if values is not None:
                for var in tvars:
                    var.load(values[var.op.name], sess)
            weights = {var.op.name: sess.run(var) for var in tvars}
            loss_value, grad_values = sess.run([loss, grads])
            losses = []
            for _ in range(steps):
                losses.append(sess.run([loss, train])[0])
    return (weights, loss_value, dict(zip([v.op.name for v in tvars], grad_values)), losses)


def test_recomputed_gradients_equal_the_plain_graphs_with_dropout_on():
    weights, loss, grads, _ = _run(recompute_grad=False)
    _, loss_r, grads_r, _ = _run(recompute_grad=True, values=weights)
    np.testing.assert_allclose(loss_r, loss, rtol=1e-6)  # Dropout masks included.
    assert sorted(grads) == sorted(grads_r) and len(grads) == 5 + 3 * 16 + 2
    for name, grad in grads.items():
        # Float32 rounding of ops fused differently: within 1e-6 of the gradient's scale
        # (at least 1: the key bias's gradient is rounding noise around 0).
        assert np.abs(grads_r[name] - grad).max() <= 1e-6 * max(np.abs(grad).max(), 1), name
    # Dropout is on: another graph seed draws other masks, so other gradients.
    _, _, grads_other, _ = _run(recompute_grad=True, values=weights, seed=4)
    name = "bert/encoder/layer_0/attention/self/query/kernel"
    assert np.abs(grads_other[name] - grads[name]).max() > 1e-4


def test_recomputed_training_follows_the_same_loss_curve():
    weights, *_ = _run(recompute_grad=False)
    *_, plain = _run(recompute_grad=False, values=weights, steps=5)
    *_, recomputed = _run(recompute_grad=True, values=weights, steps=5)
    np.testing.assert_allclose(recomputed, plain, rtol=1e-6)
    assert plain[-1] != plain[0]


@pytest.mark.parametrize("compute_dtype", [tf.bfloat16, tf.float16])
def test_recomputed_gradients_in_mixed_precision(compute_dtype):
    weights, loss, grads, _ = _run(False, compute_dtype=compute_dtype)
    _, loss_r, grads_r, _ = _run(True, values=weights, compute_dtype=compute_dtype)
    # Fused and unfused half-precision ops round differently, so not bit for bit.
    np.testing.assert_allclose(loss_r, loss, rtol=5e-3)
    # The key bias's gradient is rounding noise around 0 (softmax ignores it): all together.
    flat, flat_r = (np.concatenate([g[name].ravel() for name in sorted(grads)])
                    for g in (grads, grads_r))
    assert np.linalg.norm(flat_r - flat) < 1e-2 * np.linalg.norm(flat)
    # Dropout on in both graphs: another seed differs by far more than rounding.
    _, _, grads_other, _ = _run(True, values=weights, compute_dtype=compute_dtype, seed=4)
    flat_other = np.concatenate([grads_other[name].ravel() for name in sorted(grads)])
    assert np.linalg.norm(flat_other - flat) > 10 * np.linalg.norm(flat_r - flat)
