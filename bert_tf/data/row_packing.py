"""Several short training examples in one sequence (`--pack_sequences`).

On short texts most positions of a batch are padding, even cut to length buckets. A packed
row holds whole examples one after another, each as the feature builders made it
(`[CLS] a [SEP] (b [SEP])`, its own segment ids), with positions that restart at 0 for each;
`modeling.BertModel` then lets each token attend only to its own example and pools each
example's [CLS] (`position_ids`, `pooled_positions`), so an example's outputs are the ones it
has alone in a row. The loss averages over the examples, as an unpacked batch's does.

  pack_rows            which examples share a row (best fit, longest first)
  pack_features        `InputFeatures` -> `PackedRow`s
  packed_tf_example    a row as a TFRecord example (the keys of `packed_feature_spec`)
  packed_feature_spec  the parsing spec of those records
  batches_of_examples  an input_fn whose batches of rows hold about --train_batch_size examples
"""

import collections

# The [B, S] features of packed records besides input_pipeline.SEQUENCE_FEATURES (cut alike).
SEQUENCE_FEATURES = ("position_ids",)

# One packed row: input_ids, input_mask, segment_ids, position_ids [max_seq_length];
# cls_positions, label_ids, label_weights [examples_per_row] (weight 0: an empty slot).
PackedRow = collections.namedtuple(
    "PackedRow", ["input_ids", "input_mask", "segment_ids", "position_ids", "cls_positions",
                  "label_ids", "label_weights"])


def examples_per_row(max_seq_length):
    """The most examples a row holds: max_seq_length / 8 (16 at 128), at least 1: the size
    of the per-example features; rows of texts shorter than 8 pieces keep some padding."""
    return max(1, max_seq_length // 8)


def pack_rows(lengths, max_seq_length, max_per_row):
    """Groups examples into rows: each, longest first, goes to the open row it fills best.

    Args:
      lengths: the number of real tokens of each example (each <= max_seq_length).
      max_seq_length: a row's length.
      max_per_row: the most examples in one row.

    Returns:
      A list of rows, each a list of example indices in the order they sit in the row.
    """
    rows = []
    # open_rows[r]: the rows with r positions left (and room for another example).
    open_rows = [[] for _ in range(max_seq_length + 1)]
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        length = lengths[index]
        room = next((r for r in range(length, max_seq_length + 1) if open_rows[r]), None)
        if room is None:
            row, room = len(rows), max_seq_length
            rows.append([])
        else:
            row = open_rows[room].pop()
        rows[row].append(index)
        if len(rows[row]) < max_per_row and room - length > 0:
            open_rows[room - length].append(row)
    return rows


def pack_features(features, max_seq_length):
    """`classification_features.InputFeatures` (training examples, one label each) as packed rows.

    Args:
      features: `InputFeatures` with input_ids, input_mask, segment_ids [max_seq_length]
        and an int (class) or float (regression) label_id.
      max_seq_length: their length, and the rows'.

    Returns:
      A list of `PackedRow`.
    """
    max_per_row = examples_per_row(max_seq_length)
    lengths = [int(sum(f.input_mask)) for f in features]
    regression = bool(features) and isinstance(features[0].label_id, float)
    packed = []
    for row in pack_rows(lengths, max_seq_length, max_per_row):
        ids, segments, positions, starts, labels = [], [], [], [], []
        for index in row:
            feature, length = features[index], lengths[index]
            starts.append(len(ids))
            ids += feature.input_ids[:length]
            segments += feature.segment_ids[:length]
            positions += range(length)
            labels.append(feature.label_id)
        padding, empty = max_seq_length - len(ids), max_per_row - len(row)
        packed.append(PackedRow(
            input_ids=ids + [0] * padding, input_mask=[1] * len(ids) + [0] * padding,
            segment_ids=segments + [0] * padding, position_ids=positions + [0] * padding,
            cls_positions=starts + [0] * empty,
            label_ids=labels + [0.0 if regression else 0] * empty,
            label_weights=[1.0] * len(row) + [0.0] * empty))
    return packed


def packed_tf_example(row):
    """One `PackedRow` as a `tf.train.Example`."""
    import tensorflow as tf

    from bert_tf.data import record_writing

    regression = any(isinstance(label, float) for label in row.label_ids)
    features = {key: record_writing.create_int_feature(getattr(row, key))
                for key in ("input_ids", "input_mask", "segment_ids", "position_ids",
                            "cls_positions")}
    features["label_ids"] = (record_writing.create_float_feature(row.label_ids) if regression
                             else record_writing.create_int_feature(row.label_ids))
    features["label_weights"] = record_writing.create_float_feature(row.label_weights)
    return tf.train.Example(features=tf.train.Features(feature=features))


def packed_feature_spec(max_seq_length, is_regression=False):
    """The parsing spec of `packed_tf_example` records."""
    import tensorflow as tf

    slots = examples_per_row(max_seq_length)
    spec = {key: tf.io.FixedLenFeature([max_seq_length], tf.int64)
            for key in ("input_ids", "input_mask", "segment_ids", "position_ids")}
    spec.update({
        "cls_positions": tf.io.FixedLenFeature([slots], tf.int64),
        "label_ids": tf.io.FixedLenFeature([slots], tf.float32 if is_regression else tf.int64),
        "label_weights": tf.io.FixedLenFeature([slots], tf.float32),
    })
    return spec


def rows_per_batch(batch_size, examples_per_row_on_average):
    """The rows that hold about `batch_size` examples: rounded, at least 1."""
    return max(1, round(batch_size / examples_per_row_on_average))


def batches_of_examples(input_fn, examples_per_row_on_average):
    """`input_fn` over packed records with batches of about params["batch_size"] examples
    (`rows_per_batch` rows), so a step trains on as many examples as an unpacked one."""
    def packed_input_fn(params, input_context=None):
        rows = rows_per_batch(params["batch_size"], examples_per_row_on_average)
        return input_fn({**params, "batch_size": rows}, input_context)

    packed_input_fn.input_files, packed_input_fn.flag = input_fn.input_files, input_fn.flag
    return packed_input_fn
