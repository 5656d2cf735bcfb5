"""SQuAD v1.1 / v2.0 input: JSON -> examples -> windowed features -> TFRecords.

The semantics are those of the original Google BERT `run_squad.py`:

- `read_squad_examples` splits each context on whitespace into "doc tokens" and maps every
  character to the doc token it belongs to, so that an answer's character offset becomes a
  doc-token span. A Chinese context (CJK ideographs make up at least `CJK_SHARE` of its
  non-whitespace characters, see `is_mostly_cjk`) is written without spaces, so there every CJK
  ideograph is a doc token of its own too, as `FullTokenizer` sees it; the text between
  ideographs (Latin words, numbers, punctuation) still splits on whitespace only. Other
  contexts split exactly as in the original.
- `convert_examples_to_features` WordPiece-tokenizes question and doc tokens and cuts the
  document into windows of `max_seq_length` tokens (`[CLS] question [SEP] doc-window [SEP]`)
  that start `doc_stride` tokens apart. A doc token seen in several windows is scored in the
  one where it has the most context on both sides (`token_is_max_context`).
- `FeatureWriter` writes features as `tf.train.Example`s with the original keys
  (docs/compatibility.md §3).

Mapping predicted spans back to the original text is in `bert_tf.tasks.squad_postprocess`.
"""

import collections
import dataclasses
import json
import re

from absl import logging

from bert_tf import errors, fileio, tokenization
from bert_tf.data import bert_inputs, record_writing

# The window helpers live in packing (classifier and NER windows use them too).
from bert_tf.data.bert_inputs import DocSpan, check_is_max_context, compute_doc_spans  # noqa: F401

# First `unique_id` given to a feature, as in the original (ids are unique within one run).
FIRST_UNIQUE_ID = 1000000000

# Text counts as Chinese when CJK ideographs make up at least this share of its non-whitespace
# characters (Chinese paragraphs: well above half; English ones with a few names in Chinese:
# a few percent at most).
CJK_SHARE = 0.3
# Characters from the first ideograph's code point on (the only ones that can be ideographs).
_MAYBE_CJK_RE = re.compile(
    f"[{chr(min(low for low, _ in tokenization.CHINESE_CHAR_RANGES))}-\U0010ffff]")


class SquadExample:
    """One question on one context.

    Attributes:
      qas_id: the question id from the JSON.
      question_text: the question (str).
      doc_tokens: the context split on whitespace (list of str).
      orig_answer_text: the answer text for training ("" for impossible questions; None when
        not training).
      start_position, end_position: the answer's first and last doc-token index, inclusive
        (-1 for impossible questions; None when not training).
      is_impossible: True for a v2.0 question without an answer (only read when training).
      follows_space: for each doc token, whether whitespace (or the start of the context)
        comes before it in the context (list of bool, see `context_words`); None: all do, as
        for whitespace-split text.
    """

    def __init__(self, qas_id, question_text, doc_tokens, orig_answer_text=None,
                 start_position=None, end_position=None, is_impossible=False,
                 follows_space=None):
        self.qas_id = qas_id
        self.question_text = question_text
        self.doc_tokens = doc_tokens
        self.orig_answer_text = orig_answer_text
        self.start_position = start_position
        self.end_position = end_position
        self.is_impossible = is_impossible
        self.follows_space = follows_space

    def separator_before(self, index):
        """The text between doc tokens `index - 1` and `index`: " " or "" (no whitespace)."""
        return " " if self.follows_space is None or self.follows_space[index] else ""

    def doc_text(self, first, last):
        """Doc tokens `first` .. `last` (inclusive) as the context has them, every run of
        whitespace written as one space (the original's `" ".join` for whitespace words)."""
        if self.follows_space is None:
            return " ".join(self.doc_tokens[first:last + 1])
        return join_words(self.doc_tokens[first:last + 1], self.follows_space[first:last + 1])

    def __repr__(self):
        s = f"qas_id: {self.qas_id}, question_text: {self.question_text}, "
        s += f"doc_tokens: [{' '.join(self.doc_tokens)}]"
        if self.start_position is not None:
            s += f", start_position: {self.start_position}, end_position: {self.end_position}"
        if self.is_impossible:
            s += ", is_impossible: True"
        return s


