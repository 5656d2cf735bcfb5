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
from bert_tf.step_program import manifest as manifest_lib

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


def run_graph(step_options, state, batches, manifest):
    """bert_tf's graph-mode training step (TensorFlow's kernels), from `state`."""
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
            for n in range(NUM_STEPS):
                feed = dict(zip(placeholders, batches[n % len(batches)], strict=True))
                loss, _ = session.run([spec.loss, spec.train_op], feed)
                losses.append(float(loss))
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
    dict(task="squad", recompute_grad=True),
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
