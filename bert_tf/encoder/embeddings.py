"""The embedding layer: word, token-type and absolute position embeddings, then layer norm
and dropout (variables under `bert/embeddings/`)."""

import tensorflow as tf

from bert_tf import precision
from bert_tf.encoder import dropout, ops


def embedding_lookup(input_ids,
                     vocab_size,
                     embedding_size=128,
                     initializer_range=0.02,
                     word_embedding_name="word_embeddings",
                     use_one_hot_embeddings=False):
    """Looks up word embeddings for ids.

    Args:
      input_ids: int Tensor [B, S] (or [B, S, 1]).
      vocab_size: V.
      embedding_size: H.
      initializer_range: stddev of the table initializer.
      word_embedding_name: variable name of the table.
      use_one_hot_embeddings: one-hot matmul instead of gather (TPU-friendly).

    Returns:
      (output [B, S, H], embedding_table [V, H]), both in the scope's compute dtype (the
      table is the float32 variable itself in float32 graphs).
    """
    # The original accepts [B, S] and [B, S, 1]; normalise to [B, S].
    if input_ids.shape.ndims == 3:
        input_ids = tf.squeeze(input_ids, axis=[2])
    input_shape = ops.get_shape_list(input_ids, expected_rank=2, name="input_ids")

    compute_dtype = ops.scope_compute_dtype()
    stored_table = ops.get_variable(
        name=word_embedding_name, shape=[vocab_size, embedding_size],
        initializer=ops.create_initializer(initializer_range), dtype=tf.float32)
    # In the compute dtype, for the one-hot matmul and tied output layers; a session or a
    # tf.function that never uses it never runs it.
    embedding_table = precision.read_as(stored_table, compute_dtype)

    if use_one_hot_embeddings:
        flat_input_ids = tf.reshape(input_ids, [-1])
        one_hot_input_ids = tf.one_hot(flat_input_ids, depth=vocab_size,
                                       dtype=embedding_table.dtype)
        output = tf.matmul(one_hot_input_ids, embedding_table)
    elif precision.casts_every_step():
        # Cast the B*S gathered rows, not the whole [V, H] table on every step.
        output = tf.cast(ops.gather_rows(stored_table, input_ids), compute_dtype)
    else:
        output = ops.gather_rows(embedding_table, input_ids)
    output = tf.reshape(output, input_shape + [embedding_size])
    return output, embedding_table


def embedding_postprocessor(input_tensor,
                            use_token_type=False,
                            token_type_ids=None,
                            token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True,
                            position_embedding_name="position_embeddings",
                            initializer_range=0.02,
                            max_position_embeddings=512,
                            dropout_prob=0.1,
                            layer_norm_eps=1e-12,
                            position_ids=None):
    """Adds token-type and position embeddings, then layer norm and dropout.

    Args:
      input_tensor: float Tensor [B, S, H], word embeddings.
      use_token_type: add embeddings of `token_type_ids`.
      token_type_ids: int Tensor [B, S]; required if `use_token_type`.
      token_type_vocab_size: rows of the token-type table.
      token_type_embedding_name: variable name of that table.
      use_position_embeddings: add learned absolute position embeddings.
      position_embedding_name: variable name of the position table.
      initializer_range: stddev of the initializers.
      max_position_embeddings: rows of the position table; S must not exceed it.
      dropout_prob: dropout after the layer norm.
      layer_norm_eps: epsilon of the layer norm.
      position_ids: optional int Tensor [B, S], each token's row of the position table
        (packed examples restart at 0); None: 0..S-1 in every row.

    Returns:
      float Tensor [B, S, H].

    Raises:
      BertTfError: if S is known and longer than `max_position_embeddings`.
    """
    input_shape = ops.get_shape_list(input_tensor, expected_rank=3, name="input_tensor")
    batch_size, seq_length, width = input_shape
    output = input_tensor

    if use_token_type:
        if token_type_ids is None:
            raise ValueError("`token_type_ids` must be specified if `use_token_type` is True.")
        token_type_table = ops.get_variable(
            name=token_type_embedding_name, shape=[token_type_vocab_size, width],
            initializer=ops.create_initializer(initializer_range), dtype=input_tensor.dtype)
        output += ops.gather_rows(token_type_table, token_type_ids)

    if use_position_embeddings:
        # Packed rows' positions come from their records, each below S.
        checks = ([] if position_ids is not None else
                  ops.check_seq_length(seq_length, max_position_embeddings))
        full_position_embeddings = ops.get_variable(
            name=position_embedding_name, shape=[max_position_embeddings, width],
            initializer=ops.create_initializer(initializer_range), dtype=input_tensor.dtype)
        if position_ids is not None:
            output += ops.gather_rows(full_position_embeddings, position_ids)
        else:
            with tf.control_dependencies(checks):
                # Positions are 0..S-1 in every row: slice once and broadcast over B.
                position_embeddings = tf.slice(full_position_embeddings, [0, 0],
                                               [seq_length, -1])
            output += tf.expand_dims(position_embeddings, 0)

    return dropout.layer_norm_and_dropout(output, dropout_prob, epsilon=layer_norm_eps)


def bert_embeddings(config, input_ids, token_type_ids, position_ids=None,
                    use_one_hot_embeddings=False):
    """BERT's embedding layer, in the current scope (`embeddings/...`).

    Args:
      config: `BertConfig` (its dropouts already those of the graph).
      input_ids, token_type_ids: int Tensors [B, S].
      position_ids: optional int Tensor [B, S] of packed rows (see `embedding_postprocessor`).
      use_one_hot_embeddings: look embeddings up with a one-hot matmul (TPUs).

    Returns:
      (embedding output [B, S, E], word embedding table [V, E]), in the compute dtype; E is
      `config.embedding_width` (H, except for ALBERT's factorized embeddings).
    """
    output, table = embedding_lookup(
        input_ids=input_ids, vocab_size=config.vocab_size,
        embedding_size=config.embedding_width,
        initializer_range=config.initializer_range, word_embedding_name="word_embeddings",
        use_one_hot_embeddings=use_one_hot_embeddings)
    output = embedding_postprocessor(
        input_tensor=output, use_token_type=True, token_type_ids=token_type_ids,
        token_type_vocab_size=config.type_vocab_size,
        token_type_embedding_name="token_type_embeddings",
        # Relative types encode position inside attention instead.
        use_position_embeddings=config.position_embedding_type == "absolute",
        position_embedding_name="position_embeddings",
        initializer_range=config.initializer_range,
        max_position_embeddings=config.max_position_embeddings,
        dropout_prob=config.hidden_dropout_prob, layer_norm_eps=config.layer_norm_eps,
        position_ids=position_ids)
    return output, table
