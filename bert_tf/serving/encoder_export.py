"""The encoder alone as a SavedModel: sentence embeddings for serving.

    export_encoder(EncoderExportOptions(...))   # scripts/export_encoder.py

Any checkpoint with BERT's `bert/` variables works (Google's release layout, a pre-training
run, a fine-tuning run, whose head variables are not read). The export has the signatures of
`export.export_saved_model` (`serving_default` on int32 ids, `serving_int64`, `serving_text` on
strings) and returns
  - `embedding` float32 [B, H]: `bert_tf.encoder.sentence_pooling.pool` as `--pooling`
    (cls, mean, max over the real tokens, pooler), `--pooling_layer` (-1: the final layer)
    and `--normalize` (L2) say;
  - `sequence_output` float32 [B, S, H]: the final layer.
`assets.extra/` carries the vocab, the config and `predict_config.json` (task "embed",
"pooling", "pooling_layer", "normalize"), so `Predictor.from_saved_model(path).embed(texts)`
answers from it.
"""

import tensorflow as tf

from bert_tf.encoder import sentence_pooling
from bert_tf.errors import BertTfError
from bert_tf.serving import export
from bert_tf.tasks import encoder as encoder_tasks
from bert_tf.tasks import model_fn_parts
from bert_tf.training import estimator as estimator_lib
from bert_tf.training import runner

POOLINGS = encoder_tasks.POOLINGS


def encoder_model_fn(bert_config, pooling, compute_dtype=tf.float32):
    """The PREDICT model_fn of the export: {"embedding" [B, H], "sequence_output" [B, S, H]}
    over input_ids, input_mask, segment_ids [B, S].

    Args:
      bert_config: `modeling.BertConfig`.
      pooling: a `sentence_pooling.SentencePooling`, or a pooling name (the final layer,
        not normalized).
      compute_dtype: as `BertModel`'s.
    """
    if isinstance(pooling, str):
        pooling = sentence_pooling.SentencePooling(pooling)
    encoder = model_fn_parts.Encoder(bert_config, compute_dtype=compute_dtype)

    @estimator_lib.purpose_from_mode
    def model_fn(features, labels, mode, params, purpose):
        del labels, params  # The export only predicts.

        def head(model, _):
            return {"embedding": sentence_pooling.pool(
                        model.get_all_encoder_layers(), features["input_mask"], pooling,
                        model.get_pooled_output()),
                    "sequence_output": tf.cast(model.get_sequence_output(), tf.float32)}

        return estimator_lib.EstimatorSpec(mode, predictions=encoder.build(features, purpose, head))

    return model_fn


def export_encoder(options):
    """Writes the embedding export of the module docstring.

    Args:
      options: `bert_tf.options.EncoderExportOptions`.

    Returns:
      The export directory, `<options.export_dir>/<timestamp>`.

    Raises:
      BertTfError: a missing or inconsistent config, checkpoint, vocab or flag, before
        anything is written.
    """
    pooling = sentence_pooling.SentencePooling(options.pooling, options.pooling_layer,
                                               options.normalize)
    pooling.check()
    if not options.export_dir:
        raise BertTfError("--export_dir: required; where to write the SavedModel.")
    if not options.model.init_checkpoint:
        raise BertTfError("--init_checkpoint: required; the checkpoint whose bert/ variables "
                          "the export serves.")
    bert_config = runner.load_bert_config(options.model)
    pooling.check(bert_config.num_hidden_layers)
    checkpoint = runner.resolve_init_checkpoint(options.model.init_checkpoint)
    runner.make_tokenizer(options.tokenizer, bert_config, options.model)
    estimator = estimator_lib.Estimator(
        encoder_model_fn(bert_config, pooling, options.model.compute_dtype),
        model_dir=options.export_dir)
    return export.export_saved_model(
        estimator, options.export_dir,
        export.asset_files({"task": "embed", **pooling.to_dict()}, options, bert_config),
        checkpoint_path=checkpoint,
        text_signature=export.make_text_signature(("text",), options))
