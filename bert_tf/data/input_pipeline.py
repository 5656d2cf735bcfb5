"""Reading TFRecords for training and evaluation: each worker's share of the files, shuffling,
batching, and batches cut to their length bucket or their longest example.
"""

import dataclasses

import tensorflow as tf
from absl import logging

from bert_tf.data import record_integrity

# The [batch, seq] features every BERT input has; eval / predict batches trim them.
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")

# The int32 [B] feature of length-ordered evaluation / prediction batches: each record's
# position in the input, by which per-record outputs go back to input order
# (`bert_tf.tasks.base.ExampleCollector`, `bert_tf.tasks.base.in_input_order`).
RECORD_INDEX = "record_index"


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


def run_length_buckets(bucket_by_length, max_seq_length, distribution, is_training=True):
    """`record_input_fn`'s `bucket_boundaries` for a run's input, logging the choice once.

    Training draws its batches from length buckets; evaluation and prediction read their
    records in order of length (`length_ordered_batches`). Either way each batch is cut to
    its bucket.

    Args:
      bucket_by_length: --bucket_by_length (None: the script has no such flag).
      max_seq_length: the run's --max_seq_length.
      distribution: `options.DistributionOptions`; a TPU needs static shapes, so there the
        batches keep max_seq_length.
      is_training: the training input (else the evaluation / prediction input).

    Returns:
      `length_bucket_boundaries(max_seq_length)`, or None (training batches keep
      max_seq_length; eval / predict batches come in input order, cut to their longest).
    """
    what = "training" if is_training else "evaluation / prediction"
    if not bucket_by_length:
        return None
    if distribution.on_tpu:
        logging.info("--bucket_by_length: off on a TPU (it needs static shapes); %s "
                     "batches keep max_seq_length=%d.", what, max_seq_length)
        return None
    boundaries = length_bucket_boundaries(max_seq_length)
    if is_training:
        logging.info("--bucket_by_length: on; each training batch is cut to the smallest of "
                     "the lengths %s that holds its longest example.", list(boundaries))
    else:
        logging.info("--bucket_by_length: evaluation / prediction batches hold examples of "
                     "similar length, each cut to the smallest of the lengths %s that holds "
                     "its longest.", list(boundaries))
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


