"""The one run driver: `run_task(task)`, for pre-training and every fine-tuning task.

Every run goes through the same order, owned here once:

  checks -> BERT config, init checkpoint, tokenizer (a task that tokenizes) -> the task's
  data -> strategy -> output dir -> its lock (chief) -> Estimator -> train (evaluating every
  --eval_every_n_steps) -> (non-chief workers stop) -> the released layout -> eval -> predict
  -> export -> the lock released

The task (a `bert_tf.tasks.base.TrainableTask`, made with its options) supplies what differs:
pre-training reads record files and evaluates --max_eval_steps batches of them; a fine-tuning
task reads examples, writes their features, and can predict and export.

Distribution: training runs under `--distribution_strategy`; with `multi_worker` every worker
runs the same command, trains on its share of the records, and only the chief writes to
`--output_dir` and then evaluates, predicts and exports (the others cache their training
features in a private temporary directory and stop after training).
"""

import functools
import os

from absl import logging

from bert_tf import fileio
from bert_tf.serving import export, prediction_process
from bert_tf.tasks import model_fn_parts
from bert_tf.training import runner, validation
from bert_tf.training.training_step import TrainingStep


def run_task(task):
    """Trains, evaluates, predicts and exports `task` as its options say.

    Args:
      task: a `TrainableTask`; its `options` (`bert_tf.options.FinetuneOptions`,
        `PretrainOptions`) drive the run.

    Returns:
      The eval results dict when computed (chief only), else None.
    """
    # A foreign --init_checkpoint (a KerasHub preset, ...) brings its config and vocabulary.
    task.options = options = runner.with_checkpoint_source(task.options)
    bert_config, init_checkpoint, tokenizer = prepare_run(task)
    encoder = model_fn_parts.Encoder.from_options(bert_config, init_checkpoint, options.model,
                                                  task.padding_free())
    splits = dict(zip(("train", "eval", "predict"), task.read_examples(), strict=True))
    validation.check_options(options.run.validation, task.metric_names(),
                             task.can_evaluate(splits), task.eval_flags)
    training = TrainingStep.from_options(options, *task.training_schedule(splits["train"]))
    strategy = runner.make_strategy(options.run, options.train)
    with runner.claim_output_dir(options.run, strategy):
        estimator = runner.make_estimator(
            task.model_fn(encoder, training), options.run, options.train, strategy,
            eval_batch_size=task.eval_batch_size, predict_batch_size=task.predict_batch_size)
        chief = runner.is_chief(strategy)
        for name, text in (task.run_files().items() if chief else ()):
            fileio.atomic_write_text(os.path.join(options.run.output_dir, name), text)
        feature_dir = (runner.feature_cache_dir(chief, options.run.output_dir)
                       if task.writes_features else None)

        def features(split, is_training=False):
            return task.split_input_fn(split, splits[split], feature_dir, tokenizer,
                                       is_training)

        checkpoint = None
        if options.train.do_train:
            logging.info("***** Training: %s, batch %d, %d steps *****",
                         task.describe(splits["train"]), options.train.train_batch_size,
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
        return _evaluate_predict_export(task, estimator, features, splits, checkpoint,
                                        bert_config)


def run_task_process(task):
    """`run_task` as the whole of a process: the entry point of the run_*.py scripts.

    A run that does not train (--do_eval, --do_predict, --export_dir on a trained checkpoint)
    never changes its weights, so it tells oneDNN to keep each matmul's weights packed
    (`prediction_process.assume_frozen_weights`). Only here: a process that calls
    `run_task` may train later, and TensorFlow reads that setting once per process.
    """
    if not task.options.train.do_train and prediction_process.assume_frozen_weights():
        logging.info("Not training: oneDNN keeps each matmul's weights packed (%s=1).",
                     prediction_process.FROZEN_WEIGHTS_VARIABLE)
    return run_task(task)


def _evaluate_predict_export(task, estimator, features, splits, checkpoint, bert_config):
    """The chief's work after training, on `checkpoint` (None: the latest); the export carries
    `bert_config`, the config the run built."""
    options, requested = task.options, task.requested
    tokenizer_options = task.tokenizer_options
    if options.train.do_train:
        runner.export_release(options.run, options.model, checkpoint,
                              tokenizer_options and tokenizer_options.vocab_file)
    # Evaluation and export restore every variable from `restored`; prediction keeps
    # `checkpoint`, as without one it reads --init_checkpoint through the model's initializers.
    restored = task.evaluation_checkpoint(estimator, checkpoint)
    results = None
    if requested["do_eval"]:
        logging.info("***** Evaluating %s *****", task.describe(splits["eval"]))
        results = task.evaluate(estimator, features("eval"), splits["eval"],
                                checkpoint_path=restored)
        runner.write_results(options.run.output_dir, results, header=task.results_header())
        task.write_eval_files(splits["eval"], results)
    if requested.get("do_predict"):
        logging.info("***** Predicting %s *****", task.describe(splits["predict"]))
        predicted = task.predict(estimator, features("predict"), splits["predict"],
                                 checkpoint_path=checkpoint)
        results = predicted if predicted is not None else results
    if requested.get("export_dir"):
        assets = {**task.export_files(), **export.prediction_assets(task, options, bert_config)}
        export.export_saved_model(estimator, options.export_dir, assets,
                                  checkpoint_path=restored,
                                  text_signature=export.text_signature(task, options),
                                  extra_inputs=task.export_inputs)
    return results


def prepare_run(task):
    """Checks every option, then (bert_config, init_checkpoint, tokenizer): all before any
    graph is built or anything is written. `tokenizer` is None for a task without
    `tokenizer_options` (its records hold token ids)."""
    task.check_options()
    tokenizer_options = task.tokenizer_options
    runner.require_model_files(task.options.model, tokenizer_options)
    bert_config = runner.load_bert_config(task.options.model)
    init_checkpoint = runner.resolve_init_checkpoint(task.options.model.init_checkpoint)
    tokenizer = tokenizer_options and runner.make_tokenizer(tokenizer_options, bert_config,
                                                            task.options.model)
    return bert_config, init_checkpoint, tokenizer
