"""What a process that only predicts tells TensorFlow: its weights never change.

oneDNN reorders each matmul's weight into the layout its kernel wants. A constant weight it
reorders once and keeps; a variable's it reorders on every call, because a training step may
have changed it. `TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1` tells it that variables do not change
either, so it keeps those too: small batches answer faster, in bf16 most (the measurements
are in docs/benchmarks-history.md).

TensorFlow reads the variable once, at the first oneDNN matmul of the process, and then for
every graph it runs: a process that trains must never set it (its steps would run on the
first weights they saw).
"""

import os

from absl import logging

FROZEN_WEIGHTS_VARIABLE = "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"


def assume_frozen_weights():
    """Sets `TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1` unless the environment sets it already.

    Call it at the start of a process that only predicts (scripts/predict.py does), before
    TensorFlow runs any model.

    Returns:
      Whether the process assumes frozen weights (False when the environment said "0").
    """
    value = os.environ.setdefault(FROZEN_WEIGHTS_VARIABLE, "1")
    if value != "1":
        logging.info("%s=%s: oneDNN reorders the weights on every call.",
                     FROZEN_WEIGHTS_VARIABLE, value)
    return value == "1"
