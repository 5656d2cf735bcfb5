"""Readers of classification data sets: each turns a task's files into `InputExample`s.

GLUE (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI) and XNLI in their published
layouts, and `csv` / `tsv` for your own files (named columns, a label list, regression,
multi-label). `get_processor(task_name)` picks one by `--task_name` (case-insensitive, "_"
read as "-"):
  cola, sst-2 (sst2), mrpc, sts-b (stsb), qqp, mnli (matched dev/test), mnli-mm (mismatched
  dev/test), qnli, rte, wnli: the GLUE v1 TSV files (train.tsv, dev.tsv, test.tsv, ...) in
  their published column layouts;
  xnli: the original XnliProcessor's files (`multinli/multinli.train.<language>.tsv`,
  `xnli.dev.tsv`, `xnli.test.tsv`), option `language` (default "zh");
  csv, tsv: your own `train.csv`/`dev.csv`/`test.csv` (or .tsv) with options
  `text_a_column`, `text_b_column`, `label_column` (header names, or 0-based indices),
  `labels`, `header`, `regression`.
Bad rows raise `BertTfError` naming the file and line: too few fields, a label that is not in
the task's label list, a score that is not a number.
"""

import csv
import dataclasses
import inspect
import os

from bert_tf import errors, fileio
from bert_tf.data.classification_features import InputExample


