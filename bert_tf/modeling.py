"""The BERT encoder as graph-mode (tf.compat.v1) builders: Google's `modeling.py` API.

A drop-in for the original Google `modeling.py`: the same functions, argument names, variable
names and checkpoint layout, built from `tf.compat.v1.get_variable` and plain ops (no Keras, no
tf.contrib), so it runs on current TensorFlow 2.x in graph mode. The builders live in the
`bert_tf.encoder` package, one concept a file; this module is their public face.

Shapes use B = batch size, S (F, T) = sequence length (from / to), H = hidden size,
N = attention heads, D = H / N (size per head), I = intermediate size, V = vocabulary size.

Inside `transformer_model` activations stay 2-D [B*S, H] from the first layer to the last (one
reshape in, one out), so every dense layer is a plain MatMul + BiasAdd that grappler / oneDNN
fuse, and only attention reshapes to 4-D.

Encoder variants found in other BERT code are config keys, all off by default so Google configs
and checkpoints behave exactly as before: `position_embedding_type` (learned relative positions,
Hugging Face semantics), `layer_norm_type` (pre-LN blocks), `layer_norm_eps`, more `hidden_act`
values, and ALBERT's `embedding_size` / `num_hidden_groups` / `inner_group_num` (factorized
embeddings, shared layers in Google ALBERT's layout: `bert_tf.encoder.albert`). Beyond Google's
parameters, `transformer_model` and `attention_layer` take a
`LayerVariant` (those keys) and `transformer_model` a `Computation` (head masks,
cross-attention to an encoder output, padding-free layers, recomputation).
"""

import copy

import tensorflow as tf

from bert_tf import precision
from bert_tf.encoder import attention, embeddings, pooler, transformer
from bert_tf.encoder.attention import (  # noqa: F401  (the public names of the API)
    create_attention_mask_from_input_mask,
    create_attention_mask_from_packed_positions,
    padding_free_index,
)
from bert_tf.encoder.checkpoint_init import (  # noqa: F401
    get_assignment_map_from_checkpoint,
    init_from_checkpoint,
    restore_summary,
)
from bert_tf.encoder.config import BertConfig  # noqa: F401
from bert_tf.encoder.dropout import (  # noqa: F401
    dropout,
    dropout_key_scope,
    dropout_unscaled,
    layer_norm_and_dropout,
    portable_seed,
    random_keys,
    random_uint16,
)
from bert_tf.encoder.embeddings import embedding_lookup, embedding_postprocessor  # noqa: F401
from bert_tf.encoder.ops import (  # noqa: F401
    ACTIVATIONS,
    assert_rank,
    create_initializer,
    dense_layer,
    gather_rows,
    gelu,
    gelu_tanh,
    get_activation,
    get_shape_list,
    get_variable,
    layer_norm,
    reshape_from_matrix,
    reshape_to_matrix,
    variables_owned_by_caller,
)
from bert_tf.encoder.recompute import recompute_layer  # noqa: F401
from bert_tf.encoder.settings import (  # noqa: F401
    LAYER_NORM_TYPES,
    POSITION_EMBEDDING_TYPES,
    AttentionConfig,
    Computation,
    LayerConfig,
    LayerSharing,
    LayerVariant,
)

tf1 = tf.compat.v1


