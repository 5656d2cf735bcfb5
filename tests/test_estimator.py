"""Tests for bert_tf.training.estimator with a tiny linear-regression model_fn (no BERT needed).

Plain gradient descent on y = w*x + b with the same full batch every step has a closed form to
check against: `_numpy_gradient_descent` replays it in numpy.
"""

import glob
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from envs import ROOT, child_env
from finetune_helpers import LEARNING_RATE, X, Y, make_estimator, make_input_fn

from bert_tf import errors
from bert_tf.training import estimator as est
from bert_tf.training import hooks

INIT_W, INIT_B = 5.0, -3.0


def write_init_checkpoint(directory):
    """A 'pre-trained' checkpoint with w=INIT_W, b=INIT_B, as init_from_checkpoint reads it."""
    with tf.Graph().as_default():
        tf.compat.v1.get_variable("w", initializer=np.full([1, 1], INIT_W, np.float32))
        tf.compat.v1.get_variable("b", initializer=np.full([1], INIT_B, np.float32))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return tf.compat.v1.train.Saver().save(sess, os.path.join(directory, "pretrained"))


def numpy_gradient_descent(steps, w=INIT_W, b=INIT_B):
    for _ in range(steps):
        residual = (w * X + b - Y)[:, 0]
        w, b = w - LEARNING_RATE * 2 * np.mean(residual * X[:, 0]), b - LEARNING_RATE * 2 * np.mean(
            residual)
    return w, b


def checkpoint_weights(checkpoint):
    return (float(tf.train.load_variable(checkpoint, "w")[0, 0]),
            float(tf.train.load_variable(checkpoint, "b")[0]))


def read_scalar_events(directory):
    """{tag: {step: value}} from every events file directly in `directory`."""
    scalars = {}
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return scalars


def checkpoint_steps(model_dir):
    return sorted(int(p.rsplit("-", 1)[1].split(".")[0])
                  for p in glob.glob(os.path.join(model_dir, "model.ckpt-*.index")))


