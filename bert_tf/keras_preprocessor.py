"""`BertPreprocessor`: text into `BertEncoderLayer`'s inputs, as a Keras 3 layer.

The layer is a thin Keras wrapper over `bert_tf.serving.graph_tokenizer`, the core-op
tokenizer of bert_tf's text-in SavedModels: `GraphTokenizer` gives `FullTokenizer`'s word-piece
ids and `pack_inputs` packs them as `run_classifier.py` does (`[CLS] a [SEP]`, and `b [SEP]`
for a pair; a single text keeps its first seq_length - 2 pieces, a pair is cut by popping from
the longer side until it fits in seq_length - 3). Only core TensorFlow ops run, so a model
with the layer trains, saves, loads and exports without tensorflow-text.

    preprocessor = BertPreprocessor("minilm/vocab.txt", do_lower_case=True, seq_length=128)
    text = keras.Input(shape=(), dtype="string")
    pooled = BertEncoderLayer("minilm/bert_config.json")(preprocessor(text))["pooled_output"]

The vocabulary travels in the layer's config (its tokens in id order), so `model.save("m.keras")`
holds it and `keras.models.load_model` needs no vocab file.
"""

import keras
import tensorflow as tf

from bert_tf import tokenization
from bert_tf.errors import BertTfError
from bert_tf.serving import graph_tokenizer

# The packed outputs' keys (`BertEncoderLayer`'s inputs), each int32 [B, seq_length].
OUTPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")


def _check_settings(vocab_file, vocabulary, do_lower_case, seq_length):
    """Raises BertTfError naming the first bad argument of `BertPreprocessor`."""
    if (vocab_file is None) == (vocabulary is None):
        raise BertTfError("BertPreprocessor takes a vocab_file (the vocab.txt that came with the "
                          "checkpoint) or, from a saved config, a vocabulary list: pass one.")
    if not isinstance(do_lower_case, bool):
        raise BertTfError(f"BertPreprocessor: do_lower_case={do_lower_case!r} must be True "
                          "(uncased checkpoints) or False (cased ones).")
    if isinstance(seq_length, bool) or not isinstance(seq_length, int) or seq_length < 3:
        raise BertTfError(f"BertPreprocessor: seq_length={seq_length!r} must be an int of at "
                          "least 3 ([CLS] a [SEP] b [SEP] with room for text), e.g. 128.")


def _as_segments(inputs):
    """The one or two string segments of `inputs`, each a tf.string tensor [B].

    Args:
      inputs: strings [B] (or [B, 1]), a list of Python strings (one segment), or a list /
        tuple of one or two string tensors (a pair: first and second texts, row by row).

    Raises:
      BertTfError: another number of segments, a segment that is not strings [B] / [B, 1], or
        a pair whose segments have different (static) numbers of rows.
    """
    if isinstance(inputs, list) and inputs and all(
            isinstance(item, (str, bytes)) for item in inputs):
        inputs = [tf.constant(list(inputs), tf.string)]
    segments = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if len(segments) not in (1, 2):
        raise BertTfError(f"BertPreprocessor takes one string tensor [batch] or a pair "
                          f"(text_a, text_b) of them, got {len(segments)} segments.")
    checked = []
    for index, segment in enumerate(segments):
        if not isinstance(segment, keras.KerasTensor):
            segment = tf.convert_to_tensor(segment)
        dtype = str(keras.backend.standardize_dtype(segment.dtype))
        shape = segment.shape
        if isinstance(shape, tf.TensorShape):  # Of unknown rank in some graphs: not checked.
            shape = (None,) if shape.rank is None else tuple(shape)
        if dtype != "string" or len(shape) not in (1, 2) or shape[1:] not in ((), (1,)):
            raise BertTfError(
                f"BertPreprocessor: segment {index} is {dtype} of shape {shape}; pass strings of "
                "shape [batch] (keras.Input(shape=(), dtype='string')) or [batch, 1].")
        checked.append(segment)
    rows = [segment.shape[0] for segment in checked]
    if len(rows) == 2 and None not in rows and rows[0] != rows[1]:
        raise BertTfError(f"BertPreprocessor: text_a and text_b have {rows[0]} and {rows[1]} "
                          "rows; pass one text_b per text_a (an empty string for a single text).")
    return checked


