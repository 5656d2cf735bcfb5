"""The tasks a bare encoder answers: fill_mask (a pre-training checkpoint's masked-LM head)
and embed (sentence vectors, `scripts/export_encoder.py`'s exports)."""

import tensorflow as tf

from bert_tf.tasks import base, pretraining, registry
from bert_tf.training import estimator as estimator_lib

POOLINGS = ("cls", "mean")


def sentence_embeddings(sequence_output, input_mask):
    """Both poolings of the final layer.

    Args:
      sequence_output: float [B, S, H], the final encoder layer.
      input_mask: int [B, S], 1 for real tokens.

    Returns:
      {"cls": float32 [B, H] the [CLS] vector, "mean": float32 [B, H] the mean over the real
      tokens}.
    """
    sequence = tf.cast(sequence_output, tf.float32)
    # expand_dims, not [:, :, None]: TFLite's built-in StridedSlice has no new axes.
    mask = tf.expand_dims(tf.cast(input_mask, tf.float32), -1)  # [B, S, 1]
    return {"cls": sequence[:, 0],
            "mean": tf.reduce_sum(sequence * mask, 1) / tf.reduce_sum(mask, 1)}


# The serving backends' graphs keep every position, as an export's do.
_SERVING_GRAPH = estimator_lib.Purpose.of(estimator_lib.ModeKeys.PREDICT)


@registry.register
class FillMaskTask(base.Task):
    """The most probable tokens at each [MASK] (`Predictor.fill_mask`)."""

    name = "fill_mask"
    predicts = True
    extra_inputs = ("masked_lm_positions",)

    @classmethod
    def predict_outputs(cls, encoder, config, bert_config):
        del config

        def fill_mask(features):
            positions = features["masked_lm_positions"]
            zeros = tf.zeros_like(positions)

            def head(model, _):
                return pretraining.masked_lm_output(
                    bert_config, model.get_sequence_output(), model.get_embedding_table(),
                    positions, zeros, tf.cast(zeros, tf.float32))[2]  # log_probs [B*P, V]

            log_probs = encoder.build(features, _SERVING_GRAPH, head)
            return {"log_probs": tf.reshape(log_probs, [tf.shape(positions)[0], -1,
                                                        bert_config.vocab_size])}

        return fill_mask

    @classmethod
    def answer(cls, predictor, records, options):
        return [{"masks": masks} for masks in predictor.fill_mask(
            [record["text"] for record in records], options.top_k)]


@registry.register
class EmbedTask(base.Task):
    """Sentence vectors, [CLS] or mean pooled (`Predictor.embed`)."""

    name = "embed"
    predicts = True

    @classmethod
    def predict_outputs(cls, encoder, config, bert_config):
        del config, bert_config

        def embed(features):
            def head(model, _):
                return sentence_embeddings(model.get_sequence_output(), features["input_mask"])

            return encoder.build(features, _SERVING_GRAPH, head)

        return embed

    @classmethod
    def answer(cls, predictor, records, options):
        return [{"embedding": [float(x) for x in vector]} for vector in predictor.embed(
            [record["text"] for record in records], options.pooling)]
