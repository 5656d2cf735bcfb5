"""The graph-mode building blocks every encoder part uses: variables, dense layers, layer
norm, activations and shapes.

Variables come from `tf.compat.v1.get_variable` in the Google checkpoint layout; activations
are 2-D [M, width] wherever a dense layer reads them, so each is a plain MatMul + BiasAdd.
"""

import contextlib
import math

import tensorflow as tf

from bert_tf.errors import BertTfError

tf1 = tf.compat.v1

# The names `get_activation` knows (the `hidden_act` values of a BERT config).
ACTIVATIONS = ("gelu", "gelu_new", "gelu_tanh", "relu", "silu", "swish", "tanh", "linear")


def gelu(x):
    """Gaussian Error Linear Unit, exact form: x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))."""
    return 0.5 * x * (1.0 + tf.math.erf(x / tf.cast(math.sqrt(2.0), x.dtype)))


def gelu_tanh(x):
    """GELU, tanh approximation (`gelu_new` in Hugging Face, the original `gelu`)."""
    cdf = 0.5 * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * tf.pow(x, 3))))
    return x * cdf


def get_activation(activation_string):
    """Maps an activation name to a function.

    Args:
      activation_string: "gelu" (exact erf form), "gelu_new" / "gelu_tanh" (tanh
        approximation), "relu", "silu" / "swish" (x * sigmoid(x)), "tanh",
        "linear"; None or "" mean linear. A
        non-string is returned unchanged (assumed to be a function already).

    Returns:
      A function, or None for linear.

    Raises:
      ValueError: for an unknown name.
    """
    if not isinstance(activation_string, str):
        return activation_string
    if not activation_string:
        return None
    act = activation_string.lower()
    if act == "linear":
        return None
    if act == "relu":
        return tf.nn.relu
    if act == "gelu":
        return gelu
    if act in ("gelu_new", "gelu_tanh"):
        return gelu_tanh
    if act in ("silu", "swish"):
        return tf.nn.silu  # x * sigmoid(x)
    if act == "tanh":
        return tf.tanh
    raise ValueError(f"Unsupported activation: {act}; use one of {', '.join(ACTIVATIONS)}.")


def create_initializer(initializer_range=0.02):
    """A truncated normal initializer with stddev `initializer_range`."""
    return tf1.truncated_normal_initializer(stddev=initializer_range)


# How many `variables_owned_by_caller` blocks are open (on any thread: a distribution
# strategy runs replicas in threads of their own).
_owned_variable_blocks = 0


@contextlib.contextmanager
def variables_owned_by_caller():
    """A block in which the builders may run in TensorFlow 2 code (eagerly or in a `tf.function`).

    For `bert_tf.tf2`, whose variable creator hands every `get_variable` the variable its
    module created once; outside such a block they would make new random variables silently.
    """
    global _owned_variable_blocks
    _owned_variable_blocks += 1
    try:
        yield
    finally:
        _owned_variable_blocks -= 1


def get_variable(name, *args, **kwargs):
    """`tf.compat.v1.get_variable`, refused in TensorFlow 2 code outside a `bert_tf.tf2` module.

    In a graph (`tf.compat.v1`, the Estimator) it is `get_variable` itself. Eagerly, or in a
    `tf.function` of an eager program, `get_variable` makes a fresh random variable on every
    call, which would silently run an untrained model.

    Raises:
      BertTfError: in eager code outside `variables_owned_by_caller`.
    """
    if _owned_variable_blocks == 0 and tf1.executing_eagerly_outside_functions():
        raise BertTfError(
            f"bert_tf.modeling builds graph-mode models and would make a new random variable "
            f"'{name}' on every eager call; in TensorFlow 2 code use bert_tf.tf2.BertEncoder / "
            "TransformerEncoder (or bert_tf.keras.BertEncoderLayer), or build inside "
            "`with tf.Graph().as_default():`.")
    return tf1.get_variable(name, *args, **kwargs)


def layer_norm(input_tensor, name=None, epsilon=1e-12):
    """Layer normalization over the last axis, variables `<name>/gamma` and `<name>/beta`.

    Statistics are computed in float32 whatever the input dtype (bf16/fp16
    variance underflows); the result is returned in the input dtype.

    Args:
      input_tensor: Tensor [..., H].
      name: variable scope, default "LayerNorm".
      epsilon: added to the variance.

    Returns:
      Tensor [..., H], same dtype as the input.
    """
    with tf1.variable_scope(name, default_name="LayerNorm"):
        dtype = input_tensor.dtype
        x = tf.cast(input_tensor, tf.float32)
        width = x.shape[-1]
        # Trainable=True variables are cast on read under mixed precision; ask for
        # float32 explicitly so the norm runs in float32.
        beta = get_variable("beta", [width], dtype=tf.float32,
                            initializer=tf1.zeros_initializer())
        gamma = get_variable("gamma", [width], dtype=tf.float32,
                             initializer=tf1.ones_initializer())
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        inv = tf.math.rsqrt(variance + epsilon) * gamma
        output = x * inv + (beta - mean * inv)
        return tf.cast(output, dtype)


