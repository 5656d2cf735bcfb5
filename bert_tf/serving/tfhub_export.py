"""SavedModels in TF Hub's BERT interfaces: an encoder and its text preprocessor.

The encoder (`export_encoder`) is a reusable, fine-tunable SavedModel:

  - `obj(inputs, training=False)`: `inputs` a dict "input_word_ids", "input_mask",
    "input_type_ids" (int32 [B, S]); returns "sequence_output" [B, S, H], "pooled_output"
    and "default" [B, H], "encoder_outputs" (a list of [B, S, H]); dropout with training=True;
  - `obj.variables`, `obj.trainable_variables`, `obj.regularization_losses` (none);
  - `obj.vocab_file` (an asset: the vocab.txt) and `obj.do_lower_case` (a bool tf.Variable);
  - a `serving_default` signature (sequence_output, pooled_output, default).

The preprocessor (`export_preprocessor`), made of core TensorFlow ops only
(`graph_tokenizer.GraphTokenizer`, so it loads without tensorflow-text):

  - `obj.tokenize(strings)`: tf.string [B] -> int32 RaggedTensor [B, (words), (pieces)];
  - `obj.bert_pack_inputs(segments, seq_length)`: a list of one or two such tokenized
    segments -> the encoder's input dict, int32 [B, seq_length] each; `seq_length` any int
    (the export's `--seq_length` when left out, the one length with a static shape);
  - `obj(strings)`: tokenize and pack one segment.

Under tf-keras, `hub.KerasLayer(preprocessor)` then `hub.KerasLayer(encoder, trainable=True)`
fine-tune the encoder.
"""

import os

import tensorflow as tf
from absl import logging

from bert_tf import fileio, tf2
from bert_tf.errors import BertTfError
from bert_tf.serving import graph_tokenizer

INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")
_INPUT_SPECS = {key: tf.TensorSpec([None, None], tf.int32, name=key) for key in INPUT_KEYS}


class EncoderModule(tf.Module):
    """What `export_encoder` saves: a `tf2.BertEncoder` behind TF Hub's encoder interface."""

    # TF Hub reads `variables` and `trainable_variables` as saved attributes; these class
    # attributes hide tf.Module's properties of the same names so instances can hold lists.
    variables = ()
    trainable_variables = ()

    def __init__(self, encoder, vocab_file, do_lower_case):
        """Args:
          encoder: a `tf2.BertEncoder` (with its weights loaded).
          vocab_file: the vocab.txt the SavedModel carries as an asset.
          do_lower_case: the tokenizer's casing, saved as a bool variable.
        """
        super().__init__(name="bert_encoder")
        self.encoder = encoder
        self.variables = list(encoder.variables)
        self.trainable_variables = list(encoder.trainable_variables)
        self.regularization_losses = []
        self.vocab_file = tf.saved_model.Asset(vocab_file)
        self.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False,
                                         name="do_lower_case")

    @tf.function
    def __call__(self, inputs, training=False):
        """The encoder's outputs (see the module docstring) for the dict `inputs`."""
        outputs = self.encoder(inputs["input_word_ids"], inputs["input_mask"],
                               inputs["input_type_ids"], training=training)
        return dict(outputs, default=outputs["pooled_output"])

    @tf.function(input_signature=[_INPUT_SPECS])
    def serve(self, inputs):
        """The serving signature: the outputs without the list of layers."""
        outputs = self(inputs, training=False)
        return {key: outputs[key] for key in ("sequence_output", "pooled_output", "default")}


