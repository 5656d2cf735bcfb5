"""Exports a BERT checkpoint's encoder as a SavedModel that returns sentence embeddings.

    python scripts/export_encoder.py --bert_config_file=$BERT_DIR/bert_config.json \
        --init_checkpoint=$BERT_DIR/bert_model.ckpt --vocab_file=$BERT_DIR/vocab.txt \
        --export_dir=encoder_export --pooling=mean --max_seq_length=128

Any checkpoint with BERT's `bert/` variables works: Google's release, a pre-training run, a
fine-tuning run (its head is left out). The export (<export_dir>/<timestamp>) takes ids
(`serving_default`, `serving_int64`) or strings (`serving_text`, with tensorflow-text) and
returns `embedding` [batch, hidden] and `sequence_output` [batch, seq, hidden];
`scripts/predict.py --export_dir`, `scripts/export_onnx.py` and `scripts/export_tflite.py` take
it like the task exports.
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import tool_flags
from bert_tf.serving import encoder_export

tool_flags.define_encoder_export_flags()


def main(_):
    encoder_export.export_encoder(options.EncoderExportOptions.from_flags(flags.FLAGS))


if __name__ == "__main__":
    errors.run_main(main)
