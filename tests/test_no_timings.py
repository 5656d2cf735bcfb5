"""No measurement in the code's text: docstrings, flag help and other string constants.

A timing in a docstring or a flag's help is true of one machine on one day and goes stale
unseen; the code says what and why, and the numbers live in docs/benchmarks.md (and
docs/benchmarks-history.md), next to the command that made them. Every `.py` under bert_tf/
and scripts/ is parsed with `ast`; each line of each string constant (a docstring is one, and
so is a flag's help) is matched against TIMING_PATTERNS. Format strings that print a value
measured at run time ("{:.1f} seq/s", "%.2f MB/s") and units on their own ("seconds",
"GFLOP/step" as a column header) do not match: every pattern needs a literal number.
"""

import ast
import os
import re

import pytest
from envs import ROOT

ROOTS = ("bert_tf", "scripts")

# A number as a measurement writes it: "0.3", "1.1-1.3", "~2" (not a format's "%.1f" or a
# name's digits, which a letter, "." or "%" precedes).
_NUMBER = r"(?<![\w.%{])~?\s?\d+(?:[.,]\d+)?(?:\s?-\s?\d+(?:\.\d+)?)?"

# What each pattern catches -> the pattern.
TIMING_PATTERNS = {
    "a time on a machine (N s on ...)": rf"{_NUMBER} ?s on\b",
    "a measured duration in seconds (decimal, range or approximate)":
        r"(?<![\w.%{])(?:~\s?\d+(?:\.\d+)?|\d+\.\d+|\d+(?:\.\d+)?\s?-\s?\d+(?:\.\d+)?) ?s\b",
    "milliseconds": rf"{_NUMBER} ?ms\b",
    "a speed ratio": r"\d(?:\.\d+)?x (?:faster|slower)\b|x (?:faster|slower)\b|"
                     r"(?<![\w.])\d+\.\d+x\b|\d+ times (?:faster|slower)\b",
    "a per-cent speed-up": r"\d ?% (?:faster|slower)\b",
    "a FLOP count or rate": rf"{_NUMBER} ?[GT]FLOP",
    # Not "loss=3.21 steps/sec=4.1", a log line's keys.
    "a throughput": rf"{_NUMBER} ?(?:seq|sequences|examples|inputs|strings|steps)/s(?:ec)?\b(?!=)|"
                    rf"{_NUMBER} ?[KMG]B/s\b",
}
_COMPILED = {reason: re.compile(pattern) for reason, pattern in TIMING_PATTERNS.items()}


def _python_files():
    for top in ROOTS:
        for directory, _, names in os.walk(os.path.join(ROOT, top)):
            for name in sorted(names):
                if name.endswith(".py"):
                    yield os.path.join(directory, name)


def _timings(source):
    """[(line, reason, text)] of the timings in `source`'s string constants."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        for offset, line in enumerate(node.value.splitlines()):
            for reason, pattern in _COMPILED.items():
                if pattern.search(line):
                    found.append((node.lineno + offset, reason, line.strip()))
                    break
    return sorted(found)


def test_no_timing_in_docstrings_or_help():
    hits = []
    for path in _python_files():
        with open(path, encoding="utf-8") as f:
            for line, reason, text in _timings(f.read()):
                hits.append(f"{os.path.relpath(path, ROOT)}:{line}: {reason}: {text!r}")
    assert not hits, ("timings belong in docs/benchmarks.md, not in the code's text:\n"
                      + "\n".join(hits))


@pytest.mark.parametrize("text", [
    "It took 0.3 s for MiniLM.",
    "0.7-1 s on 2 cores",
    "~2 s more per graph",
    "one text 57.6 -> 44.7 ms",
    "bf16 steps ran 1.1-1.3x faster with AMX",
    "~10x faster than text_format",
    "XLA's dot runs them at 0.81x of oneDNN's",
    "about 1000 times slower",
    "a matmul at 193.6 GFLOP/s",
    "the peak of 0.36 TFLOP/s",
    "2.85 seq/s against 2.17",
    "about 10 MB/s here",
    "0.1-0.25 s a check",
])
def test_the_patterns_see_a_timing(text):
    assert _timings(repr(text)), text


@pytest.mark.parametrize("text", [
    "{:.1f} seq/s",
    "Read %.2f MB in %.1f s: %.2f MB/s",
    "the time in seconds of the median step",
    "GFLOP/step",
    "peak TFLOP/s",
    "p90 s",
    "several times faster than building tf.train.Example",
    "exact_match F1s",
    "byte 0x%02x",
    "a [MASK] 80% of the time",
    "Training counts 3x the forward",
    "tensor<(?:([0-9x]*)x)?([a-z]+[0-9]*)>",
    "step 120/1000 loss=3.21 steps/sec=4.1 examples/sec=131",
])
def test_the_patterns_leave_ordinary_text(text):
    assert not _timings(repr(text)), text
