"""Faults from the storage and the machine, as one line each (`BertTfError`).

`Estimator.train`, `evaluate`, `predict` and `export_saved_model` run under
`translate_faults(mode)`, which turns what TensorFlow raises deep inside `session.run` into
the line a user can act on:

  DataLossError                  a corrupt TFRecord: the file, the byte offset and the fix
                                 (`record_integrity.data_loss_message`; the input_fn's `input_files`
                                 and `flag` attributes, set by `input_pipeline.record_input_fn`, say
                                 which files it read);
  ResourceExhaustedError (OOM),  out of memory: the batch per replica and what shrinks it
  MemoryError                    (`--num_accumulation_steps`, a smaller batch,
                                 `--precision=bf16/fp16`);
  a full disk / a failed write   what was written where, and the checkpoint the same command
                                 resumes from (`checkpoints.write_failure_message`).

`checkpoints` has the checkpoint side (unreadable checkpoints, failed checkpoint writes).
"""

import contextlib
import errno
import functools
import inspect

import tensorflow as tf

from bert_tf.data import record_integrity
from bert_tf.errors import BertTfError, short_tf_error
from bert_tf.training import checkpoints

# What each mode's batch is called on the command line.
_BATCH_FLAGS = {"train": "train_batch_size", "eval": "eval_batch_size",
                "infer": "predict_batch_size"}
# Besides a full disk: a file over the size limit, a read-only file system.
_WRITE_ERRNOS = (errno.EFBIG, errno.EROFS)
_WRITES = {"train": "checkpoints and summaries", "eval": "eval summaries",
           "infer": "predictions", "export": "the export"}


def out_of_memory_message(error, mode, batch_per_replica):
    """The one line for an out-of-memory error in `mode` ("train", "eval", "infer")."""
    if isinstance(error, MemoryError):
        cause = "out of memory on the host (MemoryError)"
    else:
        # TF's first line is "Graph execution error:"; the line that says what is "OOM when
        # allocating tensor with shape[...] and type float on <device> by allocator <name>".
        lines = [line.strip() for line in str(error).splitlines() if "OOM" in line]
        detail = lines[0].split(" by allocator")[0] if lines else short_tf_error(error)
        cause = f"out of memory ({detail[:200]})"
    batch = (f" with a batch of {batch_per_replica} examples per replica"
             if batch_per_replica else "")
    flag = _BATCH_FLAGS.get(mode, "train_batch_size")
    if mode == "train":
        fix = ("pass --num_accumulation_steps=2 (or more: the same --train_batch_size in "
               "smaller micro-batches), a smaller --train_batch_size, or --precision=bf16 / "
               "fp16")
    else:
        fix = f"pass a smaller --{flag}, or --precision=bf16 / fp16"
    return f"{cause}{batch}; {fix}."


def translate(error, mode, estimator, input_fn=None, batch_per_replica=None):
    """The BertTfError for `error` raised while `estimator` ran `mode`, or None to re-raise."""
    if isinstance(error, BertTfError):
        return None
    if isinstance(error, tf.errors.DataLossError):
        return BertTfError(record_integrity.data_loss_message(
            error, getattr(input_fn, "input_files", None), getattr(input_fn, "flag", None)))
    if checkpoints.is_disk_full(error) or (isinstance(error, OSError) and
                                           error.errno in _WRITE_ERRNOS):
        return BertTfError(checkpoints.write_failure_message(
            error, _WRITES.get(mode, "files"), estimator.model_dir))
    if isinstance(error, (tf.errors.ResourceExhaustedError, MemoryError)):
        return BertTfError(out_of_memory_message(error, mode, batch_per_replica))
    return None


def translate_faults(mode):
    """Decorates an `Estimator` method run in `mode` (see the module docstring); generator
    methods (predict) are translated while they are iterated."""

    def decorator(method):
        def context(estimator, args, kwargs):
            bound = inspect.signature(method).bind(estimator, *args, **kwargs)
            return dict(mode=mode, estimator=estimator,
                        input_fn=bound.arguments.get("input_fn"),
                        batch_per_replica=estimator.batch_per_replica(mode))

        @contextlib.contextmanager
        def translated_errors(estimator, args, kwargs):
            try:
                yield
            except (tf.errors.OpError, OSError, MemoryError) as e:
                translated = translate(e, **context(estimator, args, kwargs))
                if translated is None:
                    raise
                raise translated from None

        if inspect.isgeneratorfunction(method):
            @functools.wraps(method)
            def generator(estimator, *args, **kwargs):
                with translated_errors(estimator, args, kwargs):
                    yield from method(estimator, *args, **kwargs)
            return generator

        @functools.wraps(method)
        def wrapper(estimator, *args, **kwargs):
            with translated_errors(estimator, args, kwargs):
                return method(estimator, *args, **kwargs)
        return wrapper

    return decorator
