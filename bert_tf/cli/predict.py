"""scripts/predict.py: one example a line in (text or JSON lines), one JSON line out, from an
export, an ONNX or TFLite file or a checkpoint. Every line is checked before the model runs.
"""

import json
import os
import sys
import time

import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.errors import BertTfError
from bert_tf.serving import export
from bert_tf.serving.export import TASKS, PredictConfig, newest_export
from bert_tf.serving.predictor import Predictor

INPUT_FORMATS = ("text", "jsonl")


_PAIR_SEPARATOR = " ||| "


def _parse_line(line, input_format, task):
    """One input line as {field: str} (plus "id" from JSON) for `task` (its class, whose
    `predict_fields` name the fields); raises ValueError saying why."""
    required, optional = task.predict_fields
    if input_format == "jsonl":
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a JSON object ({e.msg})") from None
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        for key in (*required, *optional):
            if key in record and not isinstance(record[key], str) and record[key] is not None:
                raise ValueError(f"\"{key}\" must be a string")
        missing = [key for key in required if not record.get(key)]
        if missing:
            raise ValueError(f"no {' / '.join(missing)} (a {task.name} model reads "
                             f"{', '.join(required + optional)})")
        return {key: record[key] for key in (*required, *optional, "id") if key in record}
    parts = line.split(_PAIR_SEPARATOR)
    if not line.strip():
        raise ValueError("empty line")
    if len(parts) == 2 and len(required) + len(optional) == 2:
        return dict(zip(required + optional, parts, strict=True))
    if len(parts) == 1 and len(required) == 1:
        return {required[0]: line}
    raise ValueError(f"expected {_line_format(required, optional)} for a {task.name} model")


def _line_format(required, optional):
    """What a text line holds, e.g. 'question ||| context' or 'text' or 'text ||| text_b'."""
    if len(required) == 1 and not optional:
        return "one text"
    formats = [required, required + optional] if optional else [required]
    return " or ".join(f"'{_PAIR_SEPARATOR.join(fields)}'" for fields in formats)


def read_records(path, input_format, task):
    """The input lines of scripts/predict.py as dicts, all checked before any prediction.

    Args:
      path: the input file, or None for stdin.
      input_format: "text" or "jsonl" (see `tool_flags.define_predict_flags`).
      task: the model's task class (its `predict_fields`: which fields a line needs).

    Raises:
      BertTfError: naming the file and line of the first line that is not `input_format`.
    """

    source = path or "<stdin>"
    if path:
        fileio.require_file(path, flag="input_file", what="input file")
        with fileio.open_text(path, encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
    else:
        lines = sys.stdin.read().splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(_parse_line(line, input_format, task))
        except ValueError as e:
            raise BertTfError(f"{source}:{number}: {e}; fix the line or pass the right "
                              "--input_format.") from None
    return records


def _answer_records(predictor, records, options):
    """The model's answers (JSON-ready dicts) to a chunk of `read_records` records."""
    outputs = predictor.answer_records(records, options)
    return [({"id": record["id"]} if "id" in record else {}) | output
            for record, output in zip(records, outputs, strict=True)]


def _model_task(options):
    """The task class of the model `options` name (read without loading it), checking that
    exactly one of --export_dir / --onnx_file / --tflite_file / --init_checkpoint is given."""
    given = [flag for flag, value in (("export_dir", options.export_dir),
                                      ("onnx_file", options.onnx_file),
                                      ("tflite_file", options.tflite_file),
                                      ("init_checkpoint", options.model.init_checkpoint))
             if value]
    if len(given) != 1:
        named = ", ".join(f"--{flag}" for flag in given) or "none"
        raise BertTfError("pass exactly one of --export_dir, --onnx_file, --tflite_file and "
                          f"--init_checkpoint (got {named}).")
    if options.export_dir:
        path = os.path.join(newest_export(options.export_dir), "assets.extra",
                            export.PREDICT_CONFIG_FILE)
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                return PredictConfig.from_dict(json.loads(f.read()), path).task_class
        return None  # from_saved_model names what is missing.
    if options.onnx_file or options.tflite_file:
        return None
    if not options.task:
        raise BertTfError("--task: required with --init_checkpoint; one of "
                          f"{', '.join(TASKS)}.")
    return export.predicting_task(options.task)


def make_predictor(options):
    """The `Predictor` of `PredictOptions`."""
    if options.export_dir:
        return Predictor.from_saved_model(options.export_dir, options.batch_size)
    if options.onnx_file:
        return Predictor.from_onnx(options.onnx_file, options.batch_size)
    if options.tflite_file:
        return Predictor.from_tflite(options.tflite_file, options.batch_size)
    task = export.predicting_task(options.task)
    settings = {name: getattr(options, name) for name in task.predict_flags}
    return Predictor.from_checkpoint(
        options.model.init_checkpoint, options.model.bert_config_file,
        options.tokenizer.vocab_file, options.task,
        do_lower_case=options.tokenizer.do_lower_case,
        max_seq_length=options.model.max_seq_length, label_list=options.labels,
        batch_size=options.batch_size, precision_name=options.model.precision, **settings)


def run_predict(options):
    """scripts/predict.py: reads every input line, then answers them in chunks, writing JSON
    lines to --output_file (whole or not at all) or stdout as they come.

    Returns:
      The number of lines answered.
    """

    if options.output_file:
        fileio.require_local(options.output_file, "output_file", "predict.py writes its answers")
    task = _model_task(options)
    records = read_records(options.input_file, options.input_format, task) if task else None
    predictor = make_predictor(options)
    if records is None:
        records = read_records(options.input_file, options.input_format, predictor.task)
    if not options.output_file:
        _write_answers(predictor, records, options, sys.stdout)
    else:
        with fileio.replaced_on_success(options.output_file) as path, \
                open(path, "w", encoding="utf-8") as output:
            _write_answers(predictor, records, options, output)
    return len(records)


def _write_answers(predictor, records, options, output):
    """Writes one JSON line per record to `output` as the answers come, with progress."""
    chunk = options.batch_size * 16
    start = time.time()
    for begin in range(0, len(records), chunk):
        for record in _answer_records(predictor, records[begin:begin + chunk], options):
            output.write(json.dumps(record, ensure_ascii=False) + "\n")
        output.flush()
        logging.info("%d of %d lines answered (%.1f/s)", min(begin + chunk, len(records)),
                     len(records), min(begin + chunk, len(records)) /
                     max(time.time() - start, 1e-9))
