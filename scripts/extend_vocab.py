"""Grows a vocab.txt with new words without moving any existing id: they take the [unusedN]
places first, then follow the last token. Set the printed vocab_size in bert_config.json; the
checkpoint's word embeddings and MLM output bias grow when it is loaded (--new_token_init).

Example:
  python scripts/extend_vocab.py --vocab_file=model/vocab.txt \\
    --new_words_file=new_words.txt --output_vocab_file=grown/vocab.txt
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import tool_flags
from bert_tf.data import vocab_extension

tool_flags.define_extend_vocab_flags()


def main(_):
    found = options.ExtendVocabOptions.from_flags(flags.FLAGS)
    summary = vocab_extension.extend_vocab(found.vocab_file, found.new_words_file,
                                           found.output_vocab_file, found.do_lower_case)
    print(f"wrote {summary['output_vocab_file']}: vocab_size {summary['vocab_size']} "
          f"({summary['filled_unused']} in [unusedN] places, {summary['appended']} appended, "
          f"{len(summary['already_present'])} already there)")


if __name__ == "__main__":
    flags.mark_flags_as_required(["vocab_file", "new_words_file", "output_vocab_file"])
    errors.run_main(main)
