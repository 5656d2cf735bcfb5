"""The one fine-tuning driver: `run_finetuning(task, options)` and what tasks share.

Every fine-tuning run goes through the same order, owned here once:

  checks -> BERT config, init checkpoint, tokenizer -> examples -> strategy -> output dir ->
  its lock (chief) -> Estimator -> train features -> train -> (non-chief workers stop) ->
  eval -> predict -> export -> the lock released

A task (classification, NER, SQuAD, ...) is a `FinetuningTask`: it supplies only what differs:
its own checks, reading examples, the model_fn, writing features, the input_fn, computing
metrics and writing predictions, and the files its export carries. See docs/architecture.md.

Distribution: training runs under `--distribution_strategy`; with `multi_worker` every worker
runs the same command, trains on its share of the records, and only the chief writes to
`--output_dir` and then evaluates, predicts and exports (the others cache their training
features in a private temporary directory and stop after training).

Export: `<export_dir>/<timestamp>/` holds a SavedModel (tag "serve") with two signatures over
one graph, both taking `input_ids`, `input_mask`, `segment_ids` of shape [batch, seq] (any
batch size, any seq up to the model's `max_position_embeddings`) and returning the task's
outputs:
  - "serving_default": int32 inputs (`tf.constant([[101, ...]])` in TF2 is int32);
  - "serving_int64": int64 inputs (what tf.train.Example / TFRecord pipelines produce).
A signature's inputs are typed, so one signature cannot take both dtypes; numpy arrays and
Python lists of either integer type work with both.
"""

import atexit
import json
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import estimator as estimator_lib
from bert_tf import fileio, modeling, serving_text, tokenization
from bert_tf.errors import BertTfError
from bert_tf.tasks import runner, validation

tf1 = tf.compat.v1

# The features the exported signatures take, all [batch, seq].
SERVING_INPUT_NAMES = runner.SEQUENCE_FEATURES
INT64_SIGNATURE_NAME = "serving_int64"