class InputFeatures:
    """One window of one example, as the model sees it.

    Attributes:
      unique_id: int id of this feature (links model outputs back to it).
      example_index: index of the example in the list given to `convert_examples_to_features`.
      doc_span_index: index of this window among the example's windows.
      tokens: the window's word pieces, `[CLS] query [SEP] doc-window [SEP]` (unpadded).
      token_to_orig_map: {index in `tokens`: doc-token index} for the doc-window tokens.
      token_is_max_context: {index in `tokens`: bool}, True where this window is the one in
        which that doc token has the most context.
      input_ids, input_mask, segment_ids: int lists of length `max_seq_length` (zero-padded).
      start_position, end_position: answer span in `tokens` for training (0, 0 = [CLS] when the
        answer is not inside this window or the question is impossible); None otherwise.
      is_impossible: the example's `is_impossible`.
    """

    def __init__(self, unique_id, example_index, doc_span_index, tokens, token_to_orig_map,
                 token_is_max_context, input_ids, input_mask, segment_ids, start_position=None,
                 end_position=None, is_impossible=None):
        self.unique_id = unique_id
        self.example_index = example_index
        self.doc_span_index = doc_span_index
        self.tokens = tokens
        self.token_to_orig_map = token_to_orig_map
        self.token_is_max_context = token_is_max_context
        self.input_ids = input_ids
        self.input_mask = input_mask
        self.segment_ids = segment_ids
        self.start_position = start_position
        self.end_position = end_position
        self.is_impossible = is_impossible


# A window of the WordPiece-tokenized document: `length` tokens from index `start`.


def load_squad_dataset(input_file, flag=None):
    """Reads a SQuAD-format JSON file and checks its structure.

    Args:
      input_file: path of a JSON file `{"data": [{"paragraphs": [{"context": str,
        "qas": [{"id": ..., "question": str, ...}]}]}]}`.
      flag: the command-line flag that named the file, for error messages.

    Returns:
      The list under "data" (the articles).

    Raises:
      errors.BertTfError: the file is missing, is not JSON or does not have that structure.
    """
    fileio.require_file(input_file, flag=flag, what="SQuAD JSON file")
    source = f"--{flag} {input_file}" if flag else f"SQuAD file {input_file}"
    expected = ('expected SQuAD JSON: {"data": [{"paragraphs": [{"context": ..., '
                '"qas": [{"id": ..., "question": ..., "answers": [...]}]}]}]}')
    try:
        with fileio.open_text(input_file) as reader:
            dataset_json = json.load(reader)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise errors.BertTfError(f"{source} is not valid UTF-8 JSON ({e}); {expected}.") from e
    if not isinstance(dataset_json, dict) or not isinstance(dataset_json.get("data"), list):
        raise errors.BertTfError(f"{source} has no \"data\" list of articles; {expected}.")
    for article_index, article in enumerate(dataset_json["data"]):
        where = f"data[{article_index}]"
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise errors.BertTfError(
                f"{source}: {where} has no \"paragraphs\" list; {expected}.")
        for paragraph_index, paragraph in enumerate(article["paragraphs"]):
            where = f"data[{article_index}].paragraphs[{paragraph_index}]"
            if (not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str)
                    or not isinstance(paragraph.get("qas"), list)):
                raise errors.BertTfError(
                    f"{source}: {where} needs a \"context\" string and a \"qas\" list; "
                    f"{expected}.")
            for qa_index, qa in enumerate(paragraph["qas"]):
                if (not isinstance(qa, dict) or "id" not in qa
                        or not isinstance(qa.get("question"), str)):
                    raise errors.BertTfError(
                        f"{source}: {where}.qas[{qa_index}] needs an \"id\" and a \"question\" "
                        f"string; {expected}.")
    return dataset_json["data"]


def _is_whitespace(c):
    # The original's whitespace set; U+202F (narrow no-break space) occurs in SQuAD contexts.
    return c in (" ", "\t", "\r", "\n") or ord(c) == 0x202F


def cjk_share(texts):
    """The share of CJK ideographs (`tokenization.is_chinese_char`) among the non-whitespace
    characters of `texts` (an iterable of str): a float in [0, 1], 0.0 when there are none."""
    cjk = total = 0
    for text in texts:
        total += len("".join(text.split()))
        cjk += sum(1 for c in _MAYBE_CJK_RE.findall(text)
                   if tokenization.is_chinese_char(ord(c)))
    return cjk / total if total else 0.0


