"""The text-in signatures of an export: WordPiece tokenization and packing inside the graph.

`serving_text` (and, for sentence-pair classifiers, `serving_text_pair`) take string tensors
[batch] (`text`, `text_b`; `question`, `context` for SQuAD), tokenize them in the graph with
`tensorflow-text` (the optional extra `[serving]`) and feed the same model as the id
signatures, so TF Serving or `tf.saved_model.load` answers raw strings.

`InGraphTokenizer` reproduces `tokenization.FullTokenizer` with tensorflow-text pieces whose
own normalisation is off, doing FullTokenizer's steps in the graph instead:

  1. drop U+0000, U+FFFD and Unicode Cc / Cf except tab, newline, carriage return, and map
     Zs to a space (tf-text's BertTokenizer keeps U+00A0 inside a word, FastBertTokenizer
     splits words at Cf characters such as U+00AD and stops reading at U+0000);
  2. uncased: `tf.strings.lower` (Unicode lower case, as `str.lower`), NFD, drop Mn marks
     (tf-text's own lower-casing is NFKC case folding: "ß" -> "ss", "ﬁ" -> "fi");
  3. split words on whitespace, punctuation and CJK ideographs (tf-text `BasicTokenizer`);
  4. a word of more than 100 characters becomes [UNK] (tf-text limits bytes, not characters);
  5. WordPiece each word (`FastWordpieceTokenizer`).

On tests/data/multilingual.txt (3,250 lines, 18 languages) this gives FullTokenizer's ids on
every line, cased and uncased; tf-text's BertTokenizer alone agrees on 3,129 (uncased) and
3,249 (cased) lines.

Packing follows `bert_tf.data.packing`: `[CLS] a [SEP] (b [SEP])`, a pair cut by popping from
the longer side (round robin gives the same lengths), SQuAD's question cut to
`max_query_length` pieces then the context to what is left (one window: the first
max_seq_length tokens; the `Predictor` of `predictor` windows long contexts). What still differs
from the id path is listed in README "Predicting and serving".
"""

import dataclasses

import numpy as np
import tensorflow as tf

SIGNATURE_NAME = "serving_text"
PAIR_SIGNATURE_NAME = "serving_text_pair"
_MAX_WORD_CHARS = 100  # tokenization.DEFAULT_MAX_INPUT_CHARS_PER_WORD
_UNK = "[UNK]"
# Cc (but \t, \n, \r), Cf, U+0000 and U+FFFD: what FullTokenizer's clean step drops.
_DROPPED_CHARS = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F\p{Cf}\x{FFFD}]"


def available():
    """Whether tensorflow-text can be imported (the `[serving]` extra)."""
    try:
        import tensorflow_text  # noqa: F401
    except ImportError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class TextSignature:
    """What the text signatures of an export need.

    Attributes:
      input_names: ("text",) (classifier: also a "text_b" pair signature; NER), or
        ("question", "context") (SQuAD).
      vocab: the vocab, {token: id} (`tokenization.load_vocab`).
      do_lower_case: the tokenizer's casing.
      max_seq_length: the packed length limit, specials included.
      max_query_length: SQuAD: most question pieces kept.
      pairs: also a `serving_text_pair` signature (text, text_b), for classifiers.
    """

    input_names: tuple
    vocab: dict
    do_lower_case: bool
    max_seq_length: int
    max_query_length: int | None = None
    pairs: bool = False


