"""`BertConfig`: the `bert_config.json` of a checkpoint, and the values its keys may take."""

import copy
import json

import tensorflow as tf

from bert_tf.encoder import ops, settings
from bert_tf.errors import BertTfError

_VARIANT = settings.LayerVariant  # The defaults of the variant keys.
# ALBERT's keys: None (the default) leaves them out of `to_dict`, and the model is BERT.
ALBERT_KEYS = ("embedding_size", "num_hidden_groups", "inner_group_num")


class BertConfig:
    """Configuration for `BertModel` (the `bert_config.json` of a checkpoint).

    Unknown keys read from JSON are kept as attributes and written back by
    `to_dict`, so configs from other BERT code survive a round trip.
    """

    def __init__(self,
                 vocab_size,
                 hidden_size=768,
                 num_hidden_layers=12,
                 num_attention_heads=12,
                 intermediate_size=3072,
                 hidden_act="gelu",
                 hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1,
                 max_position_embeddings=512,
                 type_vocab_size=16,
                 initializer_range=0.02,
                 layer_norm_eps=_VARIANT.layer_norm_eps,
                 position_embedding_type=_VARIANT.position_embedding_type,
                 layer_norm_type=_VARIANT.layer_norm_type,
                 embedding_size=None,
                 num_hidden_groups=None,
                 inner_group_num=None):
        """Constructs BertConfig.

        Args:
          vocab_size: V, the number of WordPiece tokens.
          hidden_size: H, the width of the encoder layers and the pooler.
          num_hidden_layers: number of Transformer layers.
          num_attention_heads: N, attention heads per layer; must divide H.
          intermediate_size: I, the width of the feed-forward layer.
          hidden_act: feed-forward activation name (see `get_activation`).
          hidden_dropout_prob: dropout on embeddings, encoder and pooler outputs.
          attention_probs_dropout_prob: dropout on attention probabilities.
          max_position_embeddings: the longest sequence the model accepts.
          type_vocab_size: number of `token_type_ids` values.
          initializer_range: stddev of the truncated normal weight initializer.
          layer_norm_eps: epsilon added to the variance in every layer norm.
          position_embedding_type: "absolute" (learned table added to the
            embeddings), "relative_key" or "relative_key_query" (learned
            distance vectors inside each self-attention, Hugging Face semantics;
            no absolute table is added).
          layer_norm_type: "post" (BERT: LayerNorm(x + sublayer(x))) or "pre"
            (x + sublayer(LayerNorm(x)), one final layer norm on the encoder output).
          embedding_size: E, ALBERT's factorized embeddings: word, position and token-type
            tables [*, E], then `encoder/embedding_hidden_mapping_in` [E, H] (when E != H),
            and ALBERT's shared layers. None: BERT (tables [*, H], `layer_{i}` weights).
          num_hidden_groups: ALBERT: G groups of layers, each sharing one set of weights
            (default 1).
          inner_group_num: ALBERT: attention + FFN blocks per layer (default 1).
        """
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.hidden_act = hidden_act
        self.intermediate_size = intermediate_size
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.position_embedding_type = position_embedding_type
        self.layer_norm_type = layer_norm_type
        self.embedding_size = embedding_size
        self.num_hidden_groups = num_hidden_groups
        self.inner_group_num = inner_group_num

    @property
    def embedding_width(self):
        """E, the width of the embedding tables (`hidden_size` for BERT)."""
        return self.hidden_size if self.embedding_size is None else self.embedding_size

    @property
    def sharing(self):
        """ALBERT's `settings.LayerSharing`, or None for BERT's layers."""
        if self.embedding_size is None:
            return None
        return settings.LayerSharing(self.num_hidden_groups or 1, self.inner_group_num or 1)

    @classmethod
    def from_dict(cls, json_object):
        """Constructs a `BertConfig` from a Python dictionary of parameters."""
        config = BertConfig(vocab_size=None)
        for key, value in json_object.items():
            config.__dict__[key] = value
        return config

    @classmethod
    def from_json_file(cls, json_file):
        """Reads and validates a `bert_config.json`; errors name the file and the fix."""
        try:
            with tf.io.gfile.GFile(json_file, "r") as reader:
                text = reader.read()
        except (tf.errors.NotFoundError, FileNotFoundError, IsADirectoryError):
            raise BertTfError(f"BERT config file '{json_file}' does not exist; pass an existing "
                              "bert_config.json with --bert_config_file.") from None
        try:
            json_object = json.loads(text)
        except ValueError as e:
            raise BertTfError(f"BERT config file '{json_file}' is not valid JSON ({e}); "
                              "fix the file or pass another --bert_config_file.") from None
        if not isinstance(json_object, dict):
            raise BertTfError(f"BERT config file '{json_file}' must hold a JSON object of "
                              "parameters such as {\"vocab_size\": 30522, ...}.")
        config = cls.from_dict(json_object)
        config.validate(source=json_file)
        return config

    def validate(self, source="BERT config"):
        """Raises `BertTfError` if the sizes are missing, negative or inconsistent."""
        for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, key, None)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise BertTfError(f"{source}: '{key}' must be a positive integer, got {value!r}; "
                                  "fix the config file.")
        if self.hidden_size % self.num_attention_heads:
            raise BertTfError(
                f"{source}: hidden_size ({self.hidden_size}) is not a multiple of "
                f"num_attention_heads ({self.num_attention_heads}); pick sizes where it divides.")
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, key, None)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise BertTfError(f"{source}: '{key}' must be in [0, 1), got {value!r}.")
        if isinstance(self.hidden_act, str) and self.hidden_act.lower() not in ops.ACTIVATIONS:
            raise BertTfError(f"{source}: unknown hidden_act '{self.hidden_act}'; use one of "
                              f"{', '.join(ops.ACTIVATIONS)}.")
        eps = self.layer_norm_eps
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0.0 < eps < 1.0:
            raise BertTfError(f"{source}: 'layer_norm_eps' must be a small positive number such "
                              f"as 1e-12, got {eps!r}.")
        for key, choices in (("position_embedding_type", settings.POSITION_EMBEDDING_TYPES),
                             ("layer_norm_type", settings.LAYER_NORM_TYPES)):
            value = getattr(self, key)
            if value not in choices:
                raise BertTfError(f"{source}: unknown {key} {value!r}; use one of "
                                  f"{', '.join(choices)}.")
        self._validate_albert(source)

    def _validate_albert(self, source):
        """Raises `BertTfError` for ALBERT keys that are not positive integers, or that
        the ALBERT layers cannot honour."""
        for key in ALBERT_KEYS:
            value = getattr(self, key, None)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value <= 0):
                raise BertTfError(f"{source}: '{key}' must be a positive integer, got "
                                  f"{value!r}; fix the config file.")
        if self.embedding_size is None:
            given = [key for key in ALBERT_KEYS[1:] if getattr(self, key, None) is not None]
            if given:
                raise BertTfError(f"{source}: '{given[0]}' is an ALBERT key but 'embedding_size' "
                                  "is missing; add the checkpoint's embedding_size (128 in "
                                  "Google's ALBERT configs).")
            return
        if (self.num_hidden_groups or 1) > self.num_hidden_layers:
            raise BertTfError(f"{source}: num_hidden_groups ({self.num_hidden_groups}) exceeds "
                              f"num_hidden_layers ({self.num_hidden_layers}); fix the config.")
        if (self.layer_norm_type != _VARIANT.layer_norm_type
                or self.position_embedding_type != _VARIANT.position_embedding_type):
            raise BertTfError(f"{source}: ALBERT's layers (embedding_size given) are post-LN "
                              "with absolute positions; leave out layer_norm_type and "
                              "position_embedding_type.")

    def to_dict(self):
        """Serializes this instance to a Python dictionary (ALBERT keys only when set)."""
        return {key: copy.deepcopy(value) for key, value in self.__dict__.items()
                if not (key in ALBERT_KEYS and value is None)}

    def to_json_string(self):
        """Serializes this instance to a JSON string."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
