"""Named arrays in safetensors files: an exported step's state and feature batches.

safetensors is a flat, memory-mapped format that numpy, JAX and PyTorch read without
TensorFlow, so a state crosses to a machine that has none.
"""

import os

import numpy as np

from bert_tf.errors import BertTfError, missing_extra


def _numpy_api():
    try:
        from safetensors import numpy as safetensors_numpy
    except ImportError:
        raise missing_extra("exported training steps need safetensors", "xla",
                            "jax safetensors") from None
    return safetensors_numpy


def save(arrays, path):
    """Writes `arrays` (name -> numpy array) to `path`, atomically (a temporary file, then a
    rename), so an interrupted write never leaves a partial file under the final name."""
    safetensors_numpy = _numpy_api()
    temporary = f"{path}.tmp-{os.getpid()}"
    # np.ascontiguousarray would make scalars (global_step) 1-D.
    safetensors_numpy.save_file({name: np.require(value, requirements="C")
                                 for name, value in arrays.items()}, temporary)
    os.replace(temporary, path)


def load(path, flag):
    """name -> numpy array of the safetensors file `path`.

    Raises:
      BertTfError: naming `flag` and the file when it is missing or unreadable.
    """
    safetensors_numpy = _numpy_api()
    if not os.path.isfile(path):
        raise BertTfError(f"--{flag}: '{path}' does not exist; pass a safetensors file written "
                          "by scripts/export_step.py or scripts/run_step.py.")
    try:
        return safetensors_numpy.load_file(path)
    except Exception as e:  # safetensors raises its own SafetensorError, and OSError.
        raise BertTfError(f"--{flag}: '{path}' is not a readable safetensors file ({e}); "
                          "write it again.") from None
