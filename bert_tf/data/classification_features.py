"""Sentence (pair) classification features and their TFRecords.

The API is the original `run_classifier.py`'s: a processor (`bert_tf.data.processors`) turns a
task's files into `InputExample`s, `convert_single_example` turns one into `InputFeatures`
([CLS] a [SEP] b [SEP], padded to `max_seq_length`) and
`file_based_convert_examples_to_features` writes them as TFRecords with the keys of the
original (docs/compatibility.md §3): `input_ids`, `input_mask`, `segment_ids` int64
[max_seq_length], `label_ids` [1], `is_real_example` int64 [1]. `label_ids` is int64 for
classification and **float** for regression tasks (STS-B, or a csv/tsv task with
`regression=True`), so a regression model reads it with `tf.io.FixedLenFeature([1], tf.float32)`.

Feature cache: `cached_file_based_convert_examples_to_features` keeps the TFRecord file next
to a sidecar `<file>.meta.json` and reuses the file when the sidecar still matches (see there).
"""


import numpy as np
from absl import logging

from bert_tf import errors, tokenization
from bert_tf.data import bert_inputs, feature_cache

# Examples logged by `convert_single_example`, as the original did.
_NUM_EXAMPLES_TO_LOG = 5


class InputExample:
    """A single training/test example for simple sequence classification."""

    def __init__(self, guid, text_a, text_b=None, label=None):
        """Constructs an InputExample.

        Args:
          guid: unique id for the example, e.g. "train-12".
          text_a: the untokenized text of the first sequence.
          text_b: the untokenized text of the second sequence, for sentence-pair tasks.
          label: the label (a str of the label list; a float for regression). Test examples
            carry a placeholder label (the first label, or 0.0).
        """
        self.guid = guid
        self.text_a = text_a
        self.text_b = text_b
        self.label = label

    def __repr__(self):
        return (f"InputExample(guid={self.guid!r}, text_a={self.text_a!r}, "
                f"text_b={self.text_b!r}, label={self.label!r})")


class PaddingInputExample:
    """A fake example that pads a batch to full size (TPUs need fixed batch sizes).

    It becomes all-zero features with `is_real_example=0`, which metrics weight out.
    """


class InputFeatures:
    """A single set of features of data: lists of ints of length max_seq_length, a label
    (an int id, a float score, or a multi-hot list [num_labels] for multi-label), and with
    windows the index of the example the window belongs to."""

    def __init__(self, input_ids, input_mask, segment_ids, label_id, is_real_example=True,
                 example_index=None):
        self.input_ids = input_ids
        self.input_mask = input_mask
        self.segment_ids = segment_ids
        self.label_id = label_id
        self.is_real_example = is_real_example
        self.example_index = example_index


def pad_examples_to_batch_multiple(examples, batch_size):
    """Appends `PaddingInputExample`s until len(examples) is a multiple of `batch_size`.

    Returns:
      (padded list, number of real examples).
    """
    num_real = len(examples)
    padded = list(examples)
    while len(padded) % batch_size:
        padded.append(PaddingInputExample())
    return padded, num_real


# ----------------------------------------------------------------------------------------
# Reading delimited files.


# ----------------------------------------------------------------------------------------
# Processors.


# ----------------------------------------------------------------------------------------
# Features.


def _check_room(max_seq_length, is_pair):
    if max_seq_length < (3 if is_pair else 2):
        raise errors.BertTfError(
            f"--max_seq_length={max_seq_length} leaves no room for text after [CLS] and "
            "[SEP]; use a larger max_seq_length (128 is usual).")


def label_id_of(example, label_list, multi_label=False):
    """The feature label of `example`: its index in `label_list`, its score as a float
    (`label_list` None or empty: regression), or with `multi_label` a multi-hot list
    [len(label_list)] of its labels."""
    if not label_list:
        return float(example.label)
    label_map = {label: i for i, label in enumerate(label_list)}
    labels = example.label if multi_label else [example.label]
    for label in labels:
        if label not in label_map:
            raise errors.BertTfError(
                f"example {example.guid}: label '{label}' is not in the label list "
                f"({', '.join(label_list)}); fix the data or the label list.")
    if not multi_label:
        return label_map[example.label]
    hot = set(label_map[label] for label in labels)
    return [int(i in hot) for i in range(len(label_list))]


def _padding_features(label_list, max_seq_length, multi_label, example_index=None):
    """All-zero features with is_real_example=False (batch padding)."""
    label_id = 0.0 if not label_list else ([0] * len(label_list) if multi_label else 0)
    return InputFeatures(input_ids=[0] * max_seq_length, input_mask=[0] * max_seq_length,
                         segment_ids=[0] * max_seq_length, label_id=label_id,
                         is_real_example=False, example_index=example_index)