@keras.saving.register_keras_serializable(package="bert_tf")
class BertPreprocessor(keras.layers.Layer):
    """Strings (one text or a pair) in, `BertEncoderLayer`'s input dict out.

    Attributes:
      vocab_file: the file the vocabulary was read from (None after `from_config`).
      do_lower_case, seq_length: as given.
      vocab_size, cls_id, sep_id: of the vocabulary.
    """

    def __init__(self, vocab_file: str | None = None, do_lower_case: bool = True,
                 seq_length: int = 128, *, vocabulary: list[str] | None = None, **kwargs):
        """Args:
          vocab_file: the vocab.txt of the checkpoint (one token a line; local or remote).
          do_lower_case: lower-case and strip accents, as `FullTokenizer(do_lower_case=...)`:
            True for uncased checkpoints.
          seq_length: the packed length S, [CLS] and [SEP]s included (>= 3).
          vocabulary: instead of vocab_file, the tokens in id order (`get_config` stores them).
          **kwargs: Keras layer arguments (name, ...).

        Raises:
          BertTfError: for a missing or unreadable vocab file, one without [UNK], [CLS] or
            [SEP], or a bad do_lower_case / seq_length (naming it).
        """
        super().__init__(**kwargs)
        _check_settings(vocab_file, vocabulary, do_lower_case, seq_length)
        if vocabulary is None:
            vocabulary = tokenization.vocab_tokens(vocab_file)
        vocab = {token: index for index, token in enumerate(vocabulary)}
        if vocab_file is not None:
            tokenization.check_vocab_has_special_tokens(vocab, vocab_file,
                                                        graph_tokenizer.REQUIRED_TOKENS)
        self.vocab_file = vocab_file
        self.do_lower_case = do_lower_case
        self.seq_length = seq_length
        self._vocabulary = list(vocabulary)
        self._tokenizer = graph_tokenizer.GraphTokenizer(vocab, do_lower_case)
        self.vocab_size = self._tokenizer.vocab_size
        self.cls_id, self.sep_id = self._tokenizer.cls_id, self._tokenizer.sep_id

    def __call__(self, inputs, *args, **kwargs):
        # Checked here, before Keras wraps errors of `call` in its report.
        return super().__call__(_as_segments(inputs), *args, **kwargs)

    def call(self, inputs):
        """Args:
          inputs: one or two tf.string tensors [B] (or [B, 1]): texts, or first and second
            texts of pairs (an empty second text packs that row as a single text).

        Returns:
          dict "input_word_ids", "input_mask" (1 = real token), "input_type_ids" (0 for
          `[CLS] a [SEP]`, 1 for `b [SEP]`): int32 [B, seq_length], zero-padded.
        """
        segments = [tf.reshape(segment, [-1]) for segment in inputs]
        rows = tf.shape(segments[0], out_type=tf.int64)[0]
        if len(segments) == 2:
            tf.debugging.assert_equal(tf.shape(segments[1], out_type=tf.int64)[0], rows,
                                      message="BertPreprocessor: text_a and text_b need one "
                                              "row each per example")
        # Both segments in one tokenizer pass, then split by rows.
        tokens = self._tokenizer.tokenize(tf.concat(segments, axis=0))
        pieces = [tokens[i * rows:(i + 1) * rows] for i in range(len(segments))]
        return graph_tokenizer.pack_inputs(pieces, self.seq_length, self.cls_id, self.sep_id)

    def compute_output_spec(self, inputs):
        batch = inputs[0].shape[0]
        return {key: keras.KerasTensor((batch, self.seq_length), dtype="int32", name=key)
                for key in OUTPUT_KEYS}

    def get_config(self):
        config = super().get_config()
        config.update(do_lower_case=self.do_lower_case, seq_length=self.seq_length,
                      vocabulary=list(self._vocabulary))
        return config
