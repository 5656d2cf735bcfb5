"""What the fine-tuning tasks share: option checks, the Estimator, TFRecord input, export.

`run_classifier` (tasks/classification.py), `run_squad` (tasks/squad.py) and `run_ner`
(tasks/ner.py) all: check their flags before doing any work, build a tokenizer and an
Estimator the same way, read cached TFRecords with one pipeline (fixed `max_seq_length` for
training; for eval and prediction each batch is cut to its longest example), and export the
same kind of SavedModel.

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
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import distribute, errors, fileio, modeling, precision, tokenization
from bert_tf import estimator as estimator_lib
from bert_tf import flags as flag_lib
from bert_tf.errors import BertTfError

tf1 = tf.compat.v1

# The features the exported signatures take, all [batch, seq].
SERVING_INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
INT64_SIGNATURE_NAME = "serving_int64"
# Fine-tuning needs these in the vocab ([MASK] is only for pre-training).
_NEEDED_SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]")


# ------------------------------------------------------------------------------ option checks


def check_actions(options, actions):
    """Raises `BertTfError` unless one of the flags `actions` (e.g. "do_train") or
    --export_dir is set."""
    if not any(getattr(options, action) for action in actions) and not options.export_dir:
        listed = ", ".join(f"--{action}" for action in actions)
        raise BertTfError(f"nothing to do: pass at least one of {listed} or --export_dir.")


def load_bert_config(options):
    """Reads `--bert_config_file` and checks `--max_seq_length` against it."""
    errors.require_file(options.bert_config_file, flag="bert_config_file",
                        what="BERT config file")
    bert_config = modeling.BertConfig.from_json_file(options.bert_config_file)
    if options.max_seq_length > bert_config.max_position_embeddings:
        raise BertTfError(
            f"--max_seq_length={options.max_seq_length} is longer than max_position_embeddings "
            f"({bert_config.max_position_embeddings}) in {options.bert_config_file}; lower "
            "--max_seq_length.")
    return bert_config


def check_run_options(options):
    """Checks the sizes and the batch / accumulation flags every fine-tuning script has."""
    sizes = ["train_batch_size", "predict_batch_size", "max_seq_length",
             "num_accumulation_steps", "learning_rate"]
    if hasattr(options, "eval_batch_size"):
        sizes.append("eval_batch_size")
    flag_lib.check_positive(options, *sizes)
    if options.do_train and options.train_batch_size % options.num_accumulation_steps:
        raise BertTfError(
            f"--train_batch_size={options.train_batch_size} is not divisible by "
            f"--num_accumulation_steps={options.num_accumulation_steps}; the micro-batch is "
            "train_batch_size / num_accumulation_steps, pick values where it divides.")
    if options.num_train_steps is not None and options.num_train_steps < 1:
        raise BertTfError(f"--num_train_steps must be a positive number, got "
                          f"{options.num_train_steps}.")


def resolve_init_checkpoint(init_checkpoint):
    """The checkpoint prefix for `--init_checkpoint` (a prefix or a directory), or None.

    Without one the encoder starts from random weights (a warning says so).
    """
    if not init_checkpoint:
        logging.warning("No --init_checkpoint: the model starts from random weights.")
        return None
    return modeling.resolve_checkpoint(init_checkpoint)


def make_tokenizer(options, bert_config):
    """A `FullTokenizer` for `--vocab_file`, checked against the casing and the config."""
    errors.require_file(options.vocab_file, flag="vocab_file", what="vocab file")
    tokenization.validate_case_matches_checkpoint(options.do_lower_case,
                                                  options.init_checkpoint)
    tokenizer = tokenization.FullTokenizer(vocab_file=options.vocab_file,
                                           do_lower_case=options.do_lower_case)
    tokenization.check_vocab_has_special_tokens(tokenizer.vocab, options.vocab_file,
                                                tokens=_NEEDED_SPECIAL_TOKENS)
    largest_id = max(tokenizer.vocab.values())
    if largest_id >= bert_config.vocab_size:
        raise BertTfError(
            f"--vocab_file {options.vocab_file} has token id {largest_id} but vocab_size in "
            f"{options.bert_config_file} is {bert_config.vocab_size}; pass the vocab.txt that "
            "came with the checkpoint.")
    return tokenizer


def prepare_run(options):
    """(bert_config, init_checkpoint, tokenizer) of a fine-tuning run, each checked against
    the flags; the output directory is created. Call it after the script's own flag checks."""
    bert_config = load_bert_config(options)
    init_checkpoint = resolve_init_checkpoint(options.init_checkpoint)
    tokenizer = make_tokenizer(options, bert_config)
    fileio.ensure_output_dir(options.output_dir)
    return bert_config, init_checkpoint, tokenizer


