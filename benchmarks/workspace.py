"""The work directory of a benchmark that writes large files (checkpoints, generated corpora)."""

import contextlib
import os
import tempfile


def work_directory(work_dir, prefix):
    """A context giving `work_dir` as it is (made if missing, kept at the end), or, when
    `work_dir` is empty, a new temporary directory named `prefix...`, removed at the end with
    all it holds (runs' checkpoints and generated inputs take GBs)."""
    if work_dir:
        os.makedirs(work_dir, exist_ok=True)
        return contextlib.nullcontext(work_dir)
    return tempfile.TemporaryDirectory(prefix=prefix)
