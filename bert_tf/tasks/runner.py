"""The set-up every training run shares, pre-training and fine-tuning alike.

A run (`tasks.pretraining.run_pretraining`, `tasks.finetuning.run_finetuning`) goes through the
same steps, each done here once:

  1. check the options (`check_train_options`, `check_positive`) and read the BERT config,
     checking `--max_seq_length` against it (`load_bert_config`); resolve `--init_checkpoint`
     (`resolve_init_checkpoint`) and build the tokenizer (`make_tokenizer`): all before any
     graph is built or anything is written, so bad input stops the run with one line and an
     untouched `--output_dir`;
  2. create the strategy, `--output_dir` (`create_output_dir`), hold the directory's lock for
     the rest of the run on the chief (`lock_output_dir`, so a second run on it stops before
     writing anything), and create the Estimator (`make_estimator`);
  3. read TFRecords through one input pipeline (`record_input_fn`);
  4. train; only the chief (`is_chief`) evaluates and writes results (`evaluate`,
     `write_results`).
"""

import contextlib

import tensorflow as tf
from absl import logging

from bert_tf import (
    checkpoints,
    conversion,
    distribute,
    errors,
    fileio,
    modeling,
    optimization,
    run_lock,
    tokenization,
)
from bert_tf import estimator as estimator_lib
from bert_tf.errors import BertTfError
from bert_tf.tasks import validation

# Fine-tuning and feature extraction need these in the vocab ([MASK] only pre-training).
NEEDED_SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]")
# The [batch, seq] features every BERT input has; eval / predict batches trim them.
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")


# ------------------------------------------------------------------------------- checks


def check_positive(options, *names):
    """Raises BertTfError naming the first flag among `names` whose value in `options` (an
    options dataclass) is not > 0."""
    for name in names:
        value = getattr(options, name)
        if value is None or value <= 0:
            raise BertTfError(f"--{name} must be a positive number, got {value}.")


def check_train_options(train, max_seq_length):
    """Checks the sizes and the batch / accumulation flags of a training run.

    Args:
      train: `options.TrainOptions`.
      max_seq_length: the run's `--max_seq_length`.
    """
    if max_seq_length <= 0:
        raise BertTfError(f"--max_seq_length must be a positive number, got {max_seq_length}.")
    check_positive(train, "train_batch_size", "num_accumulation_steps", "learning_rate")
    if train.num_train_steps is not None and train.num_train_steps < 1:
        raise BertTfError(f"--num_train_steps must be a positive number, got "
                          f"{train.num_train_steps}.")
    if train.freeze_layers is not None and train.freeze_layers < 0:
        raise BertTfError(f"--freeze_layers must be 0 or more, got {train.freeze_layers}.")
    if train.do_train and train.train_batch_size % train.num_accumulation_steps:
        raise BertTfError(
            f"--train_batch_size={train.train_batch_size} is not divisible by "
            f"--num_accumulation_steps={train.num_accumulation_steps}; the micro-batch is "
            "train_batch_size / num_accumulation_steps, pick values where it divides.")


def load_bert_config(model):
    """Reads `--bert_config_file` and checks `--max_seq_length` against it.

    Args:
      model: `options.ModelOptions`.

    Returns:
      The `modeling.BertConfig`.
    """
    errors.require_file(model.bert_config_file, flag="bert_config_file",
                        what="BERT config file")
    bert_config = modeling.BertConfig.from_json_file(model.bert_config_file)
    if model.max_seq_length > bert_config.max_position_embeddings:
        raise BertTfError(
            f"--max_seq_length={model.max_seq_length} is longer than max_position_embeddings "
            f"({bert_config.max_position_embeddings}) in {model.bert_config_file}; lower "
            "--max_seq_length.")
    return bert_config


def resolve_init_checkpoint(init_checkpoint):
    """The checkpoint prefix for `--init_checkpoint` (a prefix or a directory), or None.

    Without one the encoder starts from random weights (a warning says so).
    """
    if not init_checkpoint:
        logging.warning("No --init_checkpoint: the model starts from random weights.")
        return None
    prefix = modeling.resolve_checkpoint(init_checkpoint)
    # Reads every tensor: a damaged index, a missing or a short .data shard all fail here.
    checkpoints.check_init_checkpoint(prefix)
    return prefix


