"""The text-in signatures of an export: WordPiece tokenization and packing inside the graph.

`serving_text` (and, for sentence-pair classifiers, `serving_text_pair`) take string tensors
[batch] (`text`, `text_b`; `question`, `context` for SQuAD; `context` and `endings` [batch,
num_choices] for multiple choice), tokenize them in the graph with
`graph_tokenizer.GraphTokenizer` (`tokenization.FullTokenizer` in core TensorFlow ops, so the
export loads wherever TensorFlow does) and feed the same model as the id signatures, so TF
Serving or `tf.saved_model.load` answers raw strings.

Packing is `graph_tokenizer.pack_inputs`, bert_tf's rule (`bert_tf.data.bert_inputs`): `[CLS] a
[SEP] (b [SEP])`, a pair cut by popping from the longer side, SQuAD's question cut to
`max_query_length` pieces then the context to what is left, multiple choice's `[CLS] context
[SEP] ending [SEP]` for each choice, one after another (one window: the first
max_seq_length tokens; the `Predictor` of `predictor` windows long contexts). What still differs
from the id path is listed in README "Predicting and serving".
"""

import dataclasses
import functools

import tensorflow as tf

from bert_tf.serving import graph_tokenizer

SIGNATURE_NAME = "serving_text"
PAIR_SIGNATURE_NAME = "serving_text_pair"


@dataclasses.dataclass(frozen=True)
class TextSignature:
    """What the text signatures of an export need.

    Attributes:
      input_names: ("text",) (classifier: also a "text_b" pair signature; NER),
        ("question", "context") (SQuAD) or ("context", "endings") (multiple choice).
      vocab_file: the vocab file (one token a line).
      do_lower_case: the tokenizer's casing.
      max_seq_length: the packed length limit, specials included.
      max_query_length: SQuAD: most question pieces kept.
      pairs: also a `serving_text_pair` signature (text, text_b), for classifiers.
      num_choices: multiple choice: the endings of each context.
    """

    input_names: tuple
    vocab_file: str
    do_lower_case: bool
    max_seq_length: int
    max_query_length: int | None = None
    pairs: bool = False
    num_choices: int | None = None


def text_features(spec, strings):
    """The id features of the text inputs, as the Predictor / run_*.py pack them.

    In a TF1 graph (an export's) the tokenizing and packing are one function call: the
    graph holds one op for them, not the ~1,000 they are made of, so `tf.saved_model.load`,
    which copies each signature's ops one at a time, loads the export several times faster.

    Args:
      spec: a `TextSignature`.
      strings: {input name: tf.string [B]}: `spec.input_names`, or "text" and "text_b" (an
        empty text_b packs that row as a single text); "endings" is [B, num_choices].

    Returns:
      {"input_ids", "input_mask", "segment_ids"}: int64 [B, S], S the longest packed row
      (multiple choice: [B, num_choices * S]).
    """
    tokenizer = graph_tokenizer.GraphTokenizer(spec.vocab_file, spec.do_lower_case)
    features = functools.partial(_packed_features, spec, tokenizer)
    if tf.executing_eagerly():
        return features(strings)
    signature = {name: tf.TensorSpec(value.shape, tf.string, name=name)
                 for name, value in strings.items()}
    return tf.function(features, input_signature=[signature], autograph=False)(strings)


def _packed_features(spec, tokenizer, strings):
    """`text_features` with the tokenizer built."""
    if "endings" in strings:
        # One [CLS] context [SEP] ending [SEP] sequence per choice, as run_multiple_choice.py.
        strings = {"text": tf.repeat(strings["context"], spec.num_choices),
                   "text_b": tf.reshape(strings["endings"], [-1])}
    names = [name for name in (("question", "context") if "question" in strings
                               else ("text", "text_b")) if name in strings]
    # Both segments in one tokenizer pass (half the ops of two), then split by rows.
    rows = tf.shape(strings[names[0]], out_type=tf.int64)[0]
    for name in names[1:]:  # Runs in the function as any stateful op does (or eagerly, at once).
        tf.debugging.assert_equal(
            tf.shape(strings[name], out_type=tf.int64)[0], rows,
            message=f"{name} and {names[0]} need one row each per example")
    tokens = tokenizer.tokenize(tf.concat([strings[name] for name in names], axis=0))
    segments = [tokens[i * rows:(i + 1) * rows] for i in range(len(names))]
    packed = graph_tokenizer.pack_inputs(
        segments, spec.max_seq_length, tokenizer.cls_id, tokenizer.sep_id,
        max_query_length=spec.max_query_length if "question" in strings else None)
    width = tf.reduce_max(tf.reduce_sum(packed["input_mask"], axis=1))
    features = {name: tf.cast(packed[key][:, :width], tf.int64) for name, key in (
        ("input_ids", "input_word_ids"), ("input_mask", "input_mask"),
        ("segment_ids", "input_type_ids"))}
    if spec.num_choices:  # [B * num_choices, S] -> [B, num_choices * S]
        features = {name: tf.reshape(value, [-1, spec.num_choices * width])
                    for name, value in features.items()}
    return features


def receivers(spec):
    """The text signatures' string inputs and the features they make.

    Returns:
      ({signature name: {input name: tf.string [None] tensor ("endings": [None,
      num_choices])}}, {"input_ids", "input_mask", "segment_ids": int64 [B, S]}). With
      `spec.pairs`, `serving_text` feeds "text" only and "text_b" defaults to empty strings
      (a single text); `serving_text_pair` feeds both.
    """
    shapes = {"endings": [None, spec.num_choices]}
    strings = {name: tf.compat.v1.placeholder(tf.string, shapes.get(name, [None]),
                                              name=f"{name}_text")
               for name in spec.input_names}
    signatures = {SIGNATURE_NAME: dict(strings)}
    if spec.pairs:
        strings["text_b"] = tf.compat.v1.placeholder_with_default(
            tf.fill(tf.shape(strings["text"]), ""), [None], name="text_b_text")
        signatures[PAIR_SIGNATURE_NAME] = {"text": strings["text"], "text_b": strings["text_b"]}
    return signatures, text_features(spec, strings)