class FinetuningTask:
    """What a fine-tuning task supplies to `run_finetuning`. Subclasses override the hooks.

    Attributes:
      actions: the action flags the task's script offers (one must be set, or --export_dir).
      eval_split, eval_flags: the split `evaluate` runs on during training, and the flags
        that provide it.
      feature_files: the cached feature file of each split in the output directory.
      sequence_keys: the [B, S] features cut to each eval / predict batch's longest example
        and to each training batch's length bucket (`runner.record_input_fn`).
      sequences_per_example: sequences packed one after another in each `sequence_keys`
        feature ([k * S]; multiple choice: one per choice).
      length_buckets: whether --bucket_by_length applies: the task's loss ignores padding,
        so a batch cut to its bucket trains exactly as at max_seq_length.
      label_list: the task's labels, in id order (None: it has none).
      cached_features: `bert_tf.data.<task>.cached_file_based_convert_examples_to_features`
        for the default `write_features`.
      name: the task's name in an export's `predict_config.json` ("classifier", "squad",
        "ner"), which `bert_tf.predict.Predictor` reads.
      text_inputs: the string inputs of the export's `serving_text` signature.
    """

    actions = ("do_train", "do_eval", "do_predict")
    # The split evaluated during training (--eval_every_n_steps) and the flag that gives it.
    eval_split = "eval"
    eval_flags = "--do_eval"
    feature_files = {"train": "train.tf_record", "eval": "eval.tf_record",
                     "predict": "predict.tf_record"}
    sequence_keys = runner.SEQUENCE_FEATURES
    sequences_per_example = 1
    length_buckets = True
    label_list = None
    cached_features = None
    name = None
    text_inputs = ("text",)

    def check(self, options):
        """Raises BertTfError for bad task flags; runs before any other work."""

    def read_examples(self, options):
        """(train, dev, test) examples for --do_train / --do_eval / --do_predict (None where
        not asked for), all read before any work so bad data stops the run early."""
        raise NotImplementedError

    def model_fn(self, bert_config, init_checkpoint, training):
        """The model_fn; `training` holds the optimizer keyword arguments (`training_args`)."""
        raise NotImplementedError

    def write_features(self, examples, path, tokenizer, options, is_training):
        """Writes `examples` as TFRecord features to `path` (whole or not at all). By default
        through `cached_features(examples, label_list, max_seq_length, tokenizer, path)`,
        which reuses the file while the data and settings are unchanged."""
        del is_training
        self.cached_features(examples, self.label_list, options.model.max_seq_length,
                             tokenizer, path)

    def feature_spec(self, seq_length, is_training):
        """dict name -> `tf.io.FixedLenFeature` of the task's TFRecords."""
        raise NotImplementedError

    def input_fn(self, path, is_training, options):
        """The input_fn over the features at `path` (`runner.record_input_fn`): training
        batches are shuffled unless --shuffle_train_input=false and, with
        --bucket_by_length, drawn from length buckets (else they keep max_seq_length); each
        eval / predict batch is cut to its longest example."""
        max_seq_length = options.model.max_seq_length
        buckets = None
        if is_training and self.length_buckets:
            buckets = runner.training_length_buckets(options.bucket_by_length, max_seq_length,
                                                     options.run.distribution)
        return runner.record_input_fn([path], self.feature_spec(max_seq_length, is_training),
                                      is_training, shuffle=options.run.shuffle_train_input,
                                      trim_keys=self.sequence_keys,
                                      skip_corrupt_records=options.run.skip_corrupt_records,
                                      bucket_boundaries=buckets,
                                      sequences_per_example=self.sequences_per_example)

    def run_files(self):
        """{file name: text} the chief writes to --output_dir before training."""
        return {}

    def can_evaluate(self, splits):
        """Whether `evaluate` has data: {split: examples or None} of `read_examples`."""
        return splits[self.eval_split] is not None

    def metric_names(self, options):
        """The names of the metrics `evaluate` returns (None: not known before it runs)."""
        del options
        return None

    def evaluate(self, estimator, input_fn, examples, options, checkpoint_path=None):
        """Evaluates `checkpoint_path` (default: the latest) on the `eval_split` examples;
        returns the metrics (dict), writing nothing."""
        raise NotImplementedError

    def write_eval_files(self, examples, options):
        """Writes the task's files about the last `evaluate` (e.g. NER's predictions)."""

    def results_header(self):
        """Lines for the top of eval_results.txt (written `# line`): settings that shaped the
        results, e.g. class weights."""
        return []

    def predict(self, estimator, input_fn, examples, options, checkpoint_path=None):
        """Predicts the test examples with `checkpoint_path` (default: the latest) and writes
        the predictions; returns eval results when the task computes them from its
        predictions (SQuAD), else None."""
        raise NotImplementedError

    def export_files(self):
        """{file name: text} written to the export's assets.extra/ (e.g. the label list)."""
        return {}

    def predict_settings(self, options):
        """The task's settings a Predictor needs beyond the shared ones (see
        `prediction_assets`), e.g. SQuAD's windowing; JSON-serializable."""
        del options
        return {}


def run_finetuning(task, options):
    """Fine-tunes, evaluates, predicts and exports `task` as `options` say.

    Args:
      task: a `FinetuningTask`.
      options: `bert_tf.options.FinetuneOptions`.

    Returns:
      The eval results dict when computed (chief only), else None.
    """
    bert_config, init_checkpoint, tokenizer = prepare_run(task, options)
    splits = dict(zip(("train", "eval", "predict"), task.read_examples(options), strict=True))
    validation.check_options(options.run.validation, task.metric_names(options),
                             task.can_evaluate(splits), task.eval_flags)
    training = training_args(options, splits["train"])
    strategy = runner.make_strategy(options.run, options.train)
    runner.create_output_dir(options.run)
    with runner.lock_output_dir(options.run, strategy):
        estimator = runner.make_estimator(
            task.model_fn(bert_config, init_checkpoint, training), options.run, options.train,
            strategy, eval_batch_size=options.evaluation and options.evaluation.eval_batch_size,
            predict_batch_size=options.predict_batch_size)
        chief = runner.is_chief(strategy)
        for name, text in (task.run_files().items() if chief else ()):
            fileio.atomic_write_text(os.path.join(options.run.output_dir, name), text)
        cache_dir = feature_cache_dir(chief, options.run.output_dir)

        def features(split, is_training=False):
            path = os.path.join(cache_dir, task.feature_files[split])
            task.write_features(splits[split], path, tokenizer, options, is_training)
            return task.input_fn(path, is_training, options)

        checkpoint = None
        if options.train.do_train:
            logging.info("***** Training: %d examples, batch %d, %d steps *****",
                         len(splits["train"]), options.train.train_batch_size,
                         training["num_train_steps"])
            checkpoint = runner.train(
                estimator, features("train", is_training=True), training["num_train_steps"],
                options.run, _evaluate_during_training(task, estimator, features, splits, options,
                                                       chief))
        if not chief:
            logging.info("Not the chief: done after training; the chief evaluates, predicts and "
                         "exports.")
            return None
        return _evaluate_predict_export(task, estimator, features, splits, options, checkpoint)


