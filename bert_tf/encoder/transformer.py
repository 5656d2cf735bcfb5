"""The multi-layer bidirectional Transformer encoder of "Attention is All You Need".

Variables are created under `layer_{i}/...` in the current variable scope, in the Google BERT
checkpoint layout. Activations stay 2-D [B*S, H] from the first layer to the last (one reshape
in, one out), so every dense layer is a plain MatMul + BiasAdd, and only attention reshapes to
4-D; on the real tokens only (`Computation.token_index`) they are [K, H].

Each layer reads top to bottom as Google's does: attention (`attention/self`) -> dense +
residual + norm (`attention/output`) -> [cross-attention to an encoder output, the same two
blocks under `crossattention/`] -> intermediate (`intermediate`) -> output + residual + norm
(`output`). With pre-LN each block's norm moves before it (`<block>/output/LayerNorm`) and one
final `LayerNorm` follows the last layer. ALBERT's shared layers (`LayerVariant.sharing`) have
their own names and map E-wide embeddings to H first (`bert_tf.encoder.albert`).
"""

import contextlib
import dataclasses

import tensorflow as tf

from bert_tf.encoder import albert, attention, dropout, ops, recompute

tf1 = tf.compat.v1


@dataclasses.dataclass(frozen=True)
class QueryRows:
    """The rows the last encoder layer computes with `Computation.output_positions`."""

    flat: tf.Tensor  # int32 [B*F]: indices into the [B*S] rows, row-major.
    count: object  # F, an int or a scalar Tensor.
    mask: tf.Tensor | None  # [B, F, S]: the attention mask's rows at those positions.

    @classmethod
    def of(cls, output_positions, attention_mask, batch_size, seq_length):
        positions = tf.cast(output_positions, tf.int32)
        count = ops.get_shape_list(positions, expected_rank=2, name="output_positions")[1]
        flat = tf.reshape(positions + tf.expand_dims(tf.range(batch_size) * seq_length, 1), [-1])
        mask = None
        if attention_mask is not None:
            mask = tf.gather(attention_mask, positions, batch_dims=1)
        return cls(flat, count, mask)


@dataclasses.dataclass(frozen=True)
class EncoderGraph:
    """What every layer of this graph reads besides its input: the sizes, the masks, the
    real-token index, the last layer's query rows and the encoder output to cross-attend."""

    batch_size: object  # B, an int or a scalar Tensor.
    seq_length: object  # S.
    attention_mask: tf.Tensor | None  # [B, S, S].
    token_index: tf.Tensor | None  # int32 [K, 1].
    query_rows: QueryRows | None
    encoder_output: tf.Tensor | None  # [B*T, H_enc].
    encoder_seq_length: object  # T.
    encoder_attention_mask: tf.Tensor | None  # [B, S, T].


def transformer_layers(input_tensor, attention_mask, layer, num_hidden_layers, computation,
                       return_all=True):
    """The encoder's layers over `input_tensor`.

    Args:
      input_tensor: float Tensor [B, S, H], or [B*S, H] (then `attention_mask` [B, S, S] is
        required to know B and S, and outputs are 2-D as well); with ALBERT's sharing the
        width may be E (mapped to H by `embedding_hidden_mapping_in`).
      attention_mask: optional Tensor [B, S, S], 1 where position i may attend to position j.
      layer: a `settings.LayerConfig`, what every layer is.
      num_hidden_layers: L.
      computation: a `settings.Computation`, how this graph computes them.
      return_all: every layer's output, else the last one's only.

    Returns:
      (outputs, probabilities): outputs a list of L Tensors [B, S, H] ([B*S, H] for a 2-D
      input; the last one [B, F, H] with `output_positions`), or with `return_all` False the
      last one alone; probabilities a list of L self-attention [B, N, S, S] ([B, N, F, S]).

    Raises:
      ValueError: if ranks or widths are wrong, or a setting cannot be computed here.
    """
    input_shape = ops.get_shape_list(input_tensor, expected_rank=[2, 3], name="input_tensor")
    batch_size, seq_length = _batch_and_length(input_shape, attention_mask)
    # The residual connections need the input width to equal the hidden size.
    sharing = layer.variant.sharing
    if input_shape[-1] != layer.hidden_size and sharing is None:
        raise ValueError(f"The width of the input tensor ({input_shape[-1]}) != hidden size "
                         f"({layer.hidden_size})")
    head_masks = head_mask_per_layer(computation.head_mask, num_hidden_layers,
                                     layer.num_attention_heads)
    encoder_output, encoder_seq_length = _cross_attention_input(computation)
    _check_computation(computation, layer)

    hidden = ops.reshape_to_matrix(input_tensor)  # [B*S, H], kept 2-D across layers.
    if sharing is not None:
        hidden = albert.map_embeddings(hidden, layer)  # [B*S, E] -> [B*S, H]
    if computation.token_index is not None:
        hidden = tf.gather_nd(hidden, computation.token_index)  # [K, H]
    query_rows = None
    if computation.output_positions is not None:
        query_rows = QueryRows.of(computation.output_positions, attention_mask, batch_size,
                                  seq_length)
    graph = EncoderGraph(batch_size, seq_length, attention_mask, computation.token_index,
                         query_rows, encoder_output, encoder_seq_length,
                         computation.encoder_attention_mask)
    # One key per layer, so the layer's dropout masks are a function of its inputs: the same
    # whether or not the backward pass recomputes it.
    layer_keys = dropout.random_keys(num_hidden_layers) if layer.uses_dropout else None
    outputs, all_probs = [], []
    for index in range(num_hidden_layers):
        last = index == num_hidden_layers - 1
        if last and query_rows is not None and graph.token_index is not None:
            # The last layer picks its query rows from the padded layout (zeros at padding).
            hidden = tf.scatter_nd(graph.token_index, hidden,
                                   [batch_size * seq_length, layer.hidden_size])
        with (tf1.variable_scope(f"layer_{index}") if sharing is None
              else albert.layer_scope(index, num_hidden_layers, sharing)):
            key = None if layer_keys is None else layer_keys[index]
            hidden, probs = _layer_maybe_recomputed(hidden, encoder_output, key, layer, graph,
                                                    head_masks[index], last,
                                                    computation.recompute_grad)
        all_probs.append(probs)
        outputs.append(hidden)
    if layer.variant.pre_norm:
        # Pre-LN leaves the residual stream un-normalised; one final norm fixes its scale.
        outputs[-1] = ops.layer_norm(outputs[-1], "LayerNorm", layer.variant.layer_norm_eps)
    if not return_all:
        return _restore(outputs[-1], True, graph, layer, len(input_shape)), all_probs
    return [_restore(output, index == num_hidden_layers - 1, graph, layer, len(input_shape))
            for index, output in enumerate(outputs)], all_probs


