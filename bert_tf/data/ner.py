"""Named-entity recognition data: CoNLL-2003 files, word-piece label alignment, TFRecords.

Input files are CoNLL-2003 style: one token a line, its tag in the LAST column (other
columns, such as POS and chunk tags, are ignored; the token is the first column), a blank
line between sentences, `-DOCSTART-` lines skipped. Tags can be IOB1, IOB2 (BIO) or IOBES;
they are used as written.

Label alignment: each word is split into word pieces; its label goes on the FIRST piece.
Continuation pieces, [CLS], [SEP] and padding get label id 0 and `label_mask` 0, so the loss
and the predictions only look at first pieces. Words that do not fit in
`max_seq_length - 2` pieces are dropped from the features (counted and logged); when
predictions are written, such a word gets the tag "O".

Windows (--doc_stride > 0): a sentence's word pieces are cut into windows of
`max_seq_length - 2` pieces starting every doc_stride pieces (`bert_inputs.compute_doc_spans`).
Each word is scored (label_mask 1, in training and prediction) only in the window where its
first piece has the most context (`bert_inputs.max_context_window`, SQuAD's rule), so every word
is tagged exactly once; `merge_window_tags` puts the windows' tags back in word order.

TFRecord keys (tf.train.Example, all int64):
  input_ids, input_mask, segment_ids   [max_seq_length]
  label_ids                            [max_seq_length]  index into the label list
  label_mask                           [max_seq_length]  1 on the first piece of each word
  is_real_example                      [1]               0 for batch-padding examples
  with windows only:
  example_index                        [1]               the sentence the window belongs to
  word_index                           [max_seq_length]  the word scored at a position, else 0

The label list is "O" followed by the other tags of the train file, sorted.
"""

import dataclasses
import os

import numpy as np
from absl import logging

from bert_tf import errors, fileio
from bert_tf.data import bert_inputs, classification_features, feature_cache

# Where `NerProcessor` looks for each split in data_dir, in order (CoNLL-2003 names too).
TRAIN_FILES = ("train.txt", "eng.train")
DEV_FILES = ("dev.txt", "valid.txt", "eng.testa")
TEST_FILES = ("test.txt", "eng.testb")
OUTSIDE_TAG = "O"
_DOCSTART = "-DOCSTART-"
_STALE_FEATURES = "delete the cached .tf_record files in --output_dir and rerun."


@dataclasses.dataclass
class NerExample:
    """One sentence.

    Attributes:
      guid: id such as "train-3".
      words: the tokens of the sentence (CoNLL first column).
      labels: one tag per word (CoNLL last column).
      source: the file the sentence came from.
      line_numbers: the 1-based line of each word in `source`.
    """
    guid: str
    words: list
    labels: list
    source: str = ""
    line_numbers: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class NerInputFeatures:
    """Features of one sentence; id lists have length max_seq_length.

    Attributes:
      input_ids, input_mask, segment_ids: as for classification (segment ids all 0).
      label_ids: label id on the first piece of each word, 0 elsewhere.
      label_mask: 1 on the first piece of each word, 0 elsewhere.
      is_real_example: False for batch padding.
      num_words: words of the sentence that fit (the rest were dropped); with windows, the
        words scored in this window.
      example_index: with windows, the index of the sentence the window belongs to.
      word_index: with windows, the sentence's index of the word scored at each position
        (where label_mask is 1), 0 elsewhere.
    """
    input_ids: list
    input_mask: list
    segment_ids: list
    label_ids: list
    label_mask: list
    is_real_example: bool = True
    num_words: int = 0
    example_index: int = None
    word_index: list = None


