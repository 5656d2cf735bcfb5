"""Tests for bert_tf.optimization against float64 numpy references of the algorithms."""

import json
import os
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from envs import child_env
from script_runner import run_python_code

from bert_tf import optimization
from bert_tf.errors import BertTfError

tf1 = tf.compat.v1

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------
# numpy references, written from the algorithms (float64)
# --------------------------------------------------------------------------

def np_learning_rate(step, init_lr, num_train_steps, num_warmup_steps):
    if num_warmup_steps and step < num_warmup_steps:
        return init_lr * step / num_warmup_steps
    return init_lr * (1.0 - min(step, num_train_steps) / num_train_steps)


def np_clip(grads, clip_norm):
    norm = np.sqrt(sum(np.sum(g * g) for g in grads.values()))
    return {k: g * clip_norm / max(norm, clip_norm) for k, g in grads.items()}, norm


def np_adamw_step(w, m, v, g, lr, decay, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    # Betas as float32 numbers (the optimizer holds them in the variables' dtype).
    b1, b2 = float(np.float32(b1)), float(np.float32(b2))
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    update = m / (np.sqrt(v) + eps)
    if decay:
        update = update + wd * w
    return w - lr * update, m, v


def np_lamb_step(w, m, v, g, lr, decay, t, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    update = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    if decay:
        update = update + wd * w
    w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
    ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
    return w - lr * ratio * update, m, v


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def _session(graph):
    config = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    session = tf1.Session(graph=graph, config=config)
    with graph.as_default():
        session.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()])
    return session


def _variables(graph):
    """All variables of `graph` by name ("a/b"), global and local."""
    with graph.as_default():
        return {v.op.name: v for v in tf1.global_variables() + tf1.local_variables()}


def _values(session, names):
    variables = _variables(session.graph)
    return {name: session.run(variables[name]) for name in names}


def _summaries(serialized):
    summary = tf1.Summary.FromString(serialized)
    return {value.tag: value.simple_value for value in summary.value}


# --------------------------------------------------------------------------
# learning-rate schedule
# --------------------------------------------------------------------------

@pytest.mark.parametrize("num_warmup_steps, expected", [
    # step:       0     5     9     10    55     100  150
    (10, [0.0, 0.05, 0.09, 0.09, 0.045, 0.0, 0.0]),
    (0, [0.1, 0.095, 0.091, 0.09, 0.045, 0.0, 0.0]),
])
def test_learning_rate_schedule_values(num_warmup_steps, expected):
    with tf.Graph().as_default():
        step = tf1.placeholder(tf.int64, [])
        learning_rate = optimization.learning_rate_schedule(0.1, 100, num_warmup_steps, step)
        with tf1.Session() as session:
            got = [session.run(learning_rate, {step: s}) for s in (0, 5, 9, 10, 55, 100, 150)]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------------------
# AdamW / LAMB through create_optimizer vs numpy
# --------------------------------------------------------------------------

# A quadratic loss sum_v (0.5 * A_v * w_v^2 + B_v * w_v), gradient A_v * w_v + B_v.
_VARS = {
    "layer/kernel": (3, 4),
    "layer/bias": (4,),                 # no weight decay
    "layer/LayerNorm/gamma": (4,),      # no weight decay
}


def _quadratic_problem(seed, zero_bias):
    rng = np.random.RandomState(seed)
    init = {k: rng.uniform(-1, 1, shape) for k, shape in _VARS.items()}
    if zero_bias:
        init["layer/bias"] = np.zeros(_VARS["layer/bias"])
    coef_a = {k: rng.uniform(0.5, 2.0, shape) for k, shape in _VARS.items()}
    coef_b = {k: rng.uniform(-0.6, 0.6, shape) for k, shape in _VARS.items()}
    return init, coef_a, coef_b


def _run_quadratic(optimizer, init, coef_a, coef_b, steps, **kwargs):
    graph = tf.Graph()
    with graph.as_default():
        loss = 0.0
        for name, value in init.items():
            var = tf1.get_variable(name, initializer=tf.constant(value, tf.float32))
            loss += tf.reduce_sum(0.5 * coef_a[name].astype(np.float32) * tf.square(var)
                                  + coef_b[name].astype(np.float32) * var)
        train_op = optimization.create_optimizer(loss, 0.1, 8, 2, optimizer=optimizer, **kwargs)
        summaries = tf1.summary.merge_all()
        with _session(graph) as session:
            norms = []
            for _ in range(steps):
                _, serialized = session.run([train_op, summaries])
                norms.append(_summaries(serialized)["global_gradient_norm"])
            names = list(init) + [n + s for n in init for s in ("/adam_m", "/adam_v")]
            values = _values(session, names)
            values["global_step"] = session.run(tf1.train.get_global_step())
    return values, norms


