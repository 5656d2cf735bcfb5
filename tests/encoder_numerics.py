"""The encoder's outputs and one training step's gradients on MiniLM's real weights, for each
encoder variant: what tests/fixtures/encoder_numerics.npz holds and tests/test_encoder_numerics.py
recomputes.

Variants: absolute positions (MiniLM as released), learned relative positions
(relative_key_query), pre-LN, padding-free layers, packed rows and recomputed layers. Variables a
variant adds to MiniLM's (the distance table, pre-LN's final norm) get values drawn from a numpy
seed, so every number is a function of this file and the weights alone.

Per variant the fixture keeps the sequence output [B, S, H] and the pooled output [B, H] of the
inference graph, and of a training graph (dropout on, its masks drawn from a fixed key) the loss
and, per trainable variable, three float64 summaries of its gradient: the sum, the sum of squares
and the dot product with a seeded random vector. Equal float32 gradients give equal summaries;
any changed bit moves them.
"""

import os
import platform

import numpy as np
import tensorflow as tf

from bert_tf import modeling

tf1 = tf.compat.v1

VARIANTS = ("absolute", "relative", "pre_ln", "padding_free", "packed", "recompute")
BATCH, SEQ = 3, 24


def machine_key():
    """What float32 results depend on besides the code: TensorFlow's version and the CPU's
    vector instructions (oneDNN and Eigen pick kernels by them)."""
    flags = set()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    return f"tf{tf.__version__}-{platform.machine()}-" + "-".join(f for f in wanted if f in flags)


def _inputs():
    """input_ids, input_mask, segment_ids [B, S]; position_ids and cls_positions of packed rows."""
    rng = np.random.RandomState(7)
    ids = rng.randint(1000, 20000, size=(BATCH, SEQ)).astype(np.int32)
    lengths = np.array([SEQ, 17, 9])
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    segments = ((np.arange(SEQ)[None, :] >= (lengths[:, None] // 2)) * mask).astype(np.int32)
    ids[:, 0] = 101
    ids *= mask
    # Packed rows: row 0 holds examples of 10, 8 and 6 tokens; the others one example each.
    position_ids = np.tile(np.arange(SEQ, dtype=np.int32), (BATCH, 1))
    position_ids[0] = np.concatenate([np.arange(10), np.arange(8), np.arange(6)])
    cls_positions = np.array([[0, 10], [0, 0], [0, 0]], np.int32)
    return ids, mask, segments, position_ids * mask, cls_positions


def _config(minilm_converted, variant):
    config = modeling.BertConfig.from_json_file(
        os.path.join(minilm_converted, "bert_config.json"))
    if variant == "relative":
        config.position_embedding_type = "relative_key_query"
    if variant == "pre_ln":
        config.layer_norm_type = "pre"
    return config


def _model(config, variant, is_training, inputs):
    ids, mask, segments, position_ids, cls_positions = inputs
    packed = variant == "packed"
    return modeling.BertModel(
        config, is_training, tf.constant(ids), input_mask=tf.constant(mask),
        token_type_ids=tf.constant(segments),
        recompute_grad=variant == "recompute" and is_training,
        padding_free=variant == "padding_free",
        position_ids=tf.constant(position_ids) if packed else None,
        pooled_positions=tf.constant(cls_positions) if packed else None)


def _load(session, minilm_converted):
    """Restores MiniLM's variables; the others get numpy draws in name order."""
    prefix = os.path.join(minilm_converted, "bert_model.ckpt")
    reader = tf.train.load_checkpoint(prefix)
    rng = np.random.RandomState(11)
    for variable in sorted(tf1.global_variables(), key=lambda v: v.op.name):
        name = variable.op.name
        if reader.has_tensor(name):
            value = reader.get_tensor(name)
        elif name.endswith("LayerNorm/gamma"):
            value = 1.0 + 0.05 * rng.standard_normal(variable.shape.as_list())
        else:
            value = 0.02 * rng.standard_normal(variable.shape.as_list())
        variable.load(np.asarray(value, np.float32), session)


def compute(minilm_converted, variant):
    """The numbers the fixture holds for `variant`: a dict of numpy arrays (float32 outputs,
    float64 gradient summaries, the variable names in order as a string array)."""
    inputs = _inputs()
    config = _config(minilm_converted, variant)
    results = {}
    with tf.Graph().as_default():
        model = _model(config, variant, False, inputs)
        with tf1.Session() as session:
            _load(session, minilm_converted)
            sequence, pooled = session.run([model.get_sequence_output(),
                                            model.get_pooled_output()])
    results["sequence_output"], results["pooled_output"] = sequence, pooled
    with tf.Graph().as_default():
        with modeling.dropout_key_scope(tf.constant([3, 5], tf.int32)):
            model = _model(config, variant, True, inputs)
        sequence = model.get_sequence_output()
        rng = np.random.RandomState(13)
        weights = tf.constant(rng.standard_normal(sequence.shape.as_list()).astype(np.float32))
        pooled_weights = tf.constant(
            rng.standard_normal(model.get_pooled_output().shape.as_list()).astype(np.float32))
        loss = (tf.reduce_mean(sequence * weights)
                + tf.reduce_mean(model.get_pooled_output() * pooled_weights))
        variables = sorted(tf1.trainable_variables(), key=lambda v: v.op.name)
        # Dense: the embedding tables' gradients are IndexedSlices.
        gradients = [tf.convert_to_tensor(g) for g in tf.gradients(loss, variables)]
        with tf1.Session() as session:
            _load(session, minilm_converted)
            loss_value, gradient_values = session.run([loss, gradients])
    projection = np.random.RandomState(17)
    sums, squares, dots = [], [], []
    for value in gradient_values:
        value = np.asarray(value, np.float64).ravel()
        sums.append(value.sum())
        squares.append((value * value).sum())
        dots.append(value @ projection.standard_normal(value.size))
    results.update(loss=np.float32(loss_value), gradient_sum=np.array(sums),
                   gradient_square_sum=np.array(squares), gradient_projection=np.array(dots),
                   variable_names=np.array([v.op.name for v in variables]))
    return results
