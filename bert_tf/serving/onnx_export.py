"""An export's `serving_default` signature as an ONNX model (fp32 or dynamic INT8).

    export_onnx("export/1700000000", "model.onnx")                  # fp32
    export_onnx("export/1700000000", "model.int8.onnx", "int8")     # weights INT8

`tf2onnx` (the optional extra `[onnx]`) converts the signature's frozen graph: inputs
`input_ids`, `input_mask`, `segment_ids` int32 [batch, seq] with both axes dynamic, outputs
named as the signature's (`probabilities`, `start_logits` / `end_logits`, `tag_ids`). The
export's assets.extra/ files (task, vocab, labels, settings) go into the model's metadata under
"bert_tf/<file name>", so `bert_tf.serving.predictor.Predictor.from_onnx(path)` needs nothing else.
With `optimize=True` (the default) the graph is first rewritten to ONNX Runtime's fused BERT
operators (Attention, SkipLayerNormalization, BiasGelu; see `onnx_fusion`), so INT8 then
quantizes them as QAttention and DynamicQuantizeMatMul. INT8 is onnxruntime's `quantize_dynamic`:
int8 weights of the MatMuls (and the attention's packed QKV weights), activations quantized per
batch at run time.
"""

import contextlib
import os
import tempfile

import tensorflow as tf
from absl import logging

from bert_tf import fileio, options
from bert_tf.errors import BertTfError, missing_extra
from bert_tf.serving import backends, export

QUANTIZE_MODES = ("none", "int8")
SIGNATURE = "serving_default"
DEFAULT_OPSET = options.OnnxExportOptions.opset
# tf2onnx's switch for undoing a failed optimizer pass (which copies the graph first).
_CATCH_ERRORS_VARIABLE = "TF2ONNX_CATCH_ERRORS"


def _rename(graph, renames):
    """Renames tensors of an ONNX GraphProto (graph inputs / outputs and node ends)."""
    for value in (*graph.input, *graph.output):
        value.name = renames.get(value.name, value.name)
    for node in graph.node:
        node.input[:] = [renames.get(name, name) for name in node.input]
        node.output[:] = [renames.get(name, name) for name in node.output]


def _check_inputs(export_dir, output_file, quantize, optimize):
    export.check_conversion_flags(export_dir, output_file, quantize, QUANTIZE_MODES, ".onnx")
    fileio.require_local(output_file, "output_file", "the ONNX converter writes")
    try:
        import onnx  # noqa: F401
        import tf2onnx  # noqa: F401
        if quantize == "int8" or optimize:
            import onnxruntime  # noqa: F401
    except ImportError as e:
        raise missing_extra(f"ONNX export needs tf2onnx, onnx and onnxruntime ({e})", "onnx",
                            "tf2onnx onnx onnxruntime") from None
    except AttributeError as e:
        # onnx 1.19.0 beside the ml_dtypes of TensorFlow 2.16-2.18 (see setup.py's extra).
        raise BertTfError(f"onnx {_installed_version('onnx')} cannot be imported beside "
                          f"ml_dtypes {_installed_version('ml_dtypes')} ({e}): onnx 1.19.0 "
                          "needs ml_dtypes 0.5, which TensorFlow 2.16 to 2.18 do not allow; "
                          'pip install "onnx!=1.19.0".') from None