def _reference(step_fn, init, coef_a, coef_b, steps, clip_norm):
    w = dict(init)
    m = {k: np.zeros_like(x) for k, x in init.items()}
    v = {k: np.zeros_like(x) for k, x in init.items()}
    norms = []
    for step in range(steps):
        grads, norm = np_clip({k: coef_a[k] * w[k] + coef_b[k] for k in w}, clip_norm)
        norms.append(norm)
        lr = np_learning_rate(step, 0.1, 8, 2)
        for k in w:
            w[k], m[k], v[k] = step_fn(w[k], m[k], v[k], grads[k], lr,
                                       decay=(k == "layer/kernel"), t=step + 1)
    return w, m, v, norms


# clip_norm is chosen so that the first gradients are clipped and the last are not.
@pytest.mark.parametrize("optimizer, clip_norm", [("adamw", 2.0), ("lamb", 3.5)])
def test_optimizer_matches_numpy_reference(optimizer, clip_norm):
    init, coef_a, coef_b = _quadratic_problem(seed=3, zero_bias=(optimizer == "lamb"))
    if optimizer == "adamw":
        step_fn = lambda w, m, v, g, lr, decay, t: np_adamw_step(w, m, v, g, lr, decay)
    else:
        step_fn = np_lamb_step
    steps = 5
    got, got_norms = _run_quadratic(optimizer, init, coef_a, coef_b, steps, clip_norm=clip_norm)
    w, m, v, norms = _reference(step_fn, init, coef_a, coef_b, steps, clip_norm)

    assert got["global_step"] == steps
    assert norms[0] > clip_norm > norms[-1]
    np.testing.assert_allclose(got_norms, norms, rtol=1e-5)
    for k in init:
        np.testing.assert_allclose(got[k], w[k], atol=1e-6, rtol=1e-6, err_msg=k)
        np.testing.assert_allclose(got[k + "/adam_m"], m[k], atol=1e-6, rtol=1e-5, err_msg=k)
        np.testing.assert_allclose(got[k + "/adam_v"], v[k], atol=1e-7, rtol=1e-5, err_msg=k)
        # Training moved every variable (the schedule starts at lr 0, so step 0 is a no-op).
        assert np.abs(w[k] - init[k]).max() > 1e-3


def test_static_loss_scale_gives_the_same_update():
    init, coef_a, coef_b = _quadratic_problem(seed=5, zero_bias=False)
    plain, _ = _run_quadratic("adamw", init, coef_a, coef_b, 4)
    scaled, _ = _run_quadratic("adamw", init, coef_a, coef_b, 4, loss_scale=1024.0)
    for k in init:
        np.testing.assert_allclose(scaled[k], plain[k], atol=1e-7, err_msg=k)


# A lookup table's gradient (IndexedSlices, one row per lookup, ids repeated) next to a dense one.
_TABLE_SHAPE = (9, 3)
_LOOKUP_IDS = np.array([2, 5, 2, 7, 2, 0], np.int32)


def _run_lookup(optimizer, init, coef, steps, **kwargs):
    graph = tf.Graph()
    with graph.as_default():
        table = tf1.get_variable("embeddings/word_embeddings",
                                 initializer=tf.constant(init["table"], tf.float32))
        kernel = tf1.get_variable("layer/kernel", initializer=tf.constant(init["kernel"],
                                                                          tf.float32))
        rows = tf.gather(table, _LOOKUP_IDS)  # [6, 3]
        loss = (tf.reduce_sum(coef["rows"].astype(np.float32) * tf.square(rows))
                + tf.reduce_sum(coef["kernel"].astype(np.float32) * kernel))
        train_op = optimization.create_optimizer(loss, 0.1, 8, 0, optimizer=optimizer,
                                                 clip_norm=1.5, **kwargs)
        summaries = tf1.summary.merge_all()
        l2_inputs = [op.inputs[0].shape.as_list() for op in graph.get_operations()
                     if op.type == "L2Loss"]
        with _session(graph) as session:
            norms = [_summaries(session.run([train_op, summaries])[1])["global_gradient_norm"]
                     for _ in range(steps)]
            values = _values(session, ["embeddings/word_embeddings", "layer/kernel",
                                       "embeddings/word_embeddings/adam_m",
                                       "embeddings/word_embeddings/adam_v"])
    return values, norms, l2_inputs