class BertModel:
    """BERT: embeddings, a Transformer encoder and a pooler on the [CLS] token.

    Example:

    ```python
    input_ids = tf.constant([[31, 51, 99], [15, 5, 0]])
    input_mask = tf.constant([[1, 1, 1], [1, 1, 0]])
    token_type_ids = tf.constant([[0, 0, 1], [0, 2, 0]])
    config = modeling.BertConfig(vocab_size=32000, hidden_size=512,
        num_hidden_layers=8, num_attention_heads=8, intermediate_size=1024)
    model = modeling.BertModel(config=config, is_training=True,
        input_ids=input_ids, input_mask=input_mask, token_type_ids=token_type_ids)
    pooled_output = model.get_pooled_output()  # [B, H]
    ```

    Beyond Google's arguments:
      compute_dtype: tf.float32, tf.bfloat16 or tf.float16. Variables stay float32; matmuls
        run in this dtype; layer norm and softmax in float32. Outputs are in this dtype.
      head_mask: optional float array or Tensor [num_hidden_layers, N] or [N] (same for every
        layer) multiplying each head's attention probabilities after softmax and dropout: 0
        removes a head, 1 keeps it.
      recompute_grad: recompute each encoder layer's activations in the backward pass instead
        of keeping them (`Computation.recompute_grad`): less memory, same gradients.
      position_ids: optional int Tensor [B, S], each token's position. For packed rows
        (several examples one after another, each from position 0): each token then attends
        only to the tokens of its own example (`create_attention_mask_from_packed_positions`).
        None: 0..S-1 in every row.
      pooled_positions: optional int Tensor [B, K], the tokens the pooler reads (each packed
        example's [CLS]); `get_pooled_output` is then [B * K, H]. None: the first token of
        each row, [B, H].
      padding_free: run the encoder layers on the real tokens only (`padding_free_index`): the
        same outputs at real tokens, zeros at padding in the sequence outputs, and no
        dense-layer work for padding. Dynamic shapes: not for TPUs or XLA.
      pooled_only: the caller reads the pooled output only, so the last layer computes the
        pooled positions alone (absolute positions; `get_sequence_output` is then [B, K, H]).
      sequence_positions: optional int Tensor [B, P], the only positions of the sequence
        output the caller reads: `get_sequence_output` is [B, P, H], and the last layer
        computes them and the pooled positions only (absolute positions).
    """

    def __init__(self, config, is_training, input_ids, input_mask=None, token_type_ids=None,
                 use_one_hot_embeddings=False, scope=None, compute_dtype=tf.float32,
                 head_mask=None, recompute_grad=False, position_ids=None,
                 pooled_positions=None, padding_free=False, pooled_only=False,
                 sequence_positions=None):
        """Builds the model in the current graph.

        Args:
          config: `BertConfig`.
          is_training: True for training; False turns every dropout off.
          input_ids: int32/int64 Tensor [B, S], WordPiece ids.
          input_mask: optional int Tensor [B, S], 1 for real tokens, 0 for padding.
          token_type_ids: optional int Tensor [B, S], segment ids.
          use_one_hot_embeddings: look embeddings up with a one-hot matmul (faster on TPUs)
            instead of a gather.
          scope: variable scope, default "bert".
          The others: see the class docstring.

        Raises:
          BertTfError: if the config is inconsistent or the sequence is longer than
            `max_position_embeddings`.
        """
        config = copy.deepcopy(config)
        config.validate()
        if not is_training:
            config.hidden_dropout_prob = 0.0
            config.attention_probs_dropout_prob = 0.0

        batch_size, seq_length = get_shape_list(input_ids, expected_rank=2, name="input_ids")
        if input_mask is None:
            input_mask = tf.ones(shape=[batch_size, seq_length], dtype=tf.int32)
        if token_type_ids is None:
            token_type_ids = tf.zeros(shape=[batch_size, seq_length], dtype=tf.int32)

        with precision.compute_dtype_scope(compute_dtype, scope, default_name="bert"):
            with tf1.variable_scope("embeddings"):
                self.embedding_output, self.embedding_table = embeddings.bert_embeddings(
                    config, input_ids, token_type_ids, position_ids, use_one_hot_embeddings)
            with tf1.variable_scope("encoder"):
                if position_ids is None:
                    attention_mask = create_attention_mask_from_input_mask(input_ids, input_mask)
                else:
                    attention_mask = create_attention_mask_from_packed_positions(position_ids,
                                                                                 input_mask)
                read = pooler.read_positions(pooled_only, sequence_positions, pooled_positions,
                                             batch_size, config.position_embedding_type)
                computation = Computation(
                    head_mask=head_mask, recompute_grad=recompute_grad,
                    token_index=padding_free_index(input_mask) if padding_free else None,
                    output_positions=None if read is None else read.output_positions)
                # The probabilities are graph tensors the encoder builds anyway; keeping
                # references to them costs nothing unless they are fetched.
                self.all_encoder_layers, self.all_attention_probs = (
                    transformer.transformer_layers(
                        self.embedding_output, attention_mask,
                        LayerConfig.of(config, is_training), config.num_hidden_layers,
                        computation))
            last_layer = self.all_encoder_layers[-1]
            self.sequence_output = pooler.sequence_output(last_layer, read, sequence_positions)
            self.pooled_output = pooler.pooled_output(last_layer, read, pooled_positions,
                                                      config.hidden_size,
                                                      config.initializer_range)

    def get_pooled_output(self):
        """Tanh-pooled [CLS] output, [B, H]."""
        return self.pooled_output

    def get_sequence_output(self):
        """Final encoder layer, [B, S, H] ([B, K, H] with `pooled_only`, [B, P, H] with
        `sequence_positions`)."""
        return self.sequence_output

    def get_all_encoder_layers(self):
        """Every encoder layer's output, a list of num_hidden_layers [B, S, H] Tensors.

        With `layer_norm_type` "pre" the last one is after the final layer norm
        and the others are the un-normalised residual stream."""
        return self.all_encoder_layers

    def get_all_attention_probs(self):
        """Every layer's self-attention probabilities, a list of num_hidden_layers
        [B, N, F, T] Tensors (F = T = S) in the compute dtype, after dropout and
        `head_mask`, as used to weight the values (Hugging Face `attentions`)."""
        return self.all_attention_probs

    def get_embedding_output(self):
        """Word + position + token-type embeddings after layer norm and dropout, [B, S, H]
        ([B, S, E] for ALBERT, before `embedding_hidden_mapping_in`).

        For relative `position_embedding_type`s no position embedding is added here."""
        return self.embedding_output

    def get_embedding_table(self):
        """The word embedding table [V, H] ([V, E] for ALBERT), in the compute dtype."""
        return self.embedding_table


