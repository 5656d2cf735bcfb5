"""Turns a state trained by scripts/run_step.py into a Google-layout checkpoint.

    python scripts/step_checkpoint.py --step_dir=step_large \
        --state_file=trained/state.safetensors --output_dir=trained

For states trained where TensorFlow is not installed (run_step.py writes the checkpoint itself
where it is). The checkpoint, `model.ckpt-<global step>`, is what run_squad.py
--init_checkpoint (or --output_dir, to predict with it) and export_checkpoint.py read.
"""

from absl import flags

from bert_tf import errors
from bert_tf.step_program import checkpoint

flags.DEFINE_string("step_dir", None, "The directory scripts/export_step.py wrote.")
flags.DEFINE_string("state_file", None, "The state.safetensors scripts/run_step.py wrote.")
flags.DEFINE_string("output_dir", None, "Write the checkpoint here.")

FLAGS = flags.FLAGS


def main(_):
    checkpoint.state_to_checkpoint(FLAGS.step_dir, FLAGS.state_file, FLAGS.output_dir)


if __name__ == "__main__":
    flags.mark_flags_as_required(["step_dir", "state_file", "output_dir"])
    errors.run_main(main)
