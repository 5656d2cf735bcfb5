"""The flags of scripts/run_step.py (`options.RunStepOptions`), which runs where no TensorFlow
is installed: absl only, paths read as local files (`~` expanded by the runtime)."""

from absl import flags

from bert_tf import options

FLAGS = flags.FLAGS


def define_run_step_flags(flag_values=FLAGS):
    """The flags of scripts/run_step.py."""
    defaults = options.RunStepOptions
    fv = flag_values
    flags.DEFINE_string("step_dir", defaults.step_dir,
                        "A directory written by scripts/export_step.py.", flag_values=fv)
    flags.DEFINE_enum("platform", defaults.platform, ["cpu", "gpu", "tpu"],
                      "JAX's PJRT backend to compile and run the step on.", flag_values=fv)
    flags.DEFINE_integer("num_steps", defaults.num_steps, "Timed training steps.",
                         flag_values=fv)
    flags.DEFINE_integer("num_warmup_steps", defaults.num_warmup_steps,
                         "Untimed steps after compilation, before the timed ones (they train "
                         "too).", flag_values=fv)
    flags.DEFINE_string("features", defaults.features,
                        "Feature shards to train on (comma-separated safetensors files and "
                        "globs); default: the step directory's own.", flag_values=fv)
    flags.DEFINE_bool("random_features", defaults.random_features,
                      "Train on random features drawn on the device (ids in range, every "
                      "token real) instead.", flag_values=fv)
    flags.DEFINE_bool("random_init", defaults.random_init,
                      "Draw the starting state on the device from step.json's initializers "
                      "(zero optimizer slots) instead of reading state.safetensors.",
                      flag_values=fv)
    flags.DEFINE_string("state_file", defaults.state_file,
                        "The starting state; default: the step directory's "
                        "state.safetensors.", flag_values=fv)
    flags.DEFINE_integer("seed", defaults.seed,
                         "The dropout seed: each step's masks are a function of it and "
                         "global_step.", flag_values=fv)
    flags.DEFINE_string("output_dir", defaults.output_dir,
                        "Write the trained state here (state.safetensors; with TensorFlow "
                        "installed also a Google-layout checkpoint).", flag_values=fv)
    flags.DEFINE_string("output_json", defaults.output_json,
                        "Write the measurements as JSON here.", flag_values=fv)
    flags.DEFINE_integer("peak_matmul_size", defaults.peak_matmul_size,
                         "n of the n x n x n matmul that measures the device's peak in the "
                         "step's dtype.", flag_values=fv)
    flags.DEFINE_integer("log_every_n_steps", defaults.log_every_n_steps,
                         "Print a progress line every N steps.", flag_values=fv)