def require_data_dir(options, what):
    """Raises `BertTfError` unless `--data_dir` is a directory; `what` says what it holds."""
    if not options.data_dir or not os.path.isdir(options.data_dir):
        raise BertTfError(f"--data_dir: '{options.data_dir}' is not a directory; pass the "
                          f"directory that holds {what}.")


def read_splits(processor, options):
    """(train, dev, test) examples for --do_train / --do_eval / --do_predict (None if not
    asked for). All are read before any work, so bad data stops the run before training."""
    return (processor.get_train_examples(options.data_dir) if options.do_train else None,
            processor.get_dev_examples(options.data_dir) if options.do_eval else None,
            processor.get_test_examples(options.data_dir) if options.do_predict else None)


def training_args(options, train_examples):
    """The optimizer and precision keyword arguments every task's `model_fn_builder` takes.

    Without --do_train the schedule is 1 step and no warmup (the model_fn still builds in
    eval and predict mode).
    """
    num_train_steps, num_warmup_steps = 1, 0
    if options.do_train:
        num_train_steps, num_warmup_steps = train_steps(len(train_examples), options)
    return dict(learning_rate=options.learning_rate, num_train_steps=num_train_steps,
                num_warmup_steps=num_warmup_steps, optimizer=options.optimizer,
                num_accumulation_steps=options.num_accumulation_steps,
                compute_dtype=precision.compute_dtype_from_name(options.precision))


def evaluate(estimator, input_fn):
    """`estimator.evaluate` as plain Python numbers (global_step an int, the rest floats)."""
    return {key: int(value) if key == "global_step" else float(value)
            for key, value in estimator.evaluate(input_fn).items()}


def train_steps(num_examples, options):
    """(num_train_steps, num_warmup_steps) in optimizer updates.

    `--num_train_steps` if given, else num_examples / train_batch_size * num_train_epochs
    (rounded down, as the original); warmup is `--warmup_proportion` of it.
    """
    if options.num_train_steps:
        steps = options.num_train_steps
    else:
        steps = int(num_examples / options.train_batch_size * options.num_train_epochs)
    if steps < 1:
        raise BertTfError(
            f"--num_train_epochs={options.num_train_epochs} over {num_examples} training "
            f"examples at --train_batch_size={options.train_batch_size} makes no optimizer "
            "update; train for more epochs, use a smaller batch or pass --num_train_steps.")
    return steps, int(steps * options.warmup_proportion)


def make_estimator(model_fn, options):
    """An Estimator writing to `--output_dir`; its train batch is the micro-batch.

    Training runs under `--distribution_strategy` (see `bert_tf.distribute`): the train batch
    stays global, each replica computes train_batch_size / replicas of it. Evaluation and
    prediction run on one device (the chief's, see `is_chief`).
    """
    strategy = distribute.strategy_from_flags(options) if options.do_train else None
    if strategy is not None:
        per_replica = distribute.per_replica_batch_size(
            options.train_batch_size, strategy,
            num_accumulation_steps=options.num_accumulation_steps)
        logging.info("Training on %d replicas, %d examples each per micro-batch.",
                     strategy.num_replicas_in_sync, per_replica)
    run_config = flag_lib.run_config_from_flags(options, strategy)
    return estimator_lib.Estimator(
        model_fn, options.output_dir, config=run_config,
        train_batch_size=options.train_batch_size // options.num_accumulation_steps,
        eval_batch_size=getattr(options, "eval_batch_size", None),
        predict_batch_size=options.predict_batch_size)


def is_chief(estimator, options):
    """Whether this process writes to `--output_dir`, evaluates, predicts and exports: always,
    except on the non-chief workers of `--distribution_strategy=multi_worker` (TF_CONFIG)."""
    return (getattr(options, "distribution_strategy", "none") != "multi_worker"
            or estimator.config.is_chief)


def feature_cache_dir(estimator, options):
    """Where this process writes its cached TFRecord features: `--output_dir` on the chief; a
    private temporary directory, removed when the process exits, on the other workers."""
    if is_chief(estimator, options):
        return options.output_dir
    path = tempfile.mkdtemp(prefix="bert_tf_worker_features_")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    logging.info("Not the chief: caching features in %s (removed at exit), not in "
                 "--output_dir.", path)
    return path


