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

from bert_tf import errors, options
from bert_tf.cli import flags as bert_flags
from bert_tf.runs import driver
from bert_tf.tasks import classification

bert_flags.define_classifier_flags()
bert_flags.define_finetuning_flags()


def main(_):
    driver.run_task_process(classification.ClassificationTask(
        options.ClassifierOptions.from_flags(flags.FLAGS),
        options.FinetuneOptions.from_flags(flags.FLAGS)))


if __name__ == "__main__":
    # --bert_config_file and --vocab_file may come with a foreign --init_checkpoint (a KerasHub
    # preset, ...); the run stops with one line when neither gives them.
    flags.mark_flags_as_required(["task_name", "data_dir", "output_dir"])
    errors.run_main(main)