def _evaluate_during_training(task, estimator, features, splits, options, chief):
    """The chief's `evaluate(checkpoint_path) -> metrics` for --eval_every_n_steps (its
    features are written once, before training), else None."""
    if not chief or not options.run.validation.eval_every_n_steps:
        return None
    input_fn = features(task.eval_split)
    examples = splits[task.eval_split]
    return lambda path: task.evaluate(estimator, input_fn, examples, options,
                                      checkpoint_path=path)


def _evaluate_predict_export(task, estimator, features, splits, options, checkpoint):
    """The chief's work after training, on `checkpoint` (None: the latest)."""
    if options.train.do_train:
        runner.export_release(options.run, options.model, checkpoint,
                              options.tokenizer.vocab_file)
    # Evaluation and export restore every variable from `restored`; prediction keeps
    # `checkpoint`, as without one it reads --init_checkpoint through the model's initializers.
    restored = checkpoint or untrained_run_checkpoint(estimator, options)
    results = None
    if options.do_eval:
        logging.info("***** Evaluating %d examples *****", len(splits["eval"]))
        results = task.evaluate(estimator, features("eval"), splits["eval"], options,
                                checkpoint_path=restored)
        runner.write_results(options.run.output_dir, results, header=task.results_header())
        task.write_eval_files(splits["eval"], options)
    if options.do_predict:
        logging.info("***** Predicting %d examples *****", len(splits["predict"]))
        predicted = task.predict(estimator, features("predict"), splits["predict"], options,
                                 checkpoint_path=checkpoint)
        results = predicted if predicted is not None else results
    if options.export_dir:
        export_saved_model(estimator, options.export_dir,
                           {**task.export_files(), **prediction_assets(task, options)},
                           checkpoint_path=restored, text_signature=text_signature(task, options))
    return results


def untrained_run_checkpoint(estimator, options):
    """What a run without --do_train evaluates and exports: None (the latest checkpoint of
    --output_dir) when --output_dir has one, else the checkpoint of --init_checkpoint (a
    prefix, or a directory's latest), so a trained run re-exports from a new --output_dir."""
    if (options.train.do_train or not options.model.init_checkpoint
            or estimator.latest_checkpoint()):
        return None
    checkpoint = modeling.resolve_checkpoint(options.model.init_checkpoint)
    logging.info("--output_dir '%s' has no checkpoint: using --init_checkpoint %s.",
                 options.run.output_dir, checkpoint)
    return checkpoint


def prepare_run(task, options):
    """Checks every option, then (bert_config, init_checkpoint, tokenizer): all before any
    graph is built or anything is written."""
    check_actions(options, task.actions)
    runner.check_train_options(options.train, options.model.max_seq_length)
    runner.check_positive(options, "predict_batch_size")
    if options.evaluation is not None:
        runner.check_positive(options.evaluation, "eval_batch_size")
    task.check(options)
    bert_config = runner.load_bert_config(options.model)
    init_checkpoint = runner.resolve_init_checkpoint(options.model.init_checkpoint)
    tokenizer = runner.make_tokenizer(options.tokenizer, bert_config, options.model)
    return bert_config, init_checkpoint, tokenizer


LABEL_LIST_FILE = "label_list.txt"


