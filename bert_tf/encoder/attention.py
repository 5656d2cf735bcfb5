"""Multi-headed scaled dot-product attention on 2-D activations, and the masks it reads.

Variables `query`, `key`, `value` (kernel [H_from or H_to, N*D], bias [N*D]) in the current
scope, plus `distance_embedding` [2P - 1, D] for the relative position types. Scores are
computed in the input dtype; the mask is added and softmax taken in float32.
"""

import math

import tensorflow as tf

from bert_tf.encoder import dropout, ops


def create_attention_mask_from_input_mask(from_tensor, to_mask):
    """Creates a 3-D attention mask from a 2-D padding mask.

    Args:
      from_tensor: Tensor [B, F] or [B, F, ...] (only its shape is used).
      to_mask: int Tensor [B, T], 1 for tokens that may be attended to.

    Returns:
      float32 Tensor [B, F, T].
    """
    from_shape = ops.get_shape_list(from_tensor, expected_rank=[2, 3], name="from_tensor")
    batch_size, from_seq_length = from_shape[0], from_shape[1]
    to_shape = ops.get_shape_list(to_mask, expected_rank=2, name="to_mask")
    to_seq_length = to_shape[1]
    to_mask = tf.cast(tf.reshape(to_mask, [batch_size, 1, to_seq_length]), tf.float32)
    # Every query position sees the same keys, so broadcasting ones over F suffices.
    broadcast_ones = tf.ones(shape=[batch_size, from_seq_length, 1], dtype=tf.float32)
    return broadcast_ones * to_mask


def create_attention_mask_from_packed_positions(position_ids, input_mask):
    """The attention mask of packed rows: each token attends to its own example only.

    An example starts at each real token whose position is 0, so the k-th example of a row
    is the tokens between its k-th and (k+1)-th start; padding attends to and is seen by
    nothing that matters (its outputs are ignored).

    Args:
      position_ids: int Tensor [B, S], positions restarting at 0 for each example.
      input_mask: int Tensor [B, S], 1 for real tokens, 0 for padding.

    Returns:
      float32 Tensor [B, S, S]: 1 where query and key belong to the same example.
    """
    is_real = tf.cast(input_mask, tf.int32)
    starts = tf.cast(tf.equal(position_ids, 0), tf.int32) * is_real
    example_ids = tf.cumsum(starts, axis=1) * is_real  # 1..k per row; 0 on padding.
    same = tf.equal(example_ids[:, :, None], example_ids[:, None, :])
    return tf.cast(tf.logical_and(same, example_ids[:, None, :] > 0), tf.float32)


def padding_free_index(input_mask):
    """The positions of the real tokens in the flattened batch, for the padding-free layers
    (`settings.Computation.token_index`).

    Args:
      input_mask: int Tensor [B, S], 1 for real tokens, 0 for padding.

    Returns:
      int32 Tensor [K, 1]: the indices into [B*S] where `input_mask` is 1, ascending
      (K = the number of real tokens in the batch).
    """
    return tf.cast(tf.where(tf.not_equal(tf.reshape(input_mask, [-1]), 0)), tf.int32)


def attention(from_2d, to_2d, attention_mask, config, batch_size, from_seq_length,
              to_seq_length, head_mask=None, token_index=None, exact_probs=True):
    """Attention from the rows of `from_2d` to those of `to_2d`, in the current scope.

    Args:
      from_2d: float Tensor [B*F, H_from] ([K, H] with `token_index`).
      to_2d: float Tensor [B*T, H_to] ([K, H], the same tensor, with `token_index`).
      attention_mask: optional Tensor [B, F, T] of 1 (attend) / 0 (masked).
      config: a `settings.AttentionConfig` (N, D, activations, dropout, positions).
      batch_size, from_seq_length, to_seq_length: B, F and T (ints or scalar Tensors).
      head_mask: optional float array or Tensor [N] multiplying each head's probabilities
        after softmax and dropout (Hugging Face semantics).
      token_index: optional int32 Tensor [K, 1], self-attention over unpadded rows: the
        positions in [B*F] of the K rows. The projections run on the K rows; only the scores
        see the padded [B, N, F, T] layout (padding rows zero, masked out by the mask).
      exact_probs: the returned probabilities are those the context used; without it a
        float32 attention may scale the [B, N, F, D] context by the dropout's 1 / (1 - p)
        instead of the bigger [B, N, F, T] probabilities.

    Returns:
      (context float Tensor [B*F, N*D] ([K, N*D] with `token_index`), probabilities
      [B, N, F, T] in the dtype of the values, after dropout and `head_mask`).
    """
    init = ops.create_initializer(config.initializer_range)
    query = ops.dense_layer(from_2d, config.width, config.query_act, init, name="query")
    key = ops.dense_layer(to_2d, config.width, config.key_act, init, name="key")
    value = ops.dense_layer(to_2d, config.width, config.value_act, init, name="value")

    def to_heads(tensor, seq_length):  # [B*S, N*D] (or [K, N*D]) -> [B, N, S, D]
        if token_index is not None:
            tensor = tf.scatter_nd(token_index, tensor, [batch_size * seq_length, config.width])
        tensor = tf.reshape(tensor, [batch_size, seq_length, config.num_attention_heads,
                                     config.size_per_head])
        return tf.transpose(tensor, [0, 2, 1, 3])

    query = to_heads(query, from_seq_length)
    key = to_heads(key, to_seq_length)
    value = to_heads(value, to_seq_length)
    scores = attention_scores(query, key, attention_mask, config, from_seq_length,
                              to_seq_length)
    probs, dropout_scale = attention_probs(scores, config, head_mask,
                                           exact_probs or value.dtype != tf.float32)
    probs = tf.cast(probs, value.dtype)

    context = tf.matmul(probs, value)  # [B, N, F, D]
    if dropout_scale != 1.0:
        context *= dropout_scale  # B*F*N*D values rather than B*N*F*T.
    context = tf.transpose(context, [0, 2, 1, 3])  # [B, F, N, D]
    context = tf.reshape(context, [batch_size * from_seq_length, config.width])
    if token_index is not None:
        context = tf.gather_nd(context, token_index)
    return context, probs


