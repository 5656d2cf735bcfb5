"""The two objects an encoder layer's settings travel in.

`LayerConfig` is what every layer *is*: its sizes, activation, dropouts, initializer and the
`LayerVariant` keys of BERT variants (norm placement and epsilon, position type); it is built
once, from a `BertConfig` and whether the graph trains. `Computation` is how *this graph*
computes the layers: on the real tokens only, the last layer at a few positions, recomputed in
the backward pass, with head masks or cross-attention. A new encoder feature is one field on one
of them.
"""

import dataclasses

import tensorflow as tf

from bert_tf.encoder import ops

# The values the variant keys of a BERT config may take (the first is Google BERT's).
POSITION_EMBEDDING_TYPES = ("absolute", "relative_key", "relative_key_query")
LAYER_NORM_TYPES = ("post", "pre")


@dataclasses.dataclass(frozen=True)
class LayerSharing:
    """ALBERT's cross-layer parameter sharing: L layers in G groups, each group one set of
    weights (layer i uses group int(i / L * G)), each layer `inner_group_num` attention + FFN
    blocks (`transformer/group_{g}/inner_group_{j}/...`, Google ALBERT's names)."""

    num_hidden_groups: int = 1  # G.
    inner_group_num: int = 1  # Blocks per layer, each with its own weights.

    def group_of(self, index, num_hidden_layers):
        """The group of layer `index` of L = `num_hidden_layers` (Google ALBERT's rule)."""
        return int(index / num_hidden_layers * self.num_hidden_groups)


@dataclasses.dataclass(frozen=True)
class LayerVariant:
    """The layer keys of BERT variants beyond Google's; the defaults are Google BERT's, and
    `BertConfig` takes its defaults for these keys from here."""

    # "post" (BERT): x = LayerNorm(x + Sublayer(x)); "pre": x = x + Sublayer(LayerNorm(x)) and
    # one final LayerNorm on the last layer's output.
    layer_norm_type: str = LAYER_NORM_TYPES[0]
    layer_norm_eps: float = 1e-12  # Added to the variance in every layer norm.
    # "absolute" (plain attention), or Hugging Face's learned relative positions inside
    # self-attention: "relative_key" or "relative_key_query".
    position_embedding_type: str = POSITION_EMBEDDING_TYPES[0]
    max_position_embeddings: int = 512  # P: sizes the relative distance table.
    # ALBERT's shared layers and names (post-LN, absolute positions), or None: BERT's
    # `layer_{i}/...`, one set of weights a layer.
    sharing: LayerSharing | None = None

    def __post_init__(self):
        if self.layer_norm_type not in LAYER_NORM_TYPES:
            raise ValueError(f"Unknown layer_norm_type {self.layer_norm_type!r}; use one of "
                             f"{', '.join(LAYER_NORM_TYPES)}.")
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise ValueError(f"Unknown position_embedding_type {self.position_embedding_type!r};"
                             f" use one of {', '.join(POSITION_EMBEDDING_TYPES)}.")
        if self.sharing is not None and (self.pre_norm or self.position_embedding_type !=
                                         POSITION_EMBEDDING_TYPES[0]):
            raise ValueError("ALBERT's shared layers are post-LN with absolute positions: "
                             "leave out layer_norm_type and position_embedding_type.")

    @property
    def pre_norm(self):
        return self.layer_norm_type == "pre"

    @classmethod
    def of(cls, config):
        """The variant keys of a `BertConfig`."""
        return cls(config.layer_norm_type, config.layer_norm_eps, config.position_embedding_type,
                   config.max_position_embeddings, config.sharing)


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """What one multi-headed attention is: N heads of width D, their projections' activations,
    the dropout on its probabilities and how it sees positions."""

    num_attention_heads: int  # N.
    size_per_head: int  # D.
    attention_probs_dropout_prob: float
    initializer_range: float  # Stddev of the kernel initializers.
    position_embedding_type: str  # One of POSITION_EMBEDDING_TYPES.
    max_position_embeddings: int  # P: F and T must not exceed it for relative positions.
    query_act: object = None
    key_act: object = None
    value_act: object = None

    @property
    def width(self):
        """N * D, the width of the projections."""
        return self.num_attention_heads * self.size_per_head


@dataclasses.dataclass(frozen=True)
class LayerConfig:
    """What every encoder layer is."""

    hidden_size: int  # H.
    num_attention_heads: int  # N; must divide H.
    intermediate_size: int  # I, the width of the feed-forward layer.
    intermediate_act_fn: object  # The feed-forward activation (a function, or None).
    hidden_dropout_prob: float  # Dropout on each sub-layer's output.
    attention_probs_dropout_prob: float
    initializer_range: float
    variant: LayerVariant = LayerVariant()

    def __post_init__(self):
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(f"The hidden size ({self.hidden_size}) is not a multiple of the "
                             f"number of attention heads ({self.num_attention_heads})")

    @classmethod
    def of(cls, config, is_training):
        """The layers of `config` (a `BertConfig`); every dropout is off unless training."""
        keep = 1.0 if is_training else 0.0
        return cls(config.hidden_size, config.num_attention_heads, config.intermediate_size,
                   ops.get_activation(config.hidden_act), config.hidden_dropout_prob * keep,
                   config.attention_probs_dropout_prob * keep, config.initializer_range,
                   LayerVariant.of(config))

    @property
    def uses_dropout(self):
        return bool(self.hidden_dropout_prob) or bool(self.attention_probs_dropout_prob)

    def attention(self, cross=False):
        """The self-attention of each layer, or with `cross` its cross-attention (plain
        attention whatever the position type, as in Hugging Face)."""
        return AttentionConfig(
            self.num_attention_heads, self.hidden_size // self.num_attention_heads,
            self.attention_probs_dropout_prob, self.initializer_range,
            POSITION_EMBEDDING_TYPES[0] if cross else self.variant.position_embedding_type,
            self.variant.max_position_embeddings)


@dataclasses.dataclass(frozen=True)
class Computation:
    """How this graph computes the layers; the defaults compute all of them, as Google's do."""

    # Float [num_hidden_layers, N], or [N] for every layer, multiplying each head's attention
    # probabilities after softmax and dropout (layer i's row applies to its self- and
    # cross-attention, as in Hugging Face); 0 removes a head.
    head_mask: object = None
    # Keep only each layer's input for the backward pass, which builds the layer again to
    # differentiate it: one layer's activation memory instead of all, for one more forward
    # pass. Same values and gradients (dropout masks included).
    recompute_grad: bool = False
    # int32 [K, 1], the positions in [B*S] of the real tokens (`attention.padding_free_index`):
    # every layer runs on those K rows only; attention alone sees the padded layout.
    token_index: tf.Tensor | None = None
    # int [B, F], the positions whose last-layer outputs are wanted: the last layer computes
    # its queries and everything after them at those F positions only (absolute positions).
    output_positions: tf.Tensor | None = None
    # Float [B, T, H_enc] (or [B*T, H_enc] with the mask given): adds a cross-attention
    # sub-layer to every layer, attending to it under `encoder_attention_mask` [B, S, T].
    encoder_output: tf.Tensor | None = None
    encoder_attention_mask: tf.Tensor | None = None
