"""BERT SQuAD fine-tuning steps on one device, side by side: the exported StableHLO step
(scripts/run_step.py), PyTorch + transformers BertForQuestionAnswering with AdamW (eager and
torch.compile), and TensorFlow's own graph-mode step (scripts/benchmark.py) where TensorFlow
runs. One table (seq/s, step ms, fraction of the measured matmul peak, compile s, peak memory)
and JSON.

    # On a machine with TensorFlow: export the steps (a few MB each; no weights in them).
    python benchmarks/accelerator_step.py --export_only --step_root=/tmp/steps \
        --models=base,large --precisions=fp32,bf16 --batch_size=32
    # On the accelerator's machine (JAX, PyTorch; no TensorFlow needed):
    python benchmarks/accelerator_step.py --platform=gpu --step_root=/tmp/steps \
        --models=base,large --precisions=fp32,bf16 --batch_size=32 \
        --torch_python=python --output_json=accelerator.json

On the CPU (every cell in one run; PyTorch from the environment docs/benchmarks.md creates):

    python benchmarks/accelerator_step.py --platform=cpu --models=base --precisions=fp32 \
        --batch_size=2 --num_steps=3 --torch_python=/tmp/torchvenv/bin/python

`--find_max_batch`: the largest batch (doubling from --batch_size) whose exported step
compiles and runs in the device's memory, with and without --recompute_grad.

Each cell runs in a process of its own, so one cell's memory never limits the next.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {"base": "configs/bert_base.json", "large": "configs/bert_large.json"}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--platform", default="cpu", choices=["cpu", "gpu", "tpu"])
    parser.add_argument("--models", default="base,large")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=384)
    parser.add_argument("--num_steps", type=int, default=10)
    parser.add_argument("--num_warmup_steps", type=int, default=2)
    parser.add_argument("--step_root", default="/tmp/bert_tf_steps",
                        help="Where the exported steps are (or are exported to).")
    parser.add_argument("--export_only", action="store_true",
                        help="Export the steps (needs TensorFlow) and stop.")
    parser.add_argument("--torch_python", default=None,
                        help="A Python with torch + transformers; none: no PyTorch cells.")
    parser.add_argument("--no_torch_compile", action="store_true")
    parser.add_argument("--tensorflow", action="store_true",
                        help="Also time scripts/benchmark.py (needs TensorFlow here).")
    parser.add_argument("--find_max_batch", action="store_true")
    parser.add_argument("--max_batch_limit", type=int, default=1024)
    parser.add_argument("--peak_matmul_size", type=int, default=8192)
    parser.add_argument("--output_json", default=None)
    return parser.parse_args()


def step_dir(args, model, precision, batch, recompute=False):
    suffix = "-recompute" if recompute else ""
    return os.path.join(args.step_root, f"squad-{model}-{precision}-b{batch}-"
                        f"s{args.max_seq_length}{suffix}")


def ensure_exported(args, model, precision, batch, recompute=False):
    """The step directory, exported first (with TensorFlow) if it is not there yet."""
    directory = step_dir(args, model, precision, batch, recompute)
    if os.path.isfile(os.path.join(directory, "step.json")):
        return directory
    command = [sys.executable, "scripts/export_step.py", "--task=squad",
               f"--bert_config_file={CONFIGS[model]}", f"--max_seq_length={args.max_seq_length}",
               f"--train_batch_size={batch}", f"--precision={precision}",
               f"--output_dir={directory}"] + (["--recompute_grad"] if recompute else [])
    print(f"exporting {os.path.basename(directory)}", flush=True)
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"export of {directory} failed (TensorFlow is needed to export; "
                         f"export on such a machine with --export_only):\n"
                         f"{result.stderr[-2000:]}")
    return directory


def run_cell(command, json_path):
    """Runs one cell's command; its JSON, or {"error": last line} when it failed."""
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0 or not os.path.isfile(json_path):
        lines = (result.stderr or result.stdout).strip().splitlines() or ["failed"]
        return {"error": lines[-1][:300]}
    with open(json_path) as f:
        return json.load(f)


def jax_cell(args, directory, json_path, num_steps=None):
    record = run_cell([sys.executable, "scripts/run_step.py", f"--step_dir={directory}",
                       f"--platform={args.platform}", "--random_init", "--random_features",
                       f"--num_steps={num_steps or args.num_steps}",
                       f"--num_warmup_steps={args.num_warmup_steps}",
                       f"--peak_matmul_size={args.peak_matmul_size}",
                       f"--output_json={json_path}"], json_path)
    if "error" in record:
        return record
    memory = record["memory"]
    peak = memory.get("peak_bytes_in_use", memory.get("compiled_step_bytes"))
    return {"seq_per_s": record["sequences_per_s"],
            "step_ms": 1000 * record["step_time_median_s"],
            "fraction_of_peak": record["fraction_of_peak"], "compile_s": record["compile_s"],
            "peak_memory_mb": peak / 2**20 if peak else None,
            "peak_matmul_tflops": record["peak_matmul_tflops"],
            "model_tflops": record["model_tflops"], "device": record["device"]}


