"""The TF1 session every run uses: its ConfigProto (threads, soft placement, XLA, grappler's
passes; the rewrites of a training session), sessions of a process that initializes its own
variables (`self_initializing_scaffold`, `SelfInitializingSessionCreator`), and sessions that
start from a checkpoint (`restoring_session_creator`), the released layout included.
"""

import os

import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.training import session_manager

from bert_tf.errors import BertTfError
from bert_tf.training import checkpoints


def enable_xla_cpu_jit():
    """Lets sessions with XLA auto-clustering compile clusters on the CPU as well, and makes
    the clusters of only the ops XLA fuses.

    Clusters hold TF's FUSIBLE set (element-wise ops, reductions, casts, ...: layer norm, GELU,
    dropout, softmax and the optimizer's arithmetic), so matmuls stay TF's kernels (oneDNN on
    CPU, on AMX in bf16): XLA's CPU dot is slower than oneDNN's in fp32 and has no AMX path in
    bf16 (docs/benchmarks.md). A clustering policy the user set in TF_XLA_FLAGS is kept.

    TF's `--tf_xla_cpu_global_jit` flag fixes the CPU device's clustering policy when TF first
    creates its devices (which listing devices, reading a checkpoint or an eager op may do), so
    this must run before that; scripts do it while parsing `--use_xla`. TF may have parsed
    TF_XLA_FLAGS at import already, so the parsed flag is also set directly where TF exposes it.
    """
    xla_flags = os.environ.get("TF_XLA_FLAGS", "").split()
    if "--tf_xla_cpu_global_jit" not in xla_flags:
        xla_flags.append("--tf_xla_cpu_global_jit")
    if not any(flag.startswith("--tf_xla_ops_to_cluster") for flag in xla_flags):
        xla_flags.append("--tf_xla_ops_to_cluster=FUSIBLE")
    os.environ["TF_XLA_FLAGS"] = " ".join(xla_flags)
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

    Grappler optimizes each new set of fetches a session runs (the step, and before it the
    init, readiness, restore and save runs), seconds per session for a short run. Its passes
    run once, not twice: the second round finds nothing left to rewrite on BERT's graphs (the
    same ops, numerically equal runs). The layout optimizer (convolutions) and the memory
    optimizer (GPU swapping) are off: they leave BERT's graphs unchanged and only cost time.

    Returns:
      tf.compat.v1.ConfigProto with allow_soft_placement.
    """
    config = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=intra_op_parallelism_threads,
        inter_op_parallelism_threads=inter_op_parallelism_threads)
    rewrites = config.graph_options.rewrite_options
    rewrites.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    rewrites.layout_optimizer = rewriter_config_pb2.RewriterConfig.OFF
    rewrites.memory_optimization = rewriter_config_pb2.RewriterConfig.NO_MEM_OPT
    if use_xla:
        config.graph_options.optimizer_options.global_jit_level = (
            tf.compat.v1.OptimizerOptions.ON_1)
        enable_xla_cpu_jit()
    return config


def training_session_config(config, graph):
    """The ConfigProto of a session that trains `graph`: `config`, without grappler's remapper
    when the graph multiplies in bfloat16.

    The remapper folds each MatMul + BiasAdd into one op that oneDNN runs as an inner product,
    and oneDNN's bfloat16 inner product on weights that change every run (a training step's
    casts) falls back to a gemm without AMX, while a plain bfloat16 MatMul, like every matmul
    of the backward pass, runs on its AMX kernels. Float32 training is as fast either way, and
    inference keeps the remapper (its GELU fusions).

    Args:
      config: the run's ConfigProto (`session_config`).
      graph: the training graph, built.

    Returns:
      `config`, or a copy of it with `graph_options.rewrite_options.remapping` OFF.
    """
    if not any(op.type == "MatMul" and op.get_attr("T") == tf.bfloat16
               for op in graph.get_operations()):
        return config
    training = tf.compat.v1.ConfigProto()
    training.CopyFrom(config)
    training.graph_options.rewrite_options.remapping = rewriter_config_pb2.RewriterConfig.OFF
    return training


def session_dataset(dataset):
    """`dataset` as a session iterates it: without tf.data's autotuning model thread.

    That thread sleeps between optimization passes for periods that double up to a minute,
    and closing a session destroys the iterator only once the thread wakes, so a run's close
    could wait for up to a minute. Without the model, AUTOTUNE parallelism is the runner's
    thread count and prefetch buffers still grow on their own, which is all a BERT input
    pipeline (far cheaper than its step) needs. An explicit `options.autotune.enabled` in the
    input_fn's dataset is kept.
    """
    if dataset.options().autotune.enabled is not None:
        return dataset
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def self_initializing_scaffold():
    """A Scaffold for `SelfInitializingSessionCreator`: without the two readiness reports a
    default Scaffold builds (one `VarIsInitializedOp` per variable each, 8 % of a small model's
    training graph), which that creator never runs. Its saver, init and summary ops are the
    default ones."""
    nothing_uninitialized = tf.constant([], tf.string, name="no_uninitialized_variables")
    return tf.compat.v1.train.Scaffold(ready_op=nothing_uninitialized,
                                       ready_for_local_init_op=nothing_uninitialized)


class SelfInitializingSessionCreator(tf.compat.v1.train.ChiefSessionCreator):
    """A ChiefSessionCreator for a process that initializes or restores every variable of its
    graph itself (training in one process, evaluation, prediction): its session skips the
    SessionManager's readiness checks.

    Those checks list the variables no process has initialized yet, which is what a
    non-chief worker of a cluster waits on. Here the session's own init op or restore has just
    set every variable, and each check is a session run of its own (a new set of fetches, so
    a pruned and optimized graph). A variable that the restore does not cover still fails the
    run: the Saver raises on a checkpoint that lacks it.
    """

    def _get_session_manager(self):
        # ChiefSessionCreator's own, with ready_op and ready_for_local_init_op left None.
        if self._session_manager is None:
            self._session_manager = session_manager.SessionManager(
                local_init_op=self._scaffold.local_init_op,
                local_init_feed_dict=self._scaffold.local_init_feed_dict,
                graph=tf.compat.v1.get_default_graph())
        return self._session_manager


def checkpoint_restorer(checkpoint_path, action):
    """A function of a session that restores every variable of the default graph from
    `checkpoint_path`; one in the released layout (no global_step, e.g. --export_release_dir or
    an --init_checkpoint) restores at step 0. Built before the graph is finalized.

    Raises:
      BertTfError: naming the checkpoint when it lacks a variable of the model or has one of
        another shape (`action`, e.g. "export", says what could not be done).
    """
    reader = checkpoints.reader_of(checkpoint_path)
    variables = tf.compat.v1.global_variables()
    global_step = tf.compat.v1.train.get_global_step()
    missing = [v.op.name for v in variables
               if not reader.has_tensor(v.op.name) and v is not global_step]
    if missing:
        raise BertTfError(
            f"Cannot {action}: checkpoint '{checkpoint_path}' has no {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''} ({len(missing)} variables of the model); "
            f"{action} a checkpoint trained for this task.")
    # A resource variable restores a tensor of another shape without a word.
    stored = reader.get_variable_to_shape_map()
    for v in variables:
        if v is not global_step and list(stored[v.op.name]) != v.shape.as_list():
            raise BertTfError(
                f"Cannot {action}: checkpoint '{checkpoint_path}': variable '{v.op.name}' has "
                f"shape {list(stored[v.op.name])} but the model built from the BERT config has "
                f"shape {v.shape.as_list()}; use the bert_config.json that came with the "
                "checkpoint.")
    step_saved = reader.has_tensor(global_step.op.name)
    saver = tf.compat.v1.train.Saver(
        variables if step_saved else [v for v in variables if v is not global_step],
        sharded=True)

    def restore(sess):
        if not step_saved:
            sess.run(global_step.initializer)
        saver.restore(sess, checkpoint_path)

    return restore


def restoring_session_creator(scaffold, checkpoint_path, session_config, action):
    """A `SelfInitializingSessionCreator` whose session holds `checkpoint_path`'s weights, also
    when the checkpoint is in the released layout (no global_step; see `checkpoint_restorer`)."""
    if checkpoint_path is None or checkpoints.reader_of(checkpoint_path).has_tensor(
            "global_step"):
        return SelfInitializingSessionCreator(
            scaffold=scaffold, checkpoint_filename_with_path=checkpoint_path,
            config=session_config)
    # Initialized, then restored by name: the init op runs before init_fn.
    restore = checkpoint_restorer(checkpoint_path, action)
    scaffold = tf.compat.v1.train.Scaffold(init_fn=lambda _, sess: restore(sess),
                                           copy_from_scaffold=scaffold)
    return SelfInitializingSessionCreator(scaffold=scaffold, config=session_config)
