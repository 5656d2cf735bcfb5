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

from bert_tf import errors, options
from bert_tf.cli import flags as bert_flags
from bert_tf.runs import driver
from bert_tf.tasks import squad

bert_flags.define_squad_flags()
bert_flags.define_finetuning_flags(max_seq_length=options.SquadOptions.MAX_SEQ_LENGTH,
                                   has_eval=False, length_buckets=squad.SquadTask.length_buckets)


def main(_):
    driver.run_task_process(squad.SquadTask(
        options.SquadOptions.from_flags(flags.FLAGS),
        options.FinetuneOptions.from_flags(flags.FLAGS)))


if __name__ == "__main__":
    # --bert_config_file and --vocab_file may come with a foreign --init_checkpoint (a KerasHub
    # preset, ...); the run stops with one line when neither gives them.
    flags.mark_flags_as_required(["output_dir"])
    errors.run_main(main)
