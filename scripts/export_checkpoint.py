"""Writes a training checkpoint in the layout Google released BERT in.

    python scripts/export_checkpoint.py --init_checkpoint=OUTPUT_DIR_OR_PREFIX \
      --bert_config_file=bert_config.json --vocab_file=vocab.txt --output_dir=OUT

OUT gets bert_model.ckpt.{index,data-*} (model variables only: no optimizer slots, no
global_step, no loss scale), bert_config.json and vocab.txt; --keep_heads=false also drops the
task heads (cls/*, output_*) for an encoder-only release.
"""

from absl import flags

from bert_tf import errors
from bert_tf.cli import flags as bert_flags
from bert_tf.training import checkpoints

FLAGS = flags.FLAGS

bert_flags.define_checkpoint_flags()
bert_flags.define_tokenizer_flags()
bert_flags.define_path("output_dir", None, "Directory to write bert_model.ckpt and its files to.")
flags.DEFINE_bool("keep_heads", True,
                  "Keep the task heads (cls/*, output_*); false: the encoder only.")


def main(_):
    checkpoints.export_release_checkpoint(FLAGS.init_checkpoint, FLAGS.bert_config_file,
                                          FLAGS.output_dir, vocab_file=FLAGS.vocab_file,
                                          keep_heads=FLAGS.keep_heads)


if __name__ == "__main__":
    flags.mark_flags_as_required(["init_checkpoint", "bert_config_file", "output_dir"])
    errors.run_main(main)