def _installed_version(distribution):
    """The installed version of a pip distribution, or "(version unknown)"."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "(version unknown)"


def export_onnx(export_dir, output_file, quantize="none", opset=DEFAULT_OPSET, optimize=True):
    """Converts `export_dir`'s serving_default signature to `output_file` (see module doc).

    Args:
      optimize: fuse to ONNX Runtime's BERT operators before writing (and before INT8).

    Returns:
      The ONNX ModelProto written.
    """

    export_dir = export.newest_export(export_dir)
    _check_inputs(export_dir, output_file, quantize, optimize)
    metadata = {backends.ASSET_METADATA_PREFIX + name: text
                for name, text in export.read_prediction_assets(export_dir).items()}
    import onnx

    graph_def, signature = backends.frozen_signature(export_dir)
    input_keys = {info.name: key for key, info in sorted(signature.inputs.items())}
    output_keys = {info.name: key for key, info in sorted(signature.outputs.items())}
    model = _convert(graph_def, list(input_keys), list(output_keys), opset)
    _rename(model.graph, {**input_keys, **output_keys})
    if optimize:
        model = _fuse(model, metadata)
    if quantize == "int8":
        model = _quantize_int8(model)
    del model.metadata_props[:]
    for key, text in metadata.items():
        model.metadata_props.add(key=key, value=text)
    with fileio.replaced_on_success(output_file) as tmp:
        onnx.save(model, tmp)
    logging.info("Wrote %s (%s, inputs %s, outputs %s)", output_file,
                 "INT8 weights" if quantize == "int8" else "fp32", sorted(input_keys.values()),
                 sorted(output_keys.values()))
    return model


def _convert(graph_def, input_names, output_names, opset):
    """tf2onnx's conversion of a frozen GraphDef: an ONNX ModelProto.

    tf2onnx deep-copies the whole graph, weights included, before each of its optimizer passes
    so that it can skip a pass that fails; for a BERT those copies are about a third of the
    conversion. So the passes first run without them (tf2onnx's own switch), and only if one
    fails does the conversion run again the cautious way.
    """
    import tf2onnx

    def convert(catch_errors):
        with tf.Graph().as_default(), _tf2onnx_catch_errors(catch_errors):
            return tf2onnx.convert.from_graph_def(
                graph_def, input_names=input_names, output_names=output_names,
                opset=opset)[0]

    try:
        return convert("FALSE")
    except Exception as e:  # whichever pass failed: tf2onnx's own way, below
        logging.info("A tf2onnx optimizer pass failed (%s); converting again with each pass "
                     "undone if it fails.", e)
        return convert("TRUE")


@contextlib.contextmanager
def _tf2onnx_catch_errors(value):
    """Sets tf2onnx's TF2ONNX_CATCH_ERRORS for the block, then puts back what was there."""
    saved = os.environ.get(_CATCH_ERRORS_VARIABLE)
    os.environ[_CATCH_ERRORS_VARIABLE] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(_CATCH_ERRORS_VARIABLE, None)
        else:
            os.environ[_CATCH_ERRORS_VARIABLE] = saved


def _fuse(model, metadata):
    """`onnx_fusion.fuse` with the sizes from the export's bert_config.json."""
    import json

    from bert_tf.serving import onnx_fusion

    config = json.loads(metadata[backends.ASSET_METADATA_PREFIX + "bert_config.json"])
    model, stats = onnx_fusion.fuse(model, config["num_attention_heads"], config["hidden_size"])
    if stats["Attention"] != config["num_hidden_layers"]:
        logging.warning("ONNX fusion: %d of %d attention layers fused; the model is correct but "
                        "slower than it could be.", stats["Attention"],
                        config["num_hidden_layers"])
    return model


def _quantize_int8(model):
    """onnxruntime's dynamic INT8 quantization of `model` (int8 weights, uint8 activations)."""
    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        fp32, int8 = os.path.join(tmp, "fp32.onnx"), os.path.join(tmp, "int8.onnx")
        onnx.save(model, fp32)
        quantize_file(fp32, int8)
        return onnx.load(int8)


def quantize_file(fp32_file, int8_file):
    """Writes the dynamic INT8 version of an ONNX model written by `export_onnx`, keeping its
    metadata (the Predictor's assets)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Fused models have com.microsoft ops that onnx's shape inference cannot type; their
    # outputs (and so the MatMuls after them) are float.
    quantize_dynamic(fp32_file, int8_file, weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    metadata = onnx.load(fp32_file, load_external_data=False).metadata_props
    model = onnx.load(int8_file)
    del model.metadata_props[:]
    model.metadata_props.extend(metadata)
    onnx.save(model, int8_file)
