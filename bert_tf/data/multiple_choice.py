"""Multiple-choice data (SWAG and a generic jsonl layout) and its TFRecords.

Layouts, by --task_name:
  swag: SWAG's CSV files `train.csv`, `val.csv`, `test.csv` with a header naming the columns
    `sent1` (or `startphrase`), `sent2`, `ending0`..`ending3` and (not in test.csv) `label`.
    Choice k is `[CLS] sent1 [SEP] sent2 ending_k [SEP]` (sent1 missing: startphrase).
  jsonl: `train.jsonl`, `dev.jsonl`, `test.jsonl`, one object a line:
    {"context": str, "question": str (optional), "choices": [str, ...], "label": k}; choice k
    is `[CLS] context [SEP] question choice_k [SEP]`. Every line has the same number of
    choices; "label" is optional in test.jsonl.
Bad rows raise `BertTfError` naming the file and line.

TFRecord keys: `input_ids`, `input_mask`, `segment_ids` int64 [num_choices * max_seq_length]
(the choices' packed sequences one after another), `label_ids` int64 [1] (the right choice),
`is_real_example` int64 [1].
"""

import csv
import dataclasses
import json
import os

from bert_tf import errors, fileio
from bert_tf.data import bert_inputs, classification_features, feature_cache

SPLIT_FILES = {"swag": {"train": "train.csv", "dev": "val.csv", "test": "test.csv"},
               "jsonl": {"train": "train.jsonl", "dev": "dev.jsonl", "test": "test.jsonl"}}
SWAG_CHOICES = 4


@dataclasses.dataclass
class MultipleChoiceExample:
    """One question: the shared first text and one second text per choice.

    Attributes:
      guid: id such as "train-3".
      context: the first segment of every choice.
      endings: the second segment of each choice (question / sent2 + the choice text).
      label: index of the right choice (0 for unlabelled test rows).
    """
    guid: str
    context: str
    endings: list
    label: int = 0


def _check_label(path, line_number, value, num_choices):
    try:
        label = int(value)
    except (TypeError, ValueError):
        label = None
    if label is None or not 0 <= label < num_choices:
        raise errors.BertTfError(f"{path}:{line_number}: label '{value}' is not a choice index "
                                 f"0..{num_choices - 1}; fix the row.")
    return label


