"""scripts/export_step.py + scripts/run_step.py: a task's training step as a StableHLO module,
run through JAX's PJRT client on the CPU, against TensorFlow running the same step.

Two references, from the same starting state on the same batches, with dropout on (its masks
are stateless draws of the seed argument and global_step, so every side draws the same):
  - the step as TensorFlow runs it under jit_compile (the same XLA program): losses, weights
    and optimizer slots within 1e-6;
  - bert_tf's graph-mode training step (the model_fn run_*.py train with, TensorFlow's own
    kernels, sparse embedding gradients): losses within 1e-4 relative.
"""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import FINETUNE_DATA, minilm_files

from bert_tf import modeling, options, tf2
from bert_tf.errors import BertTfError
from bert_tf.step_program import export, runtime, tensor_files
from bert_tf.training import checkpoints

tf1 = tf.compat.v1
pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_STEPS = 3
SEED = 4321


def tiny_config(tmp_path):
    """A 2-layer BERT with a small vocabulary (dropout 0.1 as BERT's)."""
    config = modeling.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=64,
                                 max_position_embeddings=64)
    path = os.path.join(tmp_path, "bert_config.json")
    with open(path, "w") as f:
        f.write(config.to_json_string())
    return path


def random_batches(manifest, count, seed=0):
    """`count` batches of the manifest's features (numpy), padding at the end of each row."""
    rng = np.random.RandomState(seed)
    batches = []
    for _ in range(count):
        batch = []
        for _, entry in manifest.feature_arguments():
            if entry.name == "input_mask":
                lengths = rng.randint(entry.shape[1] // 2, entry.shape[1] + 1, entry.shape[0])
                value = (np.arange(entry.shape[1])[None, :] < lengths[:, None]).astype(np.int32)
            elif "fill" in entry.values:
                value = np.full(entry.shape, entry.values["fill"], entry.dtype)
            else:
                value = rng.randint(0, entry.values["max"], entry.shape).astype(entry.dtype)
            batch.append(value)
        batches.append(batch)
    return batches


def run_jax(step_dir, batches):
    program = runtime.StepProgram(step_dir, "cpu")
    program.load_state()
    device_batches = [[program.jax.device_put(v, program.device) for v in b] for b in batches]
    measurement = program.train(device_batches, NUM_STEPS, SEED, log_every_n_steps=0)
    return measurement.losses, program.state_arrays()


def run_tf_jit(step_options, state, batches):
    """The exported step's own tf.function (jit_compile), from `state`."""
    built = export.build_step(step_options, tf2.load_bert_config(step_options.bert_config_file))
    for variable in built.variables:
        variable.assign(state[export.variable_name(variable)])
    losses = []
    for n in range(NUM_STEPS):
        outputs = built.function(*batches[n % len(batches)], np.array([SEED, 0], np.int32))
        losses.append(float(outputs[0]))
    return losses, {export.variable_name(v): v.numpy() for v in built.variables}


def run_graph(step_options, state, batches, manifest, num_steps=NUM_STEPS, checkpoint=None):
    """bert_tf's graph-mode training step (TensorFlow's kernels), from `state`; with
    `checkpoint` (a prefix) the trained variables are saved there."""
    bert_config = tf2.load_bert_config(step_options.bert_config_file)
    names = [entry.name for _, entry in manifest.feature_arguments()]
    with tf.Graph().as_default():
        placeholders = [tf1.placeholder(entry.dtype, entry.shape)
                        for _, entry in manifest.feature_arguments()]
        spec, _ = export.training_outputs(
            export.task_model_fn(step_options, bert_config, static_shapes=False),
            dict(zip(names, placeholders, strict=True)), tf.constant([SEED, 0], tf.int32))
        variables = {v.op.name: v for v in tf1.global_variables()}
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            for name, value in state.items():
                variables[name].load(value, session)
            losses = []
            for n in range(num_steps):
                feed = dict(zip(placeholders, batches[n % len(batches)], strict=True))
                loss, _ = session.run([spec.loss, spec.train_op], feed)
                losses.append(float(loss))
            if checkpoint:
                checkpoints.write_tf_checkpoint(session.run(variables), checkpoint)
    return losses


def export_tiny(tmp_path, **values):
    step_options = options.ExportStepOptions(
        bert_config_file=tiny_config(tmp_path), max_seq_length=16, train_batch_size=4,
        max_predictions_per_seq=3, num_train_steps=20, num_warmup_steps=2,
        learning_rate=1e-3, output_dir=os.path.join(tmp_path, "step"), **values)
    manifest = export.export_step(step_options)
    return step_options, manifest


def max_difference(a, b):
    return max(float(np.max(np.abs(a[name].astype(np.float64) - b[name]))) for name in a)


CASES = [
    dict(task="squad"),
    dict(task="classifier", optimizer="lamb"),
    dict(task="pretraining"),
    dict(task="pretraining", optimizer="lamb", recompute_grad=True),
]


@pytest.mark.parametrize("values", CASES, ids=lambda v: "-".join(str(x) for x in v.values()))
def test_exported_step_matches_tensorflow(tmp_path, values):
    step_options, manifest = export_tiny(tmp_path, **values)
    state = tensor_files.load(os.path.join(step_options.output_dir, "state.safetensors"), "s")
    batches = random_batches(manifest, NUM_STEPS)
    jax_losses, jax_state = run_jax(step_options.output_dir, batches)
    tf_losses, tf_state = run_tf_jit(step_options, state, batches)
    graph_losses = run_graph(step_options, state, batches, manifest)
    print(f"{values}: losses JAX {jax_losses}, TF jit {tf_losses}, graph {graph_losses}; "
          f"state max |JAX - TF jit| {max_difference(jax_state, tf_state):.2e}")
    assert jax_state["global_step"] == NUM_STEPS
    # Dropout is on: a different mask would move the loss far more than these tolerances.
    np.testing.assert_allclose(jax_losses, tf_losses, rtol=1e-6, atol=1e-6)
    assert max_difference(jax_state, tf_state) <= 1e-6
    np.testing.assert_allclose(jax_losses, graph_losses, rtol=1e-4)
    # The weights moved: the step trains.
    assert max_difference(jax_state, state) > 1e-4


def test_bf16_step_matches_tensorflow_within_bf16s_own_spread(tmp_path):
    step_options, manifest = export_tiny(tmp_path, task="squad", precision="bf16")
    state = tensor_files.load(os.path.join(step_options.output_dir, "state.safetensors"), "s")
    batches = random_batches(manifest, NUM_STEPS)
    jax_losses = np.array(run_jax(step_options.output_dir, batches)[0])
    tf_losses = np.array(run_tf_jit(step_options, state, batches)[0])
    graph_losses = np.array(run_graph(step_options, state, batches, manifest))
    # bf16 TensorFlow against itself: the same step compiled by XLA and run on its kernels.
    spread = float(np.max(np.abs(tf_losses - graph_losses)))
    print(f"bf16 losses: JAX {jax_losses}, TF jit {tf_losses}, graph {graph_losses}; "
          f"TF's own spread {spread:.2e}")
    # A dropout mask drawn differently moves the loss by ~1e-2: the tolerance stays far below.
    assert spread < 1e-3 * float(np.max(graph_losses))
    assert float(np.max(np.abs(jax_losses - tf_losses))) <= spread
    assert float(np.max(np.abs(jax_losses - graph_losses))) <= 2 * spread


def write_squad_records(path, manifest, count):
    """`count` SQuAD training records (the keys run_squad.py writes) from random batches."""
    rows = []
    for batch in random_batches(manifest, count // manifest.batch_size, seed=7):
        names = [entry.name for _, entry in manifest.feature_arguments()]
        for i in range(manifest.batch_size):
            rows.append({name: np.atleast_1d(value[i]) for name, value in
                         zip(names, batch, strict=True)})
    with tf.io.TFRecordWriter(path) as writer:
        for n, row in enumerate(rows):
            feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(value=value))
                       for name, value in row.items()}
            feature["unique_ids"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[n]))
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())
    return rows


