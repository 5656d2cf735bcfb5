"""Writes a task's real training step as one StableHLO module, for any XLA device.

    python scripts/export_step.py --task=squad --bert_config_file=configs/bert_large.json \
        --max_seq_length=384 --train_batch_size=32 --precision=bf16 --output_dir=step_large

The step is run_squad.py's (run_classifier.py's, run_pretraining.py's): the model, loss,
AdamW / LAMB with its schedule, clipping, dropout and global step + 1. The output directory
holds step.mlirbc (the module; no weights in it), step.json (every argument and result: name,
shape, dtype, role), state.safetensors (the starting state: --init_checkpoint, or the
initializers) and, with --train_file, the task's features as fixed-shape batches.
scripts/run_step.py compiles and runs it through JAX, without TensorFlow.
"""

import dataclasses

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import tool_flags
from bert_tf.step_program import export

tool_flags.define_export_step_flags()

FLAGS = flags.FLAGS


def main(_):
    if FLAGS.train_file and FLAGS.input_file:
        raise errors.BertTfError("--input_file: the same as --train_file; pass one of them.")
    step_options = dataclasses.replace(options.ExportStepOptions.from_flags(FLAGS),
                                       train_file=FLAGS.train_file or FLAGS.input_file)
    export.export_step(step_options)


if __name__ == "__main__":
    flags.mark_flags_as_required(["bert_config_file", "output_dir"])
    errors.run_main(main)
