"""BERT fine-tuning for sentence (pair) classification: GLUE, XNLI and your own csv/tsv files.

The flags of the original Google run_classifier.py, plus --export_dir, --precision,
--optimizer, --num_accumulation_steps, --num_train_steps and the options of the generic
csv/tsv task:

    python scripts/run_classifier.py --task_name=MRPC --do_train --do_eval \
      --data_dir=$GLUE_DIR/MRPC --vocab_file=$BERT_DIR/vocab.txt \
      --bert_config_file=$BERT_DIR/bert_config.json \
      --init_checkpoint=$BERT_DIR/bert_model.ckpt --max_seq_length=128 \
      --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3.0 \
      --output_dir=/tmp/mrpc_output/

    python scripts/run_classifier.py --task_name=csv --data_dir=my_data \
      --text_a_column=review --label_column=stars ...   # my_data/{train,dev,test}.csv
"""

from absl import flags

from bert_tf import errors
from bert_tf import flags as bert_flags
from bert_tf.tasks import classification

flags.DEFINE_string("data_dir", None,
                    "The input data dir: the task's .tsv files (or train/dev/test.csv for the "
                    "csv task, .tsv for the tsv task).")
flags.DEFINE_string("task_name", None,
                    "The task: cola, sst-2, mrpc, sts-b, qqp, mnli, mnli-mm, qnli, rte, wnli, "
                    "xnli, or csv / tsv for your own files.")
flags.DEFINE_string("text_a_column", None,
                    "csv/tsv task: column of the first text (header name or 0-based index).")
flags.DEFINE_string("text_b_column", None,
                    "csv/tsv task: column of the second text, for sentence-pair tasks.")
flags.DEFINE_string("label_column", None, "csv/tsv task: column of the label (default 'label').")
flags.DEFINE_list("labels", None,
                  "csv/tsv task: the label list, comma separated (default: the distinct labels "
                  "of the train file, sorted).")
flags.DEFINE_bool("has_header", None,
                  "csv/tsv task: whether the first row names the columns (default True).")
flags.DEFINE_bool("regression", None,
                  "csv/tsv task: labels are real numbers (MSE loss, Pearson/Spearman).")
flags.DEFINE_string("language", None, "xnli task: the language to train and evaluate on "
                    "(default zh).")
bert_flags.define_finetuning_flags(max_seq_length=128)
bert_flags.define_eval_flags()

FLAGS = flags.FLAGS


def main(_):
    classification.run_classifier(FLAGS)


if __name__ == "__main__":
    flags.mark_flags_as_required(["task_name", "data_dir", "vocab_file", "bert_config_file",
                                  "output_dir"])
    errors.run_main(main)