def torch_cell(args, model, precision, json_path, compiled, peak_tflops, flops):
    command = [args.torch_python, "benchmarks/pytorch_squad.py",
               f"--bert_config_file={CONFIGS[model]}", f"--precision={precision}",
               f"--batch_size={args.batch_size}", f"--max_seq_length={args.max_seq_length}",
               f"--num_steps={args.num_steps}", f"--num_warmup_steps={args.num_warmup_steps}",
               f"--device={'cuda' if args.platform == 'gpu' else 'cpu'}",
               f"--output_json={json_path}"] + (["--compile"] if compiled else [])
    record = run_cell(command, json_path)
    if "error" in record:
        return record
    median = record["step_time_median_s"]
    return {"seq_per_s": record["sequences_per_second"], "step_ms": 1000 * median,
            "fraction_of_peak": (flops / median / 1e12 / peak_tflops) if peak_tflops else None,
            "compile_s": record["first_step_s"] if compiled else None,
            "peak_memory_mb": record.get("peak_memory_mb"), "framework": record["framework"]}


def tensorflow_cell(args, model, precision, json_path, peak_tflops, flops):
    record = run_cell([sys.executable, "scripts/benchmark.py", "--task=squad", "--mode=train",
                       f"--bert_config_file={CONFIGS[model]}", f"--precision={precision}",
                       f"--batch_size={args.batch_size}",
                       f"--max_seq_length={args.max_seq_length}", f"--num_steps={args.num_steps}",
                       "--nocheck_onednn", f"--output_json={json_path}"], json_path)
    if "error" in record:
        return record
    return {"seq_per_s": record["sequences_per_second"],
            "step_ms": 1000 * record["step_time_median_s"],
            # Against the exported step's peak: one matmul rate for every cell of the device.
            "fraction_of_peak": (flops / record["step_time_median_s"] / 1e12 / peak_tflops
                                 if peak_tflops else None), "compile_s": None,
            "peak_memory_mb": record.get("peak_memory_mb")}


def find_max_batch(args, model, precision, recompute):
    """The largest batch (doubling) whose exported step compiles and runs; None if none."""
    best, batch = None, args.batch_size
    while batch <= args.max_batch_limit:
        directory = ensure_exported(args, model, precision, batch, recompute)
        record = jax_cell(args, directory, os.path.join(directory, "probe.json"), num_steps=1)
        print(f"  batch {batch}{' (recompute)' if recompute else ''}: "
              f"{'fails: ' + record['error'] if 'error' in record else 'runs'}", flush=True)
        if "error" in record:
            break
        best, batch = batch, batch * 2
    return best


def format_table(rows):
    columns = ("model", "precision", "runtime", "seq/s", "step ms", "of peak", "compile s",
               "peak MB")
    keys = (None, None, None, "seq_per_s", "step_ms", "fraction_of_peak", "compile_s",
            "peak_memory_mb")
    formats = (None, None, None, "{:.2f}", "{:.1f}", "{:.2f}", "{:.1f}", "{:.0f}")
    lines = [columns]
    for row in rows:
        cells = [row["model"], row["precision"], row["runtime"]]
        for key, fmt in zip(keys[3:], formats[3:], strict=True):
            value = row.get(key)
            cells.append(row["error"][:40] if "error" in row and key == "seq_per_s" else
                         "-" if value is None else fmt.format(value))
        lines.append(cells)
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(columns))]
    return "\n".join(" | ".join(str(c).rjust(w) for c, w in zip(line, widths, strict=True))
                     for line in lines)


def main():
    args = parse_args()
    sys.path.insert(0, ROOT)
    models, precisions = args.models.split(","), args.precisions.split(",")
    if args.export_only:
        for model in models:
            for precision in precisions:
                ensure_exported(args, model, precision, args.batch_size)
        return
    rows, searches = [], []
    for model in models:
        for precision in precisions:
            directory = ensure_exported(args, model, precision, args.batch_size)
            with open(os.path.join(directory, "step.json")) as f:
                flops = json.load(f)["model_flops_per_step"]
            cell = jax_cell(args, directory, os.path.join(directory, "run.json"))
            rows.append({"model": model, "precision": precision, "runtime": "exported step "
                         "(JAX PJRT)", **cell})
            peak = cell.get("peak_matmul_tflops")
            if args.torch_python:
                for compiled in ([False] if args.no_torch_compile else [False, True]):
                    name = "torch.compile" if compiled else "PyTorch eager"
                    rows.append({"model": model, "precision": precision, "runtime": name,
                                 **torch_cell(args, model, precision,
                                              os.path.join(directory, f"torch-{compiled}.json"),
                                              compiled, peak, flops)})
            if args.tensorflow:
                rows.append({"model": model, "precision": precision,
                             "runtime": "TensorFlow graph",
                             **tensorflow_cell(args, model, precision,
                                               os.path.join(directory, "tf.json"),
                                               peak, flops)})
            if args.find_max_batch:
                for recompute in (False, True):
                    searches.append({"model": model, "precision": precision,
                                     "recompute_grad": recompute,
                                     "max_batch": find_max_batch(args, model, precision,
                                                                 recompute)})
    device = next((row["device"] for row in rows if "device" in row), args.platform)
    print(f"SQuAD seq {args.max_seq_length}, batch {args.batch_size}, on {device}")
    print(format_table(rows))
    for search in searches:
        print(f"largest batch, {search['model']} {search['precision']}"
              f"{' --recompute_grad' if search['recompute_grad'] else ''}: "
              f"{search['max_batch']}")
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump({"device": device, "platform": args.platform,
                       "batch_size": args.batch_size, "max_seq_length": args.max_seq_length,
                       "rows": rows, "max_batch": searches}, f, indent=1)


if __name__ == "__main__":
    main()