@pytest.mark.parametrize("optimizer, loss_scale", [("adamw", None), ("adamw", 64.0),
                                                   ("lamb", None)])
def test_lookup_gradient_with_repeated_ids_matches_the_dense_reference(optimizer, loss_scale):
    rng = np.random.RandomState(4)
    init = {"table": rng.uniform(-1, 1, _TABLE_SHAPE), "kernel": rng.uniform(-1, 1, (2, 3))}
    coef = {"rows": rng.uniform(0.2, 1.0, (len(_LOOKUP_IDS), 3)),
            "kernel": rng.uniform(-0.5, 0.5, (2, 3))}
    steps = 4
    got, got_norms, l2_inputs = _run_lookup(optimizer, init, coef, steps, loss_scale=loss_scale)

    w = {"table": init["table"].copy(), "kernel": init["kernel"].copy()}
    m = {k: np.zeros_like(x) for k, x in w.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    norms = []
    for step in range(steps):
        table_grad = np.zeros(_TABLE_SHAPE)
        np.add.at(table_grad, _LOOKUP_IDS, 2 * coef["rows"] * w["table"][_LOOKUP_IDS])
        grads, norm = np_clip({"table": table_grad, "kernel": coef["kernel"]}, 1.5)
        norms.append(norm)
        lr = np_learning_rate(step, 0.1, 8, 0)
        for k in w:
            if optimizer == "adamw":
                w[k], m[k], v[k] = np_adamw_step(w[k], m[k], v[k], grads[k], lr, decay=True)
            else:
                w[k], m[k], v[k] = np_lamb_step(w[k], m[k], v[k], grads[k], lr, True, step + 1)

    np.testing.assert_allclose(got_norms, norms, rtol=1e-5)
    assert norms[0] > 1.5  # the clip applies
    np.testing.assert_allclose(got["embeddings/word_embeddings"], w["table"], atol=1e-6)
    np.testing.assert_allclose(got["layer/kernel"], w["kernel"], atol=1e-6)
    np.testing.assert_allclose(got["embeddings/word_embeddings/adam_m"], m["table"], atol=1e-6)
    np.testing.assert_allclose(got["embeddings/word_embeddings/adam_v"], v["table"], atol=1e-7)
    # Rows no id looked up still decay (AdamW) and keep zero moments.
    untouched = sorted(set(range(_TABLE_SHAPE[0])) - set(_LOOKUP_IDS.tolist()))
    assert np.all(got["embeddings/word_embeddings/adam_m"][untouched] == 0)
    if optimizer == "adamw":
        assert np.all(np.abs(got["embeddings/word_embeddings"][untouched])
                      < np.abs(init["table"][untouched]))
    # The global norm read the looked-up rows, not the whole table.
    assert list(_TABLE_SHAPE) not in l2_inputs, l2_inputs


# --------------------------------------------------------------------------
# Variable names (Google checkpoints carry <var>/adam_m and <var>/adam_v)
# --------------------------------------------------------------------------

def _tiny_graph(num_accumulation_steps=1, seed=0):
    graph = tf.Graph()
    with graph.as_default():
        rng = np.random.RandomState(seed)
        x = tf.constant(rng.randn(4, 3), tf.float32)
        kernel = tf1.get_variable("bert/dense/kernel", initializer=tf.constant(
            rng.randn(3, 2), tf.float32))
        bias = tf1.get_variable("bert/dense/bias", [2], initializer=tf1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(x, kernel) + bias - 1.0))
        train_op = optimization.create_optimizer(
            loss, 0.1, 10, 0, num_accumulation_steps=num_accumulation_steps)
    return graph, train_op


