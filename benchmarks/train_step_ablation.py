"""Where a training step's time goes: the step timed with parts of it switched off.

Builds the benchmark's training step (`bert_tf.tools.benchmark.build_step`: the task's real
model_fn on random features) once per variant, each in its own session of one process, then
times one step of each variant in turn, `--rounds` times, reversing the order every round.
Pairing step i of a variant with step i of the first variant cancels the slow drift of a
shared machine, so the paired ratio resolves a few per cent where the medians alone do not.

Variants:
  full              the step as `scripts/benchmark.py --mode=train` runs it.
  no_dropout        hidden and attention dropout 0.
  no_clipping       no global-norm clipping (the gradients go to the update unscaled).
  dense_lookup_gradients
                    the embedding lookups' gradients made dense [V, H] before the global
                    norm and the clip, as `create_optimizer` did before it kept them sparse.
  whole_last_layer  the last encoder layer at every token, as before it ran at the positions
                    the heads read only ([CLS]; pre-training: and the masked positions).
  tf_nn_dropout     dropout as `tf.nn.dropout` (float32 masks, the probabilities rescaled),
                    the implementation before `modeling.dropout`'s 16-bit masks.
  forward_backward  the loss and every gradient, no clipping or update.
  forward           the loss alone (dropout on).

    .venv/bin/python benchmarks/train_step_ablation.py --bert_config_file=configs/bert_base.json \
        --task=squad --batch_size=4 --max_seq_length=384 --rounds=40 \
        --variants=full,no_dropout,tf_nn_dropout --output_json=/tmp/ablation.json
"""

import argparse
import contextlib
import os
import statistics
import sys
from unittest import mock

from bert_tf.training import session as session_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

VARIANTS = ("full", "no_dropout", "no_clipping", "dense_lookup_gradients", "whole_last_layer",
            "tf_nn_dropout", "forward_backward", "forward")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bert_config_file", default=os.path.join(REPO, "configs",
                                                                   "bert_base.json"))
    parser.add_argument("--task", default="squad", choices=("squad", "classifier",
                                                            "pretraining"))
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--max_seq_length", type=int, default=384)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--variants", default="full,no_dropout,tf_nn_dropout",
                        help=f"Comma-separated, from {', '.join(VARIANTS)}; ratios are to the "
                             "first.")
    parser.add_argument("--rounds", type=int, default=20, help="Timed steps per variant.")
    parser.add_argument("--num_warmup_steps", type=int, default=2)
    parser.add_argument("--output_json", default=None)
    args = parser.parse_args()
    args.variants = args.variants.split(",")
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)}; use {', '.join(VARIANTS)}.")
    return args


def build(args, variant):
    """(graph, fetch) of one variant's step."""
    import copy

    import tensorflow as tf

    from bert_tf import modeling, optimization
    from bert_tf.tools import benchmark

    config = copy.deepcopy(modeling.BertConfig.from_json_file(args.bert_config_file))
    if variant == "no_dropout":
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    spec = benchmark.BenchmarkSpec(bert_config=config, task=args.task, mode="train",
                                   batch_size=args.batch_size,
                                   max_seq_length=args.max_seq_length, precision=args.precision)
    with contextlib.ExitStack() as stack:
        if variant == "no_clipping":
            stack.enter_context(mock.patch.object(
                optimization.tf, "clip_by_global_norm",
                lambda grads, _: (grads, tf.constant(1.0))))
        if variant == "dense_lookup_gradients":
            stack.enter_context(mock.patch.object(optimization, "_deduplicated",
                                                  optimization._dense))
        if variant == "whole_last_layer":
            stack.enter_context(mock.patch.object(modeling, "_last_layer_shortens",
                                                  lambda *args: False))
        if variant == "tf_nn_dropout":
            stack.enter_context(mock.patch.object(
                modeling, "dropout_unscaled",
                lambda x, p: (tf.nn.dropout(x, rate=p), 1.0) if p else (x, 1.0)))
        graph, fetch, loss = benchmark.build_step(spec)
    if variant in ("forward_backward", "forward"):
        with graph.as_default():
            if variant == "forward":
                fetch = loss
            else:
                grads = [g for g in tf.gradients(loss, tf.compat.v1.trainable_variables())
                         if g is not None]
                # One element of each gradient: grappler prunes what only feeds a tf.group.
                fetch = tf.add_n([tf.reshape(g.values if isinstance(g, tf.IndexedSlices) else g,
                                             [-1])[0] for g in grads])
    return graph, fetch


def main():
    args = parse_args()
    import tensorflow as tf

    from bert_tf.tools import benchmark, machine

    tf.compat.v1.disable_eager_execution()
    sessions = {}
    for variant in args.variants:
        graph, fetch = build(args, variant)
        session = tf.compat.v1.Session(graph=graph,
                                       config=session_lib.session_config(use_xla=False))
        benchmark.initialize(session, graph)
        machine.time_steps(session, fetch, args.num_warmup_steps, 0)
        sessions[variant] = (session, fetch)
        print(f"built and warmed up {variant}", flush=True)
    load_before = os.getloadavg()
    times = {variant: [] for variant in args.variants}
    for round_index in range(args.rounds):
        order = args.variants if round_index % 2 == 0 else args.variants[::-1]
        for variant in order:
            session, fetch = sessions[variant]
            times[variant] += machine.time_steps(session, fetch, 0, 1)
    base = args.variants[0]
    rows = {}
    print(f"{'variant':18s} {'median s':>9s} {'min s':>7s} {'paired ratio to ' + base:>26s}")
    for variant in args.variants:
        ratio = statistics.median(a / b for a, b in zip(times[variant], times[base], strict=True))
        rows[variant] = {"median_seconds": statistics.median(times[variant]),
                         "min_seconds": min(times[variant]), "paired_ratio": ratio,
                         "seconds": times[variant]}
        print(f"{variant:18s} {rows[variant]['median_seconds']:9.3f} "
              f"{rows[variant]['min_seconds']:7.3f} {ratio:26.3f}")
    if args.output_json:
        benchmark.write_json({"args": vars(args), "machine": machine.machine_info(),
                              "load_average_before": load_before,
                              "load_average_after": os.getloadavg(), "rows": rows},
                             args.output_json)


if __name__ == "__main__":
    main()