def _read_rows(path, delimiter="\t", quoting=csv.QUOTE_NONE):
    """Yields (line_number, fields) of a delimited text file, skipping blank lines.

    GLUE TSVs are read without quote handling (quotes are literal text there, often
    unbalanced); csv files use standard CSV quoting. `line_number` is the 1-based line
    where the row ends.
    """
    fileio.require_file(path, flag="data_dir", what="data file")
    with fileio.open_text(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        try:
            for fields in reader:
                if not fields or fields == [""]:
                    continue
                yield reader.line_num, fields
        except csv.Error as e:
            raise errors.BertTfError(
                f"{path}:{reader.line_num}: cannot parse the row ({e}); "
                "check the file's quoting and delimiter.") from e


def _check_row_length(path, line_number, fields, min_fields, what):
    if len(fields) < min_fields:
        raise errors.BertTfError(
            f"{path}:{line_number}: the row has {len(fields)} field(s) but {what} needs at "
            f"least {min_fields}; fix or remove the malformed row.")


def _check_label(path, line_number, label, label_list):
    if label not in label_list:
        raise errors.BertTfError(
            f"{path}:{line_number}: label '{label}' is not one of the task's labels "
            f"({', '.join(label_list)}); fix the row, or the task's label list.")
    return label


def _parse_score(path, line_number, text):
    try:
        return float(text)
    except ValueError:
        raise errors.BertTfError(
            f"{path}:{line_number}: score '{text}' is not a number; a regression task "
            "needs a real-valued label in every row.") from None


class DataProcessor:
    """Base class of data converters for sequence classification data sets.

    Attributes:
      is_regression: True when labels are real numbers (then `get_labels()` is None).
    """

    is_regression = False
    multi_label = False  # True: an example's label is a tuple of labels.

    def get_train_examples(self, data_dir):
        """Gets a collection of `InputExample`s for the train set."""
        raise NotImplementedError()

    def get_dev_examples(self, data_dir):
        """Gets a collection of `InputExample`s for the dev set."""
        raise NotImplementedError()

    def get_test_examples(self, data_dir):
        """Gets a collection of `InputExample`s for prediction."""
        raise NotImplementedError()

    def get_labels(self):
        """Gets the list of labels (str) for this data set; None for regression."""
        raise NotImplementedError()

    @classmethod
    def _read_tsv(cls, input_file, quotechar=None):
        """Reads a tab separated value file (the original's helper): a list of rows."""
        if quotechar is None:
            return [fields for _, fields in _read_rows(input_file)]
        with fileio.open_text(input_file, newline="") as f:
            return list(csv.reader(f, delimiter="\t", quotechar=quotechar))


@dataclasses.dataclass(frozen=True)
class TsvLayout:
    """Where a GLUE file keeps its fields.

    Attributes:
      file_name: the file in data_dir.
      has_header: whether the first row is a header (skipped).
      text_a: column index of the first text.
      text_b: column index of the second text, or None for single-sentence tasks.
      label: column index of the label (negative counts from the end), or None when the
        file has no labels (test files).
    """
    file_name: str
    has_header: bool
    text_a: int
    text_b: int | None = None
    label: int | None = None

    def min_fields(self):
        """Fewest fields a row must have to hold every column of this layout."""
        text_columns = [c for c in (self.text_a, self.text_b) if c is not None]
        needed = max(text_columns) + 1
        if self.label is not None:
            # A label counted from the end must still lie after the text columns.
            needed = max(needed, self.label + 1 if self.label >= 0 else needed - self.label)
        return needed


class GlueProcessor(DataProcessor):
    """A GLUE task read from TSV files with fixed column layouts (see `TsvLayout`)."""

    task_name = None
    labels = None
    train_layout = None
    dev_layout = None
    test_layout = None

    def get_train_examples(self, data_dir):
        return self._create_examples(data_dir, self.train_layout, "train")

    def get_dev_examples(self, data_dir):
        return self._create_examples(data_dir, self.dev_layout, "dev")

    def get_test_examples(self, data_dir):
        return self._create_examples(data_dir, self.test_layout, "test")

    def get_labels(self):
        return None if self.is_regression else list(self.labels)

    def _placeholder_label(self):
        """The label test examples carry (the original used the first label)."""
        return 0.0 if self.is_regression else self.labels[0]

    def _create_examples(self, data_dir, layout, set_type):
        path = os.path.join(data_dir, layout.file_name)
        min_fields = layout.min_fields()
        examples = []
        for i, (line_number, fields) in enumerate(_read_rows(path)):
            if layout.has_header and i == 0:
                continue
            _check_row_length(path, line_number, fields, min_fields,
                              f"the {self.task_name} {set_type} layout")
            text_a = fields[layout.text_a]
            text_b = fields[layout.text_b] if layout.text_b is not None else None
            if layout.label is None:
                label = self._placeholder_label()
            elif self.is_regression:
                label = _parse_score(path, line_number, fields[layout.label])
            else:
                label = _check_label(path, line_number, fields[layout.label], self.labels)
            examples.append(InputExample(guid=f"{set_type}-{i}", text_a=text_a,
                                         text_b=text_b, label=label))
        return examples


class ColaProcessor(GlueProcessor):
    """CoLA: train/dev.tsv without header (source, label, star, sentence); test.tsv
    with header (index, sentence)."""
    task_name = "cola"
    labels = ("0", "1")
    train_layout = TsvLayout("train.tsv", has_header=False, text_a=3, label=1)
    dev_layout = TsvLayout("dev.tsv", has_header=False, text_a=3, label=1)
    test_layout = TsvLayout("test.tsv", has_header=True, text_a=1)


class Sst2Processor(GlueProcessor):
    """SST-2: header (sentence, label); test.tsv (index, sentence)."""
    task_name = "sst-2"
    labels = ("0", "1")
    train_layout = TsvLayout("train.tsv", has_header=True, text_a=0, label=1)
    dev_layout = TsvLayout("dev.tsv", has_header=True, text_a=0, label=1)
    test_layout = TsvLayout("test.tsv", has_header=True, text_a=1)


class MrpcProcessor(GlueProcessor):
    """MRPC: header (Quality, #1 ID, #2 ID, #1 String, #2 String); test.tsv
    (index, #1 ID, #2 ID, #1 String, #2 String)."""
    task_name = "mrpc"
    labels = ("0", "1")
    train_layout = TsvLayout("train.tsv", has_header=True, text_a=3, text_b=4, label=0)
    dev_layout = TsvLayout("dev.tsv", has_header=True, text_a=3, text_b=4, label=0)
    test_layout = TsvLayout("test.tsv", has_header=True, text_a=3, text_b=4)


class StsbProcessor(GlueProcessor):
    """STS-B (regression, score 0-5): header (index, genre, filename, year, old_index,
    source1, source2, sentence1, sentence2, score); test.tsv without score."""
    task_name = "sts-b"
    is_regression = True
    # The score is read from the last column, as the original did.
    train_layout = TsvLayout("train.tsv", has_header=True, text_a=7, text_b=8, label=-1)
    dev_layout = TsvLayout("dev.tsv", has_header=True, text_a=7, text_b=8, label=-1)
    test_layout = TsvLayout("test.tsv", has_header=True, text_a=7, text_b=8)


class QqpProcessor(GlueProcessor):
    """QQP: header (id, qid1, qid2, question1, question2, is_duplicate); test.tsv
    (id, question1, question2)."""
    task_name = "qqp"
    labels = ("0", "1")
    train_layout = TsvLayout("train.tsv", has_header=True, text_a=3, text_b=4, label=5)
    dev_layout = TsvLayout("dev.tsv", has_header=True, text_a=3, text_b=4, label=5)
    test_layout = TsvLayout("test.tsv", has_header=True, text_a=1, text_b=2)


class MnliProcessor(GlueProcessor):
    """MNLI, matched dev/test: header (index, promptID, pairID, genre, sentence1_binary_parse,
    sentence2_binary_parse, sentence1_parse, sentence2_parse, sentence1, sentence2, label1,
    [label2..label5 in dev,] gold_label); the label is the last column."""
    task_name = "mnli"
    labels = ("contradiction", "entailment", "neutral")
    train_layout = TsvLayout("train.tsv", has_header=True, text_a=8, text_b=9, label=-1)
    dev_layout = TsvLayout("dev_matched.tsv", has_header=True, text_a=8, text_b=9, label=-1)
    test_layout = TsvLayout("test_matched.tsv", has_header=True, text_a=8, text_b=9)


class MnliMismatchedProcessor(MnliProcessor):
    """MNLI with the mismatched dev/test sets (dev_mismatched.tsv, test_mismatched.tsv)."""
    task_name = "mnli-mm"
    dev_layout = TsvLayout("dev_mismatched.tsv", has_header=True, text_a=8, text_b=9, label=-1)
    test_layout = TsvLayout("test_mismatched.tsv", has_header=True, text_a=8, text_b=9)


class QnliProcessor(GlueProcessor):
    """QNLI: header (index, question, sentence, label); test.tsv without label."""
    task_name = "qnli"
    labels = ("entailment", "not_entailment")
    train_layout = TsvLayout("train.tsv", has_header=True, text_a=1, text_b=2, label=3)
    dev_layout = TsvLayout("dev.tsv", has_header=True, text_a=1, text_b=2, label=3)
    test_layout = TsvLayout("test.tsv", has_header=True, text_a=1, text_b=2)


class RteProcessor(QnliProcessor):
    """RTE: QNLI's layouts and labels, header (index, sentence1, sentence2, label)."""
    task_name = "rte"


class WnliProcessor(RteProcessor):
    """WNLI: header (index, sentence1, sentence2, label), labels 0/1; test.tsv without label."""
    task_name = "wnli"
    labels = ("0", "1")


class XnliProcessor(DataProcessor):
    """XNLI as the original XnliProcessor reads it, for one language.

    train: `multinli/multinli.train.<language>.tsv` (header; premise, hypo, label; label
    "contradictory" read as "contradiction"). dev / test: `xnli.dev.tsv` / `xnli.test.tsv`
    (header; language in column 0, gold_label in 1, sentence1 in 6, sentence2 in 7), rows of
    other languages skipped.
    """

    task_name = "xnli"
    labels = ("contradiction", "entailment", "neutral")

    def __init__(self, language="zh"):
        self.language = language

    def get_train_examples(self, data_dir):
        path = os.path.join(data_dir, "multinli", f"multinli.train.{self.language}.tsv")
        examples = []
        for i, (line_number, fields) in enumerate(_read_rows(path)):
            if i == 0:
                continue
            _check_row_length(path, line_number, fields, 3, "the xnli train layout")
            label = "contradiction" if fields[2] == "contradictory" else fields[2]
            _check_label(path, line_number, label, self.labels)
            examples.append(InputExample(guid=f"train-{i}", text_a=fields[0],
                                         text_b=fields[1], label=label))
        return examples

    def get_dev_examples(self, data_dir):
        return self._create_eval_examples(os.path.join(data_dir, "xnli.dev.tsv"), "dev")

    def get_test_examples(self, data_dir):
        return self._create_eval_examples(os.path.join(data_dir, "xnli.test.tsv"), "test")

    def get_labels(self):
        return list(self.labels)

    def _create_eval_examples(self, path, set_type):
        examples = []
        for i, (line_number, fields) in enumerate(_read_rows(path)):
            if i == 0:
                continue
            _check_row_length(path, line_number, fields, 8, f"the xnli {set_type} layout")
            if fields[0] != self.language:
                continue
            label = _check_label(path, line_number, fields[1], self.labels)
            examples.append(InputExample(guid=f"{set_type}-{i}", text_a=fields[6],
                                         text_b=fields[7], label=label))
        if not examples:
            raise errors.BertTfError(
                f"{path}: no rows for language '{self.language}'; pass a language the file "
                "has (e.g. en, zh, de) as the xnli language option.")
        return examples


def _parse_column(column):
    """An int index for "3" / 3, the header name otherwise; None stays None."""
    if column is None or isinstance(column, int):
        return column
    column = str(column).strip()
    if not column:
        return None
    return int(column) if column.isdigit() else column


class CsvProcessor(DataProcessor):
    """Your own data: `train.csv`, `dev.csv`, `test.csv` in data_dir (`TsvProcessor`: .tsv).

    Columns are named by header name (with `header=True`) or by 0-based index. The test
    file needs no label column. csv files use standard CSV quoting; tsv files none (a quote
    is literal text, as in GLUE).
    """

    task_name = "csv"
    delimiter = ","
    quoting = csv.QUOTE_MINIMAL
    extension = "csv"

    def __init__(self, text_a_column=None, text_b_column=None, label_column="label",
                 labels=None, header=True, regression=False, data_dir=None, multi_label=False,
                 label_separator="|"):
        """Constructs the processor.

        Args:
          text_a_column: column of the first text (header name or 0-based index). Required.
          text_b_column: column of the second text, or None for single-text tasks.
          label_column: column of the label.
          labels: the label list (list, or comma-separated str). Default: the distinct
            labels of the train file, sorted as strings. Ignored when `regression`.
          header: whether the first row of each file names the columns.
          regression: labels are real numbers (scored with Pearson / Spearman).
          data_dir: where the train file is, so `get_labels()` works before
            `get_train_examples()` (for eval- or predict-only runs).
          multi_label: the label column holds any number of labels separated by
            `label_separator` (an empty cell: none); an example's label is then a tuple.
          label_separator: see `multi_label`.
        """
        self.text_a_column = _parse_column(text_a_column)
        self.text_b_column = _parse_column(text_b_column)
        self.label_column = _parse_column(label_column)
        if self.text_a_column is None:
            raise errors.BertTfError(
                f"task {self.task_name}: no text_a_column given; name the column that holds "
                "the text (a header name, or a 0-based index).")
        self.header = bool(header)
        if not self.header:
            for option in ("text_a_column", "text_b_column", "label_column"):
                value = getattr(self, option)
                if isinstance(value, str):
                    raise errors.BertTfError(
                        f"task {self.task_name}: {option} '{value}' is a name but the files "
                        f"have no header; give a 0-based column index or set header=True.")
        self.is_regression = bool(regression)
        self.multi_label = bool(multi_label)
        if self.multi_label and self.is_regression:
            raise errors.BertTfError("--multi_label and --regression exclude each other; pass "
                                     "one of them.")
        if self.multi_label and not label_separator:
            raise errors.BertTfError("--label_separator: empty; pass the string that separates "
                                     "the labels of a row, e.g. '|'.")
        self.label_separator = label_separator
        if isinstance(labels, str):
            labels = [label.strip() for label in labels.split(",") if label.strip()]
        self._labels = list(labels) if labels else None
        self._data_dir = data_dir

    def _path(self, data_dir, split):
        return os.path.join(data_dir, f"{split}.{self.extension}")

    def get_train_examples(self, data_dir):
        self._data_dir = data_dir
        return self._create_examples(self._path(data_dir, "train"), "train")

    def get_dev_examples(self, data_dir):
        self._data_dir = self._data_dir or data_dir
        return self._create_examples(self._path(data_dir, "dev"), "dev")

    def get_test_examples(self, data_dir):
        self._data_dir = self._data_dir or data_dir
        return self._create_examples(self._path(data_dir, "test"), "test")

    def get_labels(self):
        if self.is_regression:
            return None
        if self._labels is None:
            if self._data_dir is None:
                raise errors.BertTfError(
                    f"task {self.task_name}: the label list is unknown; pass the labels option "
                    "or the data_dir that holds the train file.")
            path = self._path(self._data_dir, "train")
            header, body = self._rows(path)
            label_index = self._resolve_columns(path, header, "train")[2]
            seen = set()
            for line_number, fields in body:
                _check_row_length(path, line_number, fields, label_index + 1,
                                  "the label_column")
                seen.update(self._split_labels(fields[label_index]))
            if not seen:
                raise errors.BertTfError(f"{path}: no rows to collect labels from; "
                                         "add training rows or pass the labels option.")
            self._labels = sorted(seen)
        return list(self._labels)

    def _split_labels(self, text):
        """The labels of one label cell: itself, or with --multi_label its non-empty parts."""
        if not self.multi_label:
            return [text]
        return [label.strip() for label in text.split(self.label_separator) if label.strip()]

    def _parse_label(self, path, line_number, text, label_list):
        """The checked label of a row: a str, or with --multi_label a tuple of str."""
        if not self.multi_label:
            return _check_label(path, line_number, text, label_list)
        return tuple(_check_label(path, line_number, label, label_list)
                     for label in self._split_labels(text))

    def _rows(self, path):
        """(header names or None, [(line_number, fields)] of the data rows) of a file."""
        rows = list(_read_rows(path, self.delimiter, self.quoting))
        if not self.header:
            return None, rows
        if not rows:
            raise errors.BertTfError(f"{path}: the file is empty but header=True needs a "
                                     "header row; add one or set header=False.")
        return [name.strip() for name in rows[0][1]], rows[1:]

    def _resolve_columns(self, path, header, split):
        """Column indices (text_a, text_b, label); the label's is None for test files without it."""
        def resolve(column, option, required):
            if column is None or isinstance(column, int):
                return column
            if column in header:
                return header.index(column)
            if not required:
                return None
            raise errors.BertTfError(
                f"{path}: no column '{column}' ({option}); the file's columns are "
                f"{', '.join(header)}; name one of them.")

        text_a = resolve(self.text_a_column, "text_a_column", True)
        text_b = resolve(self.text_b_column, "text_b_column", True)
        label = resolve(self.label_column, "label_column", split != "test")
        if split != "test" and label is None:
            raise errors.BertTfError(f"task {self.task_name}: no label_column given; name the "
                                     "column that holds the label.")
        return text_a, text_b, label

    def _create_examples(self, path, split):
        header, body = self._rows(path)
        text_a_index, text_b_index, label_index = self._resolve_columns(path, header, split)
        label_list = None if self.is_regression or split == "test" else self.get_labels()
        text_columns = [c for c in (text_a_index, text_b_index) if c is not None]
        min_fields = max(text_columns) + 1
        if split != "test":
            min_fields = max(min_fields, label_index + 1)
        examples = []
        for i, (line_number, fields) in enumerate(body):
            _check_row_length(path, line_number, fields, min_fields, "the column options")
            text_a = fields[text_a_index]
            text_b = fields[text_b_index] if text_b_index is not None else None
            if split == "test":
                # Predictions do not use the label; a placeholder keeps the features uniform.
                label = 0.0 if self.is_regression else (
                    () if self.multi_label else self.get_labels()[0])
            elif self.is_regression:
                label = _parse_score(path, line_number, fields[label_index])
            else:
                label = self._parse_label(path, line_number, fields[label_index], label_list)
            examples.append(InputExample(guid=f"{split}-{i + 1}", text_a=text_a,
                                         text_b=text_b, label=label))
        return examples


class TsvProcessor(CsvProcessor):
    """`CsvProcessor` for tab-separated `train.tsv`, `dev.tsv`, `test.tsv` (no quoting)."""

    task_name = "tsv"
    delimiter = "\t"
    quoting = csv.QUOTE_NONE
    extension = "tsv"


# Task name (lower case) -> processor class.
PROCESSORS = {
    "cola": ColaProcessor,
    "sst-2": Sst2Processor,
    "sst2": Sst2Processor,
    "mrpc": MrpcProcessor,
    "sts-b": StsbProcessor,
    "stsb": StsbProcessor,
    "qqp": QqpProcessor,
    "mnli": MnliProcessor,
    "mnli-mm": MnliMismatchedProcessor,
    "qnli": QnliProcessor,
    "rte": RteProcessor,
    "wnli": WnliProcessor,
    "xnli": XnliProcessor,
    "csv": CsvProcessor,
    "tsv": TsvProcessor,
}


def normalize_task_name(task_name):
    """The key of `task_name` in `PROCESSORS`: lower case, "_" as "-" ("STS_B" -> "sts-b")."""
    return (task_name or "").strip().lower().replace("_", "-")


def get_processor(task_name, **options):
    """Returns the processor of `task_name` (see `PROCESSORS`), built with `options`.

    Options whose value is None are ignored, so a script can pass every option flag; a
    non-None option the task does not take (say `language` for cola) is an error.

    Raises:
      BertTfError: unknown task, or an option the task does not take.
    """
    name = normalize_task_name(task_name)
    if name not in PROCESSORS:
        raise errors.BertTfError(
            f"--task_name: unknown task '{task_name}'; use one of {', '.join(PROCESSORS)}.")
    processor_class = PROCESSORS[name]
    parameters = inspect.signature(processor_class.__init__).parameters.values()
    accepted = [p.name for p in parameters if p.name != "self" and
                p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    options = {k: v for k, v in options.items() if v is not None}
    for option in options:
        if option not in accepted:
            takes = f"its options are {', '.join(accepted)}" if accepted else "it has none"
            raise errors.BertTfError(
                f"--task_name={name}: the task takes no option '{option}' ({takes}); "
                "drop that flag or pick the task it belongs to.")
    return processor_class(**options)
