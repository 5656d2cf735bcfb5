"""`bert_tf.encoder.embeddings` on its own: word lookup (gather and one-hot), the added
token-type and position rows against numpy, and the too-long sequence error."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.encoder import embeddings
from bert_tf.errors import BertTfError

tf1 = tf.compat.v1
IDS = np.array([[3, 0, 7], [7, 9, 1]], np.int32)


def _run(fetches, feed_dict=None):
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        return sess.run(fetches, feed_dict)


@pytest.mark.parametrize("one_hot", [False, True])
def test_embedding_lookup_gathers_the_table_rows(one_hot):
    with tf.Graph().as_default():
        output, table = embeddings.embedding_lookup(tf.constant(IDS), vocab_size=10,
                                                    embedding_size=4,
                                                    use_one_hot_embeddings=one_hot)
        names = [v.name for v in tf1.global_variables()]
        with tf1.variable_scope("", reuse=True):
            ids_3d, _ = embeddings.embedding_lookup(tf.constant(IDS[..., None]), 10, 4)
        output, table, ids_3d = _run([output, table, ids_3d])
    assert names == ["word_embeddings:0"]
    assert output.shape == (2, 3, 4) and table.shape == (10, 4)
    np.testing.assert_allclose(output, table[IDS], atol=1e-7)
    np.testing.assert_allclose(ids_3d, table[IDS], atol=1e-7)  # [B, S, 1] ids too.


def _postprocessed(position_ids=None, token_types=None, seq_length=3):
    x = np.random.RandomState(0).normal(size=(2, seq_length, 4)).astype(np.float32)
    with tf.Graph().as_default():
        out = embeddings.embedding_postprocessor(
            tf.constant(x), use_token_type=token_types is not None,
            token_type_ids=None if token_types is None else tf.constant(token_types),
            token_type_vocab_size=2, max_position_embeddings=6, dropout_prob=0.0,
            position_ids=None if position_ids is None else tf.constant(position_ids))
        variables = {v.name: v for v in tf1.global_variables()}
        values = _run({"out": out, **{name: v for name, v in variables.items()}})
    return x, values


def _layer_norm(x, gamma, beta):
    return ((x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
            * gamma + beta)


def test_postprocessor_adds_positions_zero_to_s_and_token_types_then_normalizes():
    token_types = np.array([[0, 1, 1], [1, 0, 0]], np.int32)
    x, values = _postprocessed(token_types=token_types)
    positions, types = values["position_embeddings:0"], values["token_type_embeddings:0"]
    assert positions.shape == (6, 4) and types.shape == (2, 4)
    expected = _layer_norm(x + types[token_types] + positions[:3][None],
                           values["LayerNorm/gamma:0"], values["LayerNorm/beta:0"])
    np.testing.assert_allclose(values["out"], expected, atol=1e-5)


def test_postprocessor_with_position_ids_gathers_those_rows():
    position_ids = np.array([[0, 1, 0], [2, 0, 5]], np.int32)
    x, values = _postprocessed(position_ids=position_ids)
    positions = values["position_embeddings:0"]
    expected = _layer_norm(x + positions[position_ids],
                           values["LayerNorm/gamma:0"], values["LayerNorm/beta:0"])
    np.testing.assert_allclose(values["out"], expected, atol=1e-5)
    # Not the 0..S-1 rows: the packed positions matter.
    default = _layer_norm(x + positions[:3][None], 1.0, 0.0)
    assert np.abs(values["out"] - default).max() > 1e-3


def test_postprocessor_refuses_a_sequence_longer_than_the_position_table():
    with pytest.raises(BertTfError, match=r"sequence length 7 is longer than "
                                          r"max_position_embeddings \(6\)"):
        _postprocessed(seq_length=7)


def test_postprocessor_asserts_a_dynamic_length_and_needs_token_type_ids():
    with tf.Graph().as_default():
        x = tf1.placeholder(tf.float32, [2, None, 4])
        out = embeddings.embedding_postprocessor(x, max_position_embeddings=6, dropout_prob=0.0)
        with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings"):
            _run(out, {x: np.zeros((2, 7, 4))})
        assert _run(out, {x: np.zeros((2, 6, 4))}).shape == (2, 6, 4)
        with pytest.raises(ValueError, match="`token_type_ids` must be specified"):
            embeddings.embedding_postprocessor(tf.zeros([1, 2, 4]), use_token_type=True)
