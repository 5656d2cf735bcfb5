"""`bert_tf.encoder.pooler` on its own: which positions the last layer computes, the sequence
output read at them, and the pooler tanh(h_[CLS] @ W + b) against numpy."""

import numpy as np
import tensorflow as tf

from bert_tf.encoder import pooler

tf1 = tf.compat.v1
B, S, H = 2, 5, 4
LAST = np.random.RandomState(0).normal(size=(B, S, H)).astype(np.float32)


def _run(fetches):
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        return sess.run(fetches)


def test_read_positions_is_none_where_every_position_is_computed():
    with tf.Graph().as_default():
        positions = tf.constant([[1], [2]])
        assert pooler.read_positions(False, None, None, B, "absolute") is None
        assert pooler.read_positions(True, None, None, B, "relative_key") is None
        assert pooler.read_positions(False, positions, None, B, "relative_key_query") is None


def test_read_positions_puts_the_pooled_positions_first():
    with tf.Graph().as_default():
        only_cls = pooler.read_positions(True, None, None, B, "absolute")
        packed = pooler.read_positions(True, tf.constant([[3, 4], [1, 2]]),
                                       tf.constant([[0, 2], [0, 1]]), B, "absolute")
        cls_positions, packed_positions = _run([only_cls.output_positions,
                                                packed.output_positions])
    assert only_cls.pooled_count == 1
    np.testing.assert_array_equal(cls_positions, [[0], [0]])
    assert packed.pooled_count == 2
    np.testing.assert_array_equal(packed_positions, [[0, 2, 3, 4], [0, 1, 1, 2]])


def test_sequence_output_at_positions_with_and_without_read_rows():
    sequence_positions = np.array([[4, 1], [0, 3]])
    with tf.Graph().as_default():
        gathered = pooler.sequence_output(tf.constant(LAST), None, tf.constant(sequence_positions))
        full = pooler.sequence_output(tf.constant(LAST), None, None)
        read = pooler.ReadPositions(tf.zeros([B, 3], tf.int32), 1)
        rows = pooler.sequence_output(tf.constant(LAST[:, :3]), read, tf.constant([[1, 2]] * B))
        gathered, full, rows = _run([gathered, full, rows])
    np.testing.assert_array_equal(gathered, LAST[np.arange(B)[:, None], sequence_positions])
    np.testing.assert_array_equal(full, LAST)
    np.testing.assert_array_equal(rows, LAST[:, 1:3])  # After the one pooled row.


def _pooled(pooled_positions=None, read=None, last=LAST):
    with tf.Graph().as_default():
        if pooled_positions is not None:
            pooled_positions = tf.constant(pooled_positions)
        out = pooler.pooled_output(tf.constant(last), read, pooled_positions, H, 0.5)
        names = sorted(v.name for v in tf1.global_variables())
        kernel, bias = (tf1.global_variables()[i] for i in (0, 1))
        out, kernel, bias = _run([out, kernel, bias])
    assert names == ["pooler/dense/bias:0", "pooler/dense/kernel:0"]
    if kernel.ndim == 1:
        kernel, bias = bias, kernel
    return out, kernel, bias


def test_pooled_output_is_tanh_of_the_dense_layer_on_cls():
    out, kernel, bias = _pooled()
    assert out.shape == (B, H)
    np.testing.assert_allclose(out, np.tanh(LAST[:, 0] @ kernel + bias), atol=1e-6)


def test_pooled_output_of_packed_examples_pools_each_cls():
    positions = np.array([[0, 3], [0, 2]])
    out, kernel, bias = _pooled(positions)
    cls = LAST[np.arange(B)[:, None], positions].reshape(-1, H)
    assert out.shape == (B * 2, H)
    np.testing.assert_allclose(out, np.tanh(cls @ kernel + bias), atol=1e-6)


def test_pooled_output_of_read_rows_takes_the_first_count_rows():
    read = pooler.ReadPositions(None, 2)
    out, kernel, bias = _pooled(read=read)
    np.testing.assert_allclose(out, np.tanh(LAST[:, :2].reshape(-1, H) @ kernel + bias),
                               atol=1e-6)