def labels_next_to(checkpoint):
    """The labels of the head of `checkpoint` (a prefix), in output order: the label_list.txt
    of its directory (a run's --output_dir, or convert_checkpoint.py --task's output), or
    None."""
    path = os.path.join(os.path.dirname(checkpoint), LABEL_LIST_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def checkpoint_label_list(options):
    """For a run that evaluates or predicts without training: the labels of the head it runs
    (`labels_next_to` the latest checkpoint of --output_dir, else --init_checkpoint, as the
    Estimator picks them), which name the head's outputs in that order whatever the data
    holds; else None (a training run takes its labels from the data)."""
    if options.train.do_train:
        return None
    output_dir = options.run.output_dir
    checkpoint = (tf.train.latest_checkpoint(output_dir)
                  if output_dir and tf.io.gfile.isdir(output_dir) else None)
    if checkpoint is None and options.model.init_checkpoint:
        try:
            checkpoint = modeling.resolve_checkpoint(options.model.init_checkpoint)
        except BertTfError:
            return None  # `prepare_run` reports it, after the task's own checks.
    return labels_next_to(checkpoint) if checkpoint else None


def check_actions(options, actions):
    """Raises `BertTfError` unless one of the flags `actions` (e.g. "do_train") or
    --export_dir is set."""
    action_values = {"do_train": options.train.do_train, "do_eval": options.do_eval,
                     "do_predict": options.do_predict}
    if not any(action_values[action] for action in actions) and not options.export_dir:
        listed = ", ".join(f"--{action}" for action in actions)
        raise BertTfError(f"nothing to do: pass at least one of {listed} or --export_dir.")


def require_data_dir(data_dir, what):
    """Raises `BertTfError` unless `--data_dir` is a directory; `what` says what it holds."""
    if not data_dir or not fileio.is_dir(data_dir):
        raise BertTfError(f"--data_dir: '{data_dir}' is not a directory; pass the "
                          f"directory that holds {what}.")


def read_splits(processor, data_dir, options):
    """(train, dev, test) examples of a processor with get_train/dev/test_examples(data_dir)
    for --do_train / --do_eval / --do_predict (None if not asked for)."""
    return (processor.get_train_examples(data_dir) if options.train.do_train else None,
            processor.get_dev_examples(data_dir) if options.do_eval else None,
            processor.get_test_examples(data_dir) if options.do_predict else None)


def training_args(options, train_examples):
    """The optimizer and precision keyword arguments every task's `model_fn_builder` takes.

    Without --do_train the schedule is 1 step and no warmup (the model_fn still builds in
    eval and predict mode).
    """
    num_train_steps, num_warmup_steps = 1, 0
    if options.train.do_train:
        num_train_steps, num_warmup_steps = train_steps(len(train_examples), options)
    train = options.train
    return dict(learning_rate=train.learning_rate, num_train_steps=num_train_steps,
                num_warmup_steps=num_warmup_steps, optimizer=train.optimizer,
                num_accumulation_steps=train.num_accumulation_steps,
                compute_dtype=options.model.compute_dtype,
                trainable=runner.trainable_selection(train))


def train_steps(num_examples, options):
    """(num_train_steps, num_warmup_steps) in optimizer updates.

    `--num_train_steps` if given, else num_examples / train_batch_size * num_train_epochs
    (rounded down, as the original); warmup is `--warmup_proportion` of it.
    """
    train = options.train
    if train.num_train_steps:
        steps = train.num_train_steps
    else:
        steps = int(num_examples / train.train_batch_size * options.num_train_epochs)
    if steps < 1:
        raise BertTfError(
            f"--num_train_epochs={options.num_train_epochs} over {num_examples} training "
            f"examples at --train_batch_size={train.train_batch_size} makes no optimizer "
            "update; train for more epochs, use a smaller batch or pass --num_train_steps.")
    return steps, int(steps * options.warmup_proportion)


def feature_cache_dir(chief, output_dir):
    """Where this process writes its cached TFRecord features: `output_dir` on the chief; a
    private temporary directory, removed when the process exits, on the other workers."""
    if chief:
        return output_dir
    path = tempfile.mkdtemp(prefix="bert_tf_worker_features_")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    logging.info("Not the chief: caching features in %s (removed at exit), not in "
                 "--output_dir.", path)
    return path


class ExampleCollector:
    """Gathers per-example model outputs while `Estimator.evaluate` runs.

    The streaming metrics (loss, accuracy) come from the Estimator; metrics that need every
    prediction at once (F1, MCC, correlations, conlleval) are computed in numpy on what this
    collects, in the same pass over the data. A model_fn adds `collector.hook(tensors)` to its
    EVAL spec's `evaluation_hooks`.
    """

    def __init__(self):
        self.batches = []

    def hook(self, tensors):
        """A SessionRunHook that fetches `tensors` (dict name -> [B, ...]) at every eval step."""
        return _CollectHook(self, tensors)

    def column(self, key):
        """The values of `key` for every example, concatenated over batches ([N, ...])."""
        return np.concatenate([batch[key] for batch in self.batches], axis=0)

    def examples(self):
        """One dict name -> value per example, in input order."""
        for batch in self.batches:
            for i in range(len(next(iter(batch.values())))):
                yield {key: value[i] for key, value in batch.items()}


class _CollectHook(tf1.train.SessionRunHook):

    def __init__(self, collector, tensors):
        self._collector = collector
        self._tensors = tensors

    def begin(self):
        self._collector.batches = []

    def before_run(self, run_context):
        return tf1.train.SessionRunArgs(self._tensors)

    def after_run(self, run_context, run_values):
        self._collector.batches.append(run_values.results)


# ------------------------------------------------------------------------------------ export

# What an export carries in assets.extra/ for `bert_tf.predict.Predictor.from_saved_model`.
PREDICT_CONFIG_FILE = "predict_config.json"
VOCAB_FILE = "vocab.txt"
BERT_CONFIG_FILE = "bert_config.json"


def prediction_assets(task, options):
    """{file name: text} that make an export self-contained for prediction: the vocab, the
    BERT config and `predict_config.json` (task, casing, max_seq_length, label list and the
    task's `predict_settings`)."""
    config = {"task": task.name, "do_lower_case": options.tokenizer.do_lower_case,
              "max_seq_length": options.model.max_seq_length,
              "label_list": list(task.label_list) if task.label_list else None,
              **task.predict_settings(options)}
    files = {PREDICT_CONFIG_FILE: json.dumps(config, indent=2, sort_keys=True) + "\n"}
    for name, path in ((VOCAB_FILE, options.tokenizer.vocab_file),
                       (BERT_CONFIG_FILE, options.model.bert_config_file)):
        with tf.io.gfile.GFile(path) as f:
            files[name] = f.read()
    return files


def text_signature(task, options):
    """The `serving_text.TextSignature` of `task`'s export, or None (with a warning) without
    tensorflow-text."""
    if not serving_text.available():
        logging.warning("tensorflow-text is not installed (pip install bert_tf[serving]): the "
                        "export gets no %s signature.", serving_text.SIGNATURE_NAME)
        return None
    squad_settings = task.predict_settings(options)
    return serving_text.TextSignature(
        input_names=task.text_inputs,
        vocab=tokenization.load_vocab(options.tokenizer.vocab_file),
        do_lower_case=options.tokenizer.do_lower_case,
        max_seq_length=options.model.max_seq_length,
        max_query_length=squad_settings.get("max_query_length"),
        pairs=task.name == "classifier")


def export_saved_model(estimator, export_dir_base, extra_files=None, checkpoint_path=None,
                       text_signature=None):
    """Exports the latest checkpoint with the signatures of the module docstring.

    Args:
      estimator: the task's Estimator (its model_dir holds the checkpoint).
      export_dir_base: the export goes to a new `<timestamp>` directory inside.
      extra_files: {file name: text} written to `<export>/assets.extra/` (the TF Serving
        place for files the model does not read), e.g. the label list.
      checkpoint_path: the checkpoint to export (default: the latest).
      text_signature: a `serving_text.TextSignature`: also add the text-in signatures, which
        return the model's outputs and the packed `input_ids` [batch, seq] they ran on.

    Returns:
      The export directory `<export_dir_base>/<timestamp>`.
    """
    def serving_input_receiver_fn():
        int32_inputs, int64_inputs, alternatives, text_ids = {}, {}, {}, {}
        if text_signature is not None:
            # The id placeholders default to the tokenized strings, so the text signatures
            # (which feed only strings) run the same model.
            alternatives, text_ids = serving_text.receivers(text_signature)
        for name in SERVING_INPUT_NAMES:
            int64_inputs[name] = (
                tf1.placeholder(tf.int64, [None, None], name=name) if not text_ids else
                tf1.placeholder_with_default(text_ids[name], [None, None], name=name))
            # serving_default feeds the cast directly (any graph tensor can be fed), so it
            # takes int32; serving_int64 feeds the placeholder above it.
            int32_inputs[name] = tf.cast(int64_inputs[name], tf.int32, name=f"{name}_int32")
        outputs = {name: {"input_ids": int64_inputs["input_ids"]} for name in alternatives}
        return estimator_lib.ServingInputReceiver(
            int32_inputs, int32_inputs,
            receiver_tensors_alternatives={INT64_SIGNATURE_NAME: int64_inputs, **alternatives},
            alternative_outputs=outputs)

    export_path = estimator.export_saved_model(export_dir_base, serving_input_receiver_fn,
                                               checkpoint_path=checkpoint_path)
    for name, text in (extra_files or {}).items():
        tf.io.gfile.makedirs(os.path.join(export_path, "assets.extra"))
        fileio.atomic_write_text(os.path.join(export_path, "assets.extra", name), text)
    logging.info("Exported SavedModel to %s (signatures serving_default: int32 inputs, %s: "
                 "int64 inputs%s)", export_path, INT64_SIGNATURE_NAME,
                 ", serving_text: strings" if text_signature else "")
    return export_path