def read_graph_pbtxt(model_dir):
    """The GraphDef of model_dir/graph.pbtxt."""
    from google.protobuf import text_format

    with open(os.path.join(model_dir, "graph.pbtxt")) as f:
        return text_format.Parse(f.read(), tf.compat.v1.GraphDef())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model trained to step 10 from the init checkpoint (shared by the read-only tests)."""
    root = tmp_path_factory.mktemp("trained")
    init = write_init_checkpoint(str(root))
    model_dir = str(root / "model")
    estimator = make_estimator(model_dir, params={"init_checkpoint": init})
    estimator.train(make_input_fn(X, Y), max_steps=10)
    return estimator, init


def test_train_writes_checkpoints_and_summaries(trained):
    estimator, _ = trained
    model_dir = estimator.model_dir
    assert checkpoint_steps(model_dir) == [0, 5, 10]
    assert estimator.latest_checkpoint() == os.path.join(model_dir, "model.ckpt-10")
    # The weights started from the init checkpoint and followed plain gradient descent.
    np.testing.assert_allclose(checkpoint_weights(estimator.latest_checkpoint()),
                               numpy_gradient_descent(10), rtol=1e-5)
    scalars = read_scalar_events(model_dir)
    for tag in ("loss", "learning_rate", "global_step/sec", "examples_per_sec"):
        assert tag in scalars, f"{tag} missing from {sorted(scalars)}"
    # Loss summaries every 2 steps, falling as training goes.
    loss_steps = sorted(scalars["loss"])
    assert len(loss_steps) >= 4
    assert scalars["loss"][loss_steps[-1]] < scalars["loss"][loss_steps[0]]
    # examples/sec = steps/sec * batch size 8 (written together).
    for step, examples_per_sec in scalars["examples_per_sec"].items():
        assert examples_per_sec == pytest.approx(8 * scalars["global_step/sec"][step], rel=1e-4)



def test_summaries_are_their_steps_losses_every_save_summary_steps(trained):
    """Every save_summary_steps=2 steps, as TF's SummarySaverHook writes them, each value the
    loss of the step it is written at (computed from the weights before that step's update)."""
    estimator, _ = trained
    scalars = read_scalar_events(estimator.model_dir)
    assert sorted(scalars["loss"]) == sorted(scalars["learning_rate"]) == [1, 3, 5, 7, 9]
    for step, loss in scalars["loss"].items():
        w, b = numpy_gradient_descent(step - 1)
        assert loss == pytest.approx(np.mean((w * X + b - Y) ** 2), rel=1e-4), step


@pytest.mark.parametrize("histogram", [False, True])
def test_training_steps_fetch_one_set_of_tensors(tmp_path, session_run_fetches, histogram):
    """Each distinct set of fetches makes the session build and grappler-optimize another
    executor (~2.4 s for MiniLM on 2 cores), so all training steps fetch the same tensors when
    the summaries are scalars; a histogram summary, which would cost every step, is fetched only
    on the steps that write it."""
    model_dir = str(tmp_path / "model")
    make_estimator(model_dir, params={"histogram": histogram}).train(make_input_fn(X, Y),
                                                                     max_steps=6)
    steps = [names for names in session_run_fetches
             if any("GradientDescent" in name for name in names)]
    assert len(steps) == 6
    assert len(set(steps)) == (2 if histogram else 1)
    assert sorted(read_scalar_events(model_dir)["loss"]) == [1, 3, 5]


def test_graph_pbtxt_is_the_training_graph(trained, tmp_path):
    """train() writes graph.pbtxt (upb's fast text encoder where protobuf has it): a text
    proto that parses back to the very GraphDef tf.io.write_graph writes, awkward floats
    included; the rest of the start's writes are the stock hook's."""
    estimator, _ = trained
    written = read_graph_pbtxt(estimator.model_dir)
    assert any(node.op == "ApplyGradientDescent" or node.op == "ResourceApplyGradientDescent"
               for node in written.node), sorted({node.op for node in written.node})
    # As the stock CheckpointSaverHook: every checkpoint has its .meta, and the events file
    # holds the graph and the meta graph for TensorBoard; all four hold the training graph.
    events = [event
              for path in glob.glob(os.path.join(estimator.model_dir, "events.out.tfevents.*"))
              for event in tf.compat.v1.train.summary_iterator(path)]
    kinds = {event.WhichOneof("what") for event in events}
    assert {"graph_def", "meta_graph_def"} <= kinds, kinds
    # One graph event holds a graph: the training graph (the summary writer opens with an
    # empty one, not with a second serialization of the unfinished graph).
    event_graphs = [tf.compat.v1.GraphDef.FromString(event.graph_def) for event in events
                    if event.WhichOneof("what") == "graph_def"]
    full = [graph_def for graph_def in event_graphs if graph_def.node]
    assert len(full) == 1, [len(graph_def.node) for graph_def in event_graphs]
    assert full[0].SerializeToString(deterministic=True) == written.SerializeToString(
        deterministic=True)
    metas = []
    for step in (0, 5, 10):
        meta = tf.compat.v1.MetaGraphDef()
        with open(os.path.join(estimator.model_dir, f"model.ckpt-{step}.meta"), "rb") as f:
            meta.ParseFromString(f.read())
        metas.append(meta)
    assert metas[0].graph_def.SerializeToString(deterministic=True) == (
        written.SerializeToString(deterministic=True))
    assert metas[1] == metas[0] and metas[2] == metas[0]
    # The last one loads as TF1 users load a .meta: the graph, its saver, the weights.
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        saver = tf.compat.v1.train.import_meta_graph(estimator.latest_checkpoint() + ".meta")
        saver.restore(sess, estimator.latest_checkpoint())
        step = sess.run(tf.compat.v1.train.get_global_step())
    assert step == 10
    with tf.Graph().as_default() as graph:
        tf.constant([0.1, 1e-30, 3.4028235e38, float("nan"), -float("inf"), -0.0], name="c")
        tf.nn.leaky_relu(tf.constant([1.0]), alpha=0.123456789)
    graph_def = graph.as_graph_def(add_shapes=True)
    path = hooks.write_graph_text(graph_def, str(tmp_path / "new"), "graph.pbtxt")
    reference = tf.io.write_graph(graph_def, str(tmp_path / "stock"), "graph.pbtxt")
    parsed = [read_graph_pbtxt(os.path.dirname(p)) for p in (path, reference)]
    assert parsed[0].SerializeToString(deterministic=True) == parsed[1].SerializeToString(
        deterministic=True)
    assert parsed[0] == graph_def

def test_progress_line_format():
    line = hooks.progress_line(120, 1000, 3.2104, 4.1, 131.2)
    assert line == "step 120/1000 loss=3.21 steps/sec=4.1 examples/sec=131 ETA 0:03:35"
    assert hooks.progress_line(10, 10, 0.5, 2.0) == "step 10/10 loss=0.5 steps/sec=2 ETA 0:00:00"


def test_resume_continues_without_reinitialising(tmp_path):
    init = write_init_checkpoint(str(tmp_path))
    model_dir = str(tmp_path / "model")
    params = {"init_checkpoint": init}
    make_estimator(model_dir, params=params).train(make_input_fn(X, Y), max_steps=10)
    index_file = os.path.join(model_dir, "model.ckpt-10.index")
    before = os.stat(index_file)

    # The same command again with a larger max_steps continues from step 10.
    make_estimator(model_dir, params=params).train(make_input_fn(X, Y), max_steps=13)
    assert checkpoint_steps(model_dir) == [0, 5, 10, 13]
    np.testing.assert_allclose(checkpoint_weights(os.path.join(model_dir, "model.ckpt-13")),
                               numpy_gradient_descent(13), rtol=1e-5)
    # The checkpoint it restored from was not rewritten (a kill then could have broken it).
    after = os.stat(index_file)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)

    # Already at max_steps: returns at once and writes nothing.
    files = sorted(os.listdir(model_dir))
    make_estimator(model_dir, params=params).train(make_input_fn(X, Y), max_steps=13)
    assert sorted(os.listdir(model_dir)) == files