def read_conll(path, set_type="train", require_labels=True):
    """Reads a CoNLL-2003 style file into `NerExample`s.

    Args:
      path: the file.
      set_type: prefix of the guids ("train", "dev", "test").
      require_labels: when False, a line with only a token is allowed and tagged "O"
        (unlabelled text to predict).

    Raises:
      BertTfError: missing file, or a line with a token but no tag (when required).
    """
    fileio.require_file(path, flag="data_dir", what="CoNLL file")
    examples = []
    words, labels, line_numbers = [], [], []

    def end_sentence():
        if words:
            examples.append(NerExample(guid=f"{set_type}-{len(examples)}", words=list(words),
                                       labels=list(labels), source=path,
                                       line_numbers=list(line_numbers)))
        words.clear()
        labels.clear()
        line_numbers.clear()

    with fileio.open_text(path, encoding="utf-8-sig") as f:
        for line_number, line in enumerate(f, start=1):
            fields = line.split()
            if not fields or fields[0] == _DOCSTART:
                end_sentence()
                continue
            if len(fields) < 2:
                if require_labels:
                    raise errors.BertTfError(
                        f"{path}:{line_number}: expected a token and its tag, found only "
                        f"'{fields[0]}'; write 'token tag' (the tag in the last column).")
                fields.append(OUTSIDE_TAG)
            words.append(fields[0])
            labels.append(fields[-1])
            line_numbers.append(line_number)
    end_sentence()
    return examples


def _find_file(data_dir, candidates, split):
    for name in candidates:
        path = os.path.join(data_dir, name)
        if fileio.is_file(path):
            return path
    raise errors.BertTfError(
        f"--data_dir: no {split} file in '{data_dir}'; add one named "
        f"{' or '.join(candidates)}.")


def check_labels(examples, label_list):
    """Raises `BertTfError` naming file:line for the first tag not in `label_list`."""
    allowed = set(label_list)
    for example in examples:
        for index, label in enumerate(example.labels):
            if label not in allowed:
                line = example.line_numbers[index] if example.line_numbers else "?"
                raise errors.BertTfError(
                    f"{example.source}:{line}: tag '{label}' is not in the label list "
                    f"({', '.join(label_list)}), which comes from the train file (or the "
                    "label_list.txt of the checkpoint); fix the tag or add it to the train "
                    "data.")


class NerProcessor:
    """Reads the train / dev / test CoNLL files of a data_dir (names: see TRAIN_FILES etc.)."""

    def __init__(self, data_dir=None, labels=None):
        """Constructs the processor.

        Args:
          data_dir: where the train file is, so `get_labels()` works without
            `get_train_examples()` first.
          labels: the label list, to override the one collected from the train file.
        """
        self._data_dir = data_dir
        self._labels = list(labels) if labels else None

    def get_train_examples(self, data_dir):
        self._data_dir = data_dir
        examples = read_conll(_find_file(data_dir, TRAIN_FILES, "train"), "train")
        check_labels(examples, self.get_labels())
        return examples

    def get_dev_examples(self, data_dir):
        self._data_dir = self._data_dir or data_dir
        examples = read_conll(_find_file(data_dir, DEV_FILES, "dev"), "dev")
        check_labels(examples, self.get_labels())
        return examples

    def get_test_examples(self, data_dir):
        self._data_dir = self._data_dir or data_dir
        examples = read_conll(_find_file(data_dir, TEST_FILES, "test"), "test",
                              require_labels=False)
        check_labels(examples, self.get_labels())
        return examples

    def get_labels(self):
        """"O" then the train file's other tags, sorted."""
        if self._labels is None:
            if self._data_dir is None:
                raise errors.BertTfError("NER: the label list is unknown; pass --data_dir with "
                                         "the train file.")
            train = read_conll(_find_file(self._data_dir, TRAIN_FILES, "train"), "train")
            tags = {label for example in train for label in example.labels}
            self._labels = [OUTSIDE_TAG] + sorted(tags - {OUTSIDE_TAG})
        return list(self._labels)


def convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer):
    """Converts one `NerExample` into `NerInputFeatures` (label on each word's first piece).

    A word the tokenizer turns into nothing (e.g. only control characters) becomes "[UNK]",
    so every word keeps a position and a prediction.

    Args:
      ex_index: the example's position (the first few are logged).
      example: a `NerExample` or `classification_features.PaddingInputExample`.
      label_list: the tags; "O" should be among them.
      max_seq_length: length of the id lists, [CLS] and [SEP] included.
      tokenizer: a `tokenization.FullTokenizer`.
    """
    if max_seq_length < 3:
        raise errors.BertTfError(f"--max_seq_length={max_seq_length} leaves no room for a word "
                                 "after [CLS] and [SEP]; use a larger max_seq_length.")
    zeros = [0] * max_seq_length
    if isinstance(example, classification_features.PaddingInputExample):
        return NerInputFeatures(input_ids=list(zeros), input_mask=list(zeros),
                                segment_ids=list(zeros), label_ids=list(zeros),
                                label_mask=list(zeros), is_real_example=False, num_words=0)
    label_map = {label: i for i, label in enumerate(label_list)}
    check_labels([example], label_list)

    word_pieces = []
    # Aligned with the packed tokens: 0 on [CLS] / [SEP], a word's label on its first piece.
    label_ids = [0]
    label_mask = [0]
    num_words = 0
    for word, label in zip(example.words, example.labels, strict=True):
        pieces = tokenizer.tokenize(word) or ["[UNK]"]
        # Leave room for [CLS] and [SEP].
        if len(word_pieces) + len(pieces) > max_seq_length - 2:
            break
        word_pieces.extend(pieces)
        label_ids.extend([label_map[label]] + [0] * (len(pieces) - 1))
        label_mask.extend([1] + [0] * (len(pieces) - 1))
        num_words += 1
    label_ids.append(0)
    label_mask.append(0)

    tokens, segment_ids = bert_inputs.pack_tokens(word_pieces)
    input_ids, input_mask, segment_ids = bert_inputs.encode_and_pad(
        tokens, segment_ids, tokenizer, max_seq_length)
    if ex_index < 5:  # At DEBUG (--verbosity=1), as in classification_features.
        logging.debug("*** Example ***")
        logging.debug("guid: %s", example.guid)
        logging.debug("tokens: %s", " ".join(tokens))
        logging.debug("label_ids: %s", " ".join(str(x) for x in label_ids))
    return NerInputFeatures(input_ids=input_ids, input_mask=input_mask,
                            segment_ids=segment_ids,
                            label_ids=bert_inputs.pad(label_ids, max_seq_length),
                            label_mask=bert_inputs.pad(label_mask, max_seq_length),
                            is_real_example=True, num_words=num_words)


def word_windows(piece_counts, room, doc_stride):
    """The windows of a sentence's word pieces and the window that scores each word.

    Args:
      piece_counts: the number of word pieces of each word [num_words] (each >= 1).
      room: word pieces per window (max_seq_length - 2).
      doc_stride: word pieces between window starts (< room).

    Returns:
      (doc_spans, word_starts, word_window): the `bert_inputs.DocSpan`s over all pieces; the
      position of each word's first piece [num_words]; the index of the window where that
      piece has the most context (`bert_inputs.max_context_window`) [num_words].
    """
    word_starts = [sum(piece_counts[:i]) for i in range(len(piece_counts))]
    doc_spans = bert_inputs.compute_doc_spans(sum(piece_counts), room, doc_stride)
    return doc_spans, word_starts, [bert_inputs.max_context_window(doc_spans, start)
                                    for start in word_starts]


