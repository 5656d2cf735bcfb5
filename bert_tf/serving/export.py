"""SavedModel export of a fine-tuned task, self-contained for prediction.

`<export_dir>/<timestamp>/` holds a SavedModel (tag "serve") with two signatures over one
graph, both taking `input_ids`, `input_mask`, `segment_ids` of shape [batch, seq] (any batch
size, any seq up to the model's `max_position_embeddings`) and returning the task's outputs:
  - "serving_default": int32 inputs (`tf.constant([[101, ...]])` in TF2 is int32);
  - "serving_int64": int64 inputs (what tf.train.Example / TFRecord pipelines produce).
A signature's inputs are typed, so one signature cannot take both dtypes; numpy arrays and
Python lists of either integer type work with both. With tensorflow-text, text-in signatures
(`bert_tf.serving.text_signature`) take strings. `assets.extra/` carries the vocab, the BERT
config, the label list and `predict_config.json`, which the Predictor reads.
"""

import json
import os

import tensorflow as tf
from absl import logging

from bert_tf import fileio, tokenization
from bert_tf.data import input_pipeline
from bert_tf.serving import text_signature as serving_text
from bert_tf.training import estimator as estimator_lib

tf1 = tf.compat.v1


# The features the exported signatures take, all [batch, seq].
SERVING_INPUT_NAMES = input_pipeline.SEQUENCE_FEATURES


INT64_SIGNATURE_NAME = "serving_int64"


# What an export carries in assets.extra/ for `Predictor.from_saved_model` (serving.predictor).
PREDICT_CONFIG_FILE = "predict_config.json"


VOCAB_FILE = "vocab.txt"


BERT_CONFIG_FILE = "bert_config.json"


def prediction_assets(task, options):
    """{file name: text} that make an export self-contained for prediction: the vocab, the
    BERT config and `predict_config.json` (task, casing, max_seq_length, label list and the
    task's `predict_settings`)."""
    config = {"task": task.name, "do_lower_case": options.tokenizer.do_lower_case,
              "max_seq_length": options.model.max_seq_length,
              "label_list": list(task.label_list) if task.label_list else None,
              **task.predict_settings(options)}
    files = {PREDICT_CONFIG_FILE: json.dumps(config, indent=2, sort_keys=True) + "\n"}
    for name, path in ((VOCAB_FILE, options.tokenizer.vocab_file),
                       (BERT_CONFIG_FILE, options.model.bert_config_file)):
        with tf.io.gfile.GFile(path) as f:
            files[name] = f.read()
    return files


def text_signature(task, options):
    """The `serving_text.TextSignature` of `task`'s export, or None (with a warning) without
    tensorflow-text."""
    if not serving_text.available():
        logging.warning("tensorflow-text is not installed (pip install bert_tf[serving]): the "
                        "export gets no %s signature.", serving_text.SIGNATURE_NAME)
        return None
    squad_settings = task.predict_settings(options)
    return serving_text.TextSignature(
        input_names=task.text_inputs,
        vocab=tokenization.load_vocab(options.tokenizer.vocab_file),
        do_lower_case=options.tokenizer.do_lower_case,
        max_seq_length=options.model.max_seq_length,
        max_query_length=squad_settings.get("max_query_length"),
        pairs=task.name == "classifier")


def export_saved_model(estimator, export_dir_base, extra_files=None, checkpoint_path=None,
                       text_signature=None):
    """Exports the latest checkpoint with the signatures of the module docstring.

    Args:
      estimator: the task's Estimator (its model_dir holds the checkpoint).
      export_dir_base: the export goes to a new `<timestamp>` directory inside.
      extra_files: {file name: text} written to `<export>/assets.extra/` (the TF Serving
        place for files the model does not read), e.g. the label list.
      checkpoint_path: the checkpoint to export (default: the latest).
      text_signature: a `serving_text.TextSignature`: also add the text-in signatures, which
        return the model's outputs and the packed `input_ids` [batch, seq] they ran on.

    Returns:
      The export directory `<export_dir_base>/<timestamp>`.
    """
    def serving_input_receiver_fn():
        int32_inputs, int64_inputs, alternatives, text_ids = {}, {}, {}, {}
        if text_signature is not None:
            # The id placeholders default to the tokenized strings, so the text signatures
            # (which feed only strings) run the same model.
            alternatives, text_ids = serving_text.receivers(text_signature)
        for name in SERVING_INPUT_NAMES:
            int64_inputs[name] = (
                tf1.placeholder(tf.int64, [None, None], name=name) if not text_ids else
                tf1.placeholder_with_default(text_ids[name], [None, None], name=name))
            # serving_default feeds the cast directly (any graph tensor can be fed), so it
            # takes int32; serving_int64 feeds the placeholder above it.
            int32_inputs[name] = tf.cast(int64_inputs[name], tf.int32, name=f"{name}_int32")
        outputs = {name: {"input_ids": int64_inputs["input_ids"]} for name in alternatives}
        return estimator_lib.ServingInputReceiver(
            int32_inputs, int32_inputs,
            receiver_tensors_alternatives={INT64_SIGNATURE_NAME: int64_inputs, **alternatives},
            alternative_outputs=outputs)

    export_path = estimator.export_saved_model(export_dir_base, serving_input_receiver_fn,
                                               checkpoint_path=checkpoint_path)
    for name, text in (extra_files or {}).items():
        tf.io.gfile.makedirs(os.path.join(export_path, "assets.extra"))
        fileio.atomic_write_text(os.path.join(export_path, "assets.extra", name), text)
    logging.info("Exported SavedModel to %s (signatures serving_default: int32 inputs, %s: "
                 "int64 inputs%s)", export_path, INT64_SIGNATURE_NAME,
                 ", serving_text: strings" if text_signature else "")
    return export_path
