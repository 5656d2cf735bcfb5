"""Side-by-side: bert_tf's scripts/benchmark.py against PyTorch + transformers, same work.

For every (mode, precision) cell it alternates a bert_tf run and a PyTorch run
(benchmarks/pytorch_squad.py, BertForQuestionAnswering) for --rounds rounds,
(mode `pretrain`: a pre-training step, masked LM + next sentence, at
--pretrain_max_seq_length and --pretrain_batch_size, against BertForPreTraining)
each run in a fresh process, swapping which goes first every round so that
drifting machine load hits both alike. It prints the per-round and median
sequences/s, the ratio of the medians (bert_tf / PyTorch), the issue's target
for the cell, and bert_tf's MFU. Run it with the Python that has bert_tf's
TensorFlow; --torch_python names one that has torch and transformers:

    python -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install torch==2.13.0 transformers   # CPU wheel, see README
    .venv/bin/python benchmarks/compare_pytorch.py --torch_python=/tmp/torchvenv/bin/python \
        --output_json=/tmp/compare.json --output_markdown=/tmp/compare.md
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Issue 15's required ratios (bert_tf / PyTorch sequences per second): BERT-base, SQuAD head at
# seq 384 batch 4, pre-training at seq 128 batch 16.
TARGETS = {("train", "fp32"): 2.0, ("train", "bf16"): 2.0,
           ("infer", "fp32"): 2.0, ("infer", "bf16"): 1.4,
           ("pretrain", "fp32"): 2.5, ("pretrain", "bf16"): 2.0}
# Its MFU targets (of bert_tf's own matmul peak in that precision).
MFU_TARGETS = {("train", "fp32"): 0.8, ("train", "bf16"): 0.75, ("infer", "bf16"): 0.85}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--torch_python", required=True,
                        help="Python interpreter with torch and transformers installed.")
    parser.add_argument("--tf_python", default=sys.executable,
                        help="Python interpreter with bert_tf's TensorFlow (default: this one).")
    parser.add_argument("--bert_config_file", default=os.path.join(REPO, "configs",
                                                                   "bert_base.json"))
    parser.add_argument("--modes", default="train,infer,pretrain",
                        help="train / infer: the SQuAD cells; pretrain: the pre-training step.")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--max_seq_length", type=int, default=384)
    parser.add_argument("--pretrain_batch_size", type=int, default=16)
    parser.add_argument("--pretrain_max_seq_length", type=int, default=128)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--num_warmup_steps", type=int, default=2)
    parser.add_argument("--num_train_steps", type=int, default=6, help="Timed steps, train runs.")
    parser.add_argument("--num_infer_steps", type=int, default=10, help="Timed steps, infer runs.")
    parser.add_argument("--tf_extra_flags", default="",
                        help="Extra flags for scripts/benchmark.py, e.g. --use_xla.")
    parser.add_argument("--timeout_s", type=float, default=900,
                        help="A run still going after this is stopped and counted as slower "
                             "than (warm-up + timed steps) x batch / timeout_s seq/s.")
    parser.add_argument("--output_json", default=None)
    parser.add_argument("--output_markdown", default=None)
    return parser.parse_args()


def run_json(args, command, steps, env=None):
    """Runs `command`, which writes JSON to the file named by its last argument; returns it.

    A run past --timeout_s returns {"timed_out": True, "sequences_per_second": an upper bound}.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.json")
        try:
            completed = subprocess.run(command + [path], cwd=REPO, env=env, capture_output=True,
                                       text=True, check=False, timeout=args.timeout_s)
        except subprocess.TimeoutExpired:
            bound = (args.num_warmup_steps + steps) * args.batch_size / args.timeout_s
            return {"timed_out": True, "sequences_per_second": bound}
        if completed.returncode != 0 or not os.path.exists(path):
            sys.stderr.write(completed.stdout[-3000:] + completed.stderr[-3000:])
            raise SystemExit(f"failed: {' '.join(command)}")
        with open(path) as f:
            return json.load(f)


def cell_flags(args, mode, precision):
    """(timed steps, the flags both sides take) of a cell."""
    steps = args.num_infer_steps if mode == "infer" else args.num_train_steps
    if mode == "pretrain":
        shape = ["--task=pretraining", "--mode=train",
                 f"--batch_size={args.pretrain_batch_size}",
                 f"--max_seq_length={args.pretrain_max_seq_length}",
                 f"--max_predictions_per_seq={args.max_predictions_per_seq}"]
    else:
        shape = ["--task=squad", f"--mode={mode}", f"--batch_size={args.batch_size}",
                 f"--max_seq_length={args.max_seq_length}"]
    return steps, [f"--bert_config_file={args.bert_config_file}", *shape,
                   f"--precision={precision}", f"--num_warmup_steps={args.num_warmup_steps}",
                   f"--num_steps={steps}"]


def run_tf(args, mode, precision):
    steps, flags = cell_flags(args, mode, precision)
    command = [args.tf_python, os.path.join(REPO, "scripts", "benchmark.py"), *flags]
    command += args.tf_extra_flags.split()
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return run_json(args, command + ["--output_json"], steps, env=env)


def run_torch(args, mode, precision):
    steps, flags = cell_flags(args, mode, precision)
    command = [args.torch_python, os.path.join(REPO, "benchmarks", "pytorch_squad.py"), *flags]
    return run_json(args, command + ["--output_json"], steps)