def convert_example_to_windows(ex_index, example, label_list, max_seq_length, tokenizer,
                               doc_stride):
    """Converts one `NerExample` into the `NerInputFeatures` of its windows (see the module
    docstring): a word is scored in the one window where it has the most context.

    Returns:
      A non-empty list of `NerInputFeatures` with `example_index=ex_index`, in text order.
    """
    label_map = {label: i for i, label in enumerate(label_list)}
    check_labels([example], label_list)
    word_pieces = [tokenizer.tokenize(word) or ["[UNK]"] for word in example.words]
    doc_spans, word_starts, word_window = word_windows(
        [len(pieces) for pieces in word_pieces], max_seq_length - 2, doc_stride)
    word_at = {start: i for i, start in enumerate(word_starts)}
    all_pieces = [piece for pieces in word_pieces for piece in pieces]
    features = []
    for window, span in enumerate(doc_spans):
        # Aligned with the packed tokens: [CLS], the window's pieces, [SEP].
        words = [word_at.get(p) for p in range(span.start, span.start + span.length)]
        scored = [None] + [i if i is not None and word_window[i] == window else None
                           for i in words] + [None]
        tokens, segment_ids = bert_inputs.pack_tokens(
            all_pieces[span.start:span.start + span.length])
        input_ids, input_mask, segment_ids = bert_inputs.encode_and_pad(
            tokens, segment_ids, tokenizer, max_seq_length)
        features.append(NerInputFeatures(
            input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids,
            label_ids=bert_inputs.pad([0 if i is None else label_map[example.labels[i]]
                                       for i in scored], max_seq_length),
            label_mask=bert_inputs.pad([int(i is not None) for i in scored], max_seq_length),
            num_words=sum(i is not None for i in scored), example_index=ex_index,
            word_index=bert_inputs.pad([i or 0 for i in scored], max_seq_length)))
    return features


def convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                 doc_stride=0):
    """Converts examples to `NerInputFeatures`: one per sentence, logging how many were cut
    short; or, with `doc_stride` > 0, one per window (`convert_example_to_windows`)."""
    if doc_stride:
        return [feature for i, example in enumerate(examples)
                for feature in convert_example_to_windows(i, example, label_list,
                                                          max_seq_length, tokenizer, doc_stride)]
    features = [convert_single_example(i, example, label_list, max_seq_length, tokenizer)
                for i, example in enumerate(examples)]
    _log_truncation(examples, features, max_seq_length)
    return features


def _log_truncation(examples, features, max_seq_length):
    truncated = [(e, f) for e, f in zip(examples, features, strict=True)
                 if f.is_real_example and f.num_words < len(e.words)]
    if truncated:
        dropped = sum(len(e.words) - f.num_words for e, f in truncated)
        logging.warning("%d of %d sentences did not fit in max_seq_length=%d word pieces; "
                        "%d words were dropped (they are predicted as 'O').",
                        len(truncated), len(examples), max_seq_length, dropped)
    return len(truncated)


def feature_to_tf_example(feature):
    """One `NerInputFeatures` as a `tf.train.Example` (keys: see the module docstring)."""
    import tensorflow as tf

    from bert_tf.data import record_writing

    features = {
        "input_ids": record_writing.create_int_feature(feature.input_ids),
        "input_mask": record_writing.create_int_feature(feature.input_mask),
        "segment_ids": record_writing.create_int_feature(feature.segment_ids),
        "label_ids": record_writing.create_int_feature(feature.label_ids),
        "label_mask": record_writing.create_int_feature(feature.label_mask),
        "is_real_example": record_writing.create_int_feature([int(feature.is_real_example)]),
    }
    if feature.example_index is not None:
        features["example_index"] = record_writing.create_int_feature([feature.example_index])
        features["word_index"] = record_writing.create_int_feature(feature.word_index)
    return tf.train.Example(features=tf.train.Features(feature=features))


def file_based_convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                            output_file, doc_stride=0):
    """Writes the examples' features to the TFRecord file `output_file` (whole or not at all).

    Returns:
      The number of records written.
    """
    features = convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                            doc_stride)
    classification_features.write_tf_examples((feature_to_tf_example(f) for f in features),
                                              output_file)
    return len(features)


