"""Converts an export (run_*.py --export_dir, export_encoder.py) to a TFLite model.

    python scripts/export_tflite.py --export_dir=export/1700000000 --output_file=model.tflite
    python scripts/export_tflite.py --export_dir=export/1700000000 \
        --output_file=model.int8.tflite --quantize=dynamic

Built-in TFLite ops only (the stock LiteRT runtime runs it, no Select TF ops); inputs
input_ids, input_mask, segment_ids int32 [batch, seq], both axes dynamic. --quantize=dynamic
stores int8 weights, float16 float16 ones. The model carries the export's task, vocab and
labels in its metadata: `Predictor.from_tflite(path)` (bert_tf.serving.predictor, the
`[tflite]` extra) or `scripts/predict.py --tflite_file=...` answers text.
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import tool_flags
from bert_tf.serving import tflite_export

tool_flags.define_tflite_export_flags()


def main(_):
    o = options.TfliteExportOptions.from_flags(flags.FLAGS)
    tflite_export.export_tflite(o.export_dir, o.output_file, o.quantize)


if __name__ == "__main__":
    errors.run_main(main)
