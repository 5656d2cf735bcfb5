"""prepare_corpus.py on a generated MediaWiki dump: time and peak memory against dump size.

Writes a dump of about --dump_mb MB (.xml, or .xml.bz2 with --bz2) by repeating the pages of
tests/data/wiki/sample.xml (articles with templates, tables, references; a redirect, a talk
page, a template page) under new titles, then runs scripts/prepare_corpus.py on it under
`/usr/bin/time -v` and prints one JSON line: dump MB, documents, sentences, wall seconds, MB/s
and the peak RSS of the parent process and of its largest child (the workers). Streaming
means the peak RSS stays the same for a 20 MB and a 200 MB dump.

    python benchmarks/prepare_corpus_scale.py --dump_mb=200 --num_workers=2

A measurement for the notes, not a test.
"""

import argparse
import bz2
import json
import os
import re
import subprocess
import sys
import time

import workspace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "tests", "data", "wiki", "sample.xml")


def write_dump(path, megabytes, compress):
    text = open(SAMPLE, encoding="utf-8").read()
    head, rest = text.split("  <page>", 1)
    pages = "  <page>" + rest.rsplit("</mediawiki>", 1)[0]
    opener = bz2.open if compress else open
    written, copy = 0, 0
    with opener(path, "wt", encoding="utf-8") as f:
        f.write(head)
        while written < megabytes * 1e6:
            block = re.sub(r"<title>([^<]*)</title>", rf"<title>\1 {copy}</title>", pages)
            f.write(block)
            written += len(block)
            copy += 1
        f.write("</mediawiki>\n")
    return written / 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump_mb", type=float, default=20)
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--bz2", action="store_true")
    parser.add_argument("--work_dir", default=None,
                        help="Kept. Default: a temporary directory, removed at the end.")
    args = parser.parse_args()
    # The generated input and its output: as large as the input.
    with workspace.work_directory(args.work_dir, "prepare_corpus_scale_") as work_dir:
        dump = os.path.join(work_dir, "dump.xml" + (".bz2" if args.bz2 else ""))
        dump_mb = write_dump(dump, args.dump_mb, args.bz2)
        command = ["/usr/bin/time", "-v", sys.executable,
                   os.path.join(ROOT, "scripts", "prepare_corpus.py"), f"--input_file={dump}",
                   f"--output_dir={os.path.join(work_dir, 'out')}", "--num_shards=4",
                   f"--num_workers={args.num_workers}"]
        start = time.time()
        result = subprocess.run(command, capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": ROOT})
        seconds = time.time() - start
        if result.returncode:
            raise SystemExit(result.stderr[-2000:])
        peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)",
                                result.stderr).group(1))
        summary = re.search(r"Wrote (\d+) documents, (\d+) sentences", result.stderr)
        print(json.dumps({"dump_mb": round(dump_mb, 1), "bz2": args.bz2,
                          "documents": int(summary.group(1)), "sentences": int(summary.group(2)),
                          "seconds": round(seconds, 1), "mb_per_s": round(dump_mb / seconds, 2),
                          "peak_rss_mb_largest_process": round(peak_kb / 1024, 1)}))


if __name__ == "__main__":
    main()
