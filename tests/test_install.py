"""The editable install imports the real package from any working directory."""

import os
import subprocess
import sys

import bert_tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_next_to_a_clone_named_bert_tf(tmp_path):
    """A directory holding the clone `bert_tf/` (itself holding the package `bert_tf/` and
    setup.py) is on sys.path first when a script runs from it; the installed package must still
    be the one imported, not `./bert_tf` as an empty namespace package."""
    clone = tmp_path / "bert_tf"
    (clone / "bert_tf").mkdir(parents=True)
    (clone / "setup.py").write_text("import setuptools\nsetuptools.setup(name='bert_tf')\n")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c",
         "import bert_tf.data.classification_features, bert_tf; print(bert_tf.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == bert_tf.__file__
    assert bert_tf.__file__ == os.path.join(ROOT, "bert_tf", "__init__.py")
