"""An export's `serving_default` signature as a TFLite model (fp32, dynamic INT8 or float16).

    export_tflite("export/1700000000", "model.tflite")                       # fp32
    export_tflite("export/1700000000", "model.int8.tflite", "dynamic")       # int8 weights

TensorFlow's converter turns the signature into TFLite built-in ops only (no Select TF ops, so
the stock LiteRT runtime runs it): inputs `input_ids`, `input_mask`, `segment_ids` int32
[batch, seq] with both axes dynamic, outputs named as the export's, in a TFLite signature
"serving_default". "dynamic" stores the weights as int8 (activations quantized at run time),
"float16" as float16.

The export's assets.extra/ files (task, vocab, config, labels, settings) go into the model's
own metadata (a flatbuffer buffer per file, named "bert_tf/<file name>", as in the ONNX
export), so the one .tflite file is all a device or `Predictor.from_tflite(path)` needs: a
sidecar directory could be separated from its model, and a model with another's vocab answers
wrongly without a word.
"""

import contextlib
import os
import re
import sys
import tempfile

import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.errors import BertTfError
from bert_tf.serving import backends, export

QUANTIZE_MODES = ("none", "dynamic", "float16")
SIGNATURE = "serving_default"


def _check_inputs(export_dir, output_file, quantize):
    export.check_conversion_flags(export_dir, output_file, quantize, QUANTIZE_MODES, ".tflite")


def _unsupported_ops(error):
    """The TF op names a ConverterError says TFLite's built-in ops lack."""
    names = {data.operator.name for data in getattr(error, "errors", ())
             if data.operator.name}
    names |= set(re.findall(r"'(tf\.\w+)' op is neither a custom op nor a flex op", str(error)))
    return sorted(names)


@contextlib.contextmanager
def _converter_diagnostics():
    """Sends what the converter's C++ code prints to stderr (MLIR diagnostics, which begin
    "error: " like the scripts' own one-line errors) to a temporary file, and from there to
    the debug log."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", "replace")
            if text.strip():
                logging.debug("TFLite converter output:\n%s", text)


def convert(export_dir, quantize="none"):
    """The TFLite flatbuffer (bytes) of `export_dir`'s serving_default signature, without
    metadata.

    Raises:
      BertTfError: naming the export and the ops when the graph needs ops that are not
        TFLite built-ins.
    """
    from tensorflow.lite.python.convert_phase import ConverterError

    converter = tf.lite.TFLiteConverter.from_saved_model(export_dir, signature_keys=[SIGNATURE])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize != "none":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    try:
        with _converter_diagnostics():
            return converter.convert()
    except ConverterError as e:
        ops = _unsupported_ops(e)
        if not ops:
            raise
        raise BertTfError(f"export {export_dir}: TFLite's built-in ops cannot express "
                          f"{', '.join(ops)} (in its {SIGNATURE} signature); export a graph "
                          "without them, or serve this export with TF Serving or ONNX.") from None


def add_metadata(model, files):
    """`model` (TFLite flatbuffer bytes) with each {name: text} of `files` as a metadata buffer
    named `backends.ASSET_METADATA_PREFIX + name`."""
    import numpy as np
    from tensorflow.lite.tools import flatbuffer_utils

    # Parsed and written back in the file's own byte order (read_model_from_bytearray would
    # swap it on a big-endian host, and TensorFlow 2.16 and 2.17 do not have it).
    model_object = flatbuffer_utils.convert_bytearray_to_object(bytearray(model))
    schema = flatbuffer_utils.schema_fb
    for name, text in sorted(files.items()):
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(text.encode("utf-8"), np.uint8)
        model_object.buffers.append(buffer)
        metadata = schema.MetadataT()
        metadata.name = backends.ASSET_METADATA_PREFIX + name
        metadata.buffer = len(model_object.buffers) - 1
        model_object.metadata = [*(model_object.metadata or []), metadata]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model_object))


def export_tflite(export_dir, output_file, quantize="none"):
    """Converts `export_dir`'s serving_default signature to `output_file` (see the module
    docstring).

    Returns:
      The size of the file written, in bytes.
    """
    export_dir = export.newest_export(export_dir)
    _check_inputs(export_dir, output_file, quantize)
    files = export.read_prediction_assets(export_dir)
    model = add_metadata(convert(export_dir, quantize), files)
    with fileio.replaced_on_success(output_file) as tmp, tf.io.gfile.GFile(tmp, "wb") as f:
        f.write(model)
    logging.info("Wrote %s (%s, %.1f MB)", output_file,
                 {"none": "fp32", "dynamic": "int8 weights", "float16": "float16 weights"}[
                     quantize], len(model) / 1e6)
    return len(model)
