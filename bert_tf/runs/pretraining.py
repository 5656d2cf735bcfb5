"""The pre-training driver: `run_pretraining(options)`, as `scripts/run_pretraining.py` runs it.

checks (options, records) -> BERT config, init checkpoint -> strategy -> output dir -> its
lock (chief) -> Estimator -> train (evaluating every --eval_every_n_steps) -> the released
layout -> eval -> the lock released. The masked-LM + next-sentence task itself (heads,
model_fn, input_fn, record checks) is `bert_tf.tasks.pretraining`.
"""

import functools

from absl import logging

from bert_tf import fileio
from bert_tf.data import record_integrity
from bert_tf.errors import BertTfError
from bert_tf.tasks import model_fn_parts, pretraining
from bert_tf.training import runner, validation
from bert_tf.training.training_step import TrainingStep


def run_pretraining(options):
    """Runs pre-training and/or evaluation as `scripts/run_pretraining.py` configures it;
    every check runs before any graph is built or anything is written (`training.runner`), and
    the chief holds the lock of --output_dir from its creation to the end of the run.

    Args:
      options: `bert_tf.options.PretrainOptions`.

    Returns:
      The eval results dict if --do_eval (on the chief), else None.
    """
    options = runner.with_checkpoint_source(options)  # A foreign one brings its config.
    (bert_config, init_checkpoint, (input_files, dynamic), (eval_files, eval_dynamic),
     record_limits) = prepare_run(options)
    train, run = options.train, options.run
    strategy = runner.make_strategy(run, train)
    with runner.claim_output_dir(run, strategy):
        model_fn = pretraining.model_fn_builder(
            model_fn_parts.Encoder.from_options(bert_config, init_checkpoint, options.model),
            TrainingStep.from_options(options, train.num_train_steps, options.num_warmup_steps),
            next_sentence_objective=options.next_sentence_objective)
        estimator = runner.make_estimator(model_fn, run, train, strategy,
                                          eval_batch_size=options.evaluation.eval_batch_size)
        input_fn = functools.partial(
            pretraining.input_fn_builder, max_seq_length=options.model.max_seq_length,
            max_predictions_per_seq=options.max_predictions_per_seq, record_limits=record_limits,
            skip_corrupt_records=run.skip_corrupt_records, vocab_size=bert_config.vocab_size,
            random_seed=run.random_seed)
        eval_flag = "eval_input_file" if options.eval_input_file else "input_file"
        chief = runner.is_chief(strategy)

        def evaluate(checkpoint_path=None):
            eval_input_fn = input_fn(eval_files, is_training=False, flag=eval_flag,
                                     dynamic=eval_dynamic)
            return runner.evaluate(estimator, eval_input_fn, steps=options.max_eval_steps,
                                   checkpoint_path=checkpoint_path)

        checkpoint = None
        if train.do_train:
            checkpoint = runner.train(
                estimator, input_fn(input_files, is_training=True, shuffle=run.shuffle_train_input,
                                    flag="input_file", dynamic=dynamic),
                train.num_train_steps, run,
                evaluate if chief and run.validation.eval_every_n_steps else None)
        if chief and train.do_train:
            runner.export_release(run, options.model, checkpoint)
        if not options.evaluation.do_eval:
            return None
        if not chief:
            logging.info("Not the chief: skipping --do_eval (the chief evaluates).")
            return None
        results = evaluate(checkpoint)
        runner.write_results(run.output_dir, results)
        if options.report_majority_baseline:
            token_id, accuracy = pretraining.masked_lm_majority_baseline(input_files, eval_files)
            logging.info("  majority baseline: always predicting token id %d gives "
                         "masked_lm_accuracy = %.4f (model: %.4f)", token_id, accuracy,
                         results["masked_lm_accuracy"])
            results["majority_baseline_accuracy"] = accuracy
        return results


def prepare_run(options):
    """Checks every option and the input records, all before any graph is built or anything
    is written. Returns (bert_config, init_checkpoint, (input_files, dynamic),
    (eval_files, dynamic), record_limits): `dynamic` tells records for dynamic masking;
    `record_limits`: {path: whole records} of the damaged files read only partly
    (`record_integrity.check_record_files`, --skip_corrupt_records)."""
    if not options.train.do_train and not options.evaluation.do_eval:
        raise BertTfError("At least one of --do_train or --do_eval must be True.")
    runner.check_train_options(options.train, options.model.max_seq_length)
    runner.check_positive(options, "max_predictions_per_seq")
    runner.check_positive(options.evaluation, "eval_batch_size")
    runner.require_model_files(options.model)
    bert_config = runner.load_bert_config(options.model)
    init_checkpoint = runner.resolve_init_checkpoint(options.model.init_checkpoint)
    check = functools.partial(pretraining.check_pretraining_records,
                              max_seq_length=options.model.max_seq_length,
                              max_predictions_per_seq=options.max_predictions_per_seq,
                              next_sentence_objective=options.next_sentence_objective)
    skip = options.run.skip_corrupt_records
    input_files = fileio.expand_input_files(options.input_file, what=pretraining.RECORDS)
    record_limits = record_integrity.check_record_files(input_files, "input_file", skip)
    train_inputs = eval_inputs = (input_files, check(input_files))
    if options.eval_input_file:
        eval_files = fileio.expand_input_files(options.eval_input_file, flag="eval_input_file",
                                               what=pretraining.RECORDS)
        record_limits.update(
            record_integrity.check_record_files(eval_files, "eval_input_file", skip))
        eval_inputs = (eval_files, check(eval_files, flag="eval_input_file"))
    validation.check_options(options.run.validation,
                             pretraining.metric_names(options.next_sentence_objective))
    logging.info("Input files: %d for training (%s masking), %d for eval", len(input_files),
                 "dynamic" if train_inputs[1] else "static", len(eval_inputs[0]))
    return bert_config, init_checkpoint, train_inputs, eval_inputs, record_limits