def test_slot_names_and_checkpoint_round_trip(tmp_path):
    graph, train_op = _tiny_graph()
    with graph.as_default():
        names = sorted(v.op.name for v in tf1.global_variables())
        assert names == ["bert/dense/bias", "bert/dense/bias/adam_m", "bert/dense/bias/adam_v",
                         "bert/dense/kernel", "bert/dense/kernel/adam_m",
                         "bert/dense/kernel/adam_v", "global_step"]
        with _session(graph) as session:
            session.run(train_op)
            session.run(train_op)
            saved = _values(session, names)
            path = tf1.train.Saver().save(session, str(tmp_path / "model.ckpt"))

    # Resuming with accumulation on: the extra accumulators are local, so a
    # plain Saver restores every saved variable and needs nothing else.
    graph, train_op = _tiny_graph(num_accumulation_steps=2, seed=1)
    with graph.as_default():
        local_names = sorted(v.op.name for v in tf1.local_variables())
        assert "bert/dense/kernel/accum_grad" in local_names
        assert not set(local_names) & set(names)
        with _session(graph) as session:
            tf1.train.Saver().restore(session, path)
            restored = _values(session, names)
    for name in names:
        np.testing.assert_array_equal(restored[name], saved[name], err_msg=name)
    assert restored["global_step"] == 2


# --------------------------------------------------------------------------
# Gradient accumulation
# --------------------------------------------------------------------------

def _mlp_run(data_x, data_y, batches, num_accumulation_steps, optimizer):
    """Trains a 2-layer MLP on `batches` (index arrays), one run per batch."""
    graph = tf.Graph()
    with graph.as_default():
        rng = np.random.RandomState(7)
        x = tf1.placeholder(tf.float32, [None, data_x.shape[1]])
        y = tf1.placeholder(tf.float32, [None, 1])
        w1 = tf1.get_variable("hidden/kernel", initializer=tf.constant(
            rng.randn(data_x.shape[1], 8) * 0.5, tf.float32))
        b1 = tf1.get_variable("hidden/bias", initializer=tf.constant(
            rng.randn(8) * 0.1, tf.float32))
        w2 = tf1.get_variable("output/kernel", initializer=tf.constant(
            rng.randn(8, 1) * 0.5, tf.float32))
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2) - y))
        train_op = optimization.create_optimizer(
            loss, 0.05, 10, 1, optimizer=optimizer,
            num_accumulation_steps=num_accumulation_steps)
        summaries = tf1.summary.merge_all()
        global_step = tf1.train.get_global_step()
        with _session(graph) as session:
            steps = []
            for index in batches:
                _, serialized = session.run([train_op, summaries],
                                            {x: data_x[index], y: data_y[index]})
                steps.append(int(session.run(global_step)))
            names = [v.op.name for v in tf1.global_variables()]
            return _values(session, names), steps, _summaries(serialized)


@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_accumulation_equals_one_big_batch(optimizer):
    rng = np.random.RandomState(0)
    micro, n, updates = 3, 4, 3
    data_x = rng.randn(micro * n * updates, 5).astype(np.float32)
    data_y = rng.randn(micro * n * updates, 1).astype(np.float32)
    big = [np.arange(i * micro * n, (i + 1) * micro * n) for i in range(updates)]
    small = [np.arange(i * micro, (i + 1) * micro) for i in range(n * updates)]

    want, want_steps, want_summaries = _mlp_run(data_x, data_y, big, 1, optimizer)
    got, got_steps, got_summaries = _mlp_run(data_x, data_y, small, n, optimizer)

    assert want_steps == [1, 2, 3]
    # global_step counts updates: once per n micro-batches.
    assert got_steps == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3]
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=1e-5, err_msg=name)
    # The summaries report the applied (window-mean) gradient and the rate it used.
    np.testing.assert_allclose(got_summaries["global_gradient_norm"],
                               want_summaries["global_gradient_norm"], rtol=1e-5)
    np.testing.assert_allclose(got_summaries["learning_rate"],
                               want_summaries["learning_rate"], rtol=1e-6)
    # Control: one update per small batch ends far from the big-batch weights.
    control, _, _ = _mlp_run(data_x, data_y, small, 1, optimizer)
    assert np.abs(control["hidden/kernel"] - want["hidden/kernel"]).max() > 1e-3


# --------------------------------------------------------------------------
# Dynamic loss scaling
# --------------------------------------------------------------------------

def _scaled_graph(num_accumulation_steps):
    graph = tf.Graph()
    with graph.as_default():
        factor = tf1.placeholder(tf.float32, [])
        weights = tf1.get_variable("w", initializer=tf.constant([0.5, -1.0, 2.0]))
        loss = factor * tf.reduce_sum(weights * tf.constant([1.0, 2.0, 3.0]))
        train_op = optimization.create_optimizer(
            loss, 0.1, 100, 0, loss_scale="dynamic",
            num_accumulation_steps=num_accumulation_steps)
        variables = _variables(graph)
        state = {"w": weights, "m": variables["w/adam_m"], "scale": variables["loss_scale"],
                 "good": variables["loss_scale_good_steps"], "step": variables["global_step"]}
    session = _session(graph)
    return lambda f: session.run(train_op, {factor: f}), lambda: session.run(state), session