class PreprocessorModule(tf.Module):
    """What `export_preprocessor` saves: TF Hub's BERT preprocessor on a `GraphTokenizer`."""

    def __init__(self, vocab_file, do_lower_case, seq_length):
        """Args:
          vocab_file: the vocab.txt (read now; the SavedModel holds its table).
          do_lower_case: FullTokenizer's casing.
          seq_length: the packed length of `bert_pack_inputs` and `__call__`.
        """
        super().__init__(name="bert_preprocessor")
        self.tokenizer = graph_tokenizer.GraphTokenizer(vocab_file, do_lower_case)
        self.seq_length = seq_length
        self.vocab_file = tf.saved_model.Asset(vocab_file)
        self.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False,
                                         name="do_lower_case")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, strings):
        """tf.string [B] -> int32 RaggedTensor [B, (words), (pieces)]."""
        return self.tokenizer.tokenize(strings)

    @tf.function
    def bert_pack_inputs(self, segments, seq_length=None):
        """One or two tokenized segments -> the encoder's inputs, int32 [B, seq_length]."""
        return graph_tokenizer.pack_inputs(
            list(segments), self.seq_length if seq_length is None else seq_length,
            self.tokenizer.cls_id, self.tokenizer.sep_id)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, strings):
        """tf.string [B] (one text each) -> the encoder's inputs, int32 [B, seq_length]."""
        return self.bert_pack_inputs([self.tokenize(strings)], self.seq_length)

    def trace(self):
        """Traces `bert_pack_inputs` for one and two segments (before saving): at the
        export's `seq_length` and at any length (a scalar, as TF Hub's callers pass it)."""
        segment = tf.RaggedTensorSpec([None, None, None], tf.int32, ragged_rank=2)
        for count in (1, 2):
            for seq_length in (self.seq_length, tf.TensorSpec([], tf.int32), None):
                self.bert_pack_inputs.get_concrete_function([segment] * count, seq_length)


def _check_export_path(path, flag):
    if not path:
        raise BertTfError(f"--{flag}: no directory given; pass where to write the SavedModel.")
    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        raise BertTfError(f"--{flag}: '{path}' already holds a SavedModel; pass a new directory "
                          "or remove it.")


def export_encoder(bert_config_file, init_checkpoint, vocab_file, do_lower_case, export_path):
    """Writes the encoder SavedModel (see the module docstring) to `export_path`.

    Raises:
      BertTfError: a missing or bad config, vocab or checkpoint (naming the flag or file and
        the variable), or an `export_path` that already holds a SavedModel.
    """
    fileio.require_file(bert_config_file, flag="bert_config_file", what="BERT config file")
    fileio.require_file(vocab_file, flag="vocab_file", what="vocab file")
    _check_export_path(export_path, "export_path")
    encoder = tf2.BertEncoder(bert_config_file)
    encoder.load_checkpoint(init_checkpoint)
    module = EncoderModule(encoder, vocab_file, do_lower_case)
    for training in (False, True):
        module.__call__.get_concrete_function(_INPUT_SPECS, training=training)
    tf.saved_model.save(module, export_path, signatures={"serving_default": module.serve})
    logging.info("Wrote the TF Hub encoder SavedModel to %s.", export_path)
    return export_path


def export_preprocessor(vocab_file, do_lower_case, export_path, seq_length=128):
    """Writes the preprocessor SavedModel (see the module docstring) to `export_path`.

    Raises:
      BertTfError: a missing vocab or one without [UNK], [CLS], [SEP]; a `seq_length` below 3;
        an `export_path` that already holds a SavedModel.
    """
    fileio.require_file(vocab_file, flag="vocab_file", what="vocab file")
    if seq_length < 3:
        raise BertTfError(f"--seq_length: {seq_length} leaves no room for [CLS] a [SEP] b "
                          "[SEP]; pass 3 or more (128 is usual).")
    _check_export_path(export_path, "preprocessor_export_path")
    module = PreprocessorModule(vocab_file, do_lower_case, seq_length)
    module.trace()
    tf.saved_model.save(module, export_path, signatures={"serving_default": module.__call__})
    logging.info("Wrote the TF Hub preprocessor SavedModel to %s.", export_path)
    return export_path


def export_tfhub(options):
    """scripts/export_tfhub.py: the encoder, and the preprocessor when its path is given.

    Args:
      options: `bert_tf.options.TfHubExportOptions`.
    """
    if options.preprocessor_export_path:  # Checked first: it is the quicker one.
        fileio.require_file(options.tokenizer.vocab_file, flag="vocab_file", what="vocab file")
        _check_export_path(options.preprocessor_export_path, "preprocessor_export_path")
    export_encoder(options.bert_config_file, options.init_checkpoint,
                   options.tokenizer.vocab_file, options.tokenizer.do_lower_case,
                   options.export_path)
    if options.preprocessor_export_path:
        export_preprocessor(options.tokenizer.vocab_file, options.tokenizer.do_lower_case,
                            options.preprocessor_export_path, options.seq_length)
