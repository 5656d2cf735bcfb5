"""`scripts/benchmark.py --api=tf2`: the training step through `tf2.BertEncoder` beside graph mode.

Six cells, one run: for fp32 and bf16, the graph-mode step of `benchmark_step.build_step` (the
task's real model_fn in a session) and the same SQuAD training step in TensorFlow 2 code, under
`tf.function` without XLA and with `jit_compile=True`. The TF2 step is the same computation:
`tf2.BertEncoder`, the SQuAD head's own builder (`squad.squad_logits`) on variables made once,
`squad.squad_loss`, gradients clipped to global norm 1, and bert_tf's AdamW
(`optimization.AdamWeightDecayOptimizer`, same schedule and weight-decay exclusions), on random
features drawn inside the step. Every cell is built and warmed up first; then the timed steps
alternate between the cells, so a change of the machine's load hits all of them alike.
"""

import dataclasses
import os
import time

import numpy as np
import tensorflow as tf

from bert_tf import optimization, precision, tf2
from bert_tf.errors import BertTfError
from bert_tf.tasks import squad
from bert_tf.tools import benchmark_step, machine

tf1 = tf.compat.v1

PRECISIONS = ("fp32", "bf16")
# Those of benchmark_step._task_model_fn, so both steps follow the same schedule.
_LEARNING_RATE, _NUM_TRAIN_STEPS, _NUM_WARMUP_STEPS = 5e-5, 1000000, 100


class SquadTrainStep(tf.Module):
    """The SQuAD training step of `squad.model_fn_builder` in TensorFlow 2 code."""

    def __init__(self, spec, jit_compile):
        """Args:
          spec: `benchmark_step.BenchmarkSpec` (task squad, mode train).
          jit_compile: compile the step with XLA.
        """
        super().__init__(name="squad_train_step")
        self.spec = spec
        config = spec.bert_config
        self.encoder = tf2.BertEncoder(
            config, compute_dtype=precision.compute_dtype_from_name(spec.precision))
        self.head = tf2.make_variables(tf2.initial_values(
            lambda: squad.squad_logits(tf.zeros([1, 1, config.hidden_size]),
                                       config.initializer_range)))
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.optimizer = optimization.AdamWeightDecayOptimizer(
            learning_rate=lambda: optimization.learning_rate_schedule(
                _LEARNING_RATE, _NUM_TRAIN_STEPS, _NUM_WARMUP_STEPS, self.global_step),
            weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
            exclude_from_weight_decay=list(optimization.EXCLUDE_FROM_WEIGHT_DECAY))
        self.step = tf.function(self._step, jit_compile=jit_compile)

    def _step(self):
        """One update on random features; returns the loss (float32 scalar)."""
        features = benchmark_step.synthetic_features(self.spec)
        variables = list(self.encoder.trainable_variables) + list(self.head.values())
        with tf.GradientTape() as tape:
            outputs = self.encoder(features["input_ids"], features["input_mask"],
                                   features["segment_ids"], training=True)
            with tf2.variables_from(self.head):
                start_logits, end_logits = squad.squad_logits(
                    outputs["sequence_output"], self.spec.bert_config.initializer_range)
            loss = squad.squad_loss(start_logits, end_logits, features["start_positions"],
                                    features["end_positions"])
        # The pooler gets no gradient from a span loss; create_optimizer leaves it out too.
        pairs = [(tf.convert_to_tensor(g), v)
                 for g, v in zip(tape.gradient(loss, variables), variables, strict=True)
                 if g is not None]
        gradients, _ = tf.clip_by_global_norm([g for g, _ in pairs], clip_norm=1.0)
        self.optimizer.apply_gradients(zip(gradients, [v for _, v in pairs], strict=True))
        self.global_step.assign_add(1)
        return loss


