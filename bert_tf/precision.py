"""Compute precision: fp32 variables, fp32 / bf16 / fp16 compute.

Variables are always created and stored in float32 (so checkpoints are
interchangeable between precisions). Under a reduced compute dtype, the
variable scope's custom getter hands each trainable variable to the graph
already cast, so every matmul runs in the compute dtype while the optimizer
updates the float32 master copy.

A graph that never updates its weights (evaluation, prediction, an export) can
read them from copies cast once instead (`weights_cast_once`): a step then does
not cast the model's weights again (a quarter of a BERT-base bf16 inference
step's kernel time on CPU went to those casts).
"""

import contextlib

import tensorflow as tf

from bert_tf.errors import BertTfError

_DTYPES = {"fp32": tf.float32, "bf16": tf.bfloat16, "fp16": tf.float16}


def compute_dtype_from_name(precision):
    """Maps a `--precision` value ("fp32", "bf16", "fp16") to a `tf.DType`."""
    try:
        return _DTYPES[precision]
    except KeyError:
        raise BertTfError(
            f"--precision: unknown value '{precision}'; use one of {', '.join(_DTYPES)}."
        ) from None


# Open `weights_cast_once` blocks (graph construction is single-threaded).
_cast_once_blocks = 0


@contextlib.contextmanager
def weights_cast_once():
    """Within: reduced-precision reads of trainable variables come from cast copies.

    Each float32 variable `<name>` read in bf16 / fp16 gets a local, non-trainable
    variable `<name>/<dtype>` holding its cast, which the local-variable initializer
    fills; the graph reads that copy on every step instead of casting the variable.
    Only for graphs that do not change their weights, and the local-variable
    initializer must run after the weights are restored (as `tf.compat.v1.train.
    Scaffold`'s `local_init_op` and a SavedModel's main op do). Copies are not saved
    in checkpoints. float32 graphs, and graphs built for several replicas of a
    distribution strategy, are unchanged.
    """
    global _cast_once_blocks
    _cast_once_blocks += 1
    try:
        yield
    finally:
        _cast_once_blocks -= 1


def float32_variable_storage_getter(getter, name, *args, **kwargs):
    """A variable custom getter: store trainable variables in fp32, read in the asked dtype
    (from a copy cast once, inside `weights_cast_once`)."""
    dtype = kwargs.get("dtype")
    trainable = kwargs.get("trainable", True)
    if trainable:
        kwargs["dtype"] = tf.float32
    variable = getter(name, *args, **kwargs)
    if not trainable or dtype is None:
        return variable
    return read_as(variable, dtype)


def read_as(variable, dtype):
    """`variable` (float32) read as `dtype`: itself for float32, else a cast on every step, or
    inside `weights_cast_once` the copy cast once (`casts_every_step` says which)."""
    if dtype == tf.float32:
        return variable
    if casts_every_step():
        return tf.cast(variable, dtype)
    return _cast_copy(variable, dtype)


def casts_every_step():
    """Whether reduced-precision reads of a variable built here are a cast on every step
    (training graphs) rather than a copy cast once (`weights_cast_once`)."""
    # Under a strategy of several replicas the copies would be mirrored variables too: those
    # graphs cast on every step, as training does.
    return not _cast_once_blocks or (tf.distribute.has_strategy() and
                                     tf.distribute.get_strategy().num_replicas_in_sync > 1)


def _cast_copy(variable, dtype):
    """The local variable `<variable>/<dtype>` holding `variable` cast to `dtype`, one per
    variable and dtype in a graph (a tied table read twice shares it)."""
    name = f"{variable.op.name}/{dtype.name}"
    for copy in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES):
        if copy.op.name == name:
            return copy
    # Outside the variable store, so scope-wide `init_from_checkpoint` maps ("bert/") and
    # `get_variable` reuse never see it.
    with tf.compat.v1.name_scope(f"{variable.op.name}/"):
        return tf.compat.v1.Variable(
            tf.cast(variable, dtype), name=dtype.name, trainable=False,
            collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])


@contextlib.contextmanager
def compute_dtype_scope(compute_dtype, name_or_scope=None, default_name=None):
    """A variable scope in which trainable fp32 variables are read as `compute_dtype`.

    For float32 this is a plain variable scope, so fp32 graphs are unchanged.
    """
    getter = None
    if compute_dtype != tf.float32:
        def getter(*args, **kwargs):
            return float32_variable_storage_getter(*args, **kwargs)
        # Read by builders that have no input tensor to take a dtype from (embeddings).
        getter.compute_dtype = compute_dtype
    if name_or_scope is None and default_name is None:
        # Re-enter the current scope: only the getter changes, not the variable names.
        name_or_scope = tf.compat.v1.get_variable_scope()
    with tf.compat.v1.variable_scope(name_or_scope, default_name=default_name,
                                     custom_getter=getter) as scope:
        if getter is not None:
            # Under an outer custom getter (bert_tf.tf2's) the scope holds a wrapper of both.
            scope.custom_getter.compute_dtype = compute_dtype
        yield scope