def is_mostly_cjk(texts):
    """Whether `texts` read as Chinese: CJK ideographs are at least `CJK_SHARE` of them."""
    return cjk_share(texts) >= CJK_SHARE


# A context cut into doc tokens (see `context_words`).
ContextWords = collections.namedtuple(
    "ContextWords", ["doc_tokens", "char_to_word_offset", "follows_space"])


def context_words(paragraph_text):
    """Splits a context into doc tokens, keeping a map from characters to doc tokens.

    Doc tokens are the whitespace-separated words; in a Chinese context (`is_mostly_cjk`)
    every CJK ideograph is a doc token of its own as well, e.g. "2018年NBA总决赛" -> "2018",
    "年", "NBA", "总", "决", "赛".

    Args:
      paragraph_text: the context (str).

    Returns:
      A `ContextWords`: `doc_tokens` (list of str); `char_to_word_offset`, for every character
      of `paragraph_text` the index of the doc token it belongs to (a whitespace character
      belongs to the doc token before it; leading whitespace maps to -1); `follows_space`, for
      every doc token whether whitespace or the start of the text comes before it (list of
      bool).
    """
    split_cjk = is_mostly_cjk([paragraph_text])
    doc_tokens = []
    char_to_word_offset = []
    follows_space = []
    prev_is_whitespace = True
    prev_is_cjk = False
    for c in paragraph_text:
        if _is_whitespace(c):
            prev_is_whitespace = True
        else:
            is_cjk = split_cjk and tokenization.is_chinese_char(ord(c))
            if prev_is_whitespace or is_cjk or prev_is_cjk:
                doc_tokens.append(c)
                follows_space.append(prev_is_whitespace)
            else:
                doc_tokens[-1] += c
            prev_is_whitespace = False
            prev_is_cjk = is_cjk
        char_to_word_offset.append(len(doc_tokens) - 1)
    return ContextWords(doc_tokens, char_to_word_offset, follows_space)


def split_context(paragraph_text):
    """`context_words` without `follows_space`: (doc_tokens, char_to_word_offset).

    Args:
      paragraph_text: the context (str).

    Returns:
      (doc_tokens, char_to_word_offset): the doc tokens (list of str), and for every character
      of `paragraph_text` the index of the doc token it belongs to (a whitespace character
      belongs to the doc token before it; leading whitespace maps to -1).
    """
    words = context_words(paragraph_text)
    return words.doc_tokens, words.char_to_word_offset


def join_words(doc_tokens, follows_space):
    """Joins doc tokens as the context has them: one space before each token that follows
    whitespace (but the first), nothing before the others. A str."""
    parts = []
    for i, (token, spaced) in enumerate(zip(doc_tokens, follows_space, strict=True)):
        if i and spaced:
            parts.append(" ")
        parts.append(token)
    return "".join(parts)


def read_squad_examples(input_file, is_training, version_2_with_negative=False, flag=None):
    """Reads a SQuAD JSON file into a list of `SquadExample`.

    For training every question needs exactly one answer (v2.0: or `"is_impossible": true`),
    and answers whose text cannot be found at their `answer_start` (whitespace-normalised) are
    skipped with a warning, as in the original.

    Args:
      input_file: path of the SQuAD JSON file.
      is_training: whether to read answers (start/end positions).
      version_2_with_negative: whether questions may be impossible (SQuAD v2.0).
      flag: the command-line flag that named the file, for error messages.

    Returns:
      A list of `SquadExample`, in file order.

    Raises:
      errors.BertTfError: the file is missing or malformed, or a training answer is invalid.
    """
    input_data = load_squad_dataset(input_file, flag=flag)
    source = f"--{flag} {input_file}" if flag else f"SQuAD file {input_file}"

    examples = []
    for entry in input_data:
        for paragraph in entry["paragraphs"]:
            words = context_words(paragraph["context"])
            for qa in paragraph["qas"]:
                answer = (None, None, None, False)  # Only training reads the answers.
                if is_training:
                    answer = _training_answer(qa, words, version_2_with_negative, source)
                    if answer is None:
                        continue
                orig_answer_text, start_position, end_position, is_impossible = answer
                examples.append(SquadExample(
                    qas_id=qa["id"],
                    question_text=qa["question"],
                    doc_tokens=words.doc_tokens,
                    orig_answer_text=orig_answer_text,
                    start_position=start_position,
                    end_position=end_position,
                    is_impossible=is_impossible,
                    follows_space=words.follows_space))
    return examples


