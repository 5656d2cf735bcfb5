"""Learns a WordPiece vocab.txt (BERT's layout) from text, with the basic tokenization that
FullTokenizer applies.

Example:
  python scripts/build_vocab.py --input_file='corpus/corpus-*.txt' --output_file=vocab.txt \\
    --vocab_size=30522 --do_lower_case=True --num_unused=100
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import tool_flags
from bert_tf.data import vocab

tool_flags.define_build_vocab_flags()


def main(_):
    vocab.build_vocab(options.BuildVocabOptions.from_flags(flags.FLAGS))


if __name__ == "__main__":
    flags.mark_flags_as_required(["input_file", "output_file"])
    errors.run_main(main)