def stop_unless_chief(estimator, options):
    """True (after logging why) on a worker that must stop after training (see `is_chief`)."""
    if is_chief(estimator, options):
        return False
    logging.info("Not the chief: done after training; the chief evaluates, predicts and "
                 "exports.")
    return True


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


# ------------------------------------------------------------------------------------- input


def trim_to_longest(features, sequence_keys=SERVING_INPUT_NAMES):
    """Cuts the [B, max_seq_length] features in `sequence_keys` to the batch's longest example.

    The attention costs O(S^2) and every other layer O(S), so on short texts a batch of
    length max(sum(input_mask)) is much cheaper than padding to max_seq_length; outputs for
    the real tokens are the same (padding is masked out of attention).
    """
    length = tf.reduce_max(tf.reduce_sum(features["input_mask"], axis=1))
    return {key: value[:, :length] if key in sequence_keys else value
            for key, value in features.items()}


def tfrecord_input_fn_builder(input_file, feature_spec, is_training,
                              sequence_keys=SERVING_INPUT_NAMES, shuffle=True,
                              shuffle_buffer=1000):
    """Returns an input_fn(params, input_context=None) over a TFRecord file, batch
    params["batch_size"] (per replica under a distribution strategy).

    Training repeats forever, shuffles (with `shuffle`) and keeps full batches of fixed
    max_seq_length; several input pipelines (workers) each read their own records
    (`distribute.record_dataset`). Eval / prediction read each record once, in order, the
    last batch possibly smaller, each batch trimmed to its longest example
    (`trim_to_longest`). Int64 features arrive as int32.

    Args:
      input_file: the TFRecord file.
      feature_spec: dict name -> `tf.io.FixedLenFeature`.
      is_training: see above.
      sequence_keys: the [max_seq_length] features to trim (those also present).
      shuffle: shuffle the training records (False: file order, e.g. `--shuffle_train_input
        =false` to compare a distributed run with a single-process one).
      shuffle_buffer: records in the shuffle buffer (training).
    """

    def parse(serialized):
        features = tf.io.parse_example(serialized, feature_spec)
        features = {key: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
                    for key, value in features.items()}
        if not is_training:
            features = trim_to_longest(features, sequence_keys)
        return features

    def input_fn(params, input_context=None):
        dataset = distribute.record_dataset([input_file], is_training, input_context,
                                            shuffle=shuffle, shuffle_buffer=shuffle_buffer)
        # Batch first so one vectorised parse handles the whole batch.
        dataset = dataset.batch(params["batch_size"], drop_remainder=is_training)
        dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)

    return input_fn


# ------------------------------------------------------------------------------------ export


def export_saved_model(estimator, export_dir_base, extra_files=None):
    """Exports the latest checkpoint with the signatures of the module docstring.

    Args:
      estimator: the task's Estimator (its model_dir holds the checkpoint).
      export_dir_base: the export goes to a new `<timestamp>` directory inside.
      extra_files: {file name: text} written to `<export>/assets.extra/` (the TF Serving
        place for files the model does not read), e.g. the label list.

    Returns:
      The export directory `<export_dir_base>/<timestamp>`.
    """
    def serving_input_receiver_fn():
        int32_inputs, int64_inputs = {}, {}
        for name in SERVING_INPUT_NAMES:
            int64_inputs[name] = tf1.placeholder(tf.int64, [None, None], name=name)
            # serving_default feeds the cast directly (any graph tensor can be fed), so it
            # takes int32; serving_int64 feeds the placeholder above it.
            int32_inputs[name] = tf.cast(int64_inputs[name], tf.int32, name=f"{name}_int32")
        return estimator_lib.ServingInputReceiver(
            int32_inputs, int32_inputs,
            receiver_tensors_alternatives={INT64_SIGNATURE_NAME: int64_inputs})

    export_path = estimator.export_saved_model(export_dir_base, serving_input_receiver_fn)
    for name, text in (extra_files or {}).items():
        tf.io.gfile.makedirs(os.path.join(export_path, "assets.extra"))
        fileio.atomic_write_text(os.path.join(export_path, "assets.extra", name), text)
    logging.info("Exported SavedModel to %s (signatures serving_default: int32 inputs, %s: "
                 "int64 inputs)", export_path, INT64_SIGNATURE_NAME)
    return export_path

