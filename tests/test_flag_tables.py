"""Every script's flags as committed in tests/fixtures/flag_tables.json: the same names, kinds,
defaults, choices, bounds and required flags (help text may be reworded). The fixture was
written from the hand-written flag definitions; regenerate it only for a deliberate change of a
command line (python tests/fixtures/make_flag_tables.py)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(ROOT, "tests", "fixtures", "make_flag_tables.py")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "flag_tables.json")


@pytest.fixture(scope="module")
def tables():
    # One process for all scripts: it imports TensorFlow once.
    result = subprocess.run([sys.executable, DRIVER, "--print"], capture_output=True, text=True,
                            cwd=ROOT, timeout=300,
                            env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


with open(FIXTURE) as _f:
    EXPECTED = json.load(_f)


def test_the_same_scripts_define_flags(tables):
    assert sorted(tables) == sorted(EXPECTED)


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_a_scripts_flags_are_as_committed(tables, script):
    found, expected = tables.get(script, {}), EXPECTED[script]
    assert sorted(found) == sorted(expected), "flag names differ"
    changed = {name: {key: (expected[name][key], found[name].get(key))
                      for key in expected[name] if found[name].get(key) != expected[name][key]}
               for name in expected if found[name] != expected[name]}
    assert not changed, f"{script}: (committed, now) per flag: {changed}"



def test_at_most_40_hand_written_flag_definitions():
    # Counted as `grep -c DEFINE bert_tf/cli/*.py` counts them: lines that mention DEFINE.
    cli = os.path.join(ROOT, "bert_tf", "cli")
    count = 0
    for name in sorted(os.listdir(cli)):
        if name.endswith(".py"):
            with open(os.path.join(cli, name)) as f:
                count += sum("DEFINE" in line for line in f)
    assert count <= 40
