"""Raw text (plain, JSON lines or a MediaWiki XML dump) -> one sentence a line, a blank line
between documents, in --num_shards files: the input of create_pretraining_data.py.

Example:
  python scripts/prepare_corpus.py --input_file=enwiki-latest-pages-articles.xml.bz2 \\
    --output_dir=corpus --num_shards=256 --num_workers=16
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import tool_flags
from bert_tf.data import corpus

tool_flags.define_prepare_corpus_flags()


def main(_):
    corpus.prepare_corpus(options.PrepareCorpusOptions.from_flags(flags.FLAGS))


if __name__ == "__main__":
    flags.mark_flags_as_required(["input_file", "output_dir"])
    errors.run_main(main)
