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


def define_optimizer_flags():
    """`--optimizer` and `--num_accumulation_steps` (micro-batches per optimizer update)."""
    flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "The optimizer.")
    flags.DEFINE_integer("num_accumulation_steps", 1,
                         "Micro-batches accumulated per optimizer update; train_batch_size must "
                         "divide by it.")


def define_finetuning_flags(max_seq_length=128):
    """The flags run_classifier.py, run_squad.py and run_ner.py share.

    The original Google names and defaults (vocab_file, bert_config_file, init_checkpoint,
    do_lower_case, do_train, do_predict, train/predict_batch_size, learning_rate,
    num_train_epochs, warmup_proportion, save_checkpoints_steps, output_dir, the TPU flags), plus
    export_dir, num_train_steps, precision, optimizer, num_accumulation_steps and run controls.

    Args:
      max_seq_length: the script's default `--max_seq_length` (128; 384 for SQuAD).
    """
    flags.DEFINE_string("bert_config_file", None,
                        "The config json file corresponding to the pre-trained BERT model.")
    flags.DEFINE_string("vocab_file", None, "The vocabulary file the BERT model was trained on.")
    flags.DEFINE_string("output_dir", None,
                        "The output directory where checkpoints, cached features and results "
                        "are written.")
    flags.DEFINE_string("init_checkpoint", None,
                        "Initial checkpoint (usually from a pre-trained BERT model).")
    flags.DEFINE_bool("do_lower_case", True,
                      "Whether to lower case the input text; True for uncased models.")
    flags.DEFINE_integer("max_seq_length", max_seq_length,
                         "The maximum total input sequence length after WordPiece tokenization; "
                         "longer sequences are truncated, shorter ones padded.")
    flags.DEFINE_bool("do_train", False, "Whether to run training.")
    flags.DEFINE_bool("do_predict", False, "Whether to run prediction.")
    flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
    flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for prediction.")
    flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
    flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
    flags.DEFINE_integer("num_train_steps", None,
                         "Optimizer updates to train; default: from --num_train_epochs.")
    flags.DEFINE_float("warmup_proportion", 0.1,
                       "Proportion of training to perform linear learning rate warmup for.")
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save the model checkpoint.")
    flags.DEFINE_integer("iterations_per_loop", 1000, "Accepted for compatibility (TPU loop size).")
    flags.DEFINE_integer("keep_checkpoint_max", 5, "How many recent checkpoints to keep.")
    flags.DEFINE_integer("log_every_n_steps", 100, "Steps between progress lines.")
    flags.DEFINE_integer("save_summary_steps", 100, "Steps between TensorBoard summaries.")
    flags.DEFINE_integer("random_seed", None, "Graph-level random seed for repeatable runs.")
    flags.DEFINE_string("export_dir", None,
                        "If set, export the trained model as a SavedModel to "
                        "<export_dir>/<timestamp> (signatures serving_default, int32 inputs, "
                        "and serving_int64).")
    define_optimizer_flags()
    define_precision_flags()
    define_tpu_flags()
    define_xla_flags()
    define_distribution_flags()


def define_eval_flags():
    """`--do_eval` and `--eval_batch_size` (run_classifier.py, run_ner.py)."""
    flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
    flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")


def define_xla_flags():
    """`--use_xla`: XLA auto-clustering (JIT) of the session's graph, on CPU and GPU."""
    flags.DEFINE_bool("use_xla", False,
                      "Compile clusters of the graph with XLA (auto-clustering, global_jit_level "
                      "ON_1). Measured neutral on CPU, hence off by default.")
    # Validators run when the command line is parsed, before main() lets TF create devices.
    flags.register_validator("use_xla", _enable_xla_cpu_jit_if_set)


def _enable_xla_cpu_jit_if_set(use_xla):
    if use_xla:
        enable_xla_cpu_jit()
    return True


def enable_xla_cpu_jit():
    """Lets sessions with XLA auto-clustering compile clusters on the CPU as well.

    TF's `--tf_xla_cpu_global_jit` flag fixes the CPU device's clustering policy when TF first
    creates its devices (which listing devices, reading a checkpoint or an eager op may do), so
    this must run before that; scripts do it while parsing `--use_xla`. TF may have parsed
    TF_XLA_FLAGS at import already, so the parsed flag is also set directly where TF exposes it.
    """
    import os

    xla_flags = os.environ.get("TF_XLA_FLAGS", "")
    if "--tf_xla_cpu_global_jit" not in xla_flags:
        os.environ["TF_XLA_FLAGS"] = (xla_flags + " --tf_xla_cpu_global_jit").strip()
    try:
        from tensorflow.python import pywrap_tfe

        pywrap_tfe.TF_SetTfXlaCpuGlobalJit(True)
    except (ImportError, AttributeError):  # another TF build: the environment variable remains
        pass


