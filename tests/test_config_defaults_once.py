"""`BertConfig`'s defaults are written once, in `BertConfig` (and `encoder.settings`).

A `BertConfig` has every key (`from_dict` starts from the defaults), so code reads the
attribute; a fallback such as `getattr(config, "layer_norm_eps", 1e-12)` repeats a default
that then goes stale unseen when the config's changes. Every `.py` under bert_tf/ is parsed
with `ast` and each `getattr(<...config...>, "<BertConfig key>", <literal>)` is reported.
"""

import ast
import os

from envs import ROOT

from bert_tf import modeling

BERT_CONFIG_KEYS = frozenset(modeling.BertConfig(vocab_size=1).to_dict())


def _names_a_config(node):
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return "config" in name.lower()


def _is_literal(node):
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def repeated_defaults(source, path="<string>"):
    """["path:line: getattr(...)"] of the fallbacks in `source` that repeat a config default."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "getattr" and len(node.args) == 3):
            continue
        target, key, default = node.args
        if (_names_a_config(target) and isinstance(key, ast.Constant)
                and key.value in BERT_CONFIG_KEYS and _is_literal(default)):
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return found


def _package_files():
    for directory, _, names in os.walk(os.path.join(ROOT, "bert_tf")):
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.join(directory, name)


def test_the_check_finds_a_fallback():
    source = ('eps = getattr(bert_config, "layer_norm_eps", 1e-12)\n'
              'pad = getattr(config, "pad_token_id", 0)\n'  # Not a BertConfig key.
              'eps = getattr(options, "layer_norm_eps", 1e-12)\n'  # Not a config.
              'eps = getattr(self.config, "layer_norm_eps", DEFAULT)\n')  # Not a literal.
    assert repeated_defaults(source, "x.py") == [
        "x.py:1: getattr(bert_config, 'layer_norm_eps', 1e-12)"]


def test_no_getattr_repeats_a_bert_config_default():
    found = []
    for path in _package_files():
        with open(path, encoding="utf-8") as f:
            found += repeated_defaults(f.read(), os.path.relpath(path, ROOT))
    assert not found, ("read the BertConfig attribute (or take the default from "
                       "modeling.BertConfig / encoder.settings.LayerVariant):\n"
                       + "\n".join(found))