def make_tokenizer(tokenizer_options, bert_config, model):
    """A `FullTokenizer` for `--vocab_file`, checked against the casing and the config.

    Args:
      tokenizer_options: `options.TokenizerOptions`.
      bert_config: the run's `BertConfig` (its vocab_size bounds the vocab's ids).
      model: `options.ModelOptions` (names the config file and the init checkpoint).
    """
    vocab_file = tokenizer_options.vocab_file
    errors.require_file(vocab_file, flag="vocab_file", what="vocab file")
    tokenization.validate_case_matches_checkpoint(tokenizer_options.do_lower_case,
                                                  model.init_checkpoint)
    tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file,
                                           do_lower_case=tokenizer_options.do_lower_case)
    tokenization.check_vocab_has_special_tokens(tokenizer.vocab, vocab_file,
                                                tokens=NEEDED_SPECIAL_TOKENS)
    largest_id = max(tokenizer.vocab.values())
    if largest_id >= bert_config.vocab_size:
        raise BertTfError(
            f"--vocab_file {vocab_file} has token id {largest_id} but vocab_size in "
            f"{model.bert_config_file} is {bert_config.vocab_size}; pass the vocab.txt that "
            "came with the checkpoint.")
    return tokenizer


# ---------------------------------------------------------------------- estimator and chief


def trainable_selection(train):
    """The `optimization.TrainableSelection` of --trainable_scopes / --freeze_scopes /
    --freeze_layers, or None when every variable trains."""
    if not (train.trainable_scopes or train.freeze_scopes or train.freeze_layers):
        return None
    return optimization.TrainableSelection(tuple(train.trainable_scopes or ()),
                                           tuple(train.freeze_scopes or ()),
                                           train.freeze_layers)


def create_output_dir(run):
    """Creates `--output_dir` (the first thing a run writes, after every check)."""
    return fileio.ensure_output_dir(run.output_dir)


def lock_output_dir(run, strategy):
    """A context manager holding the lock of `--output_dir` (`bert_tf.run_lock`) on the chief,
    entered right after `create_output_dir`: a second run on the directory stops there with
    `BertTfError` (a killed run's lock is taken over). The other workers of a multi-worker run
    write to the chief's directory by design, so they take no lock."""
    return run_lock.hold(run.output_dir) if is_chief(strategy) else contextlib.nullcontext()


def make_strategy(run, train):
    """The training strategy of `--distribution_strategy` (None: one device), with the
    global batch checked against its replicas. Without --do_train only a multi-worker strategy
    is built, so that the other workers still leave the chief's work to it."""
    if not train.do_train and run.distribution.distribution_strategy != "multi_worker":
        return None
    strategy = distribute.strategy_from_options(run.distribution)
    if not train.do_train:
        return strategy
    per_replica = distribute.per_replica_batch_size(
        train.train_batch_size, strategy, num_accumulation_steps=train.num_accumulation_steps)
    logging.info("Training: batch %d (%d micro-batches of %d); %d replicas with %d examples "
                 "each per micro-batch.", train.train_batch_size, train.num_accumulation_steps,
                 train.micro_batch_size, distribute.num_replicas(strategy), per_replica)
    return strategy


def make_estimator(model_fn, run, train, strategy, eval_batch_size=None,
                   predict_batch_size=None):
    """An Estimator writing to `--output_dir`; its train batch is the micro-batch.

    Training runs under `strategy` (see `bert_tf.distribute`): the train batch stays global,
    each replica computes train_batch_size / replicas of it. Evaluation and prediction run on
    one device of the chief.
    """
    return estimator_lib.Estimator(
        model_fn, run.output_dir, config=estimator_lib.run_config(run, strategy),
        train_batch_size=train.micro_batch_size, eval_batch_size=eval_batch_size,
        predict_batch_size=predict_batch_size)


def is_chief(strategy):
    """Whether this process writes to `--output_dir`, evaluates, predicts and exports: always,
    except on the non-chief workers of `--distribution_strategy=multi_worker`."""
    return distribute.is_chief(strategy)


