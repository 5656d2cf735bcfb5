"""Every `--flag`, file path and `bert_tf.` name that README.md and docs/*.md mention exists.

Flags are those the scripts (scripts/*.py, benchmarks/*.py) define: each script runs in a
forked child up to its command-line parsing, and the names are collected from absl's registry
or from the script's argparse parser.
"""

import argparse
import glob
import importlib
import multiprocessing
import os
import re
import runpy
import sys

import pytest
from envs import ROOT

PAGES = ["README.md", *sorted(os.path.relpath(p, ROOT)
                              for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))]

# Flags of other tools that the docs show next to ours (pip; TensorFlow's TF_XLA_FLAGS; the
# official SQuAD script's spellings that squad_evaluate.py takes as aliases are absl flags and
# are checked).
OTHER_TOOLS_FLAGS = {"no-deps", "tf_xla_ops_to_cluster", "tf_xla_persistent_cache_directory"}
# Flags every script takes without defining them: errors.run_main's and absl's own.
COMMON_FLAGS = {"debug", "helpfull", "help", "tf_xla_cpu_global_jit"}


def _docs_text():
    return {page: open(os.path.join(ROOT, page), encoding="utf-8").read() for page in PAGES}


class _Parsed(Exception):  # noqa: N818 (a stop, not an error)
    """Raised instead of parsing an argparse command line: the options are known by then."""


def _defined_flags(script, queue):
    from absl import flags

    sys.argv = [script]
    sys.path.insert(0, os.path.dirname(script))
    with open(script, encoding="utf-8") as f:
        uses_argparse = "argparse" in f.read()
    if not uses_argparse:
        runpy.run_path(script, run_name="bert_tf_docs_check")
        queue.put(sorted(name for name in flags.FLAGS))
        return
    options = []

    def record(parser, *args, **kwargs):
        options.extend(option.lstrip("-") for option in parser._option_string_actions)
        raise _Parsed()

    argparse.ArgumentParser.parse_args = record
    try:
        runpy.run_path(script, run_name="__main__")
    except _Parsed:
        pass
    queue.put(sorted(options))


def _flags_of(script):
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_defined_flags, args=(script, queue))
    child.start()
    names = queue.get(timeout=120)
    child.join()
    return names


@pytest.fixture(scope="module")
def defined_flags():
    import tensorflow  # noqa: F401  (imported once, before the forks)

    import bert_tf.cli.flags  # noqa: F401

    scripts = sorted(glob.glob(os.path.join(ROOT, "scripts", "*.py")) +
                     glob.glob(os.path.join(ROOT, "benchmarks", "*.py")))
    return {name for script in scripts for name in _flags_of(script)}


def test_every_flag_the_docs_mention_is_defined(defined_flags):
    unknown = {}
    for page, text in _docs_text().items():
        for name in re.findall(r"(?<![\w-])--([a-z][a-z0-9_-]*)", text):
            bare = name[2:] if name.startswith("no") and name[2:] in defined_flags else name
            if (bare not in defined_flags and name not in OTHER_TOOLS_FLAGS
                    and name not in COMMON_FLAGS):
                unknown.setdefault(page, set()).add(f"--{name}")
    assert not unknown, unknown


def test_every_path_the_docs_mention_exists():
    missing = {}
    for page, text in _docs_text().items():
        for path in re.findall(r"(?<![\w./-])((?:scripts|benchmarks|bert_tf|tests|configs|data|"
                               r"docs)/[\w./-]*\w)", text):
            if not os.path.exists(os.path.join(ROOT, path)):
                missing.setdefault(page, set()).add(path)
    assert not missing, missing


def _resolves(dotted):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def test_every_bert_tf_name_the_docs_mention_exists():
    unknown = {}
    for page, text in _docs_text().items():
        for name in re.findall(r"(?<![\w./])(bert_tf(?:\.\w+)+)", text):
            if not _resolves(name):
                unknown.setdefault(page, set()).add(name)
    assert not unknown, unknown


def test_the_checks_see_a_wrong_name(defined_flags):
    """The checks are not vacuous: a misspelt flag, path and name are caught."""
    assert "output_dir" in defined_flags and "no_such_flag" not in defined_flags
    assert not os.path.exists(os.path.join(ROOT, "scripts/run_clasifier.py"))
    assert _resolves("bert_tf.modeling.BertModel")
    assert not _resolves("bert_tf.modeling.BertModle")