def test_dynamic_loss_scale_skips_overflow_and_halves_scale():
    train, state, session = _scaled_graph(1)
    with session:
        assert state()["scale"] == 2.0**15
        train(1.0)
        before = state()
        assert before["step"] == 1
        # 1e36 * 2**15 overflows float32: the gradients are inf.
        train(1e36)
        after = state()
        np.testing.assert_array_equal(after["w"], before["w"])
        np.testing.assert_array_equal(after["m"], before["m"])
        assert after["step"] == 1
        assert after["scale"] == 2.0**14
        train(1.0)
        assert state()["step"] == 2 and state()["scale"] == 2.0**14
        assert not np.array_equal(state()["w"], before["w"])


def test_dynamic_loss_scale_doubles_after_good_period(monkeypatch):
    monkeypatch.setattr(optimization, "DYNAMIC_LOSS_SCALE_PERIOD", 3)
    train, state, session = _scaled_graph(1)
    with session:
        train(1e36)
        assert state()["scale"] == 2.0**14
        scales = []
        for _ in range(4):
            train(1.0)
            scales.append(state()["scale"])
        assert scales == [2.0**14, 2.0**14, 2.0**15, 2.0**15]
        assert state()["good"] == 1


def test_overflow_discards_the_accumulation_window():
    train, state, session = _scaled_graph(2)
    with session:
        start = state()
        train(1.0)
        train(1e36)       # second micro-batch overflows: the whole window is skipped
        skipped = state()
        np.testing.assert_array_equal(skipped["w"], start["w"])
        assert skipped["step"] == 0 and skipped["scale"] == 2.0**14
        train(1.0)
        train(3.0)        # a clean window: applied with the mean gradient of (1, 3)
        applied = state()
    assert applied["step"] == 1
    # One AdamW step from m = v = 0: update = g / (|g| + eps) ~ sign(g); lr(0) = 0.1.
    grad = 2.0 * np.array([1.0, 2.0, 3.0])
    w_ref, _, _ = np_adamw_step(start["w"].astype(np.float64), 0.0, 0.0, np_clip(
        {"w": grad}, 1.0)[0]["w"], 0.1, decay=True)
    np.testing.assert_allclose(applied["w"], w_ref, atol=1e-6)


# --------------------------------------------------------------------------
# Argument errors
# --------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, flag", [
    ({"optimizer": "sgd"}, "--optimizer"),
    ({"num_accumulation_steps": 0}, "--num_accumulation_steps"),
    ({"num_train_steps": 0}, "--num_train_steps"),
    ({"loss_scale": "static"}, "--loss_scale"),
])
def test_bad_arguments_raise_one_line_errors(kwargs, flag):
    args = {"init_lr": 1e-4, "num_train_steps": 10, "num_warmup_steps": 1}
    args.update(kwargs)
    with tf.Graph().as_default():
        loss = tf.reduce_sum(tf1.get_variable("w", [2]))
        with pytest.raises(BertTfError, match=flag):
            optimization.create_optimizer(loss, **args)


# --------------------------------------------------------------------------
# MirroredStrategy over two logical CPUs == one device
# --------------------------------------------------------------------------