def _log_example(ex_index, example, tokens, input_ids, label_id):
    # At DEBUG (--verbosity=1 shows them): at INFO they buried the run's own lines.
    if ex_index < _NUM_EXAMPLES_TO_LOG:
        logging.debug("*** Example ***")
        logging.debug("guid: %s", example.guid)
        logging.debug("tokens: %s", " ".join(tokenization.printable_text(t) for t in tokens))
        logging.debug("input_ids: %s", " ".join(str(x) for x in input_ids))
        logging.debug("label: %s (id = %s)", example.label, label_id)


def convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer,
                           multi_label=False):
    """Converts a single `InputExample` into a single `InputFeatures` (truncating).

    Args:
      ex_index: the example's position (the first few are logged).
      example: an `InputExample` or `PaddingInputExample`.
      label_list: the task's labels; None or [] for regression (label kept as float).
      max_seq_length: length of every id list, [CLS] and [SEP]s included.
      tokenizer: a `tokenization.FullTokenizer`.
      multi_label: `example.label` is a tuple of labels (multi-hot label_id).

    Returns:
      `InputFeatures`: input_ids, input_mask (1 for real tokens), segment_ids (0 for
      [CLS] a [SEP], 1 for b [SEP]), each [max_seq_length]; label_id (see `label_id_of`);
      is_real_example.
    """
    is_pair = not isinstance(example, PaddingInputExample) and bool(example.text_b)
    _check_room(max_seq_length, is_pair)
    if isinstance(example, PaddingInputExample):
        return _padding_features(label_list, max_seq_length, multi_label)
    label_id = label_id_of(example, label_list, multi_label)
    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
    tokens, input_ids, input_mask, segment_ids = bert_inputs.pack_and_pad(
        tokens_a, tokens_b, tokenizer, max_seq_length)
    _log_example(ex_index, example, tokens, input_ids, label_id)
    return InputFeatures(input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids,
                         label_id=label_id, is_real_example=True)


def check_doc_stride(doc_stride, max_seq_length):
    """Raises `BertTfError` unless `doc_stride` is 0 (truncate) or shorter than a window."""
    if doc_stride < 0:
        raise errors.BertTfError(f"--doc_stride={doc_stride} must be 0 (truncate long texts) "
                                 "or a positive number of word pieces.")
    if doc_stride and doc_stride >= max_seq_length - 2:
        raise errors.BertTfError(
            f"--doc_stride={doc_stride} must be smaller than a window ({max_seq_length - 2} "
            f"word pieces: --max_seq_length={max_seq_length} less [CLS] and [SEP]), or windows "
            "would skip text; lower --doc_stride (e.g. max_seq_length / 2).")


