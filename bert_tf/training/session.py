"""The TF1 session every run uses: its ConfigProto (threads, soft placement, XLA) and the
`RunConfig` a script's options make.
"""

import os

import tensorflow as tf


def enable_xla_cpu_jit():
    """Lets sessions with XLA auto-clustering compile clusters on the CPU as well.

    TF's `--tf_xla_cpu_global_jit` flag fixes the CPU device's clustering policy when TF first
    creates its devices (which listing devices, reading a checkpoint or an eager op may do), so
    this must run before that; scripts do it while parsing `--use_xla`. TF may have parsed
    TF_XLA_FLAGS at import already, so the parsed flag is also set directly where TF exposes it.
    """
    xla_flags = os.environ.get("TF_XLA_FLAGS", "")
    if "--tf_xla_cpu_global_jit" not in xla_flags:
        os.environ["TF_XLA_FLAGS"] = (xla_flags + " --tf_xla_cpu_global_jit").strip()
    try:
        from tensorflow.python import pywrap_tfe

        pywrap_tfe.TF_SetTfXlaCpuGlobalJit(True)
    except (ImportError, AttributeError):  # another TF build: the environment variable remains
        pass


def session_config(use_xla=False, intra_op_parallelism_threads=0,
                   inter_op_parallelism_threads=0):
    """The session ConfigProto every run uses.

    Args:
      use_xla: turn on XLA auto-clustering (global_jit_level ON_1); on CPU see
        `enable_xla_cpu_jit`, which this calls (in time only before TF creates its devices).
      intra_op_parallelism_threads: threads inside one op (0: one per core).
      inter_op_parallelism_threads: ops run concurrently (0: TF's default).

    Returns:
      tf.compat.v1.ConfigProto with allow_soft_placement.
    """
    config = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=intra_op_parallelism_threads,
        inter_op_parallelism_threads=inter_op_parallelism_threads)
    if use_xla:
        config.graph_options.optimizer_options.global_jit_level = (
            tf.compat.v1.OptimizerOptions.ON_1)
        enable_xla_cpu_jit()
    return config
