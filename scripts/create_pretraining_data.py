"""Raw text -> masked-LM / next-sentence pre-training TFRecords (Google's flags).

Example:
  python scripts/create_pretraining_data.py --input_file=data/corpus/train.txt \\
    --output_file=/tmp/train.tfrecord --vocab_file=vocab.txt --do_lower_case=True \\
    --max_seq_length=128 --max_predictions_per_seq=20 --masked_lm_prob=0.15 \\
    --random_seed=12345 --dupe_factor=10
"""

import os

from absl import flags

from bert_tf import errors
from bert_tf.data import pretraining_data

flags.DEFINE_string("input_file", None,
                    "Input raw text file (or comma-separated list of files and globs): one "
                    "sentence a line, a blank line between documents.")
flags.DEFINE_string("output_file", None,
                    "Output TF example file (or comma-separated list of files: shards).")
flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_bool("do_lower_case", True,
                  "Whether to lower case the input text. Should be True for uncased models and "
                  "False for cased models.")
flags.DEFINE_bool("do_whole_word_mask", False,
                  "Whether to use whole word masking rather than per-WordPiece masking.")
flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20,
                     "Maximum number of masked LM predictions per sequence.")
flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
flags.DEFINE_integer("dupe_factor", 10,
                     "Number of times to duplicate the input data (with different masks).")
flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
flags.DEFINE_float("short_seq_prob", 0.1,
                   "Probability of creating sequences which are shorter than the maximum "
                   "length.")
flags.DEFINE_integer("num_workers", os.cpu_count() or 1,
                     "Worker processes; the output is the same for any number.")
flags.DEFINE_float("chunk_size_mb", 1.0,
                   "MB of text per chunk of whole documents processed together (random "
                   "next-sentence documents are drawn from the same chunk).")

FLAGS = flags.FLAGS


def main(_):
    config = pretraining_data.PretrainingDataConfig(
        vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case,
        do_whole_word_mask=FLAGS.do_whole_word_mask,
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        random_seed=FLAGS.random_seed,
        dupe_factor=FLAGS.dupe_factor,
        masked_lm_prob=FLAGS.masked_lm_prob,
        short_seq_prob=FLAGS.short_seq_prob)
    pretraining_data.create_pretraining_data(FLAGS.input_file, FLAGS.output_file, config,
                                             num_workers=FLAGS.num_workers,
                                             chunk_size_mb=FLAGS.chunk_size_mb)


if __name__ == "__main__":
    flags.mark_flags_as_required(["input_file", "output_file", "vocab_file"])
    errors.run_main(main)