class InGraphTokenizer:
    """`FullTokenizer` in TensorFlow ops: strings [B] -> ragged int64 ids [B, (pieces)]."""

    def __init__(self, vocab, do_lower_case):
        import tensorflow_text

        tokens = sorted(vocab, key=vocab.get)
        if [vocab[token] for token in tokens] != list(range(len(tokens))):
            raise ValueError("the vocab's ids must be 0..N-1 (one token a line)")
        self._do_lower_case = do_lower_case
        from tensorflow_text.core.pybinds import (
            pywrap_fast_wordpiece_tokenizer_model_builder as model_builder,
        )
        from tensorflow_text.python.ops import bert_tokenizer

        self._words = bert_tokenizer.BasicTokenizer(lower_case=False)
        # Arguments: vocab, max_bytes_per_word, suffix_indicator, unknown_token,
        # no_pretokenization, support_detokenization.
        model = model_builder.build_fast_wordpiece_model(
            tokens, 4 * _MAX_WORD_CHARS, "##", _UNK, True, False)
        # Given the model's bytes, FastWordpieceTokenizer would make its constant from a Python
        # list of them (~1.3 MB for a 30k vocab: 2 s per export); from numpy it takes ms.
        self._pieces = tensorflow_text.FastWordpieceTokenizer(
            model_buffer=tf.constant(np.frombuffer(model, dtype=np.uint8)),
            token_out_type=tf.int64)

    def tokenize(self, strings):
        """Word-piece ids of each string: ragged int64 [B, (pieces)]."""
        import tensorflow_text

        strings = tf.strings.regex_replace(strings, _DROPPED_CHARS, "")
        strings = tf.strings.regex_replace(strings, r"\p{Zs}", " ")
        if self._do_lower_case:
            strings = tf.strings.lower(strings, encoding="utf-8")
            strings = tensorflow_text.normalize_utf8(strings, "NFD")
            strings = tf.strings.regex_replace(strings, r"\p{Mn}", "")
        words = self._words.tokenize(strings)  # [B, (words)]
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > _MAX_WORD_CHARS
        words = words.with_flat_values(tf.where(too_long, _UNK, words.flat_values))
        return self._pieces.tokenize(words).merge_dims(-2, -1)


def _pack(segments, vocab, max_seq_length):
    """`[CLS] a [SEP] (b [SEP])` of trimmed ragged segments -> dense int64 features [B, S]."""
    import tensorflow_text

    input_ids, segment_ids = tensorflow_text.combine_segments(
        segments, start_of_sequence_id=vocab["[CLS]"], end_of_segment_id=vocab["[SEP]"])
    input_mask = tf.ones_like(input_ids)
    return {"input_ids": input_ids.to_tensor(), "input_mask": input_mask.to_tensor(),
            "segment_ids": segment_ids.to_tensor()}


def _pad_to(features, width):
    return {key: tf.pad(value, [[0, 0], [0, width - tf.shape(value)[1]]])
            for key, value in features.items()}


def text_features(spec, strings):
    """The id features of the text inputs, as the Predictor / run_*.py pack them.

    Args:
      spec: a `TextSignature`.
      strings: {input name: tf.string [B]}: `spec.input_names`, or "text" and "text_b".

    Returns:
      {"input_ids", "input_mask", "segment_ids"}: int64 [B, S], S the longest packed row.
    """
    import tensorflow_text

    tokenizer = InGraphTokenizer(spec.vocab, spec.do_lower_case)
    length = spec.max_seq_length
    if "question" in strings:
        question = tokenizer.tokenize(strings["question"])[:, :spec.max_query_length]
        segments = [question, tokenizer.tokenize(strings["context"])]
        trimmed = tensorflow_text.WaterfallTrimmer(length - 3).trim(segments)
        return _pack(trimmed, spec.vocab, length)
    text = tokenizer.tokenize(strings["text"])
    single = _pack([text[:, :length - 2]], spec.vocab, length)
    if "text_b" not in strings:
        return single
    # An empty text_b packs as a single text (`packing.truncate_to_fit`), row by row.
    text_b = tokenizer.tokenize(strings["text_b"])
    pair = _pack(tensorflow_text.RoundRobinTrimmer(length - 3).trim([text, text_b]),
                 spec.vocab, length)
    width = tf.maximum(tf.shape(single["input_ids"])[1], tf.shape(pair["input_ids"])[1])
    single, pair = _pad_to(single, width), _pad_to(pair, width)
    is_single = tf.equal(text_b.row_lengths(), 0)[:, None]
    return {key: tf.where(is_single, single[key], pair[key]) for key in single}


def receivers(spec):
    """The text signatures' string inputs and the features they make.

    Returns:
      ({signature name: {input name: tf.string [None] tensor}}, {"input_ids", "input_mask",
      "segment_ids": int64 [B, S]}). With `spec.pairs`, `serving_text` feeds "text" only and
      "text_b" defaults to empty strings (a single text); `serving_text_pair` feeds both.
    """
    strings = {name: tf.compat.v1.placeholder(tf.string, [None], name=f"{name}_text")
               for name in spec.input_names}
    signatures = {SIGNATURE_NAME: dict(strings)}
    if spec.pairs:
        strings["text_b"] = tf.compat.v1.placeholder_with_default(
            tf.fill(tf.shape(strings["text"]), ""), [None], name="text_b_text")
        signatures[PAIR_SIGNATURE_NAME] = {"text": strings["text"], "text_b": strings["text_b"]}
    return signatures, text_features(spec, strings)
