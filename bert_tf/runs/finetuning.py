"""The one fine-tuning driver: `run_finetuning(task)`.

Every fine-tuning run goes through the same order, owned here once:

  checks -> BERT config, init checkpoint, tokenizer -> examples -> strategy -> output dir ->
  its lock (chief) -> Estimator -> train features -> train -> (non-chief workers stop) ->
  eval -> predict -> export -> the lock released

The task (a `bert_tf.tasks.base.FinetuningTask`, made with its options) supplies what differs.

Distribution: training runs under `--distribution_strategy`; with `multi_worker` every worker
runs the same command, trains on its share of the records, and only the chief writes to
`--output_dir` and then evaluates, predicts and exports (the others cache their training
features in a private temporary directory and stop after training).
"""

import functools
import os

from absl import logging

from bert_tf import fileio
from bert_tf.errors import BertTfError
from bert_tf.serving import export, prediction_process
from bert_tf.tasks import model_fn_parts
from bert_tf.training import runner, validation
from bert_tf.training.training_step import TrainingStep


def run_finetuning(task):
    """Fine-tunes, evaluates, predicts and exports `task` as its options say.

    Args:
      task: a `FinetuningTask`; its `options` (`bert_tf.options.FinetuneOptions`) drive the
        run.

    Returns:
      The eval results dict when computed (chief only), else None.
    """
    # A foreign --init_checkpoint (a KerasHub preset, ...) brings its config and vocabulary.
    task.options = options = runner.with_checkpoint_source(task.options)
    bert_config, init_checkpoint, tokenizer = prepare_run(task, options)
    encoder = model_fn_parts.Encoder.from_options(
        bert_config, init_checkpoint, options.model,
        model_fn_parts.run_padding_free(options.padding_free, options.run))
    splits = dict(zip(("train", "eval", "predict"), task.read_examples(), strict=True))
    validation.check_options(options.run.validation, task.metric_names(),
                             task.can_evaluate(splits), task.eval_flags)
    training = TrainingStep.from_options(
        options, *runner.finetuning_schedule(options, splits["train"]))
    strategy = runner.make_strategy(options.run, options.train)
    with runner.claim_output_dir(options.run, strategy):
        estimator = runner.make_estimator(
            task.model_fn(encoder, training), options.run, options.train,
            strategy, eval_batch_size=options.evaluation and options.evaluation.eval_batch_size,
            predict_batch_size=options.predict_batch_size)
        chief = runner.is_chief(strategy)
        for name, text in (task.run_files().items() if chief else ()):
            fileio.atomic_write_text(os.path.join(options.run.output_dir, name), text)
        cache_dir = runner.feature_cache_dir(chief, options.run.output_dir)

        def features(split, is_training=False):
            path = os.path.join(cache_dir, task.feature_files[split])
            task.write_features(splits[split], path, tokenizer, is_training)
            return task.input_fn(path, is_training)

        checkpoint = None
        if options.train.do_train:
            logging.info("***** Training: %d examples, batch %d, %d steps *****",
                         len(splits["train"]), options.train.train_batch_size,
                         training.num_train_steps)
            train_input_fn = features("train", is_training=True)
            # The chief evaluates every --eval_every_n_steps on features written once, now.
            evaluate = None
            if chief and options.run.validation.eval_every_n_steps:
                evaluate = functools.partial(task.evaluate, estimator, features(task.eval_split),
                                             splits[task.eval_split])
            checkpoint = runner.train(estimator, train_input_fn, training.num_train_steps,
                                      options.run, evaluate)
        if not chief:
            logging.info("Not the chief: done after training; the chief evaluates, predicts and "
                         "exports.")
            return None
        return _evaluate_predict_export(task, estimator, features, splits, options, checkpoint,
                                        bert_config)


def run_finetuning_process(task):
    """`run_finetuning` as the whole of a process: the entry point of the run_*.py scripts.

    A run that does not train (--do_eval, --do_predict, --export_dir on a trained checkpoint)
    never changes its weights, so it tells oneDNN to keep each matmul's weights packed
    (`prediction_process.assume_frozen_weights`). Only here: a process that calls
    `run_finetuning` may train later, and TensorFlow reads that setting once per process.
    """
    if not task.options.train.do_train and prediction_process.assume_frozen_weights():
        logging.info("Not training: oneDNN keeps each matmul's weights packed (%s=1).",
                     prediction_process.FROZEN_WEIGHTS_VARIABLE)
    return run_finetuning(task)


def _evaluate_predict_export(task, estimator, features, splits, options, checkpoint,
                             bert_config):
    """The chief's work after training, on `checkpoint` (None: the latest); the export carries
    `bert_config`, the config the run built."""
    if options.train.do_train:
        runner.export_release(options.run, options.model, checkpoint,
                              options.tokenizer.vocab_file)
    # Evaluation and export restore every variable from `restored`; prediction keeps
    # `checkpoint`, as without one it reads --init_checkpoint through the model's initializers.
    restored = checkpoint or runner.untrained_run_checkpoint(estimator, options)
    results = None
    if options.do_eval:
        logging.info("***** Evaluating %d examples *****", len(splits["eval"]))
        results = task.evaluate(estimator, features("eval"), splits["eval"],
                                checkpoint_path=restored)
        runner.write_results(options.run.output_dir, results, header=task.results_header())
        task.write_eval_files(splits["eval"])
    if options.do_predict:
        logging.info("***** Predicting %d examples *****", len(splits["predict"]))
        predicted = task.predict(estimator, features("predict"), splits["predict"],
                                 checkpoint_path=checkpoint)
        results = predicted if predicted is not None else results
    if options.export_dir:
        assets = {**task.export_files(), **export.prediction_assets(task, options, bert_config)}
        export.export_saved_model(estimator, options.export_dir, assets,
                                  checkpoint_path=restored,
                                  text_signature=export.text_signature(task, options))
    return results


def prepare_run(task, options):
    """Checks every option, then (bert_config, init_checkpoint, tokenizer): all before any
    graph is built or anything is written."""
    check_actions(options, task.actions)
    runner.check_train_options(options.train, options.model.max_seq_length)
    runner.check_positive(options, "predict_batch_size")
    if options.evaluation is not None:
        runner.check_positive(options.evaluation, "eval_batch_size")
    task.check()
    runner.require_model_files(options.model, options.tokenizer)
    bert_config = runner.load_bert_config(options.model)
    init_checkpoint = runner.resolve_init_checkpoint(options.model.init_checkpoint)
    tokenizer = runner.make_tokenizer(options.tokenizer, bert_config, options.model)
    return bert_config, init_checkpoint, tokenizer


def check_actions(options, actions):
    """Raises `BertTfError` unless one of the flags `actions` (e.g. "do_train") or
    --export_dir is set."""
    action_values = {"do_train": options.train.do_train, "do_eval": options.do_eval,
                     "do_predict": options.do_predict}
    if not any(action_values[action] for action in actions) and not options.export_dir:
        listed = ", ".join(f"--{action}" for action in actions)
        raise BertTfError(f"nothing to do: pass at least one of {listed} or --export_dir.")


