"""Exports a BERT checkpoint as TF Hub SavedModels: an encoder and its text preprocessor.

    python scripts/export_tfhub.py --bert_config_file=minilm/bert_config.json \
      --init_checkpoint=minilm/bert_model.ckpt --vocab_file=minilm/vocab.txt \
      --do_lower_case --export_path=hub/encoder --preprocessor_export_path=hub/preprocessor

The encoder is a reusable, fine-tunable SavedModel in TF Hub's BERT encoder interface (a dict
of input_word_ids, input_mask, input_type_ids in; sequence_output, pooled_output, default,
encoder_outputs out); the preprocessor tokenizes and packs strings with core TensorFlow ops
only (no tensorflow-text). See bert_tf.serving.tfhub_export and docs/encoder.md.
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import tool_flags
from bert_tf.serving import tfhub_export

tool_flags.define_tfhub_export_flags()


def main(_):
    tfhub_export.export_tfhub(options.TfHubExportOptions.from_flags(flags.FLAGS))


if __name__ == "__main__":
    flags.mark_flags_as_required(["bert_config_file", "init_checkpoint", "vocab_file",
                                  "export_path"])
    errors.run_main(main)
