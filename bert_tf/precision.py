"""Compute precision: fp32 variables, fp32 / bf16 / fp16 compute.

Variables are always created and stored in float32 (so checkpoints are
interchangeable between precisions). Under a reduced compute dtype, the
variable scope's custom getter hands each trainable variable to the graph
already cast, so every matmul runs in the compute dtype while the optimizer
updates the float32 master copy.
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


def float32_variable_storage_getter(getter, name, *args, **kwargs):
    """A variable custom getter: store trainable variables in fp32, read in the asked dtype."""
    dtype = kwargs.get("dtype")
    trainable = kwargs.get("trainable", True)
    if trainable:
        kwargs["dtype"] = tf.float32
    variable = getter(name, *args, **kwargs)
    if trainable and dtype is not None and dtype != tf.float32:
        variable = tf.cast(variable, dtype)
    return variable


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
