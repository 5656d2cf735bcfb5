"""The environment of every child process the tests start, the same on every machine.

A shell (a developer's, or CI's: see .ci/run) may export variables that change what bert_tf
does: TF_CONFIG makes a script a multi-worker task (`estimator.RunConfig.is_chief`,
`distribute.make_strategy`), BERT_TF_DEBUG=1 turns clean `error:` lines into tracebacks
(`errors.run_main`). Children start without them, with the log level fixed and this checkout
first on the import path, so a test means the same wherever and from whichever directory it
runs. tests/conftest.py removes the same variables for the tests themselves.
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Variables that change bert_tf's behaviour when inherited.
# TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 would freeze every training test's weights at their first
# step (bert_tf.serving.prediction_process).
BEHAVIOUR_VARIABLES = ("TF_CONFIG", "BERT_TF_DEBUG", "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS")


def child_env(**overrides):
    """os.environ without BEHAVIOUR_VARIABLES, with PYTHONPATH=ROOT and TF's C++ log level 2
    (tests never read TF's log lines), then `overrides` (a value of None removes a variable).

    Returns:
      dict for `subprocess.run(..., env=...)`.
    """
    env = {key: value for key, value in os.environ.items() if key not in BEHAVIOUR_VARIABLES}
    env.update(PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env
