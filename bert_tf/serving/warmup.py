"""TF Serving warm-up requests: `assets.extra/tf_serving_warmup_requests` of an export.

TF Serving runs the `PredictionLog` records of this TFRecord file through a model before it
marks the model available, so the first user request does not pay for building the graph's
kernels. Each export gets one `PredictLog` per signature it has (the id signatures and the text
ones), a batch of two inputs: a short sentence and a paragraph as long as the export's
max_seq_length allows.

The records are written without tensorflow-serving-api: the messages are few and their field
numbers fixed (tensorflow_serving/apis/{prediction_log,predict,model}.proto), so they are
encoded here in protobuf's wire format around the TensorProtos TensorFlow makes.
"""

import os

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.data import bert_inputs

WARMUP_FILE = "tf_serving_warmup_requests"

# PredictionLog.predict_log = 6; PredictLog.request = 1; PredictRequest.model_spec = 1 and
# .inputs = 2 (map<string, TensorProto>: entries of key = 1, value = 2);
# ModelSpec.signature_name = 3.
_PREDICTION_LOG_PREDICT_LOG = 6
_PREDICT_LOG_REQUEST = 1
_REQUEST_MODEL_SPEC = 1
_REQUEST_INPUTS = 2
_MAP_KEY, _MAP_VALUE = 1, 2
_MODEL_SPEC_SIGNATURE_NAME = 3

SHORT_TEXT = "The home side won the final two goals to one."
LONG_TEXT = (
    "Ada Lovelace was an English mathematician and writer, chiefly known for her work on "
    "Charles Babbage's proposed mechanical general-purpose computer, the Analytical Engine. "
    "She was the first to recognise that the machine had applications beyond pure "
    "calculation, and published the first algorithm intended to be carried out by such a "
    "machine. As a result, she is often regarded as one of the first computer programmers. "
    "Her notes on the engine, translated from an article by the Italian engineer Luigi "
    "Menabrea and extended to three times its length, describe how it could compute "
    "Bernoulli numbers, and she speculated that it might one day compose elaborate pieces of "
    "music of any degree of complexity or extent. She was born in London in 1815, the only "
    "legitimate child of the poet Lord Byron and the mathematician Anne Isabella Milbanke, "
    "and died of cancer in 1852 at the age of thirty-six.")
QUESTION = "Who published the first algorithm for the Analytical Engine?"

# The string inputs of the text signatures (`text_signature.receivers`) and their rows.
_TEXT_INPUTS = {"text": (SHORT_TEXT, LONG_TEXT), "text_b": ("", SHORT_TEXT),
                "question": (QUESTION, QUESTION), "context": (SHORT_TEXT, LONG_TEXT)}


def _varint(value):
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number, payload):
    """A length-delimited protobuf field (wire type 2): a string or an embedded message."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def prediction_log(signature_name, inputs):
    """A serialized tensorflow.serving.PredictionLog holding a PredictRequest.

    Args:
      signature_name: the signature the request calls.
      inputs: {input name: numpy array}.
    """
    request = _field(_REQUEST_MODEL_SPEC,
                     _field(_MODEL_SPEC_SIGNATURE_NAME, signature_name.encode()))
    for name in sorted(inputs):
        tensor = tf.make_tensor_proto(inputs[name]).SerializeToString()
        request += _field(_REQUEST_INPUTS, _field(_MAP_KEY, name.encode()) +
                          _field(_MAP_VALUE, tensor))
    return _field(_PREDICTION_LOG_PREDICT_LOG, _field(_PREDICT_LOG_REQUEST, request))


def _id_inputs(tokenizer, max_seq_length, max_query_length):
    """int64 input_ids / input_mask / segment_ids [2, S]: the short and the long text packed
    as the text signatures pack them (with `max_query_length`, SQuAD's: each after QUESTION cut
    to that many pieces), S the longer one."""
    question = tokenizer.tokenize(QUESTION)[:max_query_length] if max_query_length else None
    rows = [bert_inputs.pack_and_pad(list(question) if question else tokenizer.tokenize(text),
                                     tokenizer.tokenize(text) if question else None,
                                     tokenizer, max_seq_length)
            for text in (SHORT_TEXT, LONG_TEXT)]
    width = max(sum(row.input_mask) for row in rows)
    return {name: np.asarray([getattr(row, name)[:width] for row in rows], np.int64)
            for name in ("input_ids", "input_mask", "segment_ids")}


def signature_inputs(signature_def, tokenizer, max_seq_length, max_query_length=None,
                     num_choices=None):
    """{input name: numpy array} for one request to a signature (see the module docstring);
    with `num_choices` (multiple choice) the ids hold that many choices side by side
    ([2, num_choices * S]) and "endings" [2, num_choices] strings."""
    inputs, ids = {}, None
    for name, info in signature_def.inputs.items():
        dtype = tf.dtypes.as_dtype(info.dtype)
        if name == "endings":
            inputs[name] = np.asarray([[f"{text} ({j})".encode() for j in range(num_choices)]
                                       for text in (SHORT_TEXT, QUESTION)], object)
        elif dtype == tf.string:
            inputs[name] = np.asarray([text.encode() for text in _TEXT_INPUTS[name]], object)
        else:
            ids = ids or _id_inputs(tokenizer, max_seq_length, max_query_length)
            # Another [B, S] input (NER with a CRF: label_mask) gets the input_mask.
            values = ids.get(name, ids["input_mask"])
            inputs[name] = np.tile(values, (1, num_choices or 1)).astype(dtype.as_numpy_dtype)
    return inputs


def write_warmup_requests(export_path, tokenizer, max_seq_length, max_query_length=None,
                          num_choices=None):
    """Writes `<export_path>/assets.extra/tf_serving_warmup_requests`: one request per
    signature of the export.

    Args:
      export_path: a SavedModel directory written by `export.export_saved_model`.
      tokenizer: the export's `FullTokenizer`; max_seq_length: its packed length limit.
      max_query_length: SQuAD's: the id requests pack question-context pairs.
      num_choices: multiple choice's: choices per example.

    Returns:
      The file's path.
    """
    from tensorflow.python.saved_model import loader_impl

    signatures = loader_impl.parse_saved_model(export_path).meta_graphs[0].signature_def
    path = os.path.join(export_path, "assets.extra", WARMUP_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as writer:
        for name in sorted(signatures):
            writer.write(prediction_log(name, signature_inputs(
                signatures[name], tokenizer, max_seq_length, max_query_length, num_choices)))
    logging.info("Wrote %s (%d requests: %s)", path, len(signatures),
                 ", ".join(sorted(signatures)))
    return path