def encoder_layer(layer_input, encoder_output, dropout_key, layer, graph, head_mask, last):
    """One layer in the current scope: [B*S, H] -> ([B*S, H], probabilities [B, N, S, S]);
    the last one with query rows: -> ([B*F, H], [B, N, F, S])."""
    if layer.variant.sharing is not None:
        return albert.albert_layer(layer_input, dropout_key, layer, graph, head_mask, last)
    rows = graph.query_rows if last else None
    keys = (contextlib.nullcontext() if dropout_key is None
            else dropout.dropout_key_scope(dropout_key))
    with keys:
        with tf1.variable_scope("attention"):
            attention_output, probs = attention_block(
                layer_input, None, graph.seq_length, graph.attention_mask, head_mask,
                layer.attention(), layer, graph, rows)
        if encoder_output is not None:
            with tf1.variable_scope("crossattention"):
                attention_output, _ = attention_block(
                    attention_output, encoder_output, graph.encoder_seq_length,
                    graph.encoder_attention_mask, head_mask, layer.attention(cross=True),
                    layer, graph)
        return feed_forward_block(attention_output, layer), probs


def attention_block(block_input, to_tensor, to_seq_length, mask, head_mask, config, layer,
                    graph, rows=None):
    """Attention (`self`) then dense + residual + norm (`output`), in the current scope:
    [B*S, H] -> ([B*S, H], probabilities [B, N, S, T]).

    Post-LN: LayerNorm(x + Dropout(Dense(Attn(x)))); pre-LN: x + Dropout(Dense(Attn(LN(x)))).
    `to_tensor` None: self-attention to the (normalised) input. `rows`: a `QueryRows`; the
    queries and the output are then its [B*F] rows only.
    """
    attention_input = block_input
    if layer.variant.pre_norm:
        with tf1.variable_scope("output"):
            attention_input = ops.layer_norm(block_input, "LayerNorm",
                                             layer.variant.layer_norm_eps)
    to_tensor = attention_input if to_tensor is None else to_tensor
    from_seq_length, index = graph.seq_length, graph.token_index
    if rows is not None:
        attention_input = tf.gather(attention_input, rows.flat)
        block_input = tf.gather(block_input, rows.flat)
        from_seq_length, mask, index = rows.count, rows.mask, None
    with tf1.variable_scope("self"):
        attention_output, probs = attention.attention(
            attention_input, to_tensor, mask, config, graph.batch_size, from_seq_length,
            to_seq_length, head_mask, index)
    with tf1.variable_scope("output"):
        return project_and_add(attention_output, block_input, layer), probs


def feed_forward_block(attention_output, layer):
    """Intermediate (`intermediate`) then output + residual + norm (`output`):
    [B*S, H] -> [B*S, I] -> [B*S, H], in the current scope."""
    feed_forward_input = attention_output
    if layer.variant.pre_norm:
        with tf1.variable_scope("output"):
            feed_forward_input = ops.layer_norm(attention_output, "LayerNorm",
                                                layer.variant.layer_norm_eps)
    with tf1.variable_scope("intermediate"):
        intermediate_output = ops.dense_layer(feed_forward_input, layer.intermediate_size,
                                              layer.intermediate_act_fn,
                                              ops.create_initializer(layer.initializer_range))
    with tf1.variable_scope("output"):
        return project_and_add(intermediate_output, attention_output, layer)


