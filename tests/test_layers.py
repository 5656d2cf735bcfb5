"""The package's tiers (docs/architecture.md): a module imports only from its own tier and the
tiers below it, read from every import statement of bert_tf/, lazy ones inside functions too."""

import ast
import os

from envs import ROOT

# From the bottom up; a folder prefix ends with "/".
TIERS = (
    ("leaves", ("bert_tf/__init__.py", "bert_tf/errors.py", "bert_tf/fileio.py",
                "bert_tf/precision.py", "bert_tf/options.py")),
    ("model", ("bert_tf/modeling.py", "bert_tf/encoder/", "bert_tf/tokenization.py",
               "bert_tf/optimization.py",
               "bert_tf/table_growth.py", "bert_tf/crf.py")),
    ("data", ("bert_tf/data/", "bert_tf/metrics/")),
    ("training", ("bert_tf/training/",)),
    ("tf2", ("bert_tf/tf2.py",)),
    ("tasks", ("bert_tf/tasks/",)),
    ("serving", ("bert_tf/serving/",)),
    ("keras", ("bert_tf/keras.py", "bert_tf/keras_preprocessor.py", "bert_tf/keras_crf.py")),
    ("runs", ("bert_tf/runs/", "bert_tf/tools/", "bert_tf/step_program/")),
    ("cli", ("bert_tf/cli/",)),
)


def tier_of(path):
    for index, (_, places) in enumerate(TIERS):
        if any(path == place or (place.endswith("/") and path.startswith(place))
               for place in places):
            return index
    raise AssertionError(f"{path} is in no tier: add it to TIERS and docs/architecture.md")


def _module_file(module):
    base = os.path.join(ROOT, *module.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return os.path.relpath(candidate, ROOT)
    return None


def _imported_files(tree):
    """(line, file) of every bert_tf module an import statement of `tree` names."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bert_tf"):
            for alias in node.names:
                target = _module_file(f"{node.module}.{alias.name}") or _module_file(node.module)
                yield node.lineno, target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("bert_tf"):
                    yield node.lineno, _module_file(alias.name)


def _package_files():
    for directory, _, names in os.walk(os.path.join(ROOT, "bert_tf")):
        for name in names:
            if name.endswith(".py"):
                yield os.path.relpath(os.path.join(directory, name), ROOT)


def upward_imports():
    found = []
    for path in sorted(_package_files()):
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for line, target in _imported_files(tree):
            if target and target != path and tier_of(target) > tier_of(path):
                found.append(f"{path}:{line} imports {target} "
                             f"({TIERS[tier_of(path)][0]} -> {TIERS[tier_of(target)][0]})")
    return found


def test_every_module_is_in_a_tier():
    for path in _package_files():
        tier_of(path)


def test_no_module_imports_from_a_higher_tier():
    assert not upward_imports()


def test_an_upward_import_is_caught(tmp_path, monkeypatch):
    """The check is not vacuous: a training module importing a task is reported."""
    tree = ast.parse("from bert_tf.tasks import classification\n")
    targets = [target for _, target in _imported_files(tree)]
    assert targets == ["bert_tf/tasks/classification.py"]
    assert tier_of(targets[0]) > tier_of("bert_tf/training/runner.py")
