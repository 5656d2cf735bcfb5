"""Recomputing encoder layers in the backward pass (`recompute_grad`): the same gradients and
the same training as the plain graph, dropout on, on one device and on two replicas."""

import textwrap

import numpy as np
import pytest
import tensorflow as tf
from envs import ROOT, child_env
from finetune_helpers import tiny_config
from script_runner import run_python_code

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
        sgd = tf1.train.GradientDescentOptimizer(1e-3)
        train = sgd.apply_gradients(zip(grads, tvars, strict=True))
        names = [var.op.name for var in tvars]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            if values is not None:
                # What `var.load` runs, for all of them in one session run: each distinct run
                # is pruned and optimized anew (~0.2 s here), one per variable took ~10 s.
                sess.run([var.initializer for var in tvars],
                         {var.initializer.inputs[1]: values[var.op.name] for var in tvars})
            weights = dict(zip(names, sess.run(tvars), strict=True))
            loss_value, grad_values = sess.run([loss, grads])
            losses = []
            for _ in range(steps):
                losses.append(sess.run([loss, train])[0])
    return weights, loss_value, dict(zip(names, grad_values, strict=True)), losses


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


_TWO_REPLICAS = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    sys.path.insert(0, "tests")
    import test_recompute
    tf1 = tf.compat.v1

    def gradients(recompute_grad, checkpoint):
        # Each replica's loss and gradients; the weights are saved to / restored from checkpoint.
        with tf.Graph().as_default():
            tf1.set_random_seed(3)
            strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
            with strategy.scope():
                def replica_fn():
                    loss, _, grads = test_recompute._build(recompute_grad)
                    return [loss] + grads
                outputs = strategy.run(replica_fn)
                per_replica = [strategy.experimental_local_results(o) for o in outputs]
                saver = tf1.train.Saver(tf1.trainable_variables())
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                if recompute_grad:
                    saver.restore(sess, checkpoint)
                else:
                    saver.save(sess, checkpoint)
                return sess.run(per_replica)

    plain = gradients(False, sys.argv[1])
    recomputed = gradients(True, sys.argv[1])
    worst = max(np.abs(r - p).max() / max(np.abs(p).max(), 1)
                for rs, ps in zip(plain, recomputed) for r, p in zip(rs, ps))
    across = np.abs(plain[1][0] - plain[1][1]).max() / np.abs(plain[1][0]).max()
    print(f"worst {worst} across {across}")
""")


def test_recomputed_gradients_equal_the_plain_graphs_on_two_replicas(tmp_path):
    completed = run_python_code(_TWO_REPLICAS, [str(tmp_path / "weights")], env=child_env(),
                                cwd=ROOT, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    worst, across = (float(value) for value in completed.stdout.split()[1::2])
    # Each replica's gradients equal the plain graph's on that replica, dropout masks
    # included; the two replicas drew different masks (and the same batch).
    assert worst <= 1e-6
    assert across > 1e-2