def read_swag(path, split):
    """`MultipleChoiceExample`s of a SWAG CSV file (see the module docstring)."""
    fileio.require_file(path, flag="data_dir", what="SWAG file")
    with fileio.open_text(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise errors.BertTfError(f"{path}:1: empty file; SWAG files start with a header row.")
    header = [name.strip() for name in rows[0]]
    needed = ["sent2"] + [f"ending{k}" for k in range(SWAG_CHOICES)]
    needed += ["label"] if split != "test" else []
    missing = [name for name in needed if name not in header]
    if "sent1" not in header and "startphrase" not in header:
        missing.insert(0, "sent1")
    if missing:
        raise errors.BertTfError(f"{path}:1: no column '{missing[0]}' in the header; SWAG files "
                                 "need sent1 (or startphrase), sent2, ending0..ending3 and "
                                 "label (not in test.csv).")
    column = {name: header.index(name) for name in header}
    context_column = column.get("sent1", column.get("startphrase"))
    examples = []
    for line_number, fields in enumerate(rows[1:], start=2):
        if not fields:
            continue
        if len(fields) < len(header):
            raise errors.BertTfError(f"{path}:{line_number}: the row has {len(fields)} fields "
                                     f"but the header names {len(header)}; fix the row.")
        sent2 = fields[column["sent2"]]
        endings = [f"{sent2} {fields[column[f'ending{k}']]}".strip()
                   for k in range(SWAG_CHOICES)]
        label = (_check_label(path, line_number, fields[column["label"]], SWAG_CHOICES)
                 if split != "test" else 0)
        examples.append(MultipleChoiceExample(f"{split}-{len(examples)}",
                                              fields[context_column], endings, label))
    return examples


def read_jsonl(path, split):
    """`MultipleChoiceExample`s of a jsonl file (see the module docstring)."""
    fileio.require_file(path, flag="data_dir", what="jsonl file")
    examples, num_choices = [], None
    with fileio.open_text(path, encoding="utf-8-sig") as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise errors.BertTfError(f"{path}:{line_number}: not a JSON object ({e}); "
                                         "write one object a line.") from None
            choices = record.get("choices") if isinstance(record, dict) else None
            if not isinstance(choices, list) or len(choices) < 2 or "context" not in record:
                raise errors.BertTfError(f"{path}:{line_number}: needs \"context\" and a "
                                         "\"choices\" list of at least 2 texts.")
            if num_choices is not None and len(choices) != num_choices:
                raise errors.BertTfError(f"{path}:{line_number}: {len(choices)} choices but the "
                                         f"lines before have {num_choices}; every question "
                                         "needs the same number of choices.")
            num_choices = len(choices)
            has_label = split != "test" or "label" in record
            label = (_check_label(path, line_number, record.get("label"), num_choices)
                     if has_label else 0)
            question = str(record.get("question") or "")
            endings = [f"{question} {choice}".strip() for choice in choices]
            examples.append(MultipleChoiceExample(f"{split}-{len(examples)}",
                                                  str(record["context"]), endings, label))
    return examples


class MultipleChoiceProcessor:
    """Reads the train / dev / test files of a data_dir in the `layout` ("swag", "jsonl")."""

    def __init__(self, layout):
        if layout not in SPLIT_FILES:
            raise errors.BertTfError(f"--task_name: unknown task '{layout}'; use one of "
                                     f"{', '.join(SPLIT_FILES)}.")
        self.layout = layout

    def _read(self, data_dir, split):
        path = os.path.join(data_dir, SPLIT_FILES[self.layout][split])
        reader = read_swag if self.layout == "swag" else read_jsonl
        return reader(path, split)

    def get_train_examples(self, data_dir):
        return self._read(data_dir, "train")

    def get_dev_examples(self, data_dir):
        return self._read(data_dir, "dev")

    def get_test_examples(self, data_dir):
        return self._read(data_dir, "test")


def num_choices_of(*example_lists):
    """The number of choices shared by every example of the lists (None entries skipped)."""
    counts = {len(e.endings) for examples in example_lists if examples for e in examples}
    if len(counts) > 1:
        raise errors.BertTfError(f"multiple choice: the splits have {sorted(counts)} choices "
                                 "per question; every split needs the same number.")
    if not counts:
        raise errors.BertTfError("multiple choice: no examples; the data files are empty.")
    return counts.pop()


def convert_example(example, num_choices, max_seq_length, tokenizer):
    """input_ids, input_mask, segment_ids [num_choices * max_seq_length] of one example:
    each choice packed and padded (`bert_inputs.pack_and_pad`), choices one after another."""
    if len(example.endings) != num_choices:
        raise errors.BertTfError(f"example {example.guid}: {len(example.endings)} choices, the "
                                 f"task has {num_choices}; every question needs as many.")
    input_ids, input_mask, segment_ids = [], [], []
    for ending in example.endings:
        tokens_a = tokenizer.tokenize(example.context)
        packed = bert_inputs.pack_and_pad(tokens_a, tokenizer.tokenize(ending), tokenizer,
                                          max_seq_length)
        input_ids += packed.input_ids
        input_mask += packed.input_mask
        segment_ids += packed.segment_ids
    return input_ids, input_mask, segment_ids


def write_features(examples, num_choices, max_seq_length, tokenizer, output_file):
    """Writes the examples' TFRecords to `output_file` (whole or not at all), reusing a
    cached file while examples and settings are unchanged (`classification.
    cached_tfrecord_file`)."""
    from bert_tf.data import record_writing

    def tf_examples():
        import tensorflow as tf

        for example in examples:
            ids, mask, segments = convert_example(example, num_choices, max_seq_length,
                                                  tokenizer)
            feature = {"input_ids": record_writing.create_int_feature(ids),
                       "input_mask": record_writing.create_int_feature(mask),
                       "segment_ids": record_writing.create_int_feature(segments),
                       "label_ids": record_writing.create_int_feature([example.label]),
                       "is_real_example": record_writing.create_int_feature([1])}
            yield tf.train.Example(features=tf.train.Features(feature=feature))

    key = feature_cache.feature_cache_key("multiple_choice", examples, None, max_seq_length,
                                          tokenizer, num_choices=num_choices)
    return feature_cache.cached_tfrecord_file(
        output_file, key,
        lambda: classification_features.write_tf_examples(tf_examples(), output_file))
