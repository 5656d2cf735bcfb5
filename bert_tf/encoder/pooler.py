"""What `BertModel` reads off the last layer: the positions it computes there, the sequence
output at them, and the pooler (a tanh dense layer on each [CLS] token, `pooler/dense`)."""

import dataclasses

import tensorflow as tf

from bert_tf.encoder import ops


@dataclasses.dataclass(frozen=True)
class ReadPositions:
    """The positions the last layer computes when the heads read only some of them."""

    output_positions: tf.Tensor  # int32 [B, F]: the pooled positions, then the sequence ones.
    pooled_count: object  # K, how many of the F are pooled positions (int or scalar Tensor).


def read_positions(pooled_only, sequence_positions, pooled_positions, batch_size,
                   position_embedding_type):
    """The last layer's positions, or None where it computes every position: the heads read
    more than the pooled output and `sequence_positions`, or relative position scores (which
    assume queries at 0..S-1) are in use.

    Args:
      pooled_only: the heads read the pooled output only.
      sequence_positions: optional int Tensor [B, P], the sequence positions the heads read.
      pooled_positions: optional int Tensor [B, K], each packed example's [CLS]; None: 0.
      batch_size: B.
      position_embedding_type: the config's.

    Returns:
      A `ReadPositions`, or None.
    """
    if not (pooled_only or sequence_positions is not None) or \
            position_embedding_type != "absolute":
        return None
    positions = (tf.zeros([batch_size, 1], tf.int32) if pooled_positions is None
                 else tf.cast(pooled_positions, tf.int32))
    pooled_count = ops.get_shape_list(positions, expected_rank=2, name="pooled_positions")[1]
    if sequence_positions is not None:
        positions = tf.concat([positions, tf.cast(sequence_positions, tf.int32)], axis=1)
    return ReadPositions(positions, pooled_count)


def sequence_output(last_layer, read, sequence_positions):
    """The sequence output: [B, S, H], or [B, P, H] at `sequence_positions`.

    Args:
      last_layer: the last layer's output, [B, S, H] or with `read` [B, F, H].
      read: the `ReadPositions` the last layer computed, or None.
      sequence_positions: optional int Tensor [B, P].
    """
    if read is not None and sequence_positions is not None:
        # The last layer's rows: the pooled positions, then `sequence_positions`.
        return last_layer[:, read.pooled_count:]
    if sequence_positions is not None:
        return tf.gather(last_layer, sequence_positions, batch_dims=1)
    return last_layer


def pooled_output(last_layer, read, pooled_positions, hidden_size, initializer_range):
    """The pooler in the current scope (`pooler/dense`): tanh(dense(h_[CLS])), [B, H], or
    [B * K, H] for `pooled_positions` [B, K].

    The pooler takes the hidden state of the first token ([CLS]), which pre-training's
    next-sentence objective has trained to summarise the pair.
    """
    with tf.compat.v1.variable_scope("pooler"):
        if read is not None:  # The last layer's rows start with them.
            first_token_tensor = tf.reshape(last_layer[:, :read.pooled_count], [-1, hidden_size])
        elif pooled_positions is None:
            first_token_tensor = last_layer[:, 0, :]
        else:
            first_token_tensor = tf.reshape(
                tf.gather(last_layer, pooled_positions, batch_dims=1), [-1, hidden_size])
        return ops.dense_layer(first_token_tensor, hidden_size, activation=tf.tanh,
                               kernel_initializer=ops.create_initializer(initializer_range),
                               name="dense")