def dense_layer(input_tensor, units, activation=None, kernel_initializer=None, name="dense"):
    """A fully connected layer: activation(x @ kernel + bias).

    Variables `<name>/kernel` [in, units] and `<name>/bias` [units], in the
    Google checkpoint layout.

    Args:
      input_tensor: Tensor [M, in] (or [..., in]: flattened to 2-D and back).
      units: output width.
      activation: function or None.
      kernel_initializer: initializer, default `create_initializer()`.
      name: variable scope.

    Returns:
      Tensor [M, units] (or [..., units]) in the input dtype.
    """
    shape = get_shape_list(input_tensor, name=name + "/input")
    x = input_tensor if len(shape) == 2 else tf.reshape(input_tensor, [-1, shape[-1]])
    with tf1.variable_scope(name):
        kernel = get_variable("kernel", [shape[-1], units], dtype=input_tensor.dtype,
                              initializer=kernel_initializer or create_initializer())
        bias = get_variable("bias", [units], dtype=input_tensor.dtype,
                            initializer=tf1.zeros_initializer())
        output = tf.nn.bias_add(tf.matmul(x, kernel), bias)
        if activation is not None:
            output = activation(output)
    if len(shape) != 2:
        output = tf.reshape(output, shape[:-1] + [units])
    return output


def gather_rows(table, indices):
    """`tf.gather(table, indices)` of a variable's value (a plain Gather, not ResourceGather).

    A ResourceGather switches its variable into TF's copy-on-read mode for the rest of the
    session: from then on every read (the optimizer's weight decay, the checkpoint saver)
    copies the whole table and every update first copies it too. For BERT's word embeddings
    that is 2-3 extra passes over [V, H] floats per training step. Reading the value first
    gathers the same rows and gives the same IndexedSlices gradient.

    Args:
      table: [V, ...] variable (or tensor).
      indices: int Tensor of any shape, values in [0, V).

    Returns:
      Tensor indices.shape + table.shape[1:].
    """
    return tf.gather(tf.convert_to_tensor(table), indices)


def get_shape_list(tensor, expected_rank=None, name=None):
    """Returns a list of the tensor's dimensions, static ints where known.

    Args:
      tensor: a Tensor.
      expected_rank: optional int or list of ints; raises if the rank differs.
      name: name of the tensor for the error message.

    Returns:
      A list with a Python int for each static dimension and a scalar int32
      Tensor for each dynamic one.
    """
    if name is None:
        name = getattr(tensor, "name", "tensor")
    if expected_rank is not None:
        assert_rank(tensor, expected_rank, name)
    shape = tensor.shape.as_list()
    non_static_indexes = [i for i, dim in enumerate(shape) if dim is None]
    if not non_static_indexes:
        return shape
    dyn_shape = tf.shape(tensor)
    for index in non_static_indexes:
        shape[index] = dyn_shape[index]
    return shape


def reshape_to_matrix(input_tensor):
    """Reshapes a Tensor of rank >= 2 to a matrix [prod(leading dims), width]."""
    ndims = input_tensor.shape.ndims
    if ndims < 2:
        raise ValueError(f"Input tensor must have at least rank 2. Shape = {input_tensor.shape}")
    if ndims == 2:
        return input_tensor
    width = input_tensor.shape[-1]
    return tf.reshape(input_tensor, [-1, width])


def reshape_from_matrix(output_tensor, orig_shape_list):
    """Reshapes a matrix [M, width] back to `orig_shape_list[:-1] + [width]`."""
    if len(orig_shape_list) == 2:
        return output_tensor
    output_shape = get_shape_list(output_tensor)
    return tf.reshape(output_tensor, orig_shape_list[0:-1] + [output_shape[-1]])


def assert_rank(tensor, expected_rank, name=None):
    """Raises ValueError naming the tensor if its rank is not `expected_rank`.

    Args:
      tensor: a Tensor.
      expected_rank: int or list of ints.
      name: tensor name for the message.
    """
    if name is None:
        name = getattr(tensor, "name", "tensor")
    expected_rank_dict = {}
    if isinstance(expected_rank, int):
        expected_rank_dict[expected_rank] = True
    else:
        for x in expected_rank:
            expected_rank_dict[x] = True
    actual_rank = tensor.shape.ndims
    if actual_rank not in expected_rank_dict:
        scope_name = tf1.get_variable_scope().name
        raise ValueError(
            f"For the tensor `{name}` in scope `{scope_name}`, the actual rank `{actual_rank}` "
            f"(shape = {tensor.shape}) is not equal to the expected rank `{expected_rank}`")


def scope_compute_dtype():
    """The dtype variables are read in: the scope's compute dtype under mixed precision.

    The embedding table has no input tensor to take its dtype from, so it asks
    the enclosing `precision.compute_dtype_scope` via a marker on the getter.
    """
    scope = tf1.get_variable_scope()
    getter = scope.custom_getter
    return getattr(getter, "compute_dtype", tf.float32) if getter else tf.float32


def check_seq_length(seq_length, max_position_embeddings):
    """Checks S <= max_position_embeddings: raises now if S is static, else returns assert ops.

    Raises:
      BertTfError: if S is a Python int larger than `max_position_embeddings`.
    """
    if isinstance(seq_length, int):
        if seq_length > max_position_embeddings:
            raise BertTfError(
                f"sequence length {seq_length} is longer than max_position_embeddings "
                f"({max_position_embeddings}) of the BERT config; use --max_seq_length of at "
                f"most {max_position_embeddings}.")
        return []
    return [tf.debugging.assert_less_equal(
        seq_length, max_position_embeddings,
        message="sequence longer than max_position_embeddings of the BERT config")]