def attention_layer(from_tensor, to_tensor, attention_mask=None, num_attention_heads=1,
                    size_per_head=512, query_act=None, key_act=None, value_act=None,
                    attention_probs_dropout_prob=0.0, initializer_range=0.02,
                    do_return_2d_tensor=False, batch_size=None, from_seq_length=None,
                    to_seq_length=None, variant=None, head_mask=None,
                    do_return_attention_probs=False):
    """Multi-headed scaled dot-product attention from `from_tensor` to `to_tensor`.

    Self-attention when both are the same tensor. Variables `query`, `key`, `value` (kernel
    [H_from or H_to, N*D], bias [N*D]) in the current scope, plus `distance_embedding`
    [2 * max_position_embeddings - 1, D] for the relative position types.

    Args:
      from_tensor: float Tensor [B, F, H_from], or [B*F, H_from] with `batch_size` and
        `from_seq_length` given.
      to_tensor: float Tensor [B, T, H_to], or [B*T, H_to] with `batch_size` and
        `to_seq_length` given.
      attention_mask: optional Tensor [B, F, T] of 1 (attend) / 0 (masked).
      num_attention_heads: N.
      size_per_head: D.
      query_act, key_act, value_act: activations of the projections.
      attention_probs_dropout_prob: dropout on the attention probabilities.
      initializer_range: stddev of the kernel initializers.
      do_return_2d_tensor: return [B*F, N*D] instead of [B, F, N*D].
      batch_size, from_seq_length, to_seq_length: needed for 2-D inputs.
      variant: optional `LayerVariant`: its `position_embedding_type` "relative_key" /
        "relative_key_query" adds Hugging Face's learned relative positions, scores
        q_f . k_t + q_f . d(f - t) (+ k_t . d(f - t)), all divided by sqrt(D); F and T must
        not exceed its `max_position_embeddings`. None: Google's attention.
      head_mask: optional float array or Tensor [N] multiplying each head's probabilities
        after softmax and dropout (Hugging Face semantics).
      do_return_attention_probs: also return the probabilities.

    Returns:
      float Tensor [B, F, N*D], or [B*F, N*D] if `do_return_2d_tensor`; with
      `do_return_attention_probs`, a pair (that Tensor, probabilities [B, N, F, T] in the
      dtype of the values, after dropout and `head_mask`).

    Raises:
      ValueError: on inconsistent ranks or missing sizes for 2-D inputs, or a `head_mask`
        that is not [N].
      BertTfError: if F or T is static and longer than `max_position_embeddings` for a
        relative position type.
    """
    variant = variant or LayerVariant()
    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3], name="from_tensor")
    to_shape = get_shape_list(to_tensor, expected_rank=[2, 3], name="to_tensor")
    if len(from_shape) != len(to_shape):
        raise ValueError("The rank of `from_tensor` must match the rank of `to_tensor`.")
    if len(from_shape) == 3:
        batch_size, from_seq_length, to_seq_length = from_shape[0], from_shape[1], to_shape[1]
    elif batch_size is None or from_seq_length is None or to_seq_length is None:
        raise ValueError("When passing in rank 2 tensors to attention_layer, the values for "
                         "`batch_size`, `from_seq_length`, and `to_seq_length` must all be "
                         "specified.")
    config = AttentionConfig(num_attention_heads, size_per_head, attention_probs_dropout_prob,
                             initializer_range, variant.position_embedding_type,
                             variant.max_position_embeddings, query_act, key_act, value_act)
    context, probs = attention.attention(
        reshape_to_matrix(from_tensor), reshape_to_matrix(to_tensor), attention_mask, config,
        batch_size, from_seq_length, to_seq_length, head_mask,
        exact_probs=do_return_attention_probs)
    if not do_return_2d_tensor:
        context = tf.reshape(context, [batch_size, from_seq_length, config.width])
    return (context, probs) if do_return_attention_probs else context