def cached_file_based_convert_examples_to_features(examples, label_list, max_seq_length,
                                                   tokenizer, output_file, doc_stride=0):
    """`file_based_convert_examples_to_features`, reusing `output_file` while still valid.

    Same sidecar policy as `classification_features.cached_file_based_convert_examples_to_features`.

    Returns:
      True if the existing file was reused, False if it was (re)built.
    """
    settings = {"doc_stride": doc_stride} if doc_stride else {}
    key = feature_cache.feature_cache_key("ner", examples, label_list, max_seq_length,
                                          tokenizer, **settings)
    return feature_cache.cached_tfrecord_file(
        output_file, key,
        lambda: file_based_convert_examples_to_features(examples, label_list, max_seq_length,
                                                        tokenizer, output_file, doc_stride))


def word_predictions(token_label_ids, label_mask, label_list):
    """Per-word tags from per-piece predictions: the prediction at each word's first piece.

    Args:
      token_label_ids: predicted label ids, one per position [max_seq_length].
      label_mask: the example's `label_mask` (1 on first pieces).
      label_list: the tags.

    Returns:
      A list of tags, one per word that fit in the sequence.
    """
    return [label_list[int(label_id)]
            for label_id, is_first in zip(token_label_ids, label_mask, strict=True) if is_first]


def merge_window_tags(outputs, examples, label_list):
    """Per sentence, the tag of every word from its windows' predictions.

    Args:
      outputs: per window record, a dict with "tag_ids", "label_mask", "word_index" [S] and
        "example_index" (scalar or [1]); a word's tag is the prediction at the one position
        where it is scored (label_mask 1: its max-context window).
      examples: the `NerExample`s the windows were made from, in order.
      label_list: the tags.

    Returns:
      A list (per example) of lists of tags, one per word.

    Raises:
      BertTfError: a word scored in no window or in two (the records do not belong to
        these examples).
    """
    tags = [[None] * len(example.words) for example in examples]
    for output in outputs:
        sentence = tags[int(np.reshape(output["example_index"], [-1])[0])]
        for tag_id, scored, word in zip(output["tag_ids"], output["label_mask"],
                                        output["word_index"], strict=True):
            if scored:
                if sentence[int(word)] is not None:
                    raise errors.BertTfError(f"NER windows: word {int(word)} is scored twice; "
                                             f"{_STALE_FEATURES}")
                sentence[int(word)] = label_list[int(tag_id)]
    for example, sentence in zip(examples, tags, strict=True):
        if None in sentence:
            raise errors.BertTfError(f"NER windows: word {sentence.index(None)} of "
                                     f"{example.guid} has no prediction; {_STALE_FEATURES}")
    return tags


def complete_predictions(example, predicted_tags):
    """`predicted_tags` extended with "O" for the words that were dropped by truncation."""
    if len(predicted_tags) > len(example.words):
        raise errors.BertTfError(
            f"NER predictions: {len(predicted_tags)} tags for the {len(example.words)} words of "
            f"{example.guid}; the predictions do not belong to these examples.")
    return list(predicted_tags) + [OUTSIDE_TAG] * (len(example.words) - len(predicted_tags))


def write_conll_predictions(output_file, examples, predicted_tags):
    """Writes "token gold predicted" a line, a blank line after each sentence (conlleval input).

    Args:
      output_file: where to write (whole or not at all: a temporary file renamed).
      examples: the `NerExample`s predicted.
      predicted_tags: per example, the predicted tag of each word (missing trailing words,
        dropped by truncation, are written as "O").
    """
    if len(examples) != len(predicted_tags):
        raise errors.BertTfError(
            f"NER predictions: {len(predicted_tags)} predicted sentences for {len(examples)} "
            "examples; predict every example.")
    from bert_tf import fileio

    lines = []
    for example, tags in zip(examples, predicted_tags, strict=True):
        tags = complete_predictions(example, tags)
        for word, gold, predicted in zip(example.words, example.labels, tags, strict=True):
            lines.append(f"{word} {gold} {predicted}\n")
        lines.append("\n")
    fileio.atomic_write_text(output_file, "".join(lines))
