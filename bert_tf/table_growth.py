"""Loading a checkpoint into a model whose tables are longer than the checkpoint's.

A config may ask for more positions (`max_position_embeddings`, for longer inputs) or more
WordPiece ids (`vocab_size`, for a grown vocabulary) than the checkpoint was trained with. The
learnt rows are then copied unchanged into the first rows of the bigger table and the new rows
start from values chosen by `GrowthOptions`:

  table                               key        new rows
  .../embeddings/position_embeddings  position   "copy": the learnt rows again, block after
                                                 block (Longformer); "interpolate": the learnt
                                                 table resampled at i * (n - 1) / (N - 1),
                                                 linear between neighbouring rows
  .../distance_embedding [2P-1, D]    distance   relative positions have no position table:
                                                 distances past the learnt ones reuse the
                                                 furthest learnt one (clipping)
  .../embeddings/word_embeddings      token      "mean": the mean learnt row; "random": the
  cls/predictions/output_bias                    variable's own initializer

The bigger table is computed in the graph from the checkpoint's tensor when the variable is
initialized (as `tf.compat.v1.train.init_from_checkpoint` restores), so nothing is read
before the session starts.
"""

import dataclasses

import tensorflow as tf
from tensorflow.python.training.saving import saveable_object_util

from bert_tf.errors import BertTfError

tf1 = tf.compat.v1

POSITION_INITS = ("copy", "interpolate")
TOKEN_INITS = ("mean", "random")

# Variable-name endings of the tables that may grow, and what their rows are.
_GROWABLE = (("embeddings/position_embeddings", "position"),
             ("distance_embedding", "distance"),
             ("embeddings/word_embeddings", "token"),
             ("predictions/output_bias", "token"))

# What to change when a table cannot grow, by kind.
_SHRINK_FIX = {
    "position": "max_position_embeddings (--max_position_embeddings) of at least",
    "distance": "max_position_embeddings (--max_position_embeddings) giving at least",
    "token": "vocab_size of at least (a vocabulary only grows: scripts/extend_vocab.py)",
}


@dataclasses.dataclass(frozen=True)
class GrowthOptions:
    """How the new rows of a grown table start."""

    position_embedding_init: str = "copy"  # One of POSITION_INITS.
    new_token_init: str = "mean"  # One of TOKEN_INITS.

    def __post_init__(self):
        if self.position_embedding_init not in POSITION_INITS:
            raise BertTfError(f"--position_embedding_init={self.position_embedding_init}: use "
                              f"one of {', '.join(POSITION_INITS)}.")
        if self.new_token_init not in TOKEN_INITS:
            raise BertTfError(f"--new_token_init={self.new_token_init}: use one of "
                              f"{', '.join(TOKEN_INITS)}.")


def table_kind(name):
    """"position", "distance" or "token" for a growable table's variable name, else None."""
    for ending, kind in _GROWABLE:
        if name.endswith(ending):
            return kind
    return None


def check_growth(name, checkpoint_shape, model_shape, init_checkpoint):
    """Whether checkpoint variable `name` loads by growing: True if the model's table has more
    rows and otherwise the same shape, False if the shapes are equal.

    Raises:
      BertTfError: for any other shape difference, naming the variable, both shapes and the fix.
    """
    checkpoint_shape, model_shape = list(checkpoint_shape), list(model_shape)
    if checkpoint_shape == model_shape:
        return False
    kind = table_kind(name)
    same_width = checkpoint_shape[1:] == model_shape[1:] and model_shape
    if kind is not None and same_width and model_shape[0] > checkpoint_shape[0]:
        return True
    if kind is not None and same_width:
        raise BertTfError(
            f"checkpoint '{init_checkpoint}': table '{name}' has {checkpoint_shape[0]} rows but "
            f"the BERT config gives it {model_shape[0]}; a table cannot shrink: use a "
            f"{_SHRINK_FIX[kind]} {checkpoint_shape[0]} rows.")
    raise shape_error(name, checkpoint_shape, model_shape, init_checkpoint)


def shape_error(name, checkpoint_shape, model_shape, init_checkpoint):
    """The `BertTfError` of a checkpoint variable whose shape is not the model's."""
    return BertTfError(
        f"checkpoint '{init_checkpoint}': variable '{name}' has shape {list(checkpoint_shape)} "
        f"but the model built from the BERT config has shape {list(model_shape)}; use the "
        "bert_config.json that came with the checkpoint.")