def attention_scores(query, key, attention_mask, config, from_seq_length, to_seq_length):
    """Scaled dot-product scores with the mask added: [B, N, F, D] x [B, N, T, D] ->
    float32 [B, N, F, T] (plus the relative-position terms for those position types)."""
    # Scaling the query (B*F*N*D values) is cheaper than scaling the scores (B*N*F*T).
    scale = tf.cast(1.0 / math.sqrt(float(config.size_per_head)), query.dtype)
    query = query * scale
    scores = tf.matmul(query, key, transpose_b=True)  # [B, N, F, T]
    if config.position_embedding_type != "absolute":
        # Every term is linear in the query or the key, so scaling those equals
        # Hugging Face's division of the summed scores by sqrt(D).
        scores += relative_position_scores(
            query, key * scale if config.position_embedding_type == "relative_key_query"
            else None, from_seq_length, to_seq_length, config)
    scores = tf.cast(scores, tf.float32)
    if attention_mask is not None:
        attention_mask = tf.expand_dims(tf.cast(attention_mask, tf.float32), axis=[1])  # [B,1,F,T]
        # -10000 rather than -inf: exp underflows to exactly 0 in float32, and a
        # fully masked row stays finite.
        scores += (1.0 - attention_mask) * -10000.0
    return scores


def attention_probs(scores, config, head_mask, exact):
    """Softmax, dropout and the head mask: float32 [B, N, F, T] -> (probabilities [B, N, F, T],
    the dropout scale still to apply to the context: 1.0 when `exact`)."""
    probs = tf.nn.softmax(scores)  # [B, N, F, T], float32
    probs, dropout_scale = dropout.dropout_unscaled(probs, config.attention_probs_dropout_prob)
    if dropout_scale != 1.0 and exact:
        # Scaling the context instead is exact only in float32 (1/0.9 is not a bfloat16).
        probs *= dropout_scale
        dropout_scale = 1.0
    if head_mask is not None:
        head_mask = tf.cast(head_mask, tf.float32)
        if head_mask.shape.ndims != 1:
            raise ValueError(f"attention_layer: head_mask must have shape [num_attention_heads] "
                             f"= [{config.num_attention_heads}], got {head_mask.shape}.")
        probs *= tf.reshape(head_mask, [1, config.num_attention_heads, 1, 1])
    return probs, dropout_scale


def relative_position_scores(query, key, from_seq_length, to_seq_length, config):
    """The learned relative-position attention scores of Hugging Face BERT.

    Creates `distance_embedding` [2P - 1, D] in the current scope; row f - t + P - 1 is the
    vector d(f - t) for query position f and key position t.

    Args:
      query: Tensor [B, N, F, D] (already scaled by 1/sqrt(D)).
      key: Tensor [B, N, T, D] (scaled) for "relative_key_query", else None.
      from_seq_length, to_seq_length: F and T (ints or scalar Tensors).
      config: the `settings.AttentionConfig` (D, P and the initializer's stddev).

    Returns:
      Tensor [B, N, F, T]: q_f . d(f - t), plus k_t . d(f - t) when `key` is given.
    """
    max_positions = config.max_position_embeddings
    distance_table = ops.get_variable(
        "distance_embedding", [2 * max_positions - 1, config.size_per_head],
        initializer=ops.create_initializer(config.initializer_range), dtype=query.dtype)
    checks = (ops.check_seq_length(from_seq_length, max_positions)
              + ops.check_seq_length(to_seq_length, max_positions))
    with tf.control_dependencies(checks):
        distance = (tf.expand_dims(tf.range(from_seq_length), 1)
                    - tf.expand_dims(tf.range(to_seq_length), 0))  # [F, T]
    distance_vectors = ops.gather_rows(distance_table, distance + max_positions - 1)
    scores = tf.einsum("bnfd,ftd->bnft", query, distance_vectors)  # [F, T, D] -> [B,N,F,T]
    if key is not None:
        scores += tf.einsum("bntd,ftd->bnft", key, distance_vectors)
    return scores
