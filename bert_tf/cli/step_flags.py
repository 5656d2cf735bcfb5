"""The flags of scripts/run_step.py (`options.RunStepOptions`), which runs where no TensorFlow
is installed: absl only, paths read as local files (`~` expanded by the runtime)."""

from absl import flags

from bert_tf import options
from bert_tf.cli.option_flags import define_fields

FLAGS = flags.FLAGS


def define_run_step_flags(flag_values=FLAGS):
    """The flags of scripts/run_step.py."""
    define_fields(options.RunStepOptions, flag_values=flag_values)