class _GraphCell:
    """The graph-mode step of `benchmark_step.build_step` in its own session."""

    def __init__(self, spec):
        graph, fetch, loss = benchmark_step.build_step(spec)
        # As scripts/benchmark.py runs the step: a run's session config, and the loss fetched
        # with every update (one set of fetches, so one executor for warm-up, steps and loss).
        self.session = tf1.Session(graph=graph,
                                   config=benchmark_step.step_session_config(spec, graph))
        self.fetches = [fetch, loss]
        benchmark_step.initialize(self.session, graph)

    def run(self):
        return self.session.run(self.fetches)[1]

    def last_loss(self):
        return float(self.run())

    def close(self):
        self.session.close()


class _Tf2Cell:
    def __init__(self, spec, jit_compile):
        self.module = SquadTrainStep(spec, jit_compile)

    def run(self):
        self.module.step().numpy()  # Waits for the step.

    def last_loss(self):
        return float(self.module.step())

    def close(self):
        pass


def run_tf2_comparison(spec, log=print):
    """Times the six cells (see the module docstring) on `spec`'s sizes.

    Args:
      spec: `benchmark_step.BenchmarkSpec`; its task must be squad and its mode train; its
        precision and use_xla are ignored (every combination runs).
      log: function taking one string.

    Returns:
      dict: "cells" (a result per cell: api, precision, use_xla, step times, median, the
      last loss), "ratios" (per precision, each TF2 cell's median step time over graph
      mode's), the sizes, the machine's load before and after.
    """
    spec.validate()
    if spec.task_class is not squad.SquadTask or spec.mode != "train":
        raise BertTfError("--api=tf2 times the SQuAD training step: use --task=squad "
                          "--mode=train.")
    cells = []
    for name in PRECISIONS:
        cell_spec = dataclasses.replace(spec, precision=name, use_xla=False)
        for api, xla in (("graph", False), ("tf2", False), ("tf2", True)):
            start = time.perf_counter()
            cell = _GraphCell(cell_spec) if api == "graph" else _Tf2Cell(cell_spec, xla)
            for _ in range(spec.num_warmup_steps):
                cell.run()
            log(f"built and warmed up {api} {name}{' XLA' if xla else ''} in "
                f"{time.perf_counter() - start:.1f} s")
            cells.append({"api": api, "precision": name, "use_xla": xla, "cell": cell,
                          "step_times_s": []})
    load_before = os.getloadavg()
    for _ in range(spec.num_steps):
        for entry in cells:
            start = time.perf_counter()
            entry["cell"].run()
            entry["step_times_s"].append(time.perf_counter() - start)
    load_after = os.getloadavg()
    results = []
    for entry in cells:
        cell = entry.pop("cell")
        entry["loss"] = cell.last_loss()
        cell.close()
        entry["step_time_median_s"] = float(np.median(entry["step_times_s"]))
        entry["sequences_per_second"] = spec.batch_size / entry["step_time_median_s"]
        results.append(entry)
    ratios = {}
    for name in PRECISIONS:
        graph = next(r for r in results if r["precision"] == name and r["api"] == "graph")
        for r in results:
            if r["precision"] == name and r["api"] == "tf2":
                key = f"{name} tf2{' xla' if r['use_xla'] else ''} / graph"
                ratios[key] = r["step_time_median_s"] / graph["step_time_median_s"]
    return {"cells": results, "ratios": ratios, "batch_size": spec.batch_size,
            "max_seq_length": spec.max_seq_length, "num_steps": spec.num_steps,
            "load_average_before": list(load_before), "load_average_after": list(load_after),
            "machine": machine.machine_info()}


def format_comparison(result):
    """The cells as a text table, then the ratios."""
    lines = ["api    prec  xla    median s   seq/s    loss"]
    for r in result["cells"]:
        lines.append(f"{r['api']:<6} {r['precision']:<5} {str(r['use_xla']):<5} "
                     f"{r['step_time_median_s']:9.3f} {r['sequences_per_second']:7.3f} "
                     f"{r['loss']:7.3f}")
    lines += [f"{key}: {value:.2f}" for key, value in result["ratios"].items()]
    return "\n".join(lines)