def train_in_child(model_dir, kill_at_step):
    """Trains 'forever', saving every 2 steps, and is killed inside the save of `kill_at_step`
    (tests/kill_during_save.py: its shards written, not yet merged into place)."""
    import kill_during_save

    kill_during_save.install(kill_at_step)
    estimator = make_estimator(model_dir, save_checkpoints_steps=2, keep_checkpoint_max=3)
    estimator.train(make_input_fn(X, Y), max_steps=1_000_000)


def test_sigkill_during_save_then_restart_ends_at_max_steps(tmp_path):
    model_dir = str(tmp_path / "model")
    env = child_env(PYTHONPATH=os.pathsep.join([ROOT, os.path.dirname(__file__)]))
    child = subprocess.run(
        [sys.executable, "-c", "import sys, test_estimator as t; t.train_in_child(sys.argv[1], 8)",
         model_dir], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    # It died inside the save: shards written, not merged into model.ckpt-8.index / .data.
    assert os.listdir(os.path.join(model_dir, "model.ckpt-8_temp"))
    assert not glob.glob(os.path.join(model_dir, "model.ckpt-8.*"))
    # The state file still names the previous checkpoint, and all of it is readable.
    latest = tf.train.latest_checkpoint(model_dir)
    assert latest == os.path.join(model_dir, "model.ckpt-6")
    reader = tf.train.load_checkpoint(latest)
    for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)

    estimator = make_estimator(model_dir, save_checkpoints_steps=2, keep_checkpoint_max=3)
    estimator.train(make_input_fn(X, Y), max_steps=11)
    assert estimator.latest_checkpoint() == os.path.join(model_dir, "model.ckpt-11")
    assert checkpoint_steps(model_dir) == [8, 10, 11]
    # Zero-initialised weights trained 11 steps in all: the restart picked up at step 6.
    np.testing.assert_allclose(checkpoint_weights(estimator.latest_checkpoint()),
                               numpy_gradient_descent(11, 0.0, 0.0), rtol=1e-4)


def test_evaluate_returns_metrics_and_writes_summaries(trained):
    estimator, _ = trained
    w, b = checkpoint_weights(estimator.latest_checkpoint())
    error = (w * X + b - Y)[:, 0]

    results = estimator.evaluate(make_input_fn(X, Y, repeat=False))  # 2 batches of 4
    assert results["global_step"] == 10
    assert results["mae"] == pytest.approx(np.mean(np.abs(error)), rel=1e-5)
    assert results["loss"] == pytest.approx(np.mean(error**2), rel=1e-5)  # mean of batch means
    scalars = read_scalar_events(os.path.join(estimator.model_dir, "eval"))
    assert scalars["mae"][10] == pytest.approx(results["mae"])
    assert scalars["loss"][10] == pytest.approx(results["loss"])

    named = estimator.evaluate(make_input_fn(X, Y, repeat=False), steps=1, name="dev")
    assert named["loss"] == pytest.approx(np.mean(error[:4] ** 2), rel=1e-5)
    dev_scalars = read_scalar_events(os.path.join(estimator.model_dir, "eval_dev"))
    assert dev_scalars["loss"][10] == pytest.approx(named["loss"])


def test_evaluate_without_checkpoint_names_model_dir(tmp_path):
    with pytest.raises(errors.BertTfError, match="no checkpoint in model_dir.*empty"):
        make_estimator(str(tmp_path / "empty")).evaluate(make_input_fn(X, Y, repeat=False))


