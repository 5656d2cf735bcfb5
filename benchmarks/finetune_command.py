"""The whole fine-tuning command on longer texts: `scripts/run_classifier.py` against a whole
Hugging Face Trainer script, each timed as a shell times it.

Data: sentences of the shipped corpus (data/corpus, Austen's *Persuasion*: train.txt's
chapters for train, eval.txt's for dev) of --min_chars to --max_chars characters, labelled
"dialogue" when they hold a quotation mark and "narration" otherwise; --num_examples of them
(sampled, without repeats) for train, every such dev sentence for dev.

Cells, each a fresh process, alternating their order every repeat:
- "bert_tf": `python scripts/run_classifier.py --task_name=tsv --do_train --do_eval` from
  MiniLM's bert_tf conversion, one epoch, the flags' defaults otherwise (length buckets on):
  Python and TensorFlow start-up, tokenizing and writing the TFRecords, the training graph, the
  epoch with its checkpoints, then the dev evaluation.
- "hf": `benchmarks/hf_finetune_epoch.py --save_dir=...` in --torch_python: torch and
  transformers start-up, tokenizing, `from_pretrained`, `Trainer.train()` with length grouping
  and dynamic padding, the dev prediction, `save_model`.
The same batch, learning rate, warmup, weight decay, epsilon, clipping and max_seq_length on
both sides; each side's loop rate is read as in finetune_epoch.py.

    .venv/bin/python benchmarks/finetune_command.py --torch_python=/tmp/torchvenv/bin/python \\
        --repeats=3 --output_json=/tmp/finetune_command.json
"""

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time

import finetune_epoch
import workspace

REPO = finetune_epoch.REPO
sys.path.insert(0, os.path.join(REPO, "tests"))
import finetune_helpers  # noqa: E402  (eval_results.txt's reader)

CORPUS = os.path.join(REPO, "data", "corpus")
CELLS = ("bert_tf", "hf")
TARGET = 1.3  # bert_tf's command over the Trainer script's.


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--torch_python", required=True,
                        help="Python with torch, transformers and accelerate (the hf cell).")
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--num_examples", type=int, default=1600, help="Training examples.")
    parser.add_argument("--min_chars", type=int, default=80)
    parser.add_argument("--max_chars", type=int, default=600)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work_dir", default=None,
                        help="Kept. Default: a temporary directory, removed at the end.")
    parser.add_argument("--output_json", default=None)
    return parser.parse_args()


def corpus_rows(name, min_chars, max_chars):
    """(sentence, "dialogue" | "narration") for data/corpus/<name>.txt's sentences whose length
    is within [min_chars, max_chars]."""
    with open(os.path.join(CORPUS, f"{name}.txt"), encoding="utf-8") as f:
        sentences = [line.strip().replace("\t", " ") for line in f]
    return [(s, "dialogue" if '"' in s else "narration") for s in sentences
            if min_chars <= len(s) <= max_chars]


