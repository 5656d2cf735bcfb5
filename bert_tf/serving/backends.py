"""What runs a model for the Predictor: an export's session, a checkpoint's graph, an ONNX
session. Each maps int32 [B, S] features to the task's named outputs.
"""

import numpy as np
import tensorflow as tf

from bert_tf import errors
from bert_tf.errors import BertTfError
from bert_tf.serving import export
from bert_tf.tasks import classification, model_fn_parts, ner, pretraining, squad
from bert_tf.training import estimator as estimator_lib

tf1 = tf.compat.v1


# ONNX metadata keys holding the export's assets.extra/ files (scripts/export_onnx.py).
ONNX_ASSET_PREFIX = "bert_tf/"


def load_serving_session(path):
    """The export at `path` loaded into a TF1 session of its own graph.

    Loaded as the TF1 SavedModel it is: `tf.saved_model.load` would wrap each signature (the
    text ones too) in a function first, ~10 s for a MiniLM export against ~1 s here.

    Returns:
      (tf.compat.v1.Session, the `serving_default` SignatureDef).
    Raises:
      BertTfError: the export cannot be loaded.
    """
    from tensorflow.python.saved_model import loader_impl  # no deprecation notice

    graph = tf.Graph()
    session = tf1.Session(graph=graph)
    try:
        with graph.as_default():
            meta_graph = loader_impl.SavedModelLoader(path).load(session, ["serve"])
    except (tf.errors.NotFoundError, OSError, ValueError, KeyError) as e:
        raise BertTfError(f"SavedModel {path} cannot be loaded: "
                          f"{errors.short_tf_error(e)}") from None
    return session, meta_graph.signature_def["serving_default"]


class SavedModelBackend:
    """The export's `serving_default` signature, run in a session (`load_serving_session`)."""

    def __init__(self, path):
        self._session, signature = load_serving_session(path)
        self._inputs = {name: info.name for name, info in signature.inputs.items()}
        self._outputs = {name: info.name for name, info in signature.outputs.items()}

    def __call__(self, inputs):
        return self._session.run(self._outputs, {self._inputs[name]: np.asarray(value, np.int32)
                                                 for name, value in inputs.items()})


class GraphBackend:
    """A graph built by `build_fn(features) -> {name: tensor}` over int32 [B, S] placeholders,
    with its variables restored from a checkpoint."""

    def __init__(self, build_fn, checkpoint, extra_inputs=()):
        self._graph = tf.Graph()
        with self._graph.as_default():
            self._inputs = {name: tf1.placeholder(tf.int32, [None, None], name=name)
                            for name in (*export.SERVING_INPUT_NAMES, *extra_inputs)}
            self._outputs = build_fn(self._inputs)
            saver = tf1.train.Saver()
            self._session = tf1.Session(graph=self._graph)
            try:
                saver.restore(self._session, checkpoint)
            except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
                raise BertTfError(
                    f"checkpoint {checkpoint} does not fit this task's model "
                    f"({errors.short_tf_error(e)}); pass the checkpoint the task was "
                    "fine-tuned into, with its --task, labels and bert_config.json.") from None

    def __call__(self, inputs):
        return self._session.run(self._outputs, {self._inputs[name]: value
                                                 for name, value in inputs.items()})


class OnnxBackend:
    """An ONNX model of the export's serving_default signature, run by onnxruntime."""

    def __init__(self, path, session):
        self.path = path
        self._session = session
        self._input_names = [node.name for node in session.get_inputs()]
        self._output_names = [node.name for node in session.get_outputs()]

    def __call__(self, inputs):
        values = self._session.run(None, {name.split(":")[0]: inputs[name.split(":")[0]]
                                          for name in self._input_names})
        return {name.split(":")[0]: value for name, value in zip(self._output_names, values,
                                                                  strict=True)}


def task_outputs(config, bert_config, compute_dtype):
    """build_fn for `GraphBackend`: the task's PREDICT-mode outputs over the features."""
    predict_mode = estimator_lib.ModeKeys.PREDICT
    encoder = model_fn_parts.Encoder(bert_config, compute_dtype=compute_dtype)
    if config.task in ("classifier", "squad", "ner"):
        if config.task == "classifier":
            model_fn = classification.model_fn_builder(
                encoder, len(config.label_list), is_regression=config.regression,
                multi_label=config.multi_label, windowed=config.windowed)
        elif config.task == "squad":
            model_fn = squad.model_fn_builder(encoder)
        else:
            model_fn = ner.model_fn_builder(encoder, len(config.label_list))
        return lambda features: model_fn(features, None, predict_mode, {}).predictions

    def fill_mask(features):
        positions = features["masked_lm_positions"]
        zeros = tf.zeros_like(positions)

        def head(model, _):
            return pretraining.masked_lm_output(
                bert_config, model.get_sequence_output(), model.get_embedding_table(),
                positions, zeros, tf.cast(zeros, tf.float32))[2]  # log_probs [B*P, V]

        log_probs = encoder.build(features, predict_mode, head)
        return {"log_probs": tf.reshape(log_probs, [tf.shape(positions)[0], -1,
                                                    bert_config.vocab_size])}

    def embed(features):
        def head(model, _):
            sequence = tf.cast(model.get_sequence_output(), tf.float32)  # [B, S, H]
            mask = tf.cast(features["input_mask"], tf.float32)[:, :, None]
            return {"cls": sequence[:, 0],
                    "mean": tf.reduce_sum(sequence * mask, 1) / tf.reduce_sum(mask, 1)}

        return encoder.build(features, predict_mode, head)

    return fill_mask if config.task == "fill_mask" else embed
