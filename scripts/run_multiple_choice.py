"""BERT fine-tuning for multiple choice: SWAG's CSV files or your own jsonl.

    python scripts/run_multiple_choice.py --task_name=swag --data_dir=$SWAG_DIR \
      --vocab_file=$BERT_DIR/vocab.txt --bert_config_file=$BERT_DIR/bert_config.json \
      --init_checkpoint=$BERT_DIR/bert_model.ckpt --do_train --do_eval \
      --max_seq_length=80 --train_batch_size=16 --learning_rate=2e-5 \
      --num_train_epochs=3.0 --output_dir=/tmp/swag_output/

See `bert_tf/data/multiple_choice.py` for the file layouts and `bert_tf/tasks/
multiple_choice.py` for the head and the export.
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import flags as bert_flags
from bert_tf.runs import driver
from bert_tf.tasks import multiple_choice

bert_flags.define_multiple_choice_flags()
bert_flags.define_finetuning_flags()


def main(_):
    driver.run_task_process(multiple_choice.MultipleChoiceTask(
        options.MultipleChoiceOptions.from_flags(flags.FLAGS),
        options.FinetuneOptions.from_flags(flags.FLAGS)))


if __name__ == "__main__":
    # --bert_config_file and --vocab_file may come with a foreign --init_checkpoint (a KerasHub
    # preset, ...); the run stops with one line when neither gives them.
    flags.mark_flags_as_required(["task_name", "data_dir", "output_dir"])
    errors.run_main(main)