def build_data(args, data_dir, tokenizer):
    """Writes data_dir/train.tsv and dev.tsv; returns what describes them."""
    train = corpus_rows("train", args.min_chars, args.max_chars)
    if len(train) < args.num_examples:
        raise SystemExit(f"--num_examples={args.num_examples}: data/corpus/train.txt has only "
                         f"{len(train)} sentences of {args.min_chars}-{args.max_chars} "
                         "characters; ask for fewer or widen the range.")
    train = random.Random(args.seed).sample(train, args.num_examples)
    dev = corpus_rows("eval", args.min_chars, args.max_chars)
    os.makedirs(data_dir, exist_ok=True)
    finetune_epoch.write_tsv(os.path.join(data_dir, "train.tsv"), train)
    finetune_epoch.write_tsv(os.path.join(data_dir, "dev.tsv"), dev)
    lengths = sorted(2 + len(tokenizer.tokenize(text)) for text, _ in train)
    return {"train_examples": len(train), "dev_examples": len(dev),
            "train_mean_chars": statistics.mean(len(text) for text, _ in train),
            "train_mean_word_pieces": statistics.mean(min(n, args.max_seq_length)
                                                      for n in lengths),
            "train_word_piece_quartiles": [lengths[len(lengths) * q // 4] for q in (1, 2, 3)],
            "train_truncated_fraction": (sum(n > args.max_seq_length for n in lengths)
                                         / len(lengths)),
            "dev_majority_accuracy": (max(sum(label == "dialogue" for _, label in dev),
                                          sum(label == "narration" for _, label in dev))
                                      / len(dev))}


def run_bert_tf(args, paths, repeat):
    output_dir = os.path.join(paths["work"], f"bert_tf-{repeat}")
    shutil.rmtree(output_dir, ignore_errors=True)
    minilm = paths["minilm_tf"]
    command = [sys.executable, os.path.join(REPO, "scripts", "run_classifier.py"),
               "--task_name=tsv", "--text_a_column=sentence", f"--data_dir={paths['data']}",
               f"--vocab_file={os.path.join(minilm, 'vocab.txt')}",
               f"--bert_config_file={os.path.join(minilm, 'bert_config.json')}",
               f"--init_checkpoint={os.path.join(minilm, 'bert_model.ckpt')}",
               "--do_train", "--do_eval", f"--max_seq_length={args.max_seq_length}",
               f"--train_batch_size={args.batch_size}", f"--learning_rate={args.learning_rate}",
               "--num_train_epochs=1", f"--random_seed={args.seed}",
               f"--log_every_n_steps={finetune_epoch.LOG_EVERY}", f"--output_dir={output_dir}"]
    seconds, completed = finetune_epoch.timed_command(command, REPO)
    results = finetune_helpers.read_key_values(os.path.join(output_dir, "eval_results.txt"))
    startup = [line for line in completed.stderr.splitlines()
               if "Started the training loop" in line]
    return {"seconds": seconds, "dev_accuracy": results["eval_accuracy"],
            "steady_examples_per_second": finetune_epoch.steady_rate(output_dir,
                                                                     args.batch_size),
            "startup": startup[-1].split("] ", 1)[-1] if startup else None}


def run_hf(args, paths, repeat):
    save_dir = os.path.join(paths["work"], f"hf-{repeat}")
    shutil.rmtree(save_dir, ignore_errors=True)
    result_path = os.path.join(paths["work"], f"hf-{repeat}.json")
    seconds, _ = finetune_epoch.timed_command(
        finetune_epoch.hf_command(args, paths, result_path, f"--save_dir={save_dir}"), REPO)
    with open(result_path) as f:
        result = json.load(f)
    return {"seconds": seconds, "dev_accuracy": result["dev_accuracy"],
            "steady_examples_per_second": result["steady_examples_per_second"],
            "trainer_train_seconds": result["train_seconds"], "framework": result["framework"]}


def format_markdown(summary):
    names = {"bert_tf": "`run_classifier.py --do_train --do_eval`",
             "hf": "Trainer script (train, predict dev, save)"}
    args, data = summary["args"], summary["data"]
    lines = [f"MiniLM-L6-H384, {data['train_examples']} train / {data['dev_examples']} dev "
             f"sentences of {args['min_chars']}-{args['max_chars']} characters (mean "
             f"{data['train_mean_chars']:.0f}; {data['train_mean_word_pieces']:.1f} word pieces, "
             f"quartiles {'/'.join(str(q) for q in data['train_word_piece_quartiles'])}), batch "
             f"{args['batch_size']}, max_seq_length {args['max_seq_length']}, one epoch; medians "
             f"of {args['repeats']} alternating repeats; load average "
             f"{finetune_epoch.load_averages(summary)}.", "",
             "| command | whole command s (median; runs) | examples/s (loop) | dev accuracy "
             "(runs) |", "|---|---|---|---|"]
    for cell, row in summary["rows"].items():
        runs = ", ".join(f"{x:.1f}" for x in row["seconds_runs"])
        accuracy = ", ".join(f"{x:.3f}" for x in row["dev_accuracy"])
        steady = row["steady_examples_per_second"]
        lines.append(f"| {names[cell]} | {row['seconds']:.1f} ({runs}) | "
                     f"{'-' if steady is None else f'{steady:.1f}'} | {accuracy} |")
    if summary.get("ratio"):
        ratio = summary["ratio"]
        loop = "-" if ratio["loop"] is None else f"{ratio['loop']:.2f}x"
        lines.append(f"\nbert_tf over Trainer: {ratio['command']:.2f}x the whole command "
                     f"(target >= {TARGET:.1f}x: {'met' if ratio['met'] else 'not met'}); "
                     f"{loop} in the training loop. Dev majority accuracy "
                     f"{data['dev_majority_accuracy']:.3f}.")
    return "\n".join(lines)


def main():
    args = parse_args()
    cells = args.cells.split(",")
    sys.path.insert(0, REPO)
    from bert_tf import tokenization
    from bert_tf.tools import machine

    with workspace.work_directory(args.work_dir, "finetune_command_") as work:
        paths = {"work": work, "data": os.path.join(work, "data"),
                 **finetune_epoch.minilm_checkpoints(work)}
        tokenizer = tokenization.FullTokenizer(os.path.join(paths["minilm_tf"], "vocab.txt"))
        data = build_data(args, paths["data"], tokenizer)
        print(f"data: {json.dumps(data)}", flush=True)
        load_before, started = os.getloadavg(), time.time()
        runs = finetune_epoch.alternating_runs(
            cells, args.repeats,
            lambda cell, repeat: (run_hf if cell == "hf" else run_bert_tf)(args, paths, repeat),
            lambda result: f"{result['seconds']:.1f} s")
    rows = {cell: {"seconds": statistics.median(run["seconds"] for run in cell_runs),
                   "seconds_runs": [run["seconds"] for run in cell_runs],
                   "steady_examples_per_second": finetune_epoch.steady_median(cell_runs),
                   "dev_accuracy": [run["dev_accuracy"] for run in cell_runs]}
            for cell, cell_runs in runs.items()}
    ratio = None
    if set(CELLS) <= set(rows):
        command = rows["hf"]["seconds"] / rows["bert_tf"]["seconds"]
        ratio = {"command": command, "target": TARGET, "met": command >= TARGET,
                 "loop": finetune_epoch.steady_ratio(rows["bert_tf"], rows["hf"])}
    summary = {"args": vars(args), "data": data, "machine": machine.machine_info(),
               "load_average_before": load_before, "load_average_after": os.getloadavg(),
               "minutes": (time.time() - started) / 60.0, "rows": rows, "ratio": ratio,
               "runs": runs}
    finetune_epoch.report(summary, format_markdown(summary), args.output_json)


if __name__ == "__main__":
    main()
