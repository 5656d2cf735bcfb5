"""No function in bert_tf/ is longer than 80 lines (docstring and comments included).

A function's length is `end_lineno - lineno + 1` of its `ast` node (decorators not counted);
methods and nested functions count on their own, and a nested function's lines count toward
the function that holds it too. One test per module, so a failure names the module and each
long function in it as file:function:length.
"""

import ast
import glob
import os

import pytest
from envs import ROOT

MAX_LINES = 80
MODULES = sorted(os.path.relpath(path, ROOT)
                 for path in glob.glob(os.path.join(ROOT, "bert_tf", "**", "*.py"),
                                       recursive=True))


def _function_lengths(tree):
    """Yields (qualified name, lines) of every function and method in `tree`."""
    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                yield name, child.end_lineno - child.lineno + 1
                yield from visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, prefix + child.name + ".")
            else:
                yield from visit(child, prefix)

    yield from visit(tree, "")


def test_the_walk_finds_the_modules():
    assert "bert_tf/optimization.py" in MODULES and len(MODULES) > 20, MODULES


@pytest.mark.parametrize("module", MODULES)
def test_no_function_is_longer_than_80_lines(module):
    with open(os.path.join(ROOT, module), encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=module)
    too_long = [f"{module}:{name}:{lines}" for name, lines in _function_lengths(tree)
                if lines > MAX_LINES]
    assert not too_long, (f"functions over {MAX_LINES} lines (split them into named "
                          f"steps): {', '.join(too_long)}")
