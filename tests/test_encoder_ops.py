"""The graph-mode building blocks of `bert_tf.encoder.ops`, tested directly: layer norm against
numpy, dense layers' checkpoint variables, shapes, activations and the refusals."""

import math

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.encoder import ops
from bert_tf.errors import BertTfError

tf1 = tf.compat.v1


def _run(fetches, feed_dict=None):
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        return sess.run(fetches, feed_dict)


def test_layer_norm_matches_numpy_and_names_its_variables():
    x = np.random.RandomState(0).normal(3.0, 2.0, size=(3, 4, 8)).astype(np.float32)
    with tf.Graph().as_default():
        out = ops.layer_norm(tf.constant(x), name="ln", epsilon=1e-3)
        names = sorted(v.name for v in tf1.global_variables())
        result = _run(out)
    assert names == ["ln/beta:0", "ln/gamma:0"]
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    np.testing.assert_allclose(result, (x - mean) / np.sqrt(var + 1e-3), atol=1e-5)


def test_layer_norm_of_bfloat16_computes_its_statistics_in_float32():
    # Exact in bfloat16 (spacing 2 at 256), but their mean 259 is not: bf16 statistics
    # would shift every centred value by one unit.
    x = np.array([[256.0, 258.0, 260.0, 262.0]], np.float32)
    with tf.Graph().as_default():
        out = ops.layer_norm(tf.cast(tf.constant(x), tf.bfloat16), epsilon=1e-6)
        variable_dtypes = {v.dtype.base_dtype for v in tf1.global_variables()}
        result = _run(tf.cast(out, tf.float32))
    assert out.dtype == tf.bfloat16
    assert variable_dtypes == {tf.float32}
    expected = (x - x.mean()) / np.sqrt(x.var() + 1e-6)
    np.testing.assert_allclose(result, expected, atol=1e-2)


def test_dense_layer_variables_follow_the_checkpoint_layout_and_3d_input_keeps_its_shape():
    x = np.random.RandomState(1).normal(size=(2, 3, 5)).astype(np.float32)
    with tf.Graph().as_default():
        out = ops.dense_layer(tf.constant(x), 7, activation=tf.nn.relu, name="proj")
        shapes = {v.name: v.shape.as_list() for v in tf1.global_variables()}
        assert out.shape.as_list() == [2, 3, 7]
        kernel, bias = [v for v in tf1.global_variables()]
        result, k, b = _run([out, kernel, bias])
    assert shapes == {"proj/kernel:0": [5, 7], "proj/bias:0": [7]}
    np.testing.assert_allclose(result, np.maximum(x @ k + b, 0.0), atol=1e-5)


def test_get_shape_list_gives_ints_where_static_and_tensors_where_dynamic():
    with tf.Graph().as_default():
        placeholder = tf1.placeholder(tf.float32, [None, 4])
        shape = ops.get_shape_list(placeholder)
        assert isinstance(shape[1], int) and shape[1] == 4
        assert isinstance(shape[0], tf.Tensor)
        assert _run(shape[0], {placeholder: np.zeros((6, 4))}) == 6
        assert ops.get_shape_list(tf.zeros([2, 3])) == [2, 3]
        with pytest.raises(ValueError, match="`ids`.*actual rank `2`.*expected rank `3`"):
            ops.get_shape_list(tf.zeros([2, 3]), expected_rank=3, name="ids")


@pytest.mark.parametrize("name, reference", [
    ("gelu", lambda x: 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))),
    ("gelu_new", lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2 / math.pi)
                                                    * (x + 0.044715 * x ** 3)))),
    ("GELU_TANH", lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2 / math.pi)
                                                     * (x + 0.044715 * x ** 3)))),
    ("relu", lambda x: np.maximum(x, 0.0)),
    ("swish", lambda x: x / (1.0 + np.exp(-x))),
    ("silu", lambda x: x / (1.0 + np.exp(-x))),
    ("tanh", np.tanh),
])
def test_get_activation_names_compute_their_functions(name, reference):
    x = np.linspace(-4.0, 4.0, 17)
    with tf.Graph().as_default():
        result = _run(ops.get_activation(name)(tf.constant(x)))
    np.testing.assert_allclose(result, reference(x), atol=1e-6)


def test_get_activation_linear_passthrough_and_unknown_name():
    assert ops.get_activation("linear") is None
    assert ops.get_activation("") is None
    assert ops.get_activation(None) is None
    assert ops.get_activation(tf.sigmoid) is tf.sigmoid
    with pytest.raises(ValueError, match="Unsupported activation: mish; use one of gelu, "):
        ops.get_activation("mish")


def test_get_variable_refuses_eager_code_naming_bert_tf_tf2():
    assert tf.executing_eagerly()
    with pytest.raises(BertTfError, match="new random variable 'w'.*bert_tf.tf2.BertEncoder"):
        ops.get_variable("w", [2])
    with ops.variables_owned_by_caller():
        assert ops.get_variable("w", [2], initializer=tf1.zeros_initializer()).shape == [2]


def test_check_seq_length_raises_for_a_static_length_and_asserts_a_dynamic_one():
    assert ops.check_seq_length(8, 8) == []
    with pytest.raises(BertTfError, match="sequence length 9 is longer than "
                                          r"max_position_embeddings \(8\).*at most 8"):
        ops.check_seq_length(9, 8)
    with tf.Graph().as_default():
        length = tf1.placeholder(tf.int32, [])
        checks = ops.check_seq_length(length, 8)
        _run(checks, {length: 8})
        with pytest.raises(tf.errors.InvalidArgumentError, match="longer than max_position"):
            _run(checks, {length: 9})
