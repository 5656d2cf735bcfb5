"""Flag groups shared by the scripts, defined once.

Each `define_*` function registers absl flags with the original Google BERT
names where they exist, so old command lines keep working.
"""

from absl import flags

from bert_tf import precision
from bert_tf.errors import BertTfError


def define_tpu_flags():
    """The original TPU flags (accepted everywhere; see README for what is wired)."""
    flags.DEFINE_bool("use_tpu", False, "Whether to use TPU or GPU/CPU.")
    flags.DEFINE_string("tpu_name", None, "The Cloud TPU to use for training.")
    flags.DEFINE_string("tpu_zone", None, "GCE zone where the Cloud TPU is located in.")
    flags.DEFINE_string("gcp_project", None, "Project name for the Cloud TPU-enabled project.")
    flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL.")
    flags.DEFINE_integer("num_tpu_cores", 8, "Only used if `use_tpu` is True.")


def define_precision_flags():
    """`--precision`: compute dtype with fp32 variables."""
    flags.DEFINE_enum("precision", "fp32", ["fp32", "bf16", "fp16"],
                      "Compute precision; variables and checkpoints stay float32.")


def compute_dtype(flag_values):
    """The tf.DType for `--precision`."""
    return precision.compute_dtype_from_name(flag_values.precision)


def check_no_tpu(flag_values):
    """TPU execution is not wired yet: say so instead of silently running on CPU."""
    if getattr(flag_values, "use_tpu", False):
        raise BertTfError("--use_tpu: TPU execution is not available in this build of bert_tf; "
                          "run without --use_tpu (CPU/GPU).")


def check_positive(flag_values, *names):
    """Raises BertTfError naming the first flag among `names` that is not > 0."""
    for name in names:
        value = getattr(flag_values, name)
        if value is None or value <= 0:
            raise BertTfError(f"--{name} must be a positive number, got {value}.")
