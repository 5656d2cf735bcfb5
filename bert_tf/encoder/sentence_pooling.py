"""Sentence embeddings pooled from the encoder's layers, as embedding services pool them.

    spec = SentencePooling("mean", layer=-2, normalize=True)
    spec.check(num_hidden_layers)
    vectors = pool(model.get_all_encoder_layers(), input_mask, spec,
                   model.get_pooled_output())   # float32 [B, H]

The one definition of the pooling math: scripts/export_encoder.py's export, the Predictor's
`embed()` on a checkpoint, `bert_tf.tf2.BertEncoder.embed` and
`bert_tf.keras.SentencePoolingLayer` all call `pool`.

  - "cls": the layer's vector at [CLS] (position 0);
  - "mean": its mean over the real tokens (`input_mask` 1);
  - "max": its element-wise maximum over the real tokens;
  - "pooler": BERT's pooler, tanh(dense(last layer at [CLS])) (the last layer only).
`layer` picks the encoder layer: -1 the last, -2 the one before, ... (bert-as-service pools
-2). `normalize` divides each vector by its L2 norm (sentence-transformers' `Normalize`).
"""

import dataclasses

import tensorflow as tf

from bert_tf.errors import BertTfError

POOLINGS = ("cls", "mean", "max", "pooler")
# sentence-transformers' (torch.nn.functional.normalize) smallest norm divided by.
_NORM_EPSILON = 1e-12


@dataclasses.dataclass(frozen=True)
class SentencePooling:
    """How a sentence vector is read off the encoder.

    Attributes:
      pooling: one of POOLINGS.
      layer: the encoder layer pooled, counted from the end: -1 the last.
      normalize: divide each vector by its L2 norm.
    """

    pooling: str = "cls"
    layer: int = -1
    normalize: bool = False

    def check(self, num_layers=None, prefix="--"):
        """Raises BertTfError in one line naming the setting and the fix.

        Args:
          num_layers: the encoder's num_hidden_layers (None: not checked against it).
          prefix: "--" where the settings are flags, "" where they are keyword arguments.
        """
        if self.pooling not in POOLINGS:
            raise BertTfError(f"{prefix}pooling={self.pooling}: use one of "
                              f"{', '.join(POOLINGS)}.")
        if isinstance(self.layer, bool) or not isinstance(self.layer, int) or self.layer >= 0 \
                or (num_layers is not None and self.layer < -num_layers):
            valid = f" to -{num_layers} (the first)" if num_layers else ", -2, ..."
            raise BertTfError(f"{prefix}pooling_layer={self.layer}: use -1 (the last layer)"
                              f"{valid}.")
        if self.pooling == "pooler" and self.layer != -1:
            raise BertTfError(f"{prefix}pooling=pooler reads the last layer only; pass "
                              f"{prefix}pooling_layer=-1 or another {prefix}pooling.")

    @property
    def key(self):
        """A name for this pooling's output, e.g. "mean@-2" or "cls@-1+normalized"."""
        return f"{self.pooling}@{self.layer}" + ("+normalized" if self.normalize else "")

    def describe(self):
        """The flags that make this pooling, e.g. "--pooling=mean --pooling_layer=-2"."""
        return (f"--pooling={self.pooling} --pooling_layer={self.layer}"
                + (" --normalize" if self.normalize else ""))

    def to_dict(self):
        """What an export records in its predict_config.json."""
        return {"pooling": self.pooling, "pooling_layer": self.layer,
                "normalize": self.normalize}


def all_poolings(num_layers):
    """Every valid `SentencePooling` of an encoder with `num_layers` layers."""
    return [SentencePooling(pooling, layer, normalize)
            for pooling in POOLINGS for layer in range(-1, -num_layers - 1, -1)
            for normalize in (False, True) if pooling != "pooler" or layer == -1]


def pool(encoder_layers, input_mask, spec, pooled_output=None):
    """The sentence vectors of `spec` (checked by the caller: `SentencePooling.check`).

    Args:
      encoder_layers: the list of num_hidden_layers float [B, S, H] layer outputs.
      input_mask: int or float [B, S], 1 for real tokens.
      spec: a `SentencePooling`.
      pooled_output: float [B, H], the pooler's output (needed for "pooler" only).

    Returns:
      float32 [B, H].
    """
    if spec.pooling == "pooler":
        if pooled_output is None:
            raise BertTfError("pooling=pooler needs the pooler's output; pass pooled_output.")
        vectors = tf.cast(pooled_output, tf.float32)
    else:
        vectors = _pool_sequence(tf.cast(encoder_layers[spec.layer], tf.float32), input_mask,
                                 spec.pooling)
    if spec.normalize:
        norm = tf.sqrt(tf.reduce_sum(tf.square(vectors), -1, keepdims=True))  # [B, 1]
        vectors = vectors / tf.maximum(norm, _NORM_EPSILON)
    return vectors


def _pool_sequence(sequence, input_mask, pooling):
    """"cls", "mean" or "max" of float32 [B, S, H] over the real tokens: [B, H]."""
    if pooling == "cls":
        return sequence[:, 0]
    # expand_dims, not [:, :, None]: TFLite's built-in StridedSlice has no new axes.
    mask = tf.expand_dims(tf.cast(input_mask, tf.float32), -1)  # [B, S, 1]
    if pooling == "mean":
        return tf.reduce_sum(sequence * mask, 1) / tf.reduce_sum(mask, 1)
    # Padding never wins the maximum: it is replaced by the lowest float32.
    lowest = tf.fill(tf.shape(sequence), tf.float32.min)
    return tf.reduce_max(tf.where(tf.broadcast_to(mask > 0, tf.shape(sequence)), sequence,
                                  lowest), 1)