def _training_answer(qa, words, version_2_with_negative, source):
    """The answer of one training question, located in its context's doc tokens.

    Args:
      qa: the question's JSON object (`{"id": ..., "question": ..., "answers": [...]}`).
      words: its context's `ContextWords`.
      version_2_with_negative: whether the question may be impossible (SQuAD v2.0).
      source: the file as error messages name it.

    Returns:
      (orig_answer_text, start_position, end_position, is_impossible), the positions being
      the answer's first and last doc-token index, inclusive (("", -1, -1, True) for an
      impossible question); None when the answer text is not found there (logged as a
      warning: the question is skipped).

    Raises:
      errors.BertTfError: the question does not have exactly one well-formed answer.
    """
    qas_id = qa["id"]
    char_to_word_offset = words.char_to_word_offset
    is_impossible = bool(qa.get("is_impossible", False)) if version_2_with_negative else False
    answers = qa.get("answers", [])
    if len(answers) != 1 and not is_impossible:
        raise errors.BertTfError(
            f"{source}: question {qas_id!r} has {len(answers)} answers; for "
            "training each question needs exactly 1 answer"
            + (" or \"is_impossible\": true." if version_2_with_negative else
               " (pass --version_2_with_negative for SQuAD v2.0 data)."))
    if is_impossible:
        return "", -1, -1, True
    answer = answers[0] if isinstance(answers[0], dict) else {}
    orig_answer_text = answer.get("text")
    answer_offset = answer.get("answer_start")
    if (not isinstance(orig_answer_text, str) or not orig_answer_text
            or not isinstance(answer_offset, int) or answer_offset < 0
            or answer_offset + len(orig_answer_text) > len(char_to_word_offset)):
        raise errors.BertTfError(
            f"{source}: question {qas_id!r} needs an answer with a "
            "non-empty \"text\" and an \"answer_start\" character offset "
            "inside its context.")
    answer_length = len(orig_answer_text)
    start_position = char_to_word_offset[answer_offset]
    end_position = char_to_word_offset[answer_offset + answer_length - 1]
    # Only keep answers whose text can be recovered from the document; a mismatch is usually
    # odd Unicode, and the example is skipped.
    actual_text = join_words(words.doc_tokens[start_position:(end_position + 1)],
                             words.follows_space[start_position:(end_position + 1)])
    cleaned_answer_text = " ".join(tokenization.whitespace_tokenize(orig_answer_text))
    if actual_text.find(cleaned_answer_text) == -1:
        logging.warning("Could not find answer: '%s' vs. '%s'",
                        actual_text, cleaned_answer_text)
        return None
    return orig_answer_text, start_position, end_position, False


def improve_answer_span(doc_tokens, input_start, input_end, tokenizer, orig_answer_text):
    """Returns the (start, end) sub-span of word pieces that matches the tokenized answer.

    The character-level answer maps to whole doc tokens, e.g. "(1895-1943)." for the answer
    "1895". Within those word pieces, the shortest span equal to the tokenized answer text is
    the better training target; if there is none, the span is returned unchanged.
    """
    tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
    for new_start in range(input_start, input_end + 1):
        for new_end in range(input_end, new_start - 1, -1):
            text_span = " ".join(doc_tokens[new_start:(new_end + 1)])
            if text_span == tok_answer_text:
                return new_start, new_end
    return input_start, input_end


def check_window_flags(max_seq_length, doc_stride, max_query_length):
    """Raises `errors.BertTfError` unless the windowing flags leave room for document tokens."""
    if max_query_length < 1:
        raise errors.BertTfError(
            f"--max_query_length={max_query_length} must be at least 1.")
    if max_seq_length <= max_query_length + 3:
        raise errors.BertTfError(
            f"--max_seq_length={max_seq_length} must be greater than --max_query_length="
            f"{max_query_length} + 3 ([CLS] and two [SEP]) to leave room for the document; "
            "raise --max_seq_length or lower --max_query_length.")
    if doc_stride < 1:
        raise errors.BertTfError(f"--doc_stride={doc_stride} must be at least 1.")


def convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                 max_query_length, is_training, output_fn=None):
    """Converts `SquadExample`s into windowed `InputFeatures`.

    Each window is `[CLS] query [SEP] doc-window [SEP]` zero-padded to `max_seq_length`, the
    query cut to `max_query_length` word pieces, and windows starting `doc_stride` word pieces
    apart. Feature unique ids count up from `FIRST_UNIQUE_ID`.

    Args:
      examples: list of `SquadExample`.
      tokenizer: a `tokenization.FullTokenizer`.
      max_seq_length: tokens per window, specials included.
      doc_stride: distance in word pieces between the starts of consecutive windows.
      max_query_length: most question word pieces kept.
      is_training: whether to compute start/end positions (examples must carry answers).
      output_fn: called with each `InputFeatures` as it is made; None to collect them.

    Returns:
      The list of `InputFeatures` when `output_fn` is None, else None.
    """
    check_window_flags(max_seq_length, doc_stride, max_query_length)
    collected = [] if output_fn is None else None
    unique_id = FIRST_UNIQUE_ID

    for example_index, example in enumerate(examples):
        pieces = _tokenize_example(example, tokenizer, max_query_length, is_training)
        # The -3 accounts for [CLS], [SEP] and [SEP].
        max_tokens_for_doc = max_seq_length - len(pieces.query_tokens) - 3
        doc_spans = compute_doc_spans(len(pieces.doc_tokens), max_tokens_for_doc, doc_stride)
        for doc_span_index in range(len(doc_spans)):
            feature = _window_feature(example, pieces, doc_spans, doc_span_index, tokenizer,
                                      max_seq_length, is_training, unique_id, example_index)
            if output_fn is None:
                collected.append(feature)
            else:
                output_fn(feature)
            unique_id += 1
    return collected


@dataclasses.dataclass(frozen=True)
class _ExamplePieces:
    """One `SquadExample` in word pieces.

    Attributes:
      query_tokens: the question's word pieces, at most max_query_length.
      doc_tokens: the context's word pieces.
      tok_to_orig_index: for each of `doc_tokens`, the index of the doc token it comes from.
      start_position, end_position: for training, the answer's first and last index in
        `doc_tokens`, inclusive (-1 for an impossible question); None otherwise.
    """

    query_tokens: list
    doc_tokens: list
    tok_to_orig_index: list
    start_position: int | None
    end_position: int | None


def _tokenize_example(example, tokenizer, max_query_length, is_training):
    """WordPiece-tokenizes `example`'s question and doc tokens: an `_ExamplePieces`."""
    query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]

    tok_to_orig_index = []
    orig_to_tok_index = []
    all_doc_tokens = []
    for i, token in enumerate(example.doc_tokens):
        orig_to_tok_index.append(len(all_doc_tokens))
        for sub_token in tokenizer.tokenize(token):
            tok_to_orig_index.append(i)
            all_doc_tokens.append(sub_token)

    tok_start_position = None
    tok_end_position = None
    if is_training and example.is_impossible:
        tok_start_position = -1
        tok_end_position = -1
    if is_training and not example.is_impossible:
        tok_start_position = orig_to_tok_index[example.start_position]
        if example.end_position < len(example.doc_tokens) - 1:
            tok_end_position = orig_to_tok_index[example.end_position + 1] - 1
        else:
            tok_end_position = len(all_doc_tokens) - 1
        tok_start_position, tok_end_position = improve_answer_span(
            all_doc_tokens, tok_start_position, tok_end_position, tokenizer,
            example.orig_answer_text)
    return _ExamplePieces(query_tokens, all_doc_tokens, tok_to_orig_index, tok_start_position,
                          tok_end_position)


