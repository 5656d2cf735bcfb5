"""BERT fine-tuning for named-entity recognition on CoNLL-2003 style files.

--data_dir holds train.txt, dev.txt and test.txt (also accepted: valid.txt, eng.train,
eng.testa, eng.testb): one token a line with its tag in the last column, a blank line between
sentences. Tags (BIO / IOB1 / IOBES) come from the train file. The other flags are those of
run_classifier.py:

    python scripts/run_ner.py --data_dir=conll2003 --do_train --do_eval --do_predict \
      --vocab_file=$BERT_DIR/vocab.txt --bert_config_file=$BERT_DIR/bert_config.json \
      --init_checkpoint=$BERT_DIR/bert_model.ckpt --do_lower_case=False \
      --max_seq_length=128 --learning_rate=5e-5 --num_train_epochs=3 --output_dir=/tmp/ner

Writes eval_results.txt (entity-level precision / recall / f1 as conlleval), label_list.txt,
eval_predictions.txt and test_predictions.txt ("token gold predicted" a line).
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import flags as bert_flags
from bert_tf.runs import driver
from bert_tf.tasks import ner

bert_flags.define_ner_flags()
bert_flags.define_finetuning_flags()


def main(_):
    driver.run_task_process(ner.NerTask(
        options.NerOptions.from_flags(flags.FLAGS),
        options.FinetuneOptions.from_flags(flags.FLAGS)))


if __name__ == "__main__":
    # --bert_config_file and --vocab_file may come with a foreign --init_checkpoint (a KerasHub
    # preset, ...); the run stops with one line when neither gives them.
    flags.mark_flags_as_required(["data_dir", "output_dir"])
    errors.run_main(main)