def train(estimator, input_fn, max_steps, run, evaluate=None):
    """Trains to `max_steps`, evaluating every --eval_every_n_steps (see `tasks.validation`).

    Args:
      estimator: the run's Estimator.
      input_fn: the training input_fn.
      max_steps: optimizer updates to reach.
      run: `options.RunOptions`.
      evaluate: on the chief with --eval_every_n_steps, `evaluate(checkpoint_path) -> dict`
        of eval metrics; else None.

    Returns:
      The checkpoint that evaluation, prediction and export use after training: the best one
      with --best_checkpoint_metric, else None (the latest).
    """
    keeper = validation.Validation(run.validation, run.output_dir, evaluate)
    if keeper.should_stop(log=True):
        logging.info("Early stopping fired in an earlier run of this command: not training "
                     "further.")
    else:
        estimator.train(input_fn, max_steps=max_steps,
                        evaluate_fn=keeper if evaluate is not None else None,
                        evaluate_every_n_steps=run.validation.eval_every_n_steps)
    best = keeper.best_checkpoint()
    if best:
        logging.info("Using the best checkpoint %s (%s) for what follows.", best,
                     run.validation.best_checkpoint_metric)
    return best


def export_release(run, model, checkpoint=None, vocab_file=None):
    """With --export_release_dir, writes the released-checkpoint layout of `checkpoint`
    (default: the latest in --output_dir) there (`conversion.export_release_checkpoint`)."""
    if run.export_release_dir:
        conversion.export_release_checkpoint(checkpoint or run.output_dir,
                                             model.bert_config_file, run.export_release_dir,
                                             vocab_file=vocab_file)


def evaluate(estimator, input_fn, steps=None, checkpoint_path=None):
    """`estimator.evaluate` of `checkpoint_path` (default: the latest) as plain Python numbers
    (global_step an int, the rest floats)."""
    results = estimator.evaluate(input_fn, steps=steps, checkpoint_path=checkpoint_path)
    return {key: int(value) if key == "global_step" else float(value)
            for key, value in results.items()}


def write_results(output_dir, results, header=()):
    """Writes eval_results.txt (`# header` lines, then `key = value` lines) and logs each
    result."""
    path = fileio.write_eval_results(output_dir, results, header=header)
    logging.info("***** Eval results (%s) *****", path)
    for line in header:
        logging.info("  # %s", line)
    for key in sorted(results):
        logging.info("  %s = %s", key, results[key])
    return path


# ------------------------------------------------------------------------------------- input


# Bucketed training reads this many batches at a time and groups them by length bucket
# (Hugging Face's group_by_length "megabatch" is 50 batches too): long enough that most
# batches hold examples of one bucket, short enough to keep the order random across the epoch.
BUCKET_WINDOW_BATCHES = 50