def main():
    args = parse_args()
    cells = [(mode, precision) for mode in args.modes.split(",")
             for precision in args.precisions.split(",")]
    runs = {cell: {"bert_tf": [], "torch": []} for cell in cells}
    load_before = os.getloadavg()
    started = time.time()
    for round_index in range(args.rounds):
        for mode, precision in cells:
            order = ["bert_tf", "torch"] if round_index % 2 == 0 else ["torch", "bert_tf"]
            for framework in order:
                runner = run_tf if framework == "bert_tf" else run_torch
                result = runner(args, mode, precision)
                result["load_average_1min"] = os.getloadavg()[0]
                runs[(mode, precision)][framework].append(result)
                bound = "< " if result.get("timed_out") else ""
                print(f"round {round_index + 1}/{args.rounds} {mode} {precision} {framework}: "
                      f"{bound}{result['sequences_per_second']:.3f} seq/s "
                      f"(load {result['load_average_1min']:.2f})", flush=True)

    rows = []
    for mode, precision in cells:
        ours = [r for r in runs[(mode, precision)]["bert_tf"] if not r.get("timed_out")]
        theirs = runs[(mode, precision)]["torch"]
        if not ours:
            raise SystemExit(f"every bert_tf {mode} {precision} run took over --timeout_s")
        ours_rate = statistics.median(r["sequences_per_second"] for r in ours)
        # PyTorch runs that timed out count with their upper bound: the ratio is then a lower
        # bound ("torch_timed_out").
        theirs_rate = statistics.median(r["sequences_per_second"] for r in theirs)
        target = TARGETS.get((mode, precision))
        ratio = ours_rate / theirs_rate
        rows.append({
            "mode": mode, "precision": precision,
            "bert_tf_seq_per_s": ours_rate, "torch_seq_per_s": theirs_rate, "ratio": ratio,
            "torch_timed_out": any(r.get("timed_out") for r in theirs),
            "target": target, "met": None if target is None else ratio >= target,
            "mfu_target": MFU_TARGETS.get((mode, precision)),
            "bert_tf_runs": [r["sequences_per_second"] for r in ours],
            "torch_runs": [r["sequences_per_second"] for r in theirs],
            "bert_tf_mfu": statistics.median(r["mfu"] for r in ours),
            "bert_tf_achieved_tflops": statistics.median(r["achieved_tflops"] for r in ours),
            "peak_matmul_tflops": statistics.median(r["peak_matmul_tflops"] for r in ours),
        })
    summary = {
        "bert_config_file": args.bert_config_file, "batch_size": args.batch_size,
        "max_seq_length": args.max_seq_length, "rounds": args.rounds,
        "pretrain_batch_size": args.pretrain_batch_size,
        "pretrain_max_seq_length": args.pretrain_max_seq_length,
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "minutes": (time.time() - started) / 60.0,
        "machine": runs[cells[0]]["bert_tf"][0]["machine"],
        "torch": next((r["framework"] for cell in cells for r in runs[cell]["torch"]
                       if "framework" in r), "PyTorch (every run timed out)"),
        "rows": rows, "runs": {
            f"{mode}_{precision}": value for (mode, precision), value in runs.items()},
    }
    markdown = format_markdown(summary)
    print(markdown)
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(summary, f, indent=2)
    if args.output_markdown:
        with open(args.output_markdown, "w") as f:
            f.write(markdown + "\n")


def format_markdown(summary):
    lines = [
        f"BERT config {os.path.basename(summary['bert_config_file'])}, SQuAD head at "
        f"seq {summary['max_seq_length']}, batch {summary['batch_size']}; pretrain: masked LM "
        f"+ next sentence at seq {summary['pretrain_max_seq_length']}, batch "
        f"{summary['pretrain_batch_size']}; "
        f"{summary['rounds']} alternating rounds; load average (1/5/15 min) "
        f"{'/'.join(f'{x:.2f}' for x in summary['load_average_before'])} before, "
        f"{'/'.join(f'{x:.2f}' for x in summary['load_average_after'])} after; "
        f"{summary['torch']}.",
        "",
        "| mode | precision | bert_tf seq/s (median; runs) | PyTorch seq/s (median; runs) "
        "| ratio | target | met | bert_tf TFLOP/s | peak matmul TFLOP/s | MFU | MFU target |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        ours = ", ".join(f"{x:.2f}" for x in row["bert_tf_runs"])
        theirs = ", ".join(f"{x:.2f}" for x in row["torch_runs"])
        bound = "< " if row.get("torch_timed_out") else ""
        ratio_bound = "> " if row.get("torch_timed_out") else ""
        target = "" if row["target"] is None else f">= {row['target']:.1f}x"
        met = "" if row["met"] is None else ("yes" if row["met"] else "no")
        mfu_target = "" if row["mfu_target"] is None else f">= {row['mfu_target']:.2f}"
        lines.append(
            f"| {row['mode']} | {row['precision']} | {row['bert_tf_seq_per_s']:.3f} ({ours}) "
            f"| {bound}{row['torch_seq_per_s']:.3f} ({theirs}) | {ratio_bound}{row['ratio']:.2f}x "
            f"| {target} "
            f"| {met} | {row['bert_tf_achieved_tflops']:.3f} | {row['peak_matmul_tflops']:.3f} "
            f"| {row['bert_tf_mfu']:.2f} | {mfu_target} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
