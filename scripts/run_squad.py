"""BERT fine-tuning and prediction on SQuAD v1.1 and v2.0 (the flags of Google's run_squad.py).

    python scripts/run_squad.py --vocab_file=$BERT_DIR/vocab.txt \
      --bert_config_file=$BERT_DIR/bert_config.json \
      --init_checkpoint=$BERT_DIR/bert_model.ckpt --do_train --train_file=train-v1.1.json \
      --do_predict --predict_file=dev-v1.1.json --train_batch_size=12 --learning_rate=3e-5 \
      --num_train_epochs=2.0 --max_seq_length=384 --doc_stride=128 --output_dir=/tmp/squad/

Writes predictions.json, nbest_predictions.json, null_odds.json (--version_2_with_negative)
and, when the predict file carries answers, eval_results.json (the official metric).
"""

from absl import flags

from bert_tf import errors
from bert_tf import flags as bert_flags
from bert_tf.tasks import squad

flags.DEFINE_string("train_file", None, "SQuAD json for training, e.g. train-v1.1.json.")
flags.DEFINE_string("predict_file", None,
                    "SQuAD json for predictions, e.g. dev-v1.1.json or test-v1.1.json.")
flags.DEFINE_integer("doc_stride", 128,
                     "When splitting up a long document into chunks, how much stride to take "
                     "between chunks.")
flags.DEFINE_integer("max_query_length", 64,
                     "The maximum number of tokens for the question; longer questions are "
                     "truncated to this length.")
flags.DEFINE_integer("n_best_size", 20,
                     "The total number of n-best predictions to generate in "
                     "nbest_predictions.json.")
flags.DEFINE_integer("max_answer_length", 30,
                     "The maximum length of an answer that can be generated (word pieces).")
flags.DEFINE_bool("verbose_logging", False,
                  "Log warnings while mapping predictions back to the original text.")
flags.DEFINE_bool("version_2_with_negative", False,
                  "SQuAD v2.0: some questions have no answer.")
flags.DEFINE_float("null_score_diff_threshold", 0.0,
                   "v2.0: predict the null answer when null score - best non-null score is "
                   "above this.")
bert_flags.define_finetuning_flags(max_seq_length=384)

FLAGS = flags.FLAGS


def main(_):
    squad.run_squad(FLAGS)


if __name__ == "__main__":
    flags.mark_flags_as_required(["vocab_file", "bert_config_file", "output_dir"])
    errors.run_main(main)
