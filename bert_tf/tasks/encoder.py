"""The tasks a bare encoder answers: fill_mask (a pre-training checkpoint's masked-LM head)
and embed (sentence vectors, `scripts/export_encoder.py`'s exports)."""

import tensorflow as tf

from bert_tf.encoder import sentence_pooling
from bert_tf.tasks import base, pretraining, registry
from bert_tf.training import estimator as estimator_lib

POOLINGS = sentence_pooling.POOLINGS


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
    """Sentence vectors (`Predictor.embed`): every pooling of every layer
    (`sentence_pooling.all_poolings`), each output named by its `SentencePooling.key`; the
    Predictor fetches the one asked for."""

    name = "embed"
    predicts = True

    @classmethod
    def predict_outputs(cls, encoder, config, bert_config):
        del config

        def embed(features):
            def head(model, _):
                layers, mask = model.get_all_encoder_layers(), features["input_mask"]
                return {spec.key: sentence_pooling.pool(layers, mask, spec,
                                                        model.get_pooled_output())
                        for spec in sentence_pooling.all_poolings(
                            bert_config.num_hidden_layers)}

            return encoder.build(features, _SERVING_GRAPH, head)

        return embed

    @classmethod
    def answer(cls, predictor, records, options):
        vectors = predictor.embed([record["text"] for record in records], options.pooling,
                                  pooling_layer=options.pooling_layer,
                                  normalize=options.normalize or None)
        return [{"embedding": [float(x) for x in vector]} for vector in vectors]
