"""Raw text -> masked-LM / next-sentence pre-training TFRecords (Google's flags).

Example:
  python scripts/create_pretraining_data.py --input_file=data/corpus/train.txt \\
    --output_file=/tmp/train.tfrecord --vocab_file=vocab.txt --do_lower_case=True \\
    --max_seq_length=128 --max_predictions_per_seq=20 --masked_lm_prob=0.15 \\
    --random_seed=12345 --dupe_factor=10 [--masking=dynamic] [--next_sentence_objective=sop]

Chinese whole-word masking (the characters of a jieba word, or of a word in a ref file of
Hugging Face's run_chinese_ref.py, masked together; docs/pretraining.md, "Chinese"):
  python scripts/create_pretraining_data.py --input_file=corpus_zh.txt \\
    --output_file=/tmp/zh.tfrecord --vocab_file=vocab_zh.txt --do_whole_word_mask=True \\
    --word_segmenter=jieba  # or --word_segmenter=ref_file --word_segmenter_ref_file=ref.txt
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import tool_flags
from bert_tf.data import pretraining_data

tool_flags.define_pretraining_data_flags()


def main(_):
    opts = options.PretrainingDataOptions.from_flags(flags.FLAGS)
    pretraining_data.create_pretraining_data(opts.input_file, opts.output_file, opts.config,
                                             num_workers=opts.num_workers,
                                             chunk_size_mb=opts.chunk_size_mb)


if __name__ == "__main__":
    flags.mark_flags_as_required(["input_file", "output_file", "vocab_file"])
    errors.run_main(main)