def _window_feature(example, pieces, doc_spans, doc_span_index, tokenizer, max_seq_length,
                    is_training, unique_id, example_index):
    """The `InputFeatures` of window `doc_spans[doc_span_index]` of `example`.

    Args:
      example: the `SquadExample`.
      pieces: its `_ExamplePieces`.
      doc_spans: its windows (`DocSpan`s over `pieces.doc_tokens`).
      doc_span_index: which window.
      tokenizer: a `tokenization.FullTokenizer`.
      max_seq_length: tokens per window, specials included.
      is_training: whether to compute start/end positions.
      unique_id, example_index: the feature's `unique_id` and `example_index`.

    Returns:
      The `InputFeatures` (input_ids, input_mask, segment_ids: max_seq_length ints each).
    """
    doc_span = doc_spans[doc_span_index]
    doc_start = doc_span.start
    doc_end = doc_span.start + doc_span.length - 1
    tokens, segment_ids = bert_inputs.pack_tokens(
        pieces.query_tokens, pieces.doc_tokens[doc_start:doc_end + 1])
    input_ids, input_mask, segment_ids = bert_inputs.encode_and_pad(
        tokens, segment_ids, tokenizer, max_seq_length)
    # The window's tokens follow [CLS] query [SEP].
    doc_offset = len(pieces.query_tokens) + 2
    token_to_orig_map = {}
    token_is_max_context = {}
    for i in range(doc_span.length):
        token_to_orig_map[doc_offset + i] = pieces.tok_to_orig_index[doc_start + i]
        token_is_max_context[doc_offset + i] = check_is_max_context(
            doc_spans, doc_span_index, doc_start + i)
    start_position, end_position = _window_answer(example, pieces, doc_start, doc_end,
                                                  doc_offset, is_training)

    if example_index < 20:
        logging.log_first_n(
            logging.DEBUG, "*** Example *** unique_id: %s example_index: %s "
            "doc_span_index: %s tokens: %s start_position: %s end_position: %s", 20,
            unique_id, example_index, doc_span_index,
            " ".join(tokenization.printable_text(x) for x in tokens),
            start_position, end_position)

    return InputFeatures(
        unique_id=unique_id,
        example_index=example_index,
        doc_span_index=doc_span_index,
        tokens=tokens,
        token_to_orig_map=token_to_orig_map,
        token_is_max_context=token_is_max_context,
        input_ids=input_ids,
        input_mask=input_mask,
        segment_ids=segment_ids,
        start_position=start_position,
        end_position=end_position,
        is_impossible=example.is_impossible)


def _window_answer(example, pieces, doc_start, doc_end, doc_offset, is_training):
    """The answer's (start, end) index in the window's tokens for training: (0, 0), i.e.
    [CLS], for an impossible question or an answer not wholly inside the window; (None, None)
    when not training. The window holds doc word pieces `doc_start` .. `doc_end` from token
    `doc_offset` on."""
    if not is_training:
        return None, None
    if example.is_impossible:
        return 0, 0
    # A window without the whole answer is trained to point at [CLS].
    if pieces.start_position >= doc_start and pieces.end_position <= doc_end:
        return (pieces.start_position - doc_start + doc_offset,
                pieces.end_position - doc_start + doc_offset)
    return 0, 0


class FeatureWriter(record_writing.AtomicRecordWriter):
    """Writes `InputFeatures` to a TFRecord file of `tf.train.Example`s (the keys of
    docs/compatibility.md §3).

    Keys: `unique_ids` [1], `input_ids`, `input_mask`, `segment_ids` [max_seq_length], and for
    training `start_positions` [1], `end_positions` [1], `is_impossible` [1]. Whole or nothing
    (see `record_writing.AtomicRecordWriter`): `close()` renames the temporary file to `filename`,
    `discard()` (or an exception in a `with` block) deletes it.
    """

    def __init__(self, filename, is_training):
        super().__init__(filename)
        self.filename = filename
        self.is_training = is_training

    @property
    def num_features(self):
        """Features written so far."""
        return self.num_written

    def process_feature(self, feature):
        """Serializes one `InputFeatures` and appends it to the file."""
        import tensorflow as tf

        features = collections.OrderedDict()
        features["unique_ids"] = record_writing.create_int_feature([feature.unique_id])
        features["input_ids"] = record_writing.create_int_feature(feature.input_ids)
        features["input_mask"] = record_writing.create_int_feature(feature.input_mask)
        features["segment_ids"] = record_writing.create_int_feature(feature.segment_ids)
        if self.is_training:
            features["start_positions"] = record_writing.create_int_feature(
                [feature.start_position])
            features["end_positions"] = record_writing.create_int_feature([feature.end_position])
            features["is_impossible"] = record_writing.create_int_feature(
                [1 if feature.is_impossible else 0])
        tf_example = tf.train.Example(features=tf.train.Features(feature=features))
        self.write(tf_example.SerializeToString())

    def discard(self):
        """Closes and deletes the unfinished file; `filename` is left untouched."""
        self.abort()
