"""The encoder alone as a SavedModel: sentence embeddings for serving.

    export_encoder(EncoderExportOptions(...))   # scripts/export_encoder.py

Any checkpoint with BERT's `bert/` variables works (Google's release layout, a pre-training
run, a fine-tuning run, whose head variables are not read). The export has the signatures of
`export.export_saved_model` (`serving_default` on int32 ids, `serving_int64`, `serving_text` on
strings) and returns
  - `embedding` float32 [B, H]: the final layer at [CLS] ("cls") or its mask-weighted mean
    over the real tokens ("mean"), as `--pooling` says;
  - `sequence_output` float32 [B, S, H]: the final layer.
`assets.extra/` carries the vocab, the config and `predict_config.json` (task "embed" and the
pooling), so `Predictor.from_saved_model(path).embed(texts)` answers from it.
"""

import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.serving import export
from bert_tf.tasks import encoder as encoder_tasks
from bert_tf.tasks import model_fn_parts
from bert_tf.training import estimator as estimator_lib
from bert_tf.training import runner

POOLINGS = encoder_tasks.POOLINGS
sentence_embeddings = encoder_tasks.sentence_embeddings


def encoder_model_fn(bert_config, pooling, compute_dtype=tf.float32):
    """The PREDICT model_fn of the export: {"embedding" [B, H], "sequence_output" [B, S, H]}
    over input_ids, input_mask, segment_ids [B, S]."""
    encoder = model_fn_parts.Encoder(bert_config, compute_dtype=compute_dtype)

    @estimator_lib.purpose_from_mode
    def model_fn(features, labels, mode, params, purpose):
        del labels, params  # The export only predicts.

        def head(model, _):
            sequence = tf.cast(model.get_sequence_output(), tf.float32)
            return {"embedding": sentence_embeddings(sequence, features["input_mask"])[pooling],
                    "sequence_output": sequence}

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
    if options.pooling not in POOLINGS:
        raise BertTfError(f"--pooling={options.pooling}: use one of {', '.join(POOLINGS)}.")
    if not options.export_dir:
        raise BertTfError("--export_dir: required; where to write the SavedModel.")
    if not options.model.init_checkpoint:
        raise BertTfError("--init_checkpoint: required; the checkpoint whose bert/ variables "
                          "the export serves.")
    bert_config = runner.load_bert_config(options.model)
    checkpoint = runner.resolve_init_checkpoint(options.model.init_checkpoint)
    runner.make_tokenizer(options.tokenizer, bert_config, options.model)
    estimator = estimator_lib.Estimator(
        encoder_model_fn(bert_config, options.pooling, options.model.compute_dtype),
        model_dir=options.export_dir)
    return export.export_saved_model(
        estimator, options.export_dir,
        export.asset_files({"task": "embed", "pooling": options.pooling}, options,
                           bert_config),
        checkpoint_path=checkpoint,
        text_signature=export.make_text_signature(("text",), options))