NO_TENSORFLOW = ("import runpy, sys; sys.modules['tensorflow'] = None; "
                 "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def run_without_tensorflow(script, *args):
    """Runs scripts/<script> in a process where `import tensorflow` fails."""
    return subprocess.run([sys.executable, "-c", NO_TENSORFLOW, os.path.join("scripts", script),
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_run_step_trains_exported_batches_without_tensorflow(tmp_path):
    step_options, manifest = export_tiny(tmp_path, task="squad")
    records = os.path.join(tmp_path, "train.tf_record")
    rows = write_squad_records(records, manifest, 10)  # 2 whole batches of 4, 2 left over.
    step_dir = os.path.join(tmp_path, "with_features")
    manifest = export.export_step(dataclasses.replace(step_options, train_file=records,
                                                      output_dir=step_dir))
    assert manifest.feature_files == ["features-00000.safetensors"]
    shard = tensor_files.load(os.path.join(step_dir, manifest.feature_files[0]), "f")
    assert shard["input_ids"].shape == (2, 4, 16)
    np.testing.assert_array_equal(shard["start_positions"][1],
                                  [row["start_positions"][0] for row in rows[4:8]])

    out = os.path.join(tmp_path, "trained")
    result = run_without_tensorflow(
        "run_step.py", f"--step_dir={step_dir}", "--num_steps=3", "--num_warmup_steps=0",
        f"--seed={SEED}", f"--output_dir={out}", f"--output_json={out}/run.json",
        "--peak_matmul_size=256", "--log_every_n_steps=1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "step 3/3: loss" in result.stderr
    assert "seq/s" in result.stdout  # The table.
    assert "TensorFlow is not installed here" in result.stderr
    record = json.load(open(os.path.join(out, "run.json")))
    assert record["global_step"] == 3 and record["sequences_per_s"] > 0
    assert 0 < record["fraction_of_peak"] < 1
    # The same batches (in turn: 0, 1, 0) through TensorFlow give the same losses.
    state = tensor_files.load(os.path.join(step_dir, "state.safetensors"), "s")
    batches = [[shard[entry.name][b] for _, entry in manifest.feature_arguments()]
               for b in range(2)]
    tf_losses, tf_state = run_tf_jit(dataclasses.replace(step_options, output_dir=step_dir),
                                     state, batches)
    np.testing.assert_allclose(record["losses"], tf_losses, rtol=1e-6, atol=1e-6)

    # Back on a TensorFlow machine: one command makes the Google-layout checkpoint.
    from script_runner import run_python_script
    checkpoint_run = run_python_script(
        os.path.join(ROOT, "scripts", "step_checkpoint.py"),
        [f"--step_dir={step_dir}", f"--state_file={out}/state.safetensors",
         f"--output_dir={out}"], dict(os.environ), cwd=ROOT)
    assert checkpoint_run.returncode == 0, checkpoint_run.stderr[-2000:]
    prefix = tf.train.latest_checkpoint(out)
    assert prefix.endswith("model.ckpt-3")
    reader = tf.train.load_checkpoint(prefix)
    names = set(reader.get_variable_to_shape_map())
    assert names == {entry.name for _, entry in manifest.state_arguments()}
    assert reader.get_tensor("global_step") == 3
    name = "bert/encoder/layer_1/attention/self/query/kernel"
    assert max_difference({name: reader.get_tensor(name)}, {name: tf_state[name]}) <= 1e-6


def test_step_dir_that_disagrees_stops_with_one_line(tmp_path):
    step_options, manifest = export_tiny(tmp_path, task="classifier")
    step_dir = step_options.output_dir
    os.makedirs(os.path.join(tmp_path, "other"))
    other_options, _ = export_tiny(os.path.join(tmp_path, "other"), task="squad")

    # A module from another export.
    broken = os.path.join(tmp_path, "mixed")
    os.makedirs(broken)
    for name in ("step.json", "state.safetensors"):
        os.link(os.path.join(step_dir, name), os.path.join(broken, name))
    os.link(os.path.join(other_options.output_dir, "step.mlirbc"),
            os.path.join(broken, "step.mlirbc"))
    result = run_without_tensorflow("run_step.py", f"--step_dir={broken}", "--random_features")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "step.mlirbc" in lines[-1]
    assert "another export" in lines[-1] and "Traceback" not in result.stderr

    # An edited shape in step.json.
    with open(os.path.join(step_dir, "step.json")) as f:
        data = json.load(f)
    name = "bert/encoder/layer_0/intermediate/dense/kernel"
    entry = next(e for e in data["arguments"] if e["name"] == name)
    entry["shape"] = [32, 65]
    edited = os.path.join(tmp_path, "edited")
    os.makedirs(edited)
    for file_name in ("step.mlirbc", "state.safetensors"):
        os.link(os.path.join(step_dir, file_name), os.path.join(edited, file_name))
    with open(os.path.join(edited, "step.json"), "w") as f:
        json.dump(data, f)
    with pytest.raises(BertTfError, match=f"step.json: argument '{name}' is float32 "
                       r"\[32, 65\] but step.mlirbc has float32 \[32, 64\]"):
        runtime.StepProgram(edited)

    # A state that lacks a tensor, or holds one of another shape.
    program = runtime.StepProgram(step_dir)
    state = tensor_files.load(os.path.join(step_dir, "state.safetensors"), "s")
    slot = name + "/adam_m"
    del state[slot]
    partial = os.path.join(tmp_path, "partial.safetensors")
    tensor_files.save(state, partial)
    with pytest.raises(BertTfError, match=f"partial.safetensors: tensor '{slot}' is missing"):
        program.load_state(partial)
    state[slot] = np.zeros([64, 32], np.float32)
    tensor_files.save(state, partial)
    with pytest.raises(BertTfError, match=f"partial.safetensors: tensor '{slot}' is float32 "
                       r"\[64, 32\] but step.json says float32 \[32, 64\]"):
        program.load_state(partial)


def test_random_init_draws_the_initializers_on_the_device(tmp_path):
    step_options, manifest = export_tiny(tmp_path, task="pretraining")
    program = runtime.StepProgram(step_options.output_dir)
    program.random_state(seed=3)
    drawn = program.state_arrays()
    kernel = drawn["bert/encoder/layer_0/attention/self/query/kernel"]
    assert abs(float(kernel.std()) - 0.02 * 0.88) < 0.002  # A normal cut at 2 deviations.
    assert float(np.max(np.abs(kernel))) <= 0.04
    assert np.all(drawn["bert/encoder/layer_0/output/LayerNorm/gamma"] == 1)
    assert not np.any(drawn["bert/embeddings/word_embeddings/adam_v"])
    assert drawn["global_step"] == 0 and drawn["global_step"].dtype == np.int64
    measurement = program.train(program.feature_batches(random_features=True), 2, SEED)
    assert measurement.global_step == 2 and np.all(np.isfinite(measurement.losses))


@pytest.mark.slow
def test_minilm_step_matches_tensorflow(tmp_path, minilm_converted):
    files = minilm_files(minilm_converted)
    step_options = options.ExportStepOptions(
        bert_config_file=files["bert_config_file"], init_checkpoint=files["init_checkpoint"],
        max_seq_length=32, train_batch_size=2, num_train_steps=10, num_warmup_steps=1,
        learning_rate=1e-4, output_dir=os.path.join(tmp_path, "step"))
    manifest = export.export_step(step_options)
    state = tensor_files.load(os.path.join(step_options.output_dir, "state.safetensors"), "s")
    reader = tf.train.load_checkpoint(files["init_checkpoint"])
    name = "bert/encoder/layer_5/output/dense/kernel"
    np.testing.assert_array_equal(state[name], reader.get_tensor(name))  # The real weights.
    batches = random_batches(manifest, NUM_STEPS)
    jax_losses, jax_state = run_jax(step_options.output_dir, batches)
    tf_losses, tf_state = run_tf_jit(step_options, state, batches)
    graph_losses = run_graph(step_options, state, batches, manifest)
    print(f"MiniLM: losses JAX {jax_losses}, TF jit {tf_losses}, graph {graph_losses}; "
          f"state max |JAX - TF jit| {max_difference(jax_state, tf_state):.2e}")
    np.testing.assert_allclose(jax_losses, tf_losses, rtol=1e-6, atol=1e-6)
    assert max_difference(jax_state, tf_state) <= 1e-6
    np.testing.assert_allclose(jax_losses, graph_losses, rtol=1e-4)


@pytest.mark.slow
def test_minilm_fine_tuned_by_run_step_predicts_as_the_graph_mode_step(tmp_path,
                                                                       minilm_converted,
                                                                       minilm_squad):
    """The round trip: MiniLM fine-tuned for 30 steps on squad_small.json's records (those
    conftest's run_squad.py run wrote) by run_step.py, its checkpoint predicted by
    run_squad.py --do_predict, against the same 30 steps of bert_tf's graph-mode step
    (run_squad.py's model_fn) on the same batches with the same dropout masks."""
    from finetune_helpers import options as finetune_options

    from bert_tf.runs import driver

    files = minilm_files(minilm_converted)
    step_options = options.ExportStepOptions(
        bert_config_file=files["bert_config_file"], init_checkpoint=files["init_checkpoint"],
        max_seq_length=64, train_batch_size=8, learning_rate=2e-4, num_train_steps=30,
        num_warmup_steps=3, train_file=os.path.join(minilm_squad.output_dir, "train.tf_record"),
        output_dir=os.path.join(tmp_path, "step"))  # conftest.minilm_squad's settings.
    manifest = export.export_step(step_options)
    trained = os.path.join(tmp_path, "trained")
    record = runtime.run(options.RunStepOptions(
        step_dir=step_options.output_dir, num_steps=30, num_warmup_steps=0, seed=SEED,
        output_dir=trained, peak_matmul_size=256))
    shard = tensor_files.load(os.path.join(step_options.output_dir, manifest.feature_files[0]),
                              "f")
    batches = [[shard[entry.name][b] for _, entry in manifest.feature_arguments()]
               for b in range(len(shard["input_ids"]))]
    state = tensor_files.load(os.path.join(step_options.output_dir, "state.safetensors"), "s")
    graph_checkpoint = os.path.join(tmp_path, "graph", "model.ckpt-30")
    graph_losses = run_graph(step_options, state, batches, manifest, 30, graph_checkpoint)
    np.testing.assert_allclose(record["losses"], graph_losses, rtol=1e-3)

    def predict(checkpoint, name):
        return driver.run_task(finetune_options(
            "squad", **{**files, "init_checkpoint": checkpoint},
            output_dir=os.path.join(tmp_path, name), do_predict=True,
            predict_file=os.path.join(FINETUNE_DATA, "squad_small.json"), max_seq_length=64,
            doc_stride=24, max_query_length=16, predict_batch_size=16, n_best_size=10,
            max_answer_length=8))

    from_run_step = predict(os.path.join(trained, "model.ckpt-30"), "predicted_run_step")
    from_graph = predict(graph_checkpoint, "predicted_graph")
    print(f"After 30 steps on the 12 questions: run_step.py {from_run_step}, graph-mode step "
          f"{from_graph}, run_squad.py (its own order and masks) {minilm_squad.results}")
    assert abs(from_run_step["f1"] - from_graph["f1"]) <= 0.5
    assert from_run_step["exact_match"] >= 25.0  # As run_squad.py's own run learns.
