"""What runs a model for the Predictor: an export's session, a checkpoint's graph, an ONNX
session, a TFLite interpreter. Each maps int32 [B, S] features to the task's named outputs,
and each may be called from several threads at once.
"""

import threading

import numpy as np
import tensorflow as tf

from bert_tf import errors
from bert_tf.errors import BertTfError
from bert_tf.serving import export
from bert_tf.tasks import model_fn_parts
from bert_tf.training import session as session_lib

tf1 = tf.compat.v1


# Metadata keys of the ONNX and TFLite models holding the export's assets.extra/ files
# (scripts/export_onnx.py, export_tflite.py).
ASSET_METADATA_PREFIX = "bert_tf/"


def load_serving_session(path):
    """The export at `path` loaded into a TF1 session of its own graph.

    Loaded as the TF1 SavedModel it is: `tf.saved_model.load` would copy each signature's ops
    into a function of its own first, which makes loading several times slower.

    Returns:
      (tf.compat.v1.Session, the `serving_default` SignatureDef).
    Raises:
      BertTfError: the export cannot be loaded.
    """
    from tensorflow.python.saved_model import loader_impl  # no deprecation notice

    graph = tf.Graph()
    session = tf1.Session(graph=graph, config=session_lib.session_config())
    try:
        with graph.as_default():
            meta_graph = loader_impl.SavedModelLoader(path).load(session, ["serve"])
    except (tf.errors.NotFoundError, OSError, ValueError, KeyError) as e:
        raise BertTfError(f"SavedModel {path} cannot be loaded: "
                          f"{errors.short_tf_error(e)}") from None
    return session, meta_graph.signature_def["serving_default"]


def frozen_signature(export_dir):
    """What computes serving_default's outputs from its inputs, variables as constants.

    Loaded as the TF1 SavedModel it is (`load_serving_session`): converters' own loaders go
    through `tf.saved_model.load`, about half of a MiniLM ONNX conversion's time.

    Returns:
      (GraphDef whose inputs are placeholders named as the signature's input tensors,
      the serving_default SignatureDef).
    """
    # What tf.compat.v1.graph_util.convert_variables_to_constants calls, without its
    # deprecation notice.
    from tensorflow.python.framework import convert_to_constants

    session, signature = load_serving_session(export_dir)
    with session:
        graph_def = session.graph.as_graph_def()
        # serving_default feeds tensors computed from the text signatures' placeholders
        # (export.export_saved_model): cut there, so nothing above them is kept.
        fed = {info.name.split(":")[0]: info for info in signature.inputs.values()}
        for node in graph_def.node:
            if node.name in fed:
                info = fed[node.name]
                node.Clear()
                node.name, node.op = info.name.split(":")[0], "Placeholder"
                node.attr["dtype"].type = info.dtype
                node.attr["shape"].shape.CopyFrom(info.tensor_shape)
        return convert_to_constants.convert_variables_to_constants_from_session_graph(
            session, graph_def, [info.name.split(":")[0] for info in signature.outputs.values()]
        ), signature


class SavedModelBackend:
    """The export's `serving_default` signature, run in a session (`load_serving_session`;
    `Session.run` takes concurrent calls)."""

    def __init__(self, path):
        self._session, signature = load_serving_session(path)
        self._inputs = {name: info.name for name, info in signature.inputs.items()}
        self._outputs = {name: info.name for name, info in signature.outputs.items()}

    def __call__(self, inputs):
        return self._session.run(self._outputs, {self._inputs[name]: np.asarray(value, np.int32)
                                                 for name, value in inputs.items()})


class GraphBackend:
    """A graph built by `build_fn(features) -> {name: tensor}` over int32 [B, S] placeholders,
    with its variables restored from a checkpoint (`Session.run` takes concurrent calls; the
    graph is finalized, so none can change it)."""

    def __init__(self, build_fn, checkpoint, extra_inputs=()):
        self._graph = tf.Graph()
        with self._graph.as_default():
            self._inputs = {name: tf1.placeholder(tf.int32, [None, None], name=name)
                            for name in (*export.SERVING_INPUT_NAMES, *extra_inputs)}
            self._outputs = build_fn(self._inputs)
            saver = tf1.train.Saver()
            local_init = tf1.local_variables_initializer()
            self._session = tf1.Session(graph=self._graph,
                                        config=session_lib.session_config())
            try:
                saver.restore(self._session, checkpoint)
            except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
                raise BertTfError(
                    f"checkpoint {checkpoint} does not fit this task's model "
                    f"({errors.short_tf_error(e)}); pass the checkpoint the task was "
                    "fine-tuned into, with its --task, labels and bert_config.json.") from None
            # After the restore: weight copies cast once (`precision.weights_cast_once`).
            self._session.run(local_init)
        self._graph.finalize()

    @property
    def output_names(self):
        """The names of the outputs `build_fn` made."""
        return tuple(self._outputs)

    def __call__(self, inputs, names=None):
        """The outputs (those in `names`, default all) on int32 [B, S] `inputs`."""
        fetches = self._outputs if names is None else {name: self._outputs[name]
                                                       for name in names}
        return self._session.run(fetches, {self._inputs[name]: value
                                           for name, value in inputs.items()})


class OnnxBackend:
    """An ONNX model of the export's serving_default signature, run by onnxruntime (whose
    `InferenceSession.run` takes concurrent calls)."""

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


class TfliteBackend:
    """A TFLite model of the export's serving_default signature (scripts/export_tflite.py),
    run by LiteRT's interpreter: one call at a time, as the interpreter holds its input and
    output tensors between calls."""

    def __init__(self, path, interpreter):
        self.path = path
        self._runner = interpreter.get_signature_runner("serving_default")
        self._lock = threading.Lock()

    def __call__(self, inputs):
        values = {name: np.asarray(value, np.int32) for name, value in inputs.items()}
        with self._lock:
            # The runner resizes its inputs to each batch's [B, S]; its outputs are copies.
            return self._runner(**values)


def tflite_assets(model):
    """{file name: text} of the export files a TFLite flatbuffer (`model`, bytes) carries as
    metadata buffers named `ASSET_METADATA_PREFIX + file name` (scripts/export_tflite.py)."""
    from ai_edge_litert import schema_py_generated as schema

    root = schema.Model.GetRootAs(model, 0)
    files = {}
    for i in range(root.MetadataLength()):
        entry = root.Metadata(i)
        name = entry.Name().decode("utf-8")
        if name.startswith(ASSET_METADATA_PREFIX):
            data = root.Buffers(entry.Buffer()).DataAsNumpy().tobytes()
            files[name[len(ASSET_METADATA_PREFIX):]] = data.decode("utf-8")
    return files


def task_outputs(config, bert_config, compute_dtype):
    """build_fn for `GraphBackend`: the task's PREDICT-mode outputs over the features."""
    encoder = model_fn_parts.Encoder(bert_config, compute_dtype=compute_dtype)
    return config.task_class.predict_outputs(encoder, config, bert_config)
