"""TFRecord feature helpers and the pre-training record schema (docs/compatibility.md §3).

One place for the keys, dtypes and lengths of pre-training records, used by the writer
(`bert_tf.data.pretraining_data`) and the reader (`bert_tf.tasks.pretraining`):

  input_ids, input_mask, segment_ids        int64 [max_seq_length], zero padded
  masked_lm_positions, masked_lm_ids        int64 [max_predictions_per_seq], zero padded
  masked_lm_weights                         float [max_predictions_per_seq], 1.0 real / 0.0 pad
  next_sentence_labels                      int64 [1], 0 = B follows A, 1 = B is random
                                            (sop: 1 = A and B swapped; none: always 0)

Records for dynamic masking (`create_pretraining_data.py --masking=dynamic`; the reader masks
them afresh every epoch, `bert_tf.data.dynamic_masking`) have no masked_lm_* features and the
input_ids unmasked, plus:

  word_ids                                  int64 [max_seq_length]: the 1-based index of the
                                            word each token belongs to ("##" pieces, and
                                            the characters of a segmenter's word with
                                            --word_segmenter, share their word's index under
                                            whole-word masking; otherwise every token is its
                                            own word), 0 for [CLS], [SEP] and padding, which
                                            are never masked
  mask_token_id                             int64 [1], the id of [MASK] in the vocab
  whole_word_replacement                    int64 [1], only in records written with
                                            --word_segmenter: 1 = the 80-10-10 choice is
                                            made once per word (absent: once per token)

TensorFlow is imported inside the functions that need it, so the worker processes of
create_pretraining_data, which only encode records, start without loading TensorFlow.
`PretrainingExampleEncoder` writes the serialized `tf.train.Example` protobuf directly (the
wire format is small and fixed), several times faster than building `tf.train.Example`
objects in Python; the tests check that TensorFlow parses it back to the same values.
"""

import operator
import struct

# The [max_seq_length] inputs every pre-training record starts with.
_SEQUENCE_FEATURES = (
    ("input_ids", "int64", "max_seq_length"),
    ("input_mask", "int64", "max_seq_length"),
    ("segment_ids", "int64", "max_seq_length"),
)

# name -> (dtype, which length): the pre-training schema of the original Google release.
PRETRAINING_FEATURES = _SEQUENCE_FEATURES + (
    ("masked_lm_positions", "int64", "max_predictions_per_seq"),
    ("masked_lm_ids", "int64", "max_predictions_per_seq"),
    ("masked_lm_weights", "float", "max_predictions_per_seq"),
    ("next_sentence_labels", "int64", "one"),
)

# The records of dynamic masking: no masks, the words to mask whole, the [MASK] id.
DYNAMIC_FEATURES = _SEQUENCE_FEATURES + (
    ("word_ids", "int64", "max_seq_length"),
    ("next_sentence_labels", "int64", "one"),
    ("mask_token_id", "int64", "one"),
)
# Keys that dynamic-masking records may lack, parsed as 0 where absent.
OPTIONAL_DYNAMIC_FEATURES = (
    ("whole_word_replacement", "int64", "one"),
)


def create_int_feature(values):
    """Returns a `tf.train.Feature` holding the ints `values` as an int64 list."""
    import tensorflow as tf

    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def create_float_feature(values):
    """Returns a `tf.train.Feature` holding the numbers `values` as a float list."""
    import tensorflow as tf

    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def pretraining_feature_spec(max_seq_length, max_predictions_per_seq, dynamic=False):
    """The `tf.io.parse_example` spec of pre-training records: {name: FixedLenFeature}.

    `dynamic`: the spec of records written for dynamic masking (`DYNAMIC_FEATURES`, and
    `OPTIONAL_DYNAMIC_FEATURES` with default 0).
    """
    import tensorflow as tf

    lengths = {"max_seq_length": max_seq_length,
               "max_predictions_per_seq": max_predictions_per_seq, "one": 1}
    dtypes = {"int64": tf.int64, "float": tf.float32}
    spec = {name: tf.io.FixedLenFeature([lengths[length]], dtypes[dtype])
            for name, dtype, length in (DYNAMIC_FEATURES if dynamic else PRETRAINING_FEATURES)}
    if dynamic:
        spec.update({name: tf.io.FixedLenFeature([lengths[length]], dtypes[dtype],
                                                 default_value=[0] * lengths[length])
                     for name, dtype, length in OPTIONAL_DYNAMIC_FEATURES})
    return spec