def make_session_config(use_xla=False, intra_op_parallelism_threads=0,
                        inter_op_parallelism_threads=0):
    """The session ConfigProto every script runs with.

    Args:
      use_xla: turn on XLA auto-clustering (global_jit_level ON_1); on CPU see
        `enable_xla_cpu_jit`, which this calls (in time only before TF creates its devices).
      intra_op_parallelism_threads: threads inside one op (0: one per core).
      inter_op_parallelism_threads: ops run concurrently (0: TF's default).

    Returns:
      tf.compat.v1.ConfigProto with allow_soft_placement.
    """
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=intra_op_parallelism_threads,
        inter_op_parallelism_threads=inter_op_parallelism_threads)
    if use_xla:
        config.graph_options.optimizer_options.global_jit_level = (
            tf.compat.v1.OptimizerOptions.ON_1)
        enable_xla_cpu_jit()
    return config


def session_config_from_flags(flag_values):
    """`make_session_config` for the parsed `--use_xla` (False where the script lacks it)."""
    return make_session_config(use_xla=getattr(flag_values, "use_xla", False))


def run_config_from_flags(flag_values, strategy=None):
    """The Estimator's `RunConfig` from the checkpoint, logging, seed, XLA and distribution
    flags every training script has; `strategy` trains (None: one device)."""
    from bert_tf import estimator

    return estimator.RunConfig(
        save_checkpoints_steps=flag_values.save_checkpoints_steps,
        keep_checkpoint_max=flag_values.keep_checkpoint_max,
        log_step_count_steps=flag_values.log_every_n_steps,
        save_summary_steps=flag_values.save_summary_steps,
        tf_random_seed=flag_values.random_seed, train_distribute=strategy,
        step_timeout_secs=getattr(flag_values, "step_timeout_secs", None),
        startup_timeout_secs=getattr(flag_values, "startup_timeout_secs", None),
        session_config=session_config_from_flags(flag_values))


def define_distribution_flags(strategies=None, shuffle_flag=True):
    """`--distribution_strategy` and `--num_gpus` (+ `--step_timeout_secs` and
    `--startup_timeout_secs` for multi_worker,
    `--shuffle_train_input` with `shuffle_flag`).

    See `bert_tf.distribute` and the README section "Scaling out". The TPU strategy uses the
    original TPU flags (`define_tpu_flags`); `--use_tpu` means `--distribution_strategy=tpu`.

    Args:
      strategies: the values the script supports (default: all of distribute.STRATEGY_NAMES).
      shuffle_flag: define `--shuffle_train_input` (scripts whose input pipeline reads it).
    """
    from bert_tf import distribute

    strategies = list(strategies or distribute.STRATEGY_NAMES)
    meanings = {"none": "one device", "mirrored": "this host's GPUs (or CPU devices) in sync",
                "multi_worker": "several hosts/processes described by TF_CONFIG",
                "tpu": "the TPU of --tpu_name"}
    flags.DEFINE_enum("distribution_strategy", "none", strategies,
                      ". ".join(f"{name}: {meanings[name]}" for name in strategies) +
                      ". --train_batch_size stays the global batch.")
    flags.DEFINE_integer("num_gpus", None,
                         "GPUs per host for mirrored / multi_worker (the first ones); default: "
                         "all. Without GPUs, mirrored uses the CPU.")
    if "multi_worker" in strategies:
        flags.DEFINE_float("step_timeout_secs", distribute.DEFAULT_STEP_TIMEOUT_SECS,
                           "multi_worker: seconds a training step may wait for the other "
                           "workers before this worker stops with an error (a worker died or "
                           "hangs); must exceed the longest pause, e.g. the chief writing a "
                           "checkpoint. 0: no limit.")
        flags.DEFINE_float("startup_timeout_secs", distribute.DEFAULT_STARTUP_TIMEOUT_SECS,
                           "multi_worker: seconds this worker waits for every task of "
                           "TF_CONFIG to start, and as long again for them to join the first "
                           "step, before it stops with an error naming the missing ones. 0: no "
                           "limit.")
    if shuffle_flag:
        flags.DEFINE_bool("shuffle_train_input", True,
                          "Shuffle the training records. False reads them in file order "
                          "(repeatable runs, e.g. to compare a distributed run with a "
                          "single-process one).")