def convert_example_to_windows(ex_index, example, label_list, max_seq_length, tokenizer,
                               doc_stride, multi_label=False):
    """Converts one `InputExample` into the `InputFeatures` of its windows.

    text_a is cut into windows of the room left in `max_seq_length` (`bert_inputs.
    compute_doc_spans`) starting every `doc_stride` word pieces; text_b, if any, is repeated
    in each window after text_a's window (cut to half the room first, as SQuAD cuts the
    question). Every window carries the example's label and `example_index=ex_index`.

    Returns:
      A non-empty list of `InputFeatures`, windows in text order.
    """
    check_doc_stride(doc_stride, max_seq_length)
    if isinstance(example, PaddingInputExample):
        return [_padding_features(label_list, max_seq_length, multi_label, ex_index)]
    _check_room(max_seq_length, bool(example.text_b))
    label_id = label_id_of(example, label_list, multi_label)
    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else []
    if tokens_b:
        tokens_b = tokens_b[:(max_seq_length - 3) // 2]
    room = max_seq_length - 2 - (len(tokens_b) + 1 if tokens_b else 0)
    spans = (bert_inputs.compute_doc_spans(len(tokens_a), room, doc_stride)
             or [bert_inputs.DocSpan(0, 0)])
    features = []
    for span in spans:
        tokens, segment_ids = bert_inputs.pack_tokens(
            tokens_a[span.start:span.start + span.length], tokens_b)
        input_ids, input_mask, segment_ids = bert_inputs.encode_and_pad(
            tokens, segment_ids, tokenizer, max_seq_length)
        _log_example(ex_index, example, tokens, input_ids, label_id)
        features.append(InputFeatures(input_ids, input_mask, segment_ids, label_id,
                                      is_real_example=True, example_index=ex_index))
    return features


def convert_examples_to_features(examples, label_list, max_seq_length, tokenizer):
    """Converts a list of examples into a list of `InputFeatures`."""
    return [convert_single_example(i, example, label_list, max_seq_length, tokenizer)
            for i, example in enumerate(examples)]


def feature_to_tf_example(feature):
    """One `InputFeatures` as a `tf.train.Example` with the docs/compatibility.md §3 keys."""
    import tensorflow as tf

    from bert_tf.data import record_writing

    if isinstance(feature.label_id, float):
        label_feature = record_writing.create_float_feature([feature.label_id])
    else:
        label_feature = record_writing.create_int_feature(np.atleast_1d(feature.label_id).tolist())
    features = {
        "input_ids": record_writing.create_int_feature(feature.input_ids),
        "input_mask": record_writing.create_int_feature(feature.input_mask),
        "segment_ids": record_writing.create_int_feature(feature.segment_ids),
        "label_ids": label_feature,
        "is_real_example": record_writing.create_int_feature([int(feature.is_real_example)]),
    }
    if feature.example_index is not None:
        features["example_index"] = record_writing.create_int_feature([feature.example_index])
    return tf.train.Example(features=tf.train.Features(feature=features))


def write_tf_examples(tf_examples, output_file):
    """Writes `tf.train.Example`s to the TFRecord file `output_file`, whole or not at all.

    They go to a temporary file renamed to `output_file` at the end (see
    `record_writing.AtomicRecordWriter`), so an interrupted run never leaves a truncated file
    under the real name.

    Returns:
      The number of records written.
    """
    from bert_tf.data import record_writing

    with record_writing.AtomicRecordWriter(output_file) as writer:
        for tf_example in tf_examples:
            writer.write(tf_example.SerializeToString())
    return writer.num_written


def file_based_convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                            output_file, doc_stride=0, multi_label=False,
                                            pack_sequences=False):
    """Converts examples to features and writes them to the TFRecord file `output_file`.

    Written to a temporary name and renamed, so `output_file` is whole or absent. With
    `doc_stride` > 0 each example becomes its windows (`convert_example_to_windows`), each
    record carrying `example_index`; `multi_label`: multi-hot label_ids [len(label_list)];
    `pack_sequences`: several examples a record (`row_packing`, training only).

    Returns:
      The number of records written.
    """
    if pack_sequences:
        from bert_tf.data import row_packing

        rows = row_packing.pack_features(
            convert_examples_to_features(examples, label_list, max_seq_length, tokenizer),
            max_seq_length)
        num_written = write_tf_examples(map(row_packing.packed_tf_example, rows),
                                        output_file)
        logging.info("%d examples -> %d packed sequences of %d (--pack_sequences)",
                     len(examples), num_written, max_seq_length)
        return num_written

    def tf_examples():
        for ex_index, example in enumerate(examples):
            if ex_index % 10000 == 0 and ex_index:
                logging.info("Writing example %d of %d", ex_index, len(examples))
            if doc_stride:
                yield from map(feature_to_tf_example, convert_example_to_windows(
                    ex_index, example, label_list, max_seq_length, tokenizer, doc_stride,
                    multi_label))
            else:
                yield feature_to_tf_example(convert_single_example(
                    ex_index, example, label_list, max_seq_length, tokenizer, multi_label))

    num_written = write_tf_examples(tf_examples(), output_file)
    if doc_stride:
        logging.info("%d examples -> %d windows (--doc_stride=%d)", len(examples), num_written,
                     doc_stride)
    return num_written


def cached_file_based_convert_examples_to_features(examples, label_list, max_seq_length,
                                                   tokenizer, output_file, doc_stride=0,
                                                   multi_label=False, pack_sequences=False):
    """`file_based_convert_examples_to_features`, reusing `output_file` when still valid.

    The sidecar `<output_file>.meta.json` (see `feature_cache.cached_tfrecord_file`) records
    the cache format, max_seq_length, the label list, the number of examples, a SHA-256 of the
    examples (guids, texts, labels) and a SHA-256 of the tokenizer's vocab and settings
    (do_lower_case, unk token, word length limit). Any change rebuilds the file; hashing
    the examples is far cheaper than tokenizing them.

    Returns:
      True if the existing file was reused, False if it was (re)built.
    """
    settings = {"doc_stride": doc_stride, "multi_label": multi_label} if (
        doc_stride or multi_label) else {}
    if pack_sequences:
        settings["pack_sequences"] = True
    key = feature_cache.feature_cache_key("classification", examples, label_list,
                                          max_seq_length, tokenizer, **settings)
    return feature_cache.cached_tfrecord_file(
        output_file, key,
        lambda: file_based_convert_examples_to_features(
            examples, label_list, max_seq_length, tokenizer, output_file, doc_stride,
            multi_label, pack_sequences))