def length_ordered_batches(dataset, parse, batch_size, boundaries, sequence_keys,
                           sequences_per_example=1):
    """Evaluation / prediction batches of records of similar length, each cut to its bucket.

    Reads `BUCKET_WINDOW_BATCHES` batches of serialized records at a time, orders them by
    length (`sequence_lengths`; input order among equal lengths), batches them again and cuts
    each batch to the smallest of `boundaries` that holds its longest example. In input order
    a batch of short texts pads to its one long text (on GLUE-like lengths about twice the
    positions) and nearly every batch is a new shape; ordered, batches pad by less than one
    bucket step and take at most len(boundaries) shapes. Every record is read once, and each
    batch carries `RECORD_INDEX`: metrics over all records do not depend on their order, and
    per-record outputs (predictions) go back to input order by it.

    Args:
      dataset: serialized records, in input order, read once.
      parse: fn([N] serialized) -> dict of [N, ...] features (not cut).
      batch_size: records per batch (the last batch may hold fewer).
      boundaries: ascending lengths, the last max_seq_length (`length_bucket_boundaries`).
      sequence_keys, sequences_per_example: as in `cut_sequences`.

    Returns:
      A dataset of feature dicts, with `RECORD_INDEX` (int32 [B]).
    """
    window = batch_size * BUCKET_WINDOW_BATCHES

    def ordered(window_index, serialized):
        features = parse(serialized)
        lengths = sequence_lengths(features, sequences_per_example)
        features[RECORD_INDEX] = (tf.cast(window_index, tf.int32) * window +
                                  tf.range(tf.shape(lengths)[0], dtype=tf.int32))
        order = tf.argsort(lengths, stable=True)
        return {key: tf.gather(value, order) for key, value in features.items()}

    dataset = dataset.batch(window).enumerate()
    dataset = dataset.map(_plain(ordered), num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.unbatch().batch(batch_size)
    return dataset.map(_plain(lambda features: trim_to_bucket(
        features, boundaries, sequence_keys, sequences_per_example)),
        num_parallel_calls=tf.data.AUTOTUNE)


def _plain(fn):
    """`fn` for `Dataset.map` without AutoGraph: the input functions here have no Python
    control flow on tensors, and converting them costs time in every training run."""
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
    pipelines (workers) each read their own files or records (`record_dataset`).
    Evaluation / prediction read each record once, in order (with `bucket_boundaries`: in
    order of length within windows, `length_ordered_batches`). Int64 features arrive as int32.
    Length-bucketed training (`bucket_boundaries`) draws each batch from one length bucket
    (`bucketed_training_batches`).

    Args:
      input_files: list of TFRecord files.
      feature_spec: dict name -> `tf.io.FixedLenFeature`.
      is_training: see above.
      shuffle: shuffle the training records (False: file order).
      trim_keys: the [B, S] features cut to each batch's bucket (with `bucket_boundaries`)
        or to each eval / predict batch's longest example (`trim_to_longest`); None: keep
        max_seq_length.
      drop_remainder: drop a last smaller batch (default: when training).
      shuffle_buffer: records in the shuffle buffer (training).
      num_cpu_threads: files read in parallel (training).
      record_limits: {path: records to read} for files read only up to their last whole
        record (`record_integrity.check_record_files` with --skip_corrupt_records).
      skip_corrupt_records: also end a file at the first record TF cannot read.
      flag: the flag that named `input_files` (None: cached features), for error messages.
      map_batch: optional fn(features, batch_index, pipeline_id) applied to each parsed batch
        (batch_index counts on through the epochs; pipeline_id: 0 without a strategy).
      bucket_boundaries: with `trim_keys`: the ascending lengths batches are cut to
        (`length_bucket_boundaries`, the last max_seq_length): training draws its batches
        from length buckets, evaluation / prediction reads records in order of length;
        None: training batches keep max_seq_length, eval / predict batches are cut to their
        longest.
      sequences_per_example: sequences packed one after another in each example's
        `trim_keys` features ([k * S]: multiple choice); each is cut alike.

    Returns:
      The input_fn; its `input_files` and `flag` attributes let the Estimator name a corrupt
      file (`bert_tf.training.faults`).
    """
    batching = _Batching(is_training,
                         is_training if drop_remainder is None else drop_remainder,
                         shuffle, trim_keys, bucket_boundaries, sequences_per_example)
    parse = _record_parser(feature_spec)

    def input_fn(params, input_context=None):
        dataset = record_dataset(input_files, is_training, input_context,
                                 shuffle=shuffle, shuffle_buffer=shuffle_buffer,
                                 num_cpu_threads=num_cpu_threads,
                                 record_limits=record_limits,
                                 skip_corrupt_records=skip_corrupt_records)
        dataset = batching.batches(dataset, parse, params["batch_size"])
        if map_batch is not None:
            dataset = _mapped_batches(dataset, map_batch, input_context)
        return dataset.prefetch(tf.data.AUTOTUNE)

    input_fn.input_files, input_fn.flag = list(input_files), flag
    return input_fn


@dataclasses.dataclass(frozen=True)
class _Batching:
    """How `record_input_fn` batches the records of a pipeline (its arguments of these names;
    `drop_remainder` resolved)."""

    is_training: bool
    drop_remainder: bool
    shuffle: bool
    trim_keys: tuple | list | None
    bucket_boundaries: tuple | None
    sequences_per_example: int

    def batches(self, dataset, parse, batch_size):
        """The parsed batches of `dataset` (serialized records): feature dicts of
        [batch_size, ...] tensors, [batch_size, length] for the cut `trim_keys`."""
        if self.is_training and self.trim_keys and self.bucket_boundaries:
            return bucketed_training_batches(dataset, parse, batch_size,
                                             self.bucket_boundaries, self.trim_keys,
                                             self.shuffle, self.sequences_per_example)
        if (not self.is_training and not self.drop_remainder and self.trim_keys
                and self.bucket_boundaries):
            return length_ordered_batches(dataset, parse, batch_size, self.bucket_boundaries,
                                          self.trim_keys, self.sequences_per_example)
        # In stream order; training batches keep max_seq_length.
        return _batches_in_stream_order(dataset, parse, batch_size, self.drop_remainder,
                                        None if self.is_training else self.trim_keys,
                                        self.sequences_per_example)


def _record_parser(feature_spec):
    """fn([N] serialized `tf.train.Example`s) -> dict of [N, ...] features of `feature_spec`,
    int64 features cast to int32."""
    def parse(serialized):
        features = tf.io.parse_example(serialized, feature_spec)
        return {key: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
                for key, value in features.items()}

    return parse


def bucketed_training_batches(dataset, parse, batch_size, boundaries, sequence_keys,
                              shuffle=True, sequences_per_example=1):
    """Training batches drawn from length buckets, each cut to its bucket.

    Reads `BUCKET_WINDOW_BATCHES` batches of records at a time (after the shuffle), orders
    them by length bucket (`sequence_lengths`; shuffled order within a bucket) into batches,
    shuffles those batches (with `shuffle`) and cuts each to its bucket (`trim_to_bucket`).
    Every record of the stream is trained on once per pass, as without buckets, in batches of
    the same size; only which records share a batch changes. The model_fns' losses ignore
    padding, so a batch's loss is the same at either length.

    Args:
      dataset: serialized records, a stream that repeats forever.
      parse: fn([N] serialized) -> dict of [N, ...] features (not cut).
      batch_size: records per batch.
      boundaries: ascending lengths, the last max_seq_length (`length_bucket_boundaries`).
      sequence_keys: the [B, S] features cut to the bucket.
      shuffle: shuffle the batches of a window (else they come shortest first).
      sequences_per_example: as in `cut_sequences`.

    Returns:
      A dataset of feature dicts, [batch_size, ...] each.
    """
    # A window of whole batches (the stream repeats forever, so none is short).
    dataset = dataset.batch(batch_size * BUCKET_WINDOW_BATCHES, drop_remainder=True)
    dataset = dataset.map(
        _plain(lambda serialized: _group_into_batches(
            parse(serialized), boundaries, batch_size, sequences_per_example)),
        num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    if shuffle:
        # Else the batches of a window would come shortest first.
        dataset = dataset.shuffle(BUCKET_WINDOW_BATCHES)
    return dataset.map(
        _plain(lambda features: trim_to_bucket(features, boundaries, sequence_keys,
                                               sequences_per_example)),
        num_parallel_calls=tf.data.AUTOTUNE)


def _batches_in_stream_order(dataset, parse, batch_size, drop_remainder, trim_keys,
                             sequences_per_example):
    """Batches of the records in the order they come, parsed; with `trim_keys` each cut to
    its longest example (`trim_to_longest`)."""
    def parse_and_trim(serialized):
        features = parse(serialized)
        if trim_keys:
            features = trim_to_longest(features, trim_keys, sequences_per_example)
        return features

    # Batch first so one vectorised parse handles the whole batch.
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    return dataset.map(_plain(parse_and_trim), num_parallel_calls=tf.data.AUTOTUNE)


def _mapped_batches(dataset, map_batch, input_context):
    """`map_batch(features, batch_index, pipeline_id)` applied to each batch of `dataset`."""
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    return dataset.enumerate().map(
        _plain(lambda index, batch: map_batch(batch, index, pipeline_id)),
        num_parallel_calls=tf.data.AUTOTUNE)


def shard_input_files(input_files, input_context=None):
    """The part of the input this worker (input pipeline) reads.

    By file when there are at least as many files as workers (worker i reads files i, i+n,
    ...), else by record (every worker reads all files and keeps records i, i+n, ...). Either
    way no two workers read the same record_integrity.

    Args:
      input_files: list of file paths, in a fixed order (the same on every worker).
      input_context: a `tf.distribute.InputContext`, or None for one pipeline.

    Returns:
      (files, num_record_shards, record_shard_index): this worker's files and, when sharding
      by record, how many record shards there are and which one is this worker's (1, 0
      otherwise).
    """
    if input_context is None or input_context.num_input_pipelines <= 1:
        return list(input_files), 1, 0
    count, index = input_context.num_input_pipelines, input_context.input_pipeline_id
    if len(input_files) >= count:
        return list(input_files)[index::count], 1, 0
    return list(input_files), count, index


def record_dataset(input_files, is_training, input_context=None, shuffle=True,
                   num_cpu_threads=4, shuffle_buffer=1000, record_limits=None,
                   skip_corrupt_records=False):
    """A dataset of serialized records: this worker's share of `input_files`.

    Training repeats forever and, with `shuffle`, shuffles records (buffer `shuffle_buffer`);
    when this worker reads whole files it also shuffles their order and reads several in
    parallel, interleaved in a fixed order (with --random_seed every run sees the same batches,
    and a resumed run's restored input goes on as the uninterrupted run's did). Without
    `shuffle` (or when not training) records come in file order: one pipeline then sees the
    records of the single-process run in the same order, and n pipelines sharded by record
    together see each global batch of the single-process run.

    Args:
      input_files: list of TFRecord paths.
      is_training: repeat (and maybe shuffle) for training; read once in order otherwise.
      input_context: `tf.distribute.InputContext` of this pipeline, or None.
      shuffle: shuffle files and records when training.
      num_cpu_threads: files read in parallel when shuffling.
      shuffle_buffer: records in the shuffle buffer.
      record_limits, skip_corrupt_records: read broken files only up to their last whole
        record (`record_integrity.read_files`).

    Returns:
      A `tf.data.Dataset` of scalar string tensors.
    """
    files, record_shards, record_index = shard_input_files(input_files, input_context)
    if not is_training:
        dataset = record_integrity.read_files(files, record_limits, skip_corrupt_records)
        return dataset.shard(record_shards, record_index) if record_shards > 1 else dataset
    if record_shards > 1 or not shuffle:
        # Files in their given order and repeated before sharding, so that every worker shards
        # the same stream and the shards keep partitioning it across epochs.
        dataset = record_integrity.read_files(files, record_limits, skip_corrupt_records).repeat()
        if record_shards > 1:
            dataset = dataset.shard(record_shards, record_index)
        return dataset.shuffle(buffer_size=shuffle_buffer) if shuffle else dataset
    dataset = record_integrity.file_dataset(files, record_limits)
    dataset = dataset.repeat().shuffle(buffer_size=len(files))
    dataset = dataset.interleave(record_integrity.file_reader(skip_corrupt_records),
                                 cycle_length=min(num_cpu_threads, len(files)),
                                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.shuffle(buffer_size=shuffle_buffer)
