"""Mixed precision: fp32 variables, bf16 / fp16 compute, fp16 loss scaling, fp32 checkpoints.

The loss-curve test fine-tunes the SQuAD head of a small BERT for 300 steps from
the same fp32 checkpoint on the same batches, once in fp32 and once in bf16, and
checks that the two curves stay together (see `test_bf16_and_fp32_loss_curves_agree`
for the tolerance).
"""

import contextlib

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import tiny_config
from ran_ops import kernel_op_types

from bert_tf import modeling, precision
from bert_tf.tasks import model_fn_parts, squad
from bert_tf.training import estimator as estimator_lib
from bert_tf.training import session as session_lib
from bert_tf.training.training_step import TrainingStep

tf1 = tf.compat.v1

SEQ = 24
BATCH = 16
START_TOKEN, END_TOKEN = 5, 6


def _config():
    # Dropout off: both precisions must see exactly the same computation up to rounding.
    return modeling.BertConfig(**tiny_config(vocab_size=64, hidden_dropout_prob=0.0,
                                             attention_probs_dropout_prob=0.0,
                                             max_position_embeddings=SEQ))


def _batches(num_batches, seed=0):
    """Learnable span data: the answer starts at token 5 and ends at token 6."""
    rng = np.random.RandomState(seed)
    batches = []
    for _ in range(num_batches):
        ids = rng.randint(10, 64, size=(BATCH, SEQ)).astype(np.int32)
        starts = rng.randint(1, SEQ - 4, size=BATCH)
        ends = starts + rng.randint(1, 4, size=BATCH)
        ids[np.arange(BATCH), starts] = START_TOKEN
        ids[np.arange(BATCH), ends] = END_TOKEN
        batches.append({"input_ids": ids, "start_positions": starts.astype(np.int32),
                        "end_positions": ends.astype(np.int32)})
    return batches


def _placeholders():
    return {
        "input_ids": tf1.placeholder(tf.int32, [BATCH, SEQ], "input_ids"),
        "input_mask": tf.ones([BATCH, SEQ], tf.int32),
        "segment_ids": tf.zeros([BATCH, SEQ], tf.int32),
        "start_positions": tf1.placeholder(tf.int32, [BATCH], "start_positions"),
        "end_positions": tf1.placeholder(tf.int32, [BATCH], "end_positions"),
    }


