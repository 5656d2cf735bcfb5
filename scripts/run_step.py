"""Compiles and runs a step written by scripts/export_step.py through JAX's PJRT client.

    python scripts/run_step.py --step_dir=step_large --platform=gpu --num_steps=20 \
        --random_init --random_features --output_json=step_large.json

Needs the `[xla]` extra (jax, jaxlib, safetensors; on a GPU also JAX's CUDA plugin) and no
TensorFlow. The state stays on the device between steps (its buffers are donated to the
step). Prints compile time, steps/s, sequences/s, the model FLOP rate and its fraction of
the device's measured matmul rate in the step's dtype. With --output_dir the trained state is
written as state.safetensors and, where TensorFlow is installed, as a Google-layout
checkpoint (elsewhere: scripts/step_checkpoint.py on a TensorFlow machine).
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import step_flags
from bert_tf.step_program import runtime

step_flags.define_run_step_flags()


def main(_):
    runtime.run(options.RunStepOptions.from_flags(flags.FLAGS))


if __name__ == "__main__":
    flags.mark_flags_as_required(["step_dir"])
    errors.run_main(main)
