"""`bert_tf.encoder.dropout` on its own: the drop rate and scale, the keyed masks that make
recomputation reproducible, the portable seeds and the refusals."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.encoder import dropout

tf1 = tf.compat.v1


def _run(fetches, feed_dict=None):
    with tf1.Session() as sess:
        return sess.run(fetches, feed_dict)


def test_dropout_drops_about_p_and_scales_the_rest_by_one_over_one_minus_p():
    with tf.Graph().as_default():
        out = _run(dropout.dropout(tf.ones([200, 500]), 0.25))
    dropped = np.mean(out == 0.0)
    # 100000 draws: the standard deviation of the rate is ~0.0014.
    assert abs(dropped - 0.25) < 0.01
    np.testing.assert_allclose(out[out != 0.0], 1.0 / 0.75, rtol=1e-6)
    assert abs(out.mean() - 1.0) < 0.02


def test_dropout_draws_new_masks_on_every_run():
    with tf.Graph().as_default():
        out = dropout.dropout(tf.ones([1000]), 0.5)
        with tf1.Session() as sess:
            first, second = sess.run(out), sess.run(out)
    assert not np.array_equal(first == 0, second == 0)


def test_two_key_scopes_of_one_key_draw_the_same_masks_and_other_keys_differ():
    with tf.Graph().as_default():
        key = tf.constant([7, 11], tf.int32)
        other = tf.constant([8, 11], tf.int32)
        x = tf.ones([64, 64])
        with dropout.dropout_key_scope(key):
            a1, a2 = dropout.dropout(x, 0.3), dropout.dropout(x, 0.3)
        with dropout.dropout_key_scope(key):
            b1, b2 = dropout.dropout(x, 0.3), dropout.dropout(x, 0.3)
        with dropout.dropout_key_scope(other):
            c1 = dropout.dropout(x, 0.3)
        with tf1.Session() as sess:
            a1, a2, b1, b2, c1 = sess.run([a1, a2, b1, b2, c1])
    np.testing.assert_array_equal(a1, b1)
    np.testing.assert_array_equal(a2, b2)
    # Successive draws inside a scope differ, and so do other keys' draws.
    assert not np.array_equal(a1, a2)
    assert not np.array_equal(a1, c1)


def test_keyed_masks_are_the_same_on_every_run():
    with tf.Graph().as_default():
        with dropout.dropout_key_scope(tf.constant([1, 2], tf.int32)):
            out = dropout.dropout(tf.ones([256]), 0.5)
        with tf1.Session() as sess:
            np.testing.assert_array_equal(sess.run(out), sess.run(out))


def test_random_keys_inside_a_scope_are_a_function_of_its_key():
    with tf.Graph().as_default():
        with dropout.dropout_key_scope(tf.constant([3, 4], tf.int32)):
            first = dropout.random_keys(5)
        with dropout.dropout_key_scope(tf.constant([3, 4], tf.int32)):
            second = dropout.random_keys(5)
        unkeyed = dropout.random_keys(5)
        first, second, unkeyed = _run([first, second, unkeyed])
    assert first.shape == (5, 2) and unkeyed.shape == (5, 2)
    np.testing.assert_array_equal(first, second)
    assert (first >= 0).all() and (unkeyed >= 0).all()


def test_portable_seed_clears_only_the_sign_bit():
    seeds = np.array([-1, -2 ** 31, 5, 2 ** 31 - 1], np.int32)
    with tf.Graph().as_default():
        result = _run(dropout.portable_seed(tf.constant(seeds)))
    np.testing.assert_array_equal(result, seeds.view(np.uint32) & 0x7FFFFFFF)
    np.testing.assert_array_equal(result, [2 ** 31 - 1, 0, 5, 2 ** 31 - 1])


def test_dropout_unscaled_returns_its_input_at_zero_and_the_scale_otherwise():
    with tf.Graph().as_default():
        x = tf.ones([4000])
        assert dropout.dropout_unscaled(x, 0.0) == (x, 1.0)
        assert dropout.dropout_unscaled(x, None) == (x, 1.0)
        assert dropout.dropout(x, 0.0) is x
        kept, scale = dropout.dropout_unscaled(x, 0.1)
        kept = _run(kept)
    threshold = round(0.1 * 65536)
    assert scale == pytest.approx(65536 / (65536 - threshold))
    assert set(np.unique(kept)) == {0.0, 1.0}  # Not rescaled.
    assert abs(np.mean(kept == 0.0) - 0.1) < 0.03


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5])
def test_dropout_refuses_a_probability_outside_zero_one(p):
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match=r"dropout_prob must be in \[0, 1\), got "
                                             + str(p).replace(".", r"\.")):
            dropout.dropout(tf.ones([3]), p)
