"""Extracts per-token BERT activations to JSON lines (the flags of Google's extract_features.py).

    python scripts/extract_features.py --input_file=input.txt --output_file=output.jsonl \
      --vocab_file=$BERT_DIR/vocab.txt --bert_config_file=$BERT_DIR/bert_config.json \
      --init_checkpoint=$BERT_DIR/bert_model.ckpt --layers=-1,-2,-3,-4 \
      --max_seq_length=128 --batch_size=8
"""

from absl import flags

from bert_tf import errors
from bert_tf.cli import flags as bert_flags
from bert_tf.runs import extract_features as extraction

FLAGS = flags.FLAGS

bert_flags.define_model_flags()
bert_flags.define_tokenizer_flags()
bert_flags.define_tpu_flags()
bert_flags.define_xla_flags()
bert_flags.define_path("input_file", None,
                       "Text file, one example a line: 'text' or 'text_a ||| text_b'.")
bert_flags.define_path("output_file", None, "JSON lines file to write, one object per input line.")
flags.DEFINE_string("layers", "-1,-2,-3,-4",
                    "Comma-separated encoder layer indexes to output (-1 is the last layer).")
flags.DEFINE_integer("batch_size", 32, "Batch size for predictions.")
flags.DEFINE_string("padding", "longest",
                    "'longest': pad each batch to its longest example (faster); "
                    "'max_seq_length': pad every batch to --max_seq_length.")
flags.DEFINE_bool("use_one_hot_embeddings", False,
                  "Look embeddings up with a one-hot matmul instead of a gather (as on TPUs).")
flags.DEFINE_bool("output_attentions", False,
                  "Also write each example's self-attention probabilities [heads, tokens, tokens] "
                  "for the --layers, under the key 'attentions'.")


def main(_):
    extraction.run_extract_features(
        input_file=FLAGS.input_file, output_file=FLAGS.output_file, vocab_file=FLAGS.vocab_file,
        bert_config_file=FLAGS.bert_config_file, init_checkpoint=FLAGS.init_checkpoint,
        layers=FLAGS.layers, do_lower_case=FLAGS.do_lower_case,
        max_seq_length=FLAGS.max_seq_length, batch_size=FLAGS.batch_size, padding=FLAGS.padding,
        use_one_hot_embeddings=FLAGS.use_one_hot_embeddings,
        output_attentions=FLAGS.output_attentions, use_xla=FLAGS.use_xla, use_tpu=FLAGS.use_tpu)


if __name__ == "__main__":
    errors.run_main(main)
