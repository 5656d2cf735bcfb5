"""The input features of an exported step: their shapes, their value ranges for random
features, and a task's TFRecords (the records run_*.py trains on) as fixed-shape batches."""

import os

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.errors import BertTfError
from bert_tf.step_program import tensor_files
from bert_tf.tools import benchmark_step

# Batches per safetensors shard (a BERT-large seq-384 batch of 32 is ~150 KB of ids).
BATCHES_PER_SHARD = 256
SHARD_PATTERN = "features-{:05d}.safetensors"

_SEQUENCE = ("input_ids", "input_mask", "segment_ids")


def _names_and_widths(options):
    """[(name, width, dtype)]: width None for one value per example ([B]), else [B, width]."""
    seq = options.max_seq_length
    common = [(name, seq, tf.int32) for name in _SEQUENCE]
    # The vocabulary bounds only random values, which `value_ranges` gives.
    task = benchmark_step.step_task(options.task)
    return common + [(name, width, dtype) for name, width, dtype, _ in task.step_features(
        seq, options.max_predictions_per_seq, options.num_labels, vocab_size=None)]


def feature_specs(options):
    """[(name, tf.TensorSpec)] of the step's features: [B, S] sequences, [B] labels and
    positions, [B, P] masked-LM features; in the module's argument order."""
    batch = options.train_batch_size
    return [(name, tf.TensorSpec([batch] if width is None else [batch, width], dtype))
            for name, width, dtype in _names_and_widths(options)]


def value_ranges(options, bert_config):
    """name -> `Entry.values`: what `run_step.py --random_features` fills each feature with
    (every token real, as in full seq-384 SQuAD windows)."""
    seq = options.max_seq_length
    return {"input_ids": {"max": bert_config.vocab_size}, "input_mask": {"fill": 1},
            "segment_ids": {"max": min(2, bert_config.type_vocab_size)},
            "start_positions": {"max": seq}, "end_positions": {"max": seq},
            "label_ids": {"max": options.num_labels}, "is_real_example": {"fill": 1},
            "masked_lm_positions": {"max": seq}, "masked_lm_ids": {"max": bert_config.vocab_size},
            "masked_lm_weights": {"fill": 1.0}, "next_sentence_labels": {"max": 2}}


def _parse_spec(options):
    """The TFRecord keys the step reads (docs/compatibility.md §3), as stored."""
    spec = {}
    for name, width, dtype in _names_and_widths(options):
        stored = tf.float32 if dtype == tf.float32 else tf.int64
        spec[name] = tf.io.FixedLenFeature([1 if width is None else width], stored)
    return spec


def write_feature_shards(options, specs, directory):
    """Writes the whole batches of `options.train_file` (TFRecords, in file order) as shards.

    Returns:
      The shard file names, in order.

    Raises:
      BertTfError: naming --train_file when it matches nothing, lacks a key, or holds fewer
        records than one batch.
    """
    files = fileio.expand_input_files(options.train_file, flag="train_file")
    parse_spec = _parse_spec(options)
    batch = options.train_batch_size
    dataset = tf.data.TFRecordDataset(files).map(
        lambda record: tf.io.parse_single_example(record, parse_spec)).batch(
            batch, drop_remainder=True)
    if options.num_batches:
        dataset = dataset.take(options.num_batches)
    num_batches, shards, pending = 0, [], []

    def flush():
        arrays = {name: np.stack([b[name] for b in pending]) for name, _ in specs}
        shard = SHARD_PATTERN.format(len(shards))
        tensor_files.save(arrays, os.path.join(directory, shard))
        shards.append(shard)
        pending.clear()

    try:
        for values in dataset.as_numpy_iterator():
            pending.append({name: values[name].reshape(spec.shape.as_list()).astype(
                spec.dtype.as_numpy_dtype) for name, spec in specs})
            num_batches += 1
            if len(pending) == BATCHES_PER_SHARD:
                flush()
    except tf.errors.InvalidArgumentError as e:
        raise BertTfError(f"--train_file: '{options.train_file}' does not hold the "
                          f"{options.task} features of --max_seq_length={options.max_seq_length} "
                          f"({e.message.splitlines()[0]}); pass the train.tf_record that "
                          "run_*.py writes (or create_pretraining_data.py's output).") from None
    if pending:
        flush()
    if not num_batches:
        raise BertTfError(f"--train_file: '{options.train_file}' holds fewer than one batch of "
                          f"{batch} records; pass more records or a smaller --train_batch_size.")
    logging.info("Wrote %d batches of %d from %s in %d shards.", num_batches, batch,
                 options.train_file, len(shards))
    return shards