def test_predict_yields_each_example(trained):
    estimator, init = trained
    w, b = checkpoint_weights(estimator.latest_checkpoint())
    x = X[:6]
    predictions = list(estimator.predict(make_input_fn(x, repeat=False)))
    assert len(predictions) == 6 and set(predictions[0]) == {"x", "y"}
    np.testing.assert_allclose([p["y"] for p in predictions], w * x[:, 0] + b, rtol=1e-5)
    only_y = list(estimator.predict(make_input_fn(x, repeat=False), predict_keys=["y"]))
    assert set(only_y[0]) == {"y"}
    batches = list(estimator.predict(make_input_fn(x, repeat=False),
                                     yield_single_examples=False))
    assert [len(batch["y"]) for batch in batches] == [4, 2]

    # No checkpoint in model_dir: the model_fn's init_from_checkpoint weights are used.
    fresh = make_estimator(os.path.join(os.path.dirname(init), "fresh"),
                           params={"init_checkpoint": init})
    fresh_y = [p["y"] for p in fresh.predict(make_input_fn(x, repeat=False))]
    np.testing.assert_allclose(fresh_y, INIT_W * x[:, 0] + INIT_B, rtol=1e-6)


def test_export_saved_model_matches_predict(trained, tmp_path):
    estimator, _ = trained
    receiver_fn = est.build_raw_serving_input_receiver_fn(
        {"x": tf.TensorSpec([None, 1], tf.float32)})
    export_path = estimator.export_saved_model(str(tmp_path / "export"), receiver_fn)
    assert os.path.basename(export_path).isdigit()
    assert os.listdir(tmp_path / "export") == [os.path.basename(export_path)]  # No temp dir.

    serve = tf.saved_model.load(export_path).signatures["serving_default"]
    served = serve(x=tf.constant(X))
    predicted = [p["y"] for p in estimator.predict(make_input_fn(X, repeat=False))]
    np.testing.assert_allclose(served["y"].numpy(), predicted, rtol=1e-6)
    np.testing.assert_allclose(served["x"].numpy(), X[:, 0])


def test_nan_loss_stops_without_saving_that_step(tmp_path):
    model_dir = str(tmp_path / "model")
    x = np.tile(X, (4, 1))
    x[24] = np.nan  # In batch 7 of 4 rows.
    estimator = make_estimator(model_dir, batch_size=4, save_checkpoints_steps=7)
    with pytest.raises(errors.BertTfError, match=r"loss became nan at step 7.*learning_rate"):
        estimator.train(make_input_fn(x, np.tile(Y, (4, 1))), max_steps=20)
    # Step 7 was due for a checkpoint, but its weights are NaN: only step 0 is on disk.
    assert checkpoint_steps(model_dir) == [0]
    assert np.isfinite(checkpoint_weights(estimator.latest_checkpoint())).all()


def test_nan_weights_with_finite_loss_are_not_saved(tmp_path):
    model_dir = str(tmp_path / "model")
    estimator = make_estimator(model_dir, params={"poison_step": 2})
    with pytest.raises(errors.BertTfError, match="weights hold NaN or Inf at step 5"):
        estimator.train(make_input_fn(X, Y), max_steps=20)
    assert checkpoint_steps(model_dir) == [0]


def test_tf_random_seed_makes_training_repeatable(tmp_path):
    def random_init_model_fn(features, labels, mode, params):
        # Random initial weights and dropout: repeatable only through the graph seed.
        w = tf.compat.v1.get_variable("w", [1, 1])
        pred = tf.matmul(tf.nn.dropout(features["x"], rate=0.5), w)
        loss = tf.reduce_mean(tf.square(pred - labels))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step())
        return est.EstimatorSpec(mode, loss=loss, train_op=train_op)

    def train(name, seed):
        estimator = est.Estimator(random_init_model_fn, str(tmp_path / name),
                                  config=est.RunConfig(tf_random_seed=seed),
                                  params={"batch_size": 4})
        estimator.train(make_input_fn(X, Y), max_steps=5)
        return tf.train.load_variable(estimator.latest_checkpoint(), "w")

    np.testing.assert_array_equal(train("a", 7), train("b", 7))
    assert not np.array_equal(train("a2", 7 + 1), train("b2", 7))