def grown_rows(table, rows, how, initial_value=None):
    """`table` [n, ...] made `rows` long, rows 0..n-1 unchanged.

    Args:
      table: Tensor [n, ...] with a static n.
      rows: N > n.
      how: "copy", "interpolate", "mean", "random" (new rows from `initial_value`) or
        "distance" (a [2P-1, D] relative distance table re-centred, the outer distances
        repeating the furthest learnt one; N odd).
      initial_value: Tensor [N, ...], the variable's own initial value, for "random".

    Returns:
      Tensor [N, ...].
    """
    n = table.shape[0]
    if how == "distance":
        # Row P-1+d holds distance d: the old centre moves from (n-1)/2 to (N-1)/2.
        old_half, new_half = (n - 1) // 2, (rows - 1) // 2
        distances = tf.clip_by_value(tf.range(-new_half, new_half + 1), -old_half, old_half)
        return tf.gather(table, distances + old_half)
    if how == "copy":
        blocks = -(-rows // n)
        return tf.tile(table, [blocks] + [1] * (table.shape.rank - 1))[:rows]
    if how == "interpolate":
        where = tf.range(n, rows, dtype=tf.float64) * ((n - 1) / (rows - 1))
        below = tf.cast(tf.floor(where), tf.int32)
        above = tf.minimum(below + 1, n - 1)
        weight = tf.cast(where - tf.floor(where), table.dtype)
        weight = tf.reshape(weight, [-1] + [1] * (table.shape.rank - 1))
        new = tf.gather(table, below) * (1 - weight) + tf.gather(table, above) * weight
    elif how == "mean":
        # In float64: the mean row rounded once, whatever the order TF sums in.
        mean = tf.cast(tf.reduce_mean(tf.cast(table, tf.float64), axis=0, keepdims=True),
                       table.dtype)
        new = tf.broadcast_to(mean, [rows - n] + table.shape.as_list()[1:])
    elif how == "random":
        new = tf.convert_to_tensor(initial_value)[n:]
    else:
        raise ValueError(f"unknown growth {how!r}")
    return tf.concat([table, new], axis=0)


def _growth_of(kind, options):
    return {"position": options.position_embedding_init, "distance": "distance",
            "token": options.new_token_init}[kind]


def init_grown_tables(init_checkpoint, grown, options):
    """Makes each variable of `grown` start from its checkpoint table, grown.

    Args:
      init_checkpoint: checkpoint prefix.
      grown: list of (checkpoint name, variable, checkpoint shape).
      options: `GrowthOptions`.

    Returns:
      One line saying what was extended, or None if `grown` is empty.
    """
    if not grown:
        return None

    def set_initializers(_=None):
        for name, variable, shape in grown:
            how = _growth_of(table_kind(name), options)
            initial_value = variable.initial_value if how == "random" else None
            # RestoreV2 runs on the CPU only; so does the initializer, once.
            with tf.device("/cpu:0"):
                table = tf.raw_ops.RestoreV2(prefix=init_checkpoint, tensor_names=[name],
                                             shape_and_slices=[""],
                                             dtypes=[variable.dtype.base_dtype])[0]
                table.set_shape(shape)
                value = grown_rows(table, variable.shape[0], how, initial_value)
                saveables = [saveable for op_name, op in
                             saveable_object_util.op_list_to_dict([variable]).items()
                             for saveable in
                             saveable_object_util.saveable_objects_for_op(op, op_name)]
            variable._initializer_op = saveables[0].restore([value], restored_shapes=None)
            variable._initial_value = value

    # As tf.compat.v1.train.init_from_checkpoint: mirrored variables are set once, for all.
    if tf.distribute.in_cross_replica_context():
        set_initializers()
    else:
        tf.distribute.get_replica_context().merge_call(set_initializers)
    parts = [f"{name} {shape[0]} -> {variable.shape[0]} rows "
             f"({_describe(_growth_of(table_kind(name), options))})"
             for name, variable, shape in grown]
    return (f"Extended tables of {init_checkpoint}, learnt rows kept: {'; '.join(parts)}.")


def _describe(how):
    return {"copy": "copy: the learnt rows repeated",
            "interpolate": "interpolate: the learnt rows resampled",
            "distance": "relative positions need no position table; distances past the "
                        "learnt ones reuse the furthest",
            "mean": "mean: new rows the mean learnt row",
            "random": "random: new rows from the initializer"}[how]
