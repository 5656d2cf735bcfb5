"""Converts an export (run_*.py --export_dir, export_encoder.py) to ONNX, optionally with
INT8 weights.

    python scripts/export_onnx.py --export_dir=export/1700000000 --output_file=model.onnx
    python scripts/export_onnx.py --export_dir=export/1700000000 \
        --output_file=model.int8.onnx --quantize=int8

`--nooptimize` writes the graph as tf2onnx converts it, without ONNX Runtime's fused BERT
operators (Attention, SkipLayerNormalization, BiasGelu).

Needs the `[onnx]` extra (tf2onnx, onnx, onnxruntime). The model takes input_ids, input_mask,
segment_ids int32 [batch, seq] and carries the export's task, vocab and labels in its metadata:
`Predictor.from_onnx(path)` (bert_tf.serving.predictor) or `scripts/predict.py --onnx_file=...`
answers text.
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import tool_flags
from bert_tf.serving import onnx_export

tool_flags.define_onnx_export_flags()


def main(_):
    o = options.OnnxExportOptions.from_flags(flags.FLAGS)
    onnx_export.export_onnx(o.export_dir, o.output_file, o.quantize, o.opset, o.optimize)


if __name__ == "__main__":
    errors.run_main(main)