def length_bucket_boundaries(max_seq_length):
    """The sequence lengths a bucketed training batch is cut to, ascending.

    Multiples of a step of max_seq_length / 16 rounded up to a multiple of 8 (at least 8),
    then max_seq_length itself: 128 -> (8, 16, ..., 120, 128), 384 -> (24, 48, ..., 384).
    All but the last are multiples of 8 (whole SIMD vectors of int32 / float32 on AVX2, whole
    tensor-core tiles on GPUs). At most 16 shapes: a bounded set that XLA compiles once each
    and oneDNN's primitive caches hold. A batch carries less than one step of padding beyond
    its longest example: on GLUE-like lengths (mean 27 of 128) an 8-token step computes 14 %
    more positions than padding each batch exactly, a 16-token step 28 % more.
    """
    step = max(8, -(-max_seq_length // 128) * 8)
    return tuple(range(step, max_seq_length, step)) + (max_seq_length,)


def training_length_buckets(bucket_by_length, max_seq_length, distribution):
    """`record_input_fn`'s `bucket_boundaries` for a training run, logging the choice once.

    Args:
      bucket_by_length: --bucket_by_length (None: the script has no such flag).
      max_seq_length: the run's --max_seq_length.
      distribution: `options.DistributionOptions`; a TPU needs static shapes, so there the
        batches keep max_seq_length.

    Returns:
      `length_bucket_boundaries(max_seq_length)`, or None (fixed max_seq_length batches).
    """
    if not bucket_by_length:
        return None
    if distribution.use_tpu or distribution.distribution_strategy == "tpu":
        logging.info("--bucket_by_length: off on a TPU (it needs static shapes); training "
                     "batches keep max_seq_length=%d.", max_seq_length)
        return None
    boundaries = length_bucket_boundaries(max_seq_length)
    logging.info("--bucket_by_length: on; each training batch is cut to the smallest of the "
                 "lengths %s that holds its longest example.", list(boundaries))
    return boundaries


def sequence_lengths(features, sequences_per_example=1):
    """int32 [B]: each example's real tokens, sum(input_mask); with several sequences per
    example ([B, k * S] features, e.g. multiple choice) the longest of its k."""
    mask = features["input_mask"]
    if sequences_per_example > 1:
        mask = tf.reshape(mask, [_batch_dim(mask), sequences_per_example, -1])
    lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=-1)
    return tf.reduce_max(lengths, axis=-1) if sequences_per_example > 1 else lengths


def cut_sequences(features, length, sequence_keys=SEQUENCE_FEATURES, sequences_per_example=1):
    """The [B, k * S] features in `sequence_keys` cut to [B, k * length]: each of the k
    sequences of an example keeps its first `length` positions; other features unchanged."""
    def cut(value):
        if sequences_per_example == 1:
            return value[:, :length]
        batch = _batch_dim(value)
        value = tf.reshape(value, [batch, sequences_per_example, -1])[:, :, :length]
        return tf.reshape(value, [batch, sequences_per_example * length])

    return {key: cut(value) if key in sequence_keys else value
            for key, value in features.items()}


def trim_to_longest(features, sequence_keys=SEQUENCE_FEATURES, sequences_per_example=1):
    """Cuts the [B, max_seq_length] features in `sequence_keys` to the batch's longest example.

    The attention costs O(S^2) and every other layer O(S), so on short texts a batch of
    length max(sum(input_mask)) is much cheaper than padding to max_seq_length; outputs for
    the real tokens are the same (padding is masked out of attention).
    """
    length = tf.reduce_max(sequence_lengths(features, sequences_per_example))
    return cut_sequences(features, length, sequence_keys, sequences_per_example)


def trim_to_bucket(features, boundaries, sequence_keys=SEQUENCE_FEATURES,
                   sequences_per_example=1):
    """Cuts the [B, max_seq_length] features in `sequence_keys` to the smallest of
    `boundaries` (ascending, the last max_seq_length) that holds the batch's longest example:
    one of a fixed set of shapes, unlike `trim_to_longest`."""
    longest = tf.reduce_max(sequence_lengths(features, sequences_per_example))
    sizes = tf.constant(boundaries, tf.int32)
    length = sizes[tf.reduce_sum(tf.cast(sizes < longest, tf.int32))]
    return cut_sequences(features, length, sequence_keys, sequences_per_example)


def _group_into_batches(features, boundaries, batch_size, sequences_per_example):
    """[W, ...] features (W a multiple of batch_size) grouped by length bucket, as
    [W / B, B, ...]: ordered by the smallest of `boundaries` that holds each example, in their
    incoming (shuffled) order within a bucket, so a batch is a random draw from its bucket
    (sorting by exact length would put copies of one record side by side on small sets)."""
    lengths = sequence_lengths(features, sequences_per_example)
    buckets = tf.reduce_sum(tf.cast(tf.constant(boundaries, tf.int32)[None, :] <
                                    lengths[:, None], tf.int32), axis=1)
    order = tf.argsort(buckets, stable=True)
    # Parsed FixedLenFeatures have static shapes: [W / B, B, ...] stays static too.
    return {key: tf.reshape(tf.gather(value, order), [-1, batch_size, *value.shape[1:]])
            for key, value in features.items()}


def _plain(fn):
    """`fn` for `Dataset.map` without AutoGraph: the input functions here have no Python
    control flow on tensors, and converting them costs ~0.1 s each (~1 s per training run)."""
    return tf.autograph.experimental.do_not_convert(fn)


def _batch_dim(value):
    """The leading dimension of `value`: static when known (it keeps the batch size in the
    shapes downstream), else a tensor."""
    return value.shape[0] if value.shape[0] is not None else tf.shape(value)[0]


def record_input_fn(input_files, feature_spec, is_training, shuffle=True, trim_keys=None,
                    drop_remainder=None, shuffle_buffer=1000, num_cpu_threads=4,
                    record_limits=None, skip_corrupt_records=False, flag=None,
                    map_batch=None, bucket_boundaries=None, sequences_per_example=1):
    """Returns an input_fn(params, input_context=None) over TFRecord files, batch
    params["batch_size"] (per replica under a distribution strategy).

    Training repeats forever, shuffles (with `shuffle`) and keeps full batches; several input
    pipelines (workers) each read their own files or records (`distribute.record_dataset`).
    Evaluation / prediction read each record once, in order. Int64 features arrive as int32.

    Length-bucketed training (`bucket_boundaries`): each pipeline reads
    `BUCKET_WINDOW_BATCHES` batches of records at a time (after the shuffle), orders them by
    length bucket (`sequence_lengths`; shuffled order within a bucket) into batches, shuffles
    those batches (with `shuffle`) and cuts each to its bucket (`trim_to_bucket`). Every
    record of the stream is trained on once per pass, as without buckets, in batches of the
    same size; only which records share a batch changes. The model_fns' losses ignore
    padding, so a batch's loss is the same at either length.

    Args:
      input_files: list of TFRecord files.
      feature_spec: dict name -> `tf.io.FixedLenFeature`.
      is_training: see above.
      shuffle: shuffle the training records (False: file order).
      trim_keys: the [B, S] features cut to each eval / predict batch's longest example
        (`trim_to_longest`), or to each bucketed training batch's bucket; None: keep
        max_seq_length.
      drop_remainder: drop a last smaller batch (default: when training).
      shuffle_buffer: records in the shuffle buffer (training).
      num_cpu_threads: files read in parallel (training).
      record_limits: {path: records to read} for files read only up to their last whole
        record (`records.check_record_files` with --skip_corrupt_records).
      skip_corrupt_records: also end a file at the first record TF cannot read.
      flag: the flag that named `input_files` (None: cached features), for error messages.
      map_batch: optional fn(features, batch_index, pipeline_id) applied to each parsed batch
        (batch_index counts on through the epochs; pipeline_id: 0 without a strategy).
      bucket_boundaries: training with `trim_keys`: the ascending lengths batches are cut to
        (`length_bucket_boundaries`, the last max_seq_length); None: fixed length.
      sequences_per_example: sequences packed one after another in each example's
        `trim_keys` features ([k * S]: multiple choice); each is cut alike.

    Returns:
      The input_fn; its `input_files` and `flag` attributes let the Estimator name a corrupt
      file (`bert_tf.faults`).
    """
    drop_remainder = is_training if drop_remainder is None else drop_remainder
    bucketed = bool(is_training and trim_keys and bucket_boundaries)

    def parse(serialized):
        features = tf.io.parse_example(serialized, feature_spec)
        features = {key: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
                    for key, value in features.items()}
        if trim_keys and not is_training:
            features = trim_to_longest(features, trim_keys, sequences_per_example)
        return features

    def input_fn(params, input_context=None):
        dataset = distribute.record_dataset(input_files, is_training, input_context,
                                            shuffle=shuffle, shuffle_buffer=shuffle_buffer,
                                            num_cpu_threads=num_cpu_threads,
                                            record_limits=record_limits,
                                            skip_corrupt_records=skip_corrupt_records)
        batch_size = params["batch_size"]
        if bucketed:
            # A window of whole batches (the stream repeats forever, so none is short).
            dataset = dataset.batch(batch_size * BUCKET_WINDOW_BATCHES, drop_remainder=True)
            dataset = dataset.map(
                _plain(lambda serialized: _group_into_batches(
                    parse(serialized), bucket_boundaries, batch_size, sequences_per_example)),
                num_parallel_calls=tf.data.AUTOTUNE).unbatch()
            if shuffle:
                # Else the batches of a window would come shortest first.
                dataset = dataset.shuffle(BUCKET_WINDOW_BATCHES)
            dataset = dataset.map(
                _plain(lambda features: trim_to_bucket(features, bucket_boundaries, trim_keys,
                                                       sequences_per_example)),
                num_parallel_calls=tf.data.AUTOTUNE)
        else:
            # Batch first so one vectorised parse handles the whole batch.
            dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
            dataset = dataset.map(_plain(parse), num_parallel_calls=tf.data.AUTOTUNE)
        if map_batch is not None:
            pipeline_id = input_context.input_pipeline_id if input_context else 0
            dataset = dataset.enumerate().map(
                _plain(lambda index, batch: map_batch(batch, index, pipeline_id)),
                num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)

    input_fn.input_files, input_fn.flag = list(input_files), flag
    return input_fn