def project_and_add(hidden, residual, layer):
    """A block's output: dense to H, dropout, plus `residual`, then (post-LN) LayerNorm, in
    the current scope. [B*S, *] -> [B*S, H]."""
    hidden = dropout.dropout(
        ops.dense_layer(hidden, layer.hidden_size, None,
                        ops.create_initializer(layer.initializer_range)),
        layer.hidden_dropout_prob)
    if layer.variant.pre_norm:
        return hidden + residual
    return ops.layer_norm(hidden + residual, epsilon=layer.variant.layer_norm_eps)


def head_mask_per_layer(head_mask, num_hidden_layers, num_attention_heads):
    """Splits a head mask [L, N] or [N] into a list of L masks [N] (or Nones).

    Raises:
      ValueError: if the mask is not rank 1 or 2 or its static sizes do not match.
    """
    if head_mask is None:
        return [None] * num_hidden_layers
    head_mask = tf.cast(head_mask, tf.float32)
    shape = head_mask.shape.as_list() if head_mask.shape.ndims is not None else None
    expected = (f"[num_hidden_layers, num_attention_heads] = [{num_hidden_layers}, "
                f"{num_attention_heads}] or [{num_attention_heads}]")
    if shape is None or len(shape) not in (1, 2) or shape[-1] not in (None, num_attention_heads):
        raise ValueError(f"head_mask must have shape {expected}, got {shape}.")
    if len(shape) == 1:
        return [head_mask] * num_hidden_layers
    if shape[0] not in (None, num_hidden_layers):
        raise ValueError(f"head_mask must have shape {expected}, got {shape}.")
    return [head_mask[i] for i in range(num_hidden_layers)]


def _layer_maybe_recomputed(hidden, encoder_output, key, layer, graph, head_mask, last,
                            recompute_grad):
    """`encoder_layer`, with `recompute_grad` rebuilt in the backward pass instead of kept."""
    if not recompute_grad:
        return encoder_layer(hidden, encoder_output, key, layer, graph, head_mask, last)
    inputs = [hidden, encoder_output, key]
    present = [tensor for tensor in inputs if tensor is not None]

    def layer_of_present(*tensors):
        tensors = iter(tensors)
        return encoder_layer(*[None if tensor is None else next(tensors) for tensor in inputs],
                             layer, graph, head_mask, last)

    return recompute.recompute_layer(layer_of_present, present)


def _batch_and_length(input_shape, attention_mask):
    """B and S of a [B, S, H] input, or of a [B*S, H] one from its [B, S, S] mask."""
    if len(input_shape) == 3:
        return input_shape[0], input_shape[1]
    if attention_mask is None:
        raise ValueError("transformer_model: a 2-D input_tensor [batch*seq, hidden] needs "
                         "attention_mask [batch, seq, seq] to know batch and seq sizes.")
    mask_shape = ops.get_shape_list(attention_mask, expected_rank=3, name="attention_mask")
    return mask_shape[0], mask_shape[1]


def _cross_attention_input(computation):
    """The encoder output as [B*T, H_enc] and T, or (None, None) without cross-attention."""
    encoder_output = computation.encoder_output
    if encoder_output is None:
        return None, None
    encoder_shape = ops.get_shape_list(encoder_output, expected_rank=[2, 3],
                                       name="encoder_output")
    if len(encoder_shape) == 3:
        encoder_seq_length = encoder_shape[1]
    elif computation.encoder_attention_mask is None:
        raise ValueError("transformer_model: a 2-D encoder_output [batch*enc_seq, width] "
                         "needs encoder_attention_mask [batch, seq, enc_seq] to know enc_seq.")
    else:
        encoder_seq_length = ops.get_shape_list(computation.encoder_attention_mask,
                                                expected_rank=3,
                                                name="encoder_attention_mask")[2]
    return ops.reshape_to_matrix(encoder_output), encoder_seq_length


def _check_computation(computation, layer):
    """Refuses the combinations the layers cannot compute."""
    cross = computation.encoder_output is not None
    if cross and layer.variant.sharing is not None:
        raise ValueError("transformer_model: ALBERT's shared layers have no cross-attention "
                         "(encoder_output).")
    if computation.token_index is not None and cross:
        raise ValueError("transformer_model: token_index (padding-free layers) works with "
                         "self-attention only, not with encoder_output.")
    if computation.output_positions is not None and (
            cross or layer.variant.position_embedding_type != "absolute"):
        raise ValueError("transformer_model: output_positions works with self-attention and "
                         "absolute position embeddings only (relative scores assume queries "
                         "at positions 0..S-1).")


def _restore(tensor, last, graph, layer, input_rank):
    """A layer's 2-D output in the input's layout: padding back, [B, S, H] for a 3-D input
    ([B, F, H] for the last layer with query rows)."""
    rows = graph.seq_length
    if last and graph.query_rows is not None:
        rows = graph.query_rows.count
    elif graph.token_index is not None:
        tensor = tf.scatter_nd(graph.token_index, tensor,
                               [graph.batch_size * graph.seq_length, layer.hidden_size])
    return tensor if input_rank == 2 else tf.reshape(
        tensor, [graph.batch_size, rows, layer.hidden_size])