def _build(compute_dtype, mode, init_checkpoint=None, num_train_steps=300, learning_rate=1e-3):
    features = _placeholders()
    model_fn = squad.model_fn_builder(
        model_fn_parts.Encoder(_config(), init_checkpoint, compute_dtype),
        TrainingStep(learning_rate=learning_rate, num_train_steps=num_train_steps,
                     num_warmup_steps=num_train_steps // 10, compute_dtype=compute_dtype))
    spec = model_fn(features, None, mode, {})
    _init_op()
    return features, spec


# Built by `_build` in every graph; local variables hold optimizer state.
_INIT = "init_all"


def _init_op():
    return tf.group(tf1.global_variables_initializer(), tf1.local_variables_initializer(),
                    name=_INIT)


def _feed(features, batch):
    return {features[key]: value for key, value in batch.items()}


def _save_initial_checkpoint(directory):
    """A random fp32 starting point, saved once and shared by every run."""
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(7)
        _build(tf.float32, estimator_lib.ModeKeys.TRAIN)
        saver = tf1.train.Saver(tf1.trainable_variables())
        with tf1.Session() as session:
            session.run(_INIT)
            return saver.save(session, str(directory / "init.ckpt"))


def _train_curve(compute_dtype, init_checkpoint, batches):
    graph = tf.Graph()
    with graph.as_default():
        # At 2e-4 the loss falls over all 300 steps (from 3.1 to ~0.06), not in the first 50.
        features, spec = _build(compute_dtype, estimator_lib.ModeKeys.TRAIN, init_checkpoint,
                                learning_rate=2e-4)
        with tf1.Session() as session:
            session.run(_INIT)
            return np.array([session.run([spec.train_op, spec.loss], _feed(features, b))[1]
                             for b in batches])


def _smooth(curve, window=25):
    return np.convolve(curve, np.ones(window) / window, mode="valid")


@pytest.mark.slow
def test_bf16_and_fp32_loss_curves_agree(tmp_path):
    """300 fine-tuning steps from the same checkpoint on the same batches.

    Tolerance: at every step the 25-step running means of the two loss curves
    differ by at most 0.02 + 3 % of the fp32 value (measured: at most 0.005, while
    the loss falls from 3.1 to 0.06), and the first losses by less than 0.01
    (same start, only the rounding of the bf16 forward).
    """
    init_checkpoint = _save_initial_checkpoint(tmp_path)
    batches = _batches(300)
    fp32 = _train_curve(tf.float32, init_checkpoint, batches)
    bf16 = _train_curve(tf.bfloat16, init_checkpoint, batches)
    assert np.all(np.isfinite(fp32)) and np.all(np.isfinite(bf16))
    assert fp32[0] > 2.5
    assert abs(fp32[0] - bf16[0]) < 0.01, (fp32[0], bf16[0])
    # Both learn the task (two curves agreeing on a flat line would prove nothing).
    smooth32, smooth16 = _smooth(fp32), _smooth(bf16)
    assert smooth32[-1] < 0.1 * smooth32[0] and smooth16[-1] < 0.1 * smooth16[0]
    gap = np.abs(smooth32 - smooth16)
    allowed = 0.02 + 0.03 * smooth32
    worst = int(np.argmax(gap - allowed))
    assert np.all(gap <= allowed), (
        f"running-mean losses differ by {gap[worst]:.4f} at step {worst} "
        f"(fp32 {smooth32[worst]:.4f}, bf16 {smooth16[worst]:.4f})")


def _forward_dtypes(compute_dtype):
    """Builds the SQuAD training graph; returns {op type: set of "T" dtypes} of the encoder."""
    graph = tf.Graph()
    with graph.as_default():
        _build(compute_dtype, estimator_lib.ModeKeys.TRAIN)
        dtypes = {}
        for op in graph.get_operations():
            if not op.name.startswith("bert/encoder/") or "T" not in op.node_def.attr:
                continue
            dtypes.setdefault(op.type, set()).add(op.get_attr("T"))
        # Weights, Adam slots and the loss scale; global_step is the only integer.
        variable_dtypes = {v.dtype.base_dtype for v in tf1.global_variables()
                           if v.dtype.base_dtype.is_floating}
    return dtypes, variable_dtypes


@pytest.mark.parametrize("compute_dtype", [tf.bfloat16, tf.float16])
def test_reduced_precision_runs_matmuls_low_and_statistics_in_fp32(compute_dtype):
    dtypes, variable_dtypes = _forward_dtypes(compute_dtype)
    assert variable_dtypes == {tf.float32}
    # Dense layers and both attention matmuls in the compute dtype.
    assert dtypes["MatMul"] == {compute_dtype}
    assert dtypes["BatchMatMulV2"] == {compute_dtype}
    assert dtypes["Erf"] == {compute_dtype}  # GELU
    # Softmax and the layer-norm statistics in float32.
    assert dtypes["Softmax"] == {tf.float32}
    assert dtypes["Mean"] == {tf.float32}
    assert dtypes["Rsqrt"] == {tf.float32}


def test_fp32_graph_has_no_reduced_precision_op():
    dtypes, _ = _forward_dtypes(tf.float32)
    assert set().union(*dtypes.values()) <= {tf.float32, tf.int32, tf.int64}


def _variable(name):
    return [v for v in tf1.global_variables() if v.op.name == name][0]


def test_fp16_dynamic_loss_scaling_skips_overflowing_steps():
    batches = _batches(3)
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(3)
        features, spec = _build(tf.float16, estimator_lib.ModeKeys.TRAIN)
        scale = _variable("loss_scale")
        step = tf1.train.get_global_step()
        kernel = _variable("bert/encoder/layer_0/attention/self/query/kernel")
        with tf1.Session() as session:
            session.run(_INIT)
            assert session.run(scale) == 2.0 ** 15
            for batch in batches[:2]:
                loss = session.run([spec.train_op, spec.loss], _feed(features, batch))[1]
                assert np.isfinite(loss)
            assert session.run(step) == 2
            assert session.run(scale) == 2.0 ** 15
            # A scale that overflows fp16 gradients: the update must be skipped and halved.
            scale.load(1e30, session)
            before = session.run(kernel)
            session.run(spec.train_op, _feed(features, batches[2]))
            assert session.run(step) == 2
            np.testing.assert_array_equal(session.run(kernel), before)
            assert session.run(scale) == pytest.approx(5e29)
            # The next step with a sane scale applies again.
            scale.load(2.0 ** 10, session)
            session.run(spec.train_op, _feed(features, batches[2]))
            assert session.run(step) == 3
            assert not np.array_equal(session.run(kernel), before)


def _predict(compute_dtype, checkpoint, batch):
    graph = tf.Graph()
    with graph.as_default():
        features, spec = _build(compute_dtype, estimator_lib.ModeKeys.PREDICT,
                                init_checkpoint=checkpoint)
        with tf1.Session() as session:
            # In this order: the weight copies cast once read the restored variables.
            session.run(tf1.global_variables_initializer())
            session.run(tf1.local_variables_initializer())
            feed = {features["input_ids"]: batch["input_ids"]}
            return session.run(spec.predictions["start_logits"], feed)


def test_checkpoints_are_fp32_and_interchangeable_between_precisions(tmp_path):
    batches = _batches(4)
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(5)
        features, spec = _build(tf.bfloat16, estimator_lib.ModeKeys.TRAIN)
        saver = tf1.train.Saver()
        with tf1.Session() as session:
            session.run(_INIT)
            for batch in batches[:3]:
                session.run(spec.train_op, _feed(features, batch))
            checkpoint = saver.save(session, str(tmp_path / "bf16.ckpt"))
        trained_names = {v.op.name for v in tf1.trainable_variables()}

    reader = tf.train.load_checkpoint(checkpoint)
    dtypes = reader.get_variable_to_dtype_map()
    assert trained_names <= set(dtypes)
    assert {dtypes[name] for name in trained_names} == {tf.float32}

    fp32_graph = tf.Graph()
    with fp32_graph.as_default():
        _build(tf.float32, estimator_lib.ModeKeys.TRAIN)
        assert {v.op.name for v in tf1.trainable_variables()} == trained_names

    fp32_logits = _predict(tf.float32, checkpoint, batches[3])
    bf16_logits = _predict(tf.bfloat16, checkpoint, batches[3])
    fp16_logits = _predict(tf.float16, checkpoint, batches[3])
    spread = np.std(fp32_logits)
    assert spread > 0.03
    # bf16 keeps 8 mantissa bits, fp16 11: measured max errors 2.5 % and 0.3 % of the spread.
    np.testing.assert_allclose(bf16_logits, fp32_logits, atol=0.1 * spread)
    np.testing.assert_allclose(fp16_logits, fp32_logits, atol=0.02 * spread)


def _weight_casts(fetch):
    """The trainable variables whose value `fetch` (a tensor or an op) casts on every step,
    one name per Cast."""
    trainable = {v.op.name for v in tf1.trainable_variables()}
    casts, seen, stack = [], set(), [getattr(fetch, "op", fetch)]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if (op.type == "Cast" and op.inputs[0].op.type == "ReadVariableOp"
                and op.inputs[0].op.inputs[0].op.name in trainable):
            casts.append(op.inputs[0].op.inputs[0].op.name)
        stack.extend(tensor.op for tensor in op.inputs)
        stack.extend(op.control_inputs)
    return casts


def _pooled_output(cast_once, checkpoint, input_ids):
    """A bf16 BertModel's pooled output from the fp32 `checkpoint`, its weights cast on
    every step or once, and the casts it runs a step."""
    graph = tf.Graph()
    with graph.as_default():
        ids = tf.constant(input_ids)
        with precision.weights_cast_once() if cast_once else contextlib.nullcontext():
            model = modeling.BertModel(_config(), False, ids, compute_dtype=tf.bfloat16)
            # The pre-training head reads the word embeddings a second time (tied tables).
            logits = tf.matmul(model.get_sequence_output(), model.get_embedding_table(),
                               transpose_b=True)
        tf1.train.init_from_checkpoint(checkpoint, {"bert/": "bert/"})
        copies = tf1.local_variables()
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            session.run(tf1.local_variables_initializer())
            pooled, logits = session.run([model.get_pooled_output(), logits])
        return pooled, logits, _weight_casts(model.get_pooled_output()), copies


def test_inference_reads_weights_cast_once(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(11)
        modeling.BertModel(_config(), False, tf.zeros([1, SEQ], tf.int32))
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            checkpoint = tf1.train.Saver().save(session, str(tmp_path / "fp32.ckpt"))
        # Layer norm reads its fp32 weights as they are; every other weight is cast.
        num_cast = len([v for v in tf1.trainable_variables() if "LayerNorm" not in v.op.name])
    input_ids = _batches(1)[0]["input_ids"]

    pooled, logits, casts, copies = _pooled_output(False, checkpoint, input_ids)
    # Cast on every step: every weight but the word embeddings, whose gathered rows are cast.
    assert len(casts) == num_cast - 1 and not copies
    assert "bert/embeddings/word_embeddings" not in casts
    once_pooled, once_logits, once_casts, copies = _pooled_output(True, checkpoint, input_ids)
    # No weight is cast in the step; one bf16 copy a weight (the tied table shares its copy),
    # local, so checkpoints and Savers never see them.
    assert once_casts == []
    assert len(copies) == num_cast
    assert {v.dtype.base_dtype for v in copies} == {tf.bfloat16}
    assert all(v.op.name.endswith("/bfloat16") for v in copies)
    # The same bf16 values reach the same kernels: the same numbers, bit for bit.
    assert np.std(pooled) > 0.01
    np.testing.assert_array_equal(once_pooled, pooled)
    np.testing.assert_array_equal(once_logits, logits)


def test_training_casts_the_gathered_embedding_rows_not_the_table():
    """A bf16 training step casts each weight it reads, but of the word-embedding table only
    the B*S rows it gathers ([V, H] is half of a small model's weights); the tied output layer
    still gets the whole table in bf16, and the lookup gives the same bits as a gather from
    the cast table."""
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(3)
        features, spec = _build(tf.bfloat16, estimator_lib.ModeKeys.TRAIN)
        casts = _weight_casts(spec.train_op)
        table_name = "bert/embeddings/word_embeddings"
        assert casts and table_name not in casts, casts
        stored = [v for v in tf1.global_variables() if v.op.name == table_name][0]
        assert stored.dtype.base_dtype == tf.float32
        # The embedding lookup of the model, and the table for tied layers, in bf16.
        lookup = graph.get_tensor_by_name("bert/embeddings/Reshape:0")
        tied = [op.outputs[0] for op in graph.get_operations()
                if op.type == "Cast" and op.inputs[0].op.type == "ReadVariableOp"
                and op.inputs[0].op.inputs[0].op.name == table_name]
        assert len(tied) == 1 and tied[0].dtype == tf.bfloat16
        reference = tf.gather(tied[0], features["input_ids"])
        with tf1.Session() as session:
            session.run(_INIT)
            feed = _feed(features, _batches(1)[0])
            got, expected = session.run([lookup, reference], feed)
            assert got.dtype == expected.dtype and np.std(got.astype(np.float32)) > 0
            np.testing.assert_array_equal(got, expected)
            # The steps train the fp32 table (the first, at step 0 of the warmup, has rate 0).
            before = session.run(stored)
            for _ in range(2):
                session.run(spec.train_op, feed)
            after = session.run(stored)
    rows = np.unique(feed[features["input_ids"]])
    assert np.abs(after[rows] - before[rows]).max() > 0


def _fused_matmuls(kernels):
    return {kernel for kernel in kernels if "FusedMatMul" in kernel}


class _KernelsRan(tf1.train.SessionRunHook):
    """Traces every run of a MonitoredSession and keeps the kernels' op types."""

    def __init__(self):
        self.kernels = set()

    def before_run(self, run_context):
        options = tf1.RunOptions(trace_level=tf1.RunOptions.SOFTWARE_TRACE)
        return tf1.train.SessionRunArgs(None, options=options)

    def after_run(self, run_context, run_values):
        self.kernels |= kernel_op_types(run_values.run_metadata)


@pytest.mark.parametrize("compute_dtype", [tf.bfloat16, tf.float32])
def test_bf16_training_multiplies_in_plain_matmuls(compute_dtype):
    """A bf16 training session runs without grappler's remapper, so no forward MatMul + BiasAdd
    becomes a fused inner product (which oneDNN runs without AMX on weights cast every step);
    float32 training keeps the session config it was given."""
    graph = tf.Graph()
    with graph.as_default():
        features, spec = _build(compute_dtype, estimator_lib.ModeKeys.TRAIN)
    given = session_lib.session_config()
    training = session_lib.training_session_config(given, graph)
    feed = _feed(features, _batches(1)[0])
    ran = {}
    for name, config in (("given", given), ("training", training)):
        with tf1.Session(graph=graph, config=config) as session:
            session.run(_INIT)
            metadata = tf1.RunMetadata()
            session.run(spec.train_op, feed, run_metadata=metadata,
                        options=tf1.RunOptions(trace_level=tf1.RunOptions.SOFTWARE_TRACE))
            ran[name] = kernel_op_types(metadata)
    if compute_dtype == tf.float32:
        assert training is given
        assert _fused_matmuls(ran["training"])
        return
    assert given.graph_options.rewrite_options.remapping == 0  # The caller's config untouched.
    assert not _fused_matmuls(ran["training"]), ran["training"]
    if not _fused_matmuls(ran["given"]):
        pytest.skip("TensorFlow fuses no bf16 MatMul + BiasAdd on this CPU")


def test_the_estimator_trains_bf16_in_plain_matmuls(tmp_path):
    """The Estimator's training session is the one `training_session_config` makes."""
    batches = _batches(2)

    def input_fn(params):
        del params
        columns = {key: np.stack([b[key] for b in batches]) for key in batches[0]}
        dataset = tf.data.Dataset.from_tensor_slices(columns)
        return dataset.map(lambda batch: dict(batch, input_mask=tf.ones([BATCH, SEQ], tf.int32),
                                              segment_ids=tf.zeros([BATCH, SEQ], tf.int32)))

    def model_fn(features, labels, mode, params):
        return squad.model_fn_builder(
            model_fn_parts.Encoder(_config(), None, tf.bfloat16),
            TrainingStep(learning_rate=1e-3, num_train_steps=2, num_warmup_steps=0,
                         compute_dtype=tf.bfloat16))(features, labels, mode, params)

    kernels = _KernelsRan()
    estimator = estimator_lib.Estimator(model_fn, str(tmp_path / "model"))
    estimator.train(input_fn, max_steps=2, hooks=[kernels])
    assert any(kernel.endswith("MatMul") for kernel in kernels.kernels), kernels.kernels
    assert not _fused_matmuls(kernels.kernels), kernels.kernels