def _varint(value):
    """Protobuf base-128 varint encoding of a non-negative int."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Protobuf tags (field number << 3 | wire type 2) of the messages in tf.train.Example.
_TAG_1 = b"\x0a"  # Example.features, Features.feature (map entry), entry key, *List.value
_TAG_2 = b"\x12"  # map entry value, Feature.float_list
_TAG_3 = b"\x1a"  # Feature.int64_list


class _KeyedCache(dict):
    """A dict that fills in a missing key with `make(key)` on first use."""

    def __init__(self, make):
        super().__init__()
        self._make = make

    def __missing__(self, key):
        value = self[key] = self._make(key)
        return value


def _entry_prefix(name, list_tag, num_bytes):
    """Bytes of a `Features.feature` map entry for `name` that precede its `num_bytes` of
    packed values: entry tag and length, key, value tag and length, `Feature.int64_list` /
    `float_list` tag and length, `*List.value` tag and length."""
    values_header = _TAG_1 + _varint(num_bytes)
    list_length = len(values_header) + num_bytes
    feature_header = list_tag + _varint(list_length)
    feature_length = len(feature_header) + list_length
    entry_head = _TAG_1 + _varint(len(name)) + name.encode() + _TAG_2 + _varint(feature_length)
    entry_length = len(entry_head) + feature_length
    return _TAG_1 + _varint(entry_length) + entry_head + feature_header + values_header


class PretrainingExampleEncoder:
    """Serializes pre-training instances to `tf.train.Example` bytes without TensorFlow.

    Every feature is a map entry `{key, Feature{int64_list | float_list {packed values}}}`.
    All bytes but the token ids depend only on a few lengths (the number of tokens, of tokens
    in A, of masked tokens), so they are built once per length and cached.

    Args:
      vocab_size: ids are below this (varints of all of them are precomputed).
      max_seq_length: length of input_ids / input_mask / segment_ids.
      max_predictions_per_seq: length of the masked_lm_* lists.
      mask_token_id: the id of [MASK], written into records for dynamic masking
        (`encode_dynamic`).
    """

    def __init__(self, vocab_size, max_seq_length, max_predictions_per_seq, mask_token_id=0):
        self.max_seq_length = max_seq_length
        self.max_predictions_per_seq = max_predictions_per_seq
        self._varints = [_varint(i) for i in range(max(vocab_size, max_seq_length, 4096))]
        self._zeros = [b"\x00" * n for n in range(max(max_seq_length, max_predictions_per_seq)
                                                  + 1)]
        # A position below 128 is a one-byte varint: the byte itself.
        self._one_byte_positions = max_seq_length <= 128
        self._input_ids_prefix = _KeyedCache(
            lambda n: _entry_prefix("input_ids", _TAG_3, n))
        self._positions_prefix = _KeyedCache(
            lambda n: _entry_prefix("masked_lm_positions", _TAG_3, n))
        self._masked_ids_prefix = _KeyedCache(
            lambda n: _entry_prefix("masked_lm_ids", _TAG_3, n))
        # input_mask and segment_ids, keyed by (num_tokens, num_tokens_a) as one int.
        self._mask_and_segments = _KeyedCache(self._make_mask_and_segments)
        self._weights = [
            _entry_prefix("masked_lm_weights", _TAG_2, 4 * max_predictions_per_seq) +
            struct.pack(f"<{max_predictions_per_seq}f",
                        *([1.0] * n + [0.0] * (max_predictions_per_seq - n)))
            for n in range(max_predictions_per_seq + 1)]
        self._labels = [_entry_prefix("next_sentence_labels", _TAG_3, 1) + _varint(label)
                        for label in (0, 1)]
        self._word_ids_prefix = _KeyedCache(lambda n: _entry_prefix("word_ids", _TAG_3, n))
        self._mask_token_id = (_entry_prefix("mask_token_id", _TAG_3, len(_varint(mask_token_id)))
                               + _varint(mask_token_id))
        self._whole_word_replacement = _entry_prefix("whole_word_replacement", _TAG_3, 1) + b"\x01"

    def _make_mask_and_segments(self, key):
        num_tokens, num_tokens_a = divmod(key, self.max_seq_length + 1)
        num_pad = self.max_seq_length - num_tokens
        # Zero encodes as the single byte 0 and one as 1, so masks are byte runs.
        return (_entry_prefix("input_mask", _TAG_3, self.max_seq_length) +
                b"\x01" * num_tokens + b"\x00" * num_pad +
                _entry_prefix("segment_ids", _TAG_3, self.max_seq_length) +
                b"\x00" * (num_tokens_a + 2) + b"\x01" * (num_tokens - num_tokens_a - 2) +
                b"\x00" * num_pad)

    def encode(self, input_ids, num_tokens_a, masked_lm_positions, masked_lm_ids,
               next_sentence_label):
        """Returns one serialized `tf.train.Example` (bytes).

        Args:
          input_ids: token ids of `[CLS] A [SEP] B [SEP]` after masking, unpadded
            (at most max_seq_length).
          num_tokens_a: tokens of segment A (without [CLS] / [SEP]); segment_ids are 0 for
            [CLS] A [SEP] and 1 for B [SEP].
          masked_lm_positions: positions of the masked tokens in `input_ids`.
          masked_lm_ids: their original ids.
          next_sentence_label: 0 if B follows A, 1 if B is random.
        """
        varints, zeros = self._varints, self._zeros
        num_tokens = len(input_ids)
        num_pad = self.max_seq_length - num_tokens
        num_pred_pad = self.max_predictions_per_seq - len(masked_lm_positions)
        # itemgetter looks all ids up in C (input_ids has at least 5 entries, so a tuple).
        ids_bytes = b"".join(operator.itemgetter(*input_ids)(varints))
        if self._one_byte_positions:
            positions_bytes = bytes(masked_lm_positions)
        else:
            positions_bytes = b"".join([varints[i] for i in masked_lm_positions])
        masked_ids_bytes = b"".join([varints[i] for i in masked_lm_ids])
        features = b"".join((
            self._input_ids_prefix[len(ids_bytes) + num_pad], ids_bytes, zeros[num_pad],
            self._mask_and_segments[num_tokens * (self.max_seq_length + 1) + num_tokens_a],
            self._positions_prefix[len(positions_bytes) + num_pred_pad], positions_bytes,
            zeros[num_pred_pad],
            self._masked_ids_prefix[len(masked_ids_bytes) + num_pred_pad], masked_ids_bytes,
            zeros[num_pred_pad],
            self._weights[len(masked_lm_positions)],
            self._labels[next_sentence_label],
        ))
        return self._example(features)

    def _example(self, features):
        length = len(features)
        varints = self._varints
        return _TAG_1 + (varints[length] if length < len(varints) else _varint(length)) + features

    def encode_dynamic(self, input_ids, num_tokens_a, word_ids, next_sentence_label,
                       whole_word_replacement=False):
        """Returns one serialized `tf.train.Example` for dynamic masking (`DYNAMIC_FEATURES`).

        Args:
          input_ids: token ids of `[CLS] A [SEP] B [SEP]` (or `[CLS] A [SEP]` with
            num_tokens_a = len(input_ids) - 2), unmasked and unpadded.
          num_tokens_a: tokens of segment A, as in `encode`.
          word_ids: one per token of `input_ids`, see the module docstring.
          next_sentence_label: 0 or 1.
          whole_word_replacement: write `whole_word_replacement` = 1 (module docstring).
        """
        varints, zeros = self._varints, self._zeros
        num_tokens = len(input_ids)
        num_pad = self.max_seq_length - num_tokens
        ids_bytes = b"".join(operator.itemgetter(*input_ids)(varints))
        word_bytes = b"".join(operator.itemgetter(*word_ids)(varints))
        return self._example(b"".join((
            self._input_ids_prefix[len(ids_bytes) + num_pad], ids_bytes, zeros[num_pad],
            self._mask_and_segments[num_tokens * (self.max_seq_length + 1) + num_tokens_a],
            self._word_ids_prefix[len(word_bytes) + num_pad], word_bytes, zeros[num_pad],
            self._labels[next_sentence_label],
            self._mask_token_id,
            self._whole_word_replacement if whole_word_replacement else b"",
        )))


class _WholeOrNothing:
    """Context manager protocol of the writers below: `close()` on success, else `abort()`."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()