def test_model_dir_with_foreign_checkpoint_is_refused(tmp_path):
    init = write_init_checkpoint(str(tmp_path))  # Writes the `checkpoint` state file too.
    with pytest.raises(errors.BertTfError, match="without a global_step.*--init_checkpoint"):
        make_estimator(str(tmp_path)).train(make_input_fn(X, Y), max_steps=2)
    assert tf.train.latest_checkpoint(str(tmp_path)) == init


def test_input_fn_without_params_and_distribute_seam(tmp_path):
    estimator = make_estimator(str(tmp_path / "model"))
    estimator.train(lambda: tf.data.Dataset.from_tensor_slices(({"x": X}, Y)).repeat().batch(8),
                    max_steps=2)
    assert checkpoint_steps(estimator.model_dir) == [0, 2]
    with pytest.raises(TypeError, match="train_distribute must be a tf.distribute strategy"):
        make_estimator(str(tmp_path / "other"), train_distribute=object()).train(
            make_input_fn(X, Y), max_steps=2)


def test_scalar_summaries_written_within_one_second_all_survive(tmp_path):
    """Event files are named by the second they are opened in: an evaluation's summaries and
    the final evaluation's, written in the same second, must not replace each other."""
    with tf.Graph().as_default():
        for step in (10, 20, 30):
            hooks.write_scalar_summaries(str(tmp_path), {"eval_loss": 1.0 / step}, step)
        hooks.write_scalar_summaries(str(tmp_path), {"eval_loss": 0.5}, 10)
    steps = sorted(event.step for path in glob.glob(str(tmp_path / "*"))
                   for event in tf.compat.v1.train.summary_iterator(path)
                   if any(value.tag == "eval_loss" for value in event.summary.value))
    assert steps == [10, 10, 20, 30]


def _autotune_settings(graph_def):
    """`autotune.enabled` of every options node (OptionsDataset) of `graph_def`'s datasets."""
    from tensorflow.core.framework import dataset_options_pb2

    settings = []
    for node in graph_def.node:
        if node.op == "OptionsDataset":
            options = dataset_options_pb2.Options.FromString(
                node.attr["serialized_options"].s)
            settings.append(options.autotune_options.enabled
                            if options.autotune_options.HasField("enabled") else None)
    return settings


def test_session_iterators_run_without_the_autotuning_thread(trained, tmp_path):
    """The training input is iterated without tf.data's autotuning model, whose sleeping thread
    held up closing the session (seconds to a minute), unless the input_fn's dataset sets
    `autotune.enabled` itself."""
    estimator, _ = trained
    assert _autotune_settings(read_graph_pbtxt(estimator.model_dir)) == [False]

    def autotuned_input_fn(params):
        options = tf.data.Options()
        options.autotune.enabled = True
        return make_input_fn(X, Y)(params).with_options(options)

    own = make_estimator(str(tmp_path / "own"))
    own.train(autotuned_input_fn, max_steps=1)
    assert _autotune_settings(read_graph_pbtxt(own.model_dir)) == [True]


def test_one_process_sessions_skip_the_readiness_checks(tmp_path, session_run_fetches):
    """Training in one process, evaluation and prediction initialize or restore every variable
    themselves: no session run asks which variables are uninitialized (each such check was a
    run of its own), yet a checkpoint that lacks a variable of the model still stops the
    evaluation with an error naming the variable."""
    model_dir = str(tmp_path / "model")
    estimator = make_estimator(model_dir)
    estimator.train(make_input_fn(X, Y), max_steps=2)
    results = estimator.evaluate(make_input_fn(X, Y), steps=1)
    assert len(list(estimator.predict(make_input_fn(X, repeat=False)))) == len(X)
    assert results["global_step"] == 2
    # The readiness ops are not even built (TF's default ones: report_uninitialized_variables
    # joined by a `concat` at the graph's root, which each check fetches).
    with open(os.path.join(model_dir, "graph.pbtxt")) as f:
        assert "report_uninitialized" not in f.read()
    checks = [names for names in session_run_fetches
              if any(re.fullmatch(r"concat(_\d+)?:0", name) for name in names)]
    assert not checks and session_run_fetches, checks
    # A checkpoint with `w` but no `b`.
    with tf.Graph().as_default():
        tf.compat.v1.get_variable("w", initializer=np.ones([1, 1], np.float32))
        tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            partial = tf.compat.v1.train.Saver().save(sess, str(tmp_path / "partial" / "model"))
    with pytest.raises((errors.BertTfError, tf.errors.NotFoundError), match="b"):
        estimator.evaluate(make_input_fn(X, Y), steps=1, checkpoint_path=partial)
