"""Dropout whose masks come from stateless Philox draws, and the keys that make them
reproducible: the same masks when a layer is built twice (recomputation) or when XLA compiles
the step (`portable_seed`)."""

import contextlib
import threading

import tensorflow as tf

from bert_tf.encoder import ops

tf1 = tf.compat.v1


# Dropout draws one 16-bit number per element: half of the Philox work of a float32 draw,
# which dominates the cost of dropout on the [B, N, F, T] attention probabilities.
_DROPOUT_LEVELS = 1 << 16


def dropout(input_tensor, dropout_prob):
    """Dropout with drop probability `dropout_prob` (not keep probability); no-op at 0.

    Each element is zeroed with probability p = round(dropout_prob * 65536) / 65536 (0.1 ->
    0.100006) and the others are scaled by 1 / (1 - p), so in float32 the expectation is the
    input (a bfloat16 scale is rounded, as in `tf.nn.dropout`). The mask comes from a
    stateless Philox draw keyed by a per-op seed that a stateful op draws on every run, so a
    graph-level seed (`tf.compat.v1.set_random_seed`) makes the sequence of masks
    reproducible, as with `tf.nn.dropout`.

    Args:
      input_tensor: float Tensor of any shape.
      dropout_prob: float in [0, 1), or None.

    Returns:
      Tensor of the same shape and dtype.
    """
    kept, scale = dropout_unscaled(input_tensor, dropout_prob)
    return kept if scale == 1.0 else kept * tf.constant(scale, kept.dtype)


def dropout_unscaled(input_tensor, dropout_prob):
    """`dropout` without its rescaling: (kept, scale), where dropout = kept * scale.

    For a caller that can apply `scale` to a smaller tensor downstream (attention scales
    the [B, N, F, D] context instead of the [B, N, F, T] probabilities); the gradient then
    needs one pass over the big tensor instead of two.

    Returns:
      (Tensor like `input_tensor` with the dropped elements zeroed, Python float scale);
      (input_tensor, 1.0) when `dropout_prob` is None or 0.

    Raises:
      ValueError: if `dropout_prob` is outside [0, 1).
    """
    if dropout_prob is None or dropout_prob == 0.0:
        return input_tensor, 1.0
    if not 0.0 <= dropout_prob < 1.0:
        raise ValueError(f"dropout_prob must be in [0, 1), got {dropout_prob}.")
    # Below 1/131072 nothing is dropped; above 1 - 1/131072 one value in 65536 is kept.
    threshold = min(int(round(dropout_prob * _DROPOUT_LEVELS)), _DROPOUT_LEVELS - 1)
    if threshold == 0:
        return input_tensor, 1.0
    with tf1.name_scope("dropout"):
        keep = random_uint16(tf.shape(input_tensor), input_tensor.shape) >= threshold
        kept = tf.where(keep, input_tensor, tf.zeros([], input_tensor.dtype))
    return kept, _DROPOUT_LEVELS / (_DROPOUT_LEVELS - threshold)


def random_uint16(shape, static_shape=None):
    """Uniform random uint16 Tensor of `shape`, new on every run.

    Args:
      shape: int32 1-D Tensor (the dynamic shape).
      static_shape: optional `tf.TensorShape` of the result, to keep static dimensions.

    Returns:
      uint16 Tensor of `shape`: two values from every uint32 of a stateless Philox draw,
      keyed by a seed that a stateful op draws on every run (and that follows the
      graph-level seed), or inside `dropout_key_scope` by that scope's key.
    """
    seed = _next_dropout_seed()
    size = tf.reduce_prod(shape)
    bits = tf.random.stateless_uniform([(size + 1) // 2], seed, dtype=tf.uint32, minval=None,
                                       maxval=None)
    # A prefix slice along dimension 0 aliases the buffer: no copy for an even or odd size.
    values = tf.reshape(tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size], shape)
    if static_shape is not None:
        values.set_shape(static_shape)
    return values


# Per thread (MirroredStrategy builds each replica in its own thread): the innermost
# `dropout_key_scope`'s [key, number of draws so far], or nothing.
_dropout_keys = threading.local()


@contextlib.contextmanager
def dropout_key_scope(key):
    """Makes the random draws built inside stateless functions of `key` and their order.

    Building the same ops twice inside two scopes of one `key` Tensor gives the same masks
    on every run: what recomputing a layer in the backward pass needs (`recompute_layer`).

    Args:
      key: int32 Tensor [2], e.g. a row of `random_keys`.
    """
    stack = getattr(_dropout_keys, "stack", None)
    if stack is None:
        stack = _dropout_keys.stack = []
    stack.append([portable_seed(key), 0])
    try:
        yield
    finally:
        stack.pop()


def random_keys(count):
    """int32 Tensor [count, 2]: `count` keys for `dropout_key_scope`, new on every run.

    One stateful op, so the graph-level seed makes them reproducible; inside a
    `dropout_key_scope` a stateless draw from its key, so the keys are a function of it."""
    if not getattr(_dropout_keys, "stack", None):
        return tf1.random.uniform([count, 2], 0, tf.int32.max, dtype=tf.int32)
    return tf.random.stateless_uniform([count, 2], _next_dropout_seed(), 0, tf.int32.max,
                                       dtype=tf.int32)


def _next_dropout_seed():
    """int32 [2] seed of the next random draw: from the innermost `dropout_key_scope`
    (its key folded with the draw's number), else a stateful op's draw."""
    stack = getattr(_dropout_keys, "stack", None)
    if not stack:
        return tf1.random.uniform([2], 0, tf.int32.max, dtype=tf.int32)
    entry = stack[-1]
    entry[1] += 1
    return portable_seed(tf.random.experimental.stateless_fold_in(entry[0], entry[1]))


def portable_seed(seed):
    """`seed` (int32 [2]) with its sign bits cleared: TensorFlow's kernels and XLA turn a
    negative seed into different Philox keys, a non-negative one into the same, so the masks
    of a step do not depend on whether XLA compiles it."""
    return tf.bitwise.bitwise_and(seed, tf.int32.max)


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None, epsilon=1e-12):
    """Layer norm (variance + `epsilon`) followed by dropout."""
    return dropout(ops.layer_norm(input_tensor, name, epsilon), dropout_prob)