def transformer_model(input_tensor, attention_mask=None, hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072, intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                      initializer_range=0.02, do_return_all_layers=False, variant=None,
                      computation=None, do_return_attention_probs=False):
    """The multi-layer bidirectional Transformer encoder of "Attention is All You Need".

    Variables are created under `layer_{i}/...` in the current variable scope, in the Google
    BERT checkpoint layout (see `bert_tf.encoder.transformer`); "pre" `layer_norm_type` adds a
    final `LayerNorm` in the current scope.

    Args:
      input_tensor: float Tensor [B, S, H], or [B*S, H] (then `attention_mask` [B, S, S] is
        required to know B and S, and outputs are 2-D as well).
      attention_mask: optional Tensor [B, S, S], 1 where position i may attend to position j
        (see `create_attention_mask_from_input_mask`).
      hidden_size: H.
      num_hidden_layers: number of layers.
      num_attention_heads: N; must divide H.
      intermediate_size: I, width of the feed-forward layer.
      intermediate_act_fn: activation of the feed-forward layer.
      hidden_dropout_prob: dropout on each sub-layer's output.
      attention_probs_dropout_prob: dropout on attention probabilities.
      initializer_range: stddev of the kernel initializers.
      do_return_all_layers: return every layer's output instead of the last.
      variant: optional `LayerVariant` (norm placement and epsilon, position type; None:
        Google BERT's). Cross-attention always uses plain attention, as Hugging Face does.
      computation: optional `Computation`: head masks, cross-attention to an encoder output,
        padding-free layers, the last layer at some positions, recomputation (None: all
        layers, plainly).
      do_return_attention_probs: also return the self-attention probabilities.

    Returns:
      Tensor [B, S, H] (the last layer; [B, F, H] with `output_positions`), or a list of
      num_hidden_layers such Tensors if `do_return_all_layers`; [B*S, H] for a 2-D input.
      With `do_return_attention_probs`, a pair (that, list of num_hidden_layers [B, N, S, S]
      self-attention probabilities).

    Raises:
      ValueError: if H is not a multiple of N, ranks are wrong, or a variant argument has an
        unknown value or shape.
    """
    layer = LayerConfig(hidden_size, num_attention_heads, intermediate_size,
                        intermediate_act_fn, hidden_dropout_prob, attention_probs_dropout_prob,
                        initializer_range, variant or LayerVariant())
    outputs, probs = transformer.transformer_layers(
        input_tensor, attention_mask, layer, num_hidden_layers, computation or Computation(),
        return_all=do_return_all_layers)
    return (outputs, probs) if do_return_attention_probs else outputs