_MIRRORED_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    tf1 = tf.compat.v1
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from bert_tf import optimization

    rng = np.random.RandomState(0)
    X = rng.randn(16, 4).astype(np.float32)
    Y = rng.randn(16, 1).astype(np.float32)

    def run(num_replicas, num_accumulation_steps, optimizer, loss_scale):
        graph = tf.Graph()
        with graph.as_default():
            def model_fn(x, y):
                init = np.random.RandomState(1)
                w1 = tf1.get_variable("dense/kernel", initializer=tf.constant(
                    init.randn(4, 5), tf.float32))
                b1 = tf1.get_variable("dense/bias", [5], initializer=tf1.zeros_initializer())
                w2 = tf1.get_variable("out/kernel", initializer=tf.constant(
                    init.randn(5, 1), tf.float32))
                loss = tf.reduce_mean(tf.square(tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2) - y))
                return optimization.create_optimizer(
                    loss, 0.05, 20, 2, optimizer=optimizer,
                    num_accumulation_steps=num_accumulation_steps, loss_scale=loss_scale)
            micro_step = tf1.placeholder(tf.int32, [])
            micro = 16 // num_accumulation_steps
            if num_replicas == 1:
                begin = micro_step * micro
                train_op = model_fn(tf.constant(X)[begin:begin + micro],
                                    tf.constant(Y)[begin:begin + micro])
            else:
                strategy = tf1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
                with strategy.scope():
                    tf1.train.get_or_create_global_step()
                    def replica_fn():
                        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
                        begin = micro_step * micro + replica * (micro // 2)
                        return model_fn(tf.constant(X)[begin:begin + micro // 2],
                                        tf.constant(Y)[begin:begin + micro // 2])
                    train_op = strategy.group(strategy.extended.call_for_each_replica(replica_fn))
            summaries = tf1.summary.merge_all()
            with tf1.Session(graph=graph) as session:
                session.run([tf1.global_variables_initializer(),
                             tf1.local_variables_initializer()])
                for _ in range(3):
                    for m in range(num_accumulation_steps):
                        _, serialized = session.run([train_op, summaries], {micro_step: m})
                out = {v.op.name: session.run(v).tolist() for v in tf1.global_variables()
                       if "replica_" not in v.op.name}
                out["summaries"] = {v.tag: v.simple_value
                                    for v in tf1.Summary.FromString(serialized).value}
        return out

    results = {}
    for config in [(1, "adamw", None), (2, "lamb", "dynamic")]:
        results[repr(config)] = {"one": run(1, *config), "two": run(2, *config)}
    json.dump(results, sys.stdout)
""")


@pytest.mark.slow
def test_mirrored_strategy_matches_one_device():
    completed = run_python_code(_MIRRORED_SCRIPT, [], env=child_env(), cwd=REPO_ROOT,
                                timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    for config, runs in results.items():
        one, two = runs["one"], runs["two"]
        assert sorted(one) == sorted(two), config
        assert one["global_step"] == two["global_step"] == 3, config
        # Clipping is active, so equality also shows that replicas clip the global gradient.
        assert one["summaries"]["global_gradient_norm"] > 1.0, config
        assert two["summaries"] == pytest.approx(one["summaries"], rel=1e-5), config
        for name in one:
            if name != "summaries":
                np.testing.assert_allclose(two[name], one[name], atol=1e-6, err_msg=name)


@pytest.mark.parametrize("num_accumulation_steps, fused", [(1, True), (2, False)])
def test_adamw_uses_the_fused_kernel_when_every_write_applies(num_accumulation_steps, fused):
    # The one-pass ResourceApplyAdam is what makes the BERT-base update ~2.5x cheaper; the
    # masked element-wise path is kept for accumulation windows and skipped steps.
    graph = tf.Graph()
    with graph.as_default():
        var = tf1.get_variable("layer/kernel", initializer=tf.ones([3, 4]))
        optimization.create_optimizer(tf.reduce_sum(tf.square(var)), 0.1, 8, 2,
                                      num_accumulation_steps=num_accumulation_steps)
    op_types = {op.type for op in graph.get_operations()}
    assert ("ResourceApplyAdam" in op_types) == fused


def test_weight_decay_waits_for_the_forward_and_backward_passes():
    # The decoupled decay writes the weights without needing the gradient's values, so only
    # an explicit dependency orders it after the step's forward pass. Without one TF may run
    # it first (the traced MiniLM step did, 15 ms into a 450 ms step): the loss could come
    # from decayed weights, and TF copies the weights to keep the earlier reads intact.
    # A race cannot be timed reliably in a test, so this checks the order in the graph.
    graph = tf.Graph()
    with graph.as_default():
        weight = tf1.get_variable("layer/kernel", initializer=tf.fill([4], 2.0))
        forward_read = tf.convert_to_tensor(weight)
        optimization.create_optimizer(tf.reduce_sum(tf.square(forward_read)), 0.5, 10, 0,
                                      weight_decay_rate=0.5)
    decays = [op for op in graph.get_operations() if op.type == "AssignVariableOp"
              and op.name.startswith("AdamWeightDecayOptimizer/")]
    assert len(decays) == 1, [op.name for op in graph.get_operations()]
    ancestors, stack = set(), [decays[0]]
    while stack:
        op = stack.pop()
        for parent in [tensor.op for tensor in op.inputs] + list(op.control_inputs):
            if parent.name not in ancestors:
                ancestors.add(parent.name)
                stack.append(parent)
    assert forward_read.op.name in ancestors