class AtomicRecordWriter(_WholeOrNothing):
    """Writes one TFRecord file whole or not at all, on any path `tf.io.gfile` supports.

    Records go to a temporary name beside `path`, renamed to `path` by `close()`; `abort()`
    (or leaving a `with` block by an exception) deletes it, so an interrupted run never leaves
    a half-written file under `path` and an earlier complete file there survives.

    Args:
      path: the TFRecord file to write (local, or e.g. gs://...).
    """

    def __init__(self, path):
        import tensorflow as tf

        from bert_tf import fileio

        self.path = path
        self._file = fileio.WholeFiles([path], tf.io.TFRecordWriter)
        self._writer = self._file.files[0]
        self.num_written = 0
        self._closed = False

    def write(self, record):
        """Appends one serialized record (bytes)."""
        self._writer.write(record)
        self.num_written += 1

    def close(self):
        """Finishes the file and renames it to `path` (once)."""
        if not self._closed:
            self._closed = True
            self._file.close()

    def abort(self):
        """Deletes the temporary file; `path` is left as it was."""
        if not self._closed:
            self._closed = True
            self._file.abort()


class RoundRobinRecordWriter(_WholeOrNothing):
    """Writes records to several TFRecord files in turn, each an `AtomicRecordWriter`.

    `close()` renames every file to its final name; `abort()` (or leaving a `with` block by an
    exception) deletes the temporary files, so earlier complete files survive.
    """

    def __init__(self, output_files):
        self.output_files = list(output_files)
        self._writers = [AtomicRecordWriter(path) for path in self.output_files]
        self.num_written = 0

    def write(self, record):
        self._writers[self.num_written % len(self._writers)].write(record)
        self.num_written += 1

    def close(self):
        """Finishes the files and renames them to their final names (once)."""
        for writer in self._writers:
            writer.close()

    def abort(self):
        """Deletes the temporary files; the final names are left as they were."""
        for writer in self._writers:
            writer.abort()
