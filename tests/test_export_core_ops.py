"""Every export kind (classifier, multi-label, regression, SQuAD, NER, multiple choice) is made
of core TensorFlow ops only: a fresh Python that never imports tensorflow_text loads it with
`tf.saved_model.load` and runs every signature, the text ones included, and every TF Serving
warm-up request of the export; every op type of its graph (nodes and function library) is
registered in that plain TensorFlow. The multiple choice export's serving_text packs each
choice as run_multiple_choice.py does."""

import csv
import json
import os
import subprocess
import sys

import pytest
from finetune_helpers import (
    DATA,
    FINETUNE_DATA,
    TOPICS,
    only_export,
    options,
    write_tiny_config,
)

from bert_tf import tokenization
from bert_tf.data import multiple_choice as mc_data
from bert_tf.runs import driver

SEQ = 16
STRINGS = ["Größe: ¡Ünïcödé! 中文 naïve", "a second, rather longer text " * 4]

# Loads each export in plain TensorFlow, lists its op types and runs every signature.
_CHECK_EXPORTS = r"""
import importlib.util
import json
import sys

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry

sys.path.insert(0, sys.argv[1])  # tests/, for warmup_requests (TensorFlow and TF Serving's protos)
from warmup_requests import answer_warmup_requests
# Without tensorflow-serving-api (a test dependency) the test skips the warm-up part.
serving_protos = importlib.util.find_spec("tensorflow_serving") is not None
STRINGS = json.loads(sys.argv[2])
report = {}
for path in sys.argv[3:]:
    saved_model = saved_model_pb2.SavedModel()
    with open(path + "/saved_model.pb", "rb") as f:
        saved_model.ParseFromString(f.read())
    ops = set()
    for meta_graph in saved_model.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    loaded = tf.saved_model.load(path)
    outputs = {}
    for name, signature in loaded.signatures.items():
        inputs = {}
        for key, spec in signature.structured_input_signature[1].items():
            if spec.dtype == tf.string and spec.shape.rank == 2:  # endings [B, choices]
                inputs[key] = tf.constant([[f"{text} ending {j}" for j in range(spec.shape[1])]
                                           for text in STRINGS])
            elif spec.dtype == tf.string:
                inputs[key] = tf.constant(STRINGS)
            else:  # ids [2, 12]: 12 is a multiple of the choices of a multiple-choice model
                inputs[key] = tf.ones([2, 12], spec.dtype)
        served = signature(**inputs)
        outputs[name] = {key: value.shape.as_list() for key, value in served.items()}
        if "input_ids" in served:
            outputs[name]["input_ids_values"] = served["input_ids"].numpy().tolist()
    # TF Serving runs the warm-up requests before it serves: each must be one the export answers.
    warmup = sorted(answer_warmup_requests(path, loaded)) if serving_protos else None
    report[path] = {"ops": sorted(ops),
                    "unregistered": sorted(op for op in ops if op_def_registry.get(op) is None),
                    "outputs": outputs, "warmup_answered": warmup}
report["tensorflow_text_imported"] = "tensorflow_text" in sys.modules
print(json.dumps(report))
"""


def _regression_data(directory):
    """A csv regression task: a score per sentence."""
    directory.mkdir()
    rows = [(f"{'good ' * (i % 4)}day {i}", f"{i % 4}.5") for i in range(12)]
    for split in ("train", "dev", "test"):
        with open(directory / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "score"])
            writer.writerows(rows)
    return str(directory)


@pytest.fixture(scope="module")
def exports(tmp_path_factory, vocab_file):
    """{kind: export path} of tiny models trained one step."""
    kinds = {
        "classifier": ("classifier", dict(task_name="tsv", text_a_column="sentence",
                                          data_dir=TOPICS)),
        "multi_label": ("classifier", dict(
            task_name="tsv", multi_label=True, text_a_column="text", label_column="labels",
            data_dir=os.path.join(FINETUNE_DATA, "multi_label"))),
        "regression": ("classifier", dict(
            task_name="csv", text_a_column="text", label_column="score", regression=True,
            data_dir=_regression_data(tmp_path_factory.mktemp("regression") / "data"))),
        "squad": ("squad", dict(train_file=os.path.join(DATA, "squad", "windows_v2.json"),
                                version_2_with_negative=True, doc_stride=4,
                                max_query_length=5)),
        "ner": ("ner", dict(data_dir=os.path.join(DATA, "ner"))),
        "multiple_choice": ("multiple_choice", dict(
            task_name="swag", data_dir=os.path.join(FINETUNE_DATA, "swag"))),
    }
    paths = {}
    for kind, (task, values) in kinds.items():
        directory = tmp_path_factory.mktemp(kind)
        driver.run_task(options(
            task, vocab_file=vocab_file, bert_config_file=write_tiny_config(directory),
            output_dir=str(directory / "out"), export_dir=str(directory / "export"),
            do_train=True, num_train_steps=1, train_batch_size=4, max_seq_length=SEQ,
            **values))
        paths[kind] = only_export(str(directory / "export"))
    return paths


def test_every_export_loads_and_runs_in_plain_tensorflow(exports, vocab_file):
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", _CHECK_EXPORTS, os.path.dirname(__file__),
                             json.dumps(STRINGS), *exports.values()],
                            capture_output=True, text=True, timeout=600, env=env,
                            cwd=os.path.dirname(next(iter(exports.values()))))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report.pop("tensorflow_text_imported") is False
    text_signatures = {"serving_text"}
    for kind, path in exports.items():
        checked = report[path]
        assert checked["unregistered"] == [], kind
        # The text signatures are there (tokenizer tables and string ops with them).
        assert {"LookupTableFindV2", "UnicodeDecode", "LowerBound"} <= set(
            checked["ops"]), kind
        signatures = {"serving_default", "serving_int64", *text_signatures}
        if kind in ("classifier", "multi_label", "regression"):
            signatures.add("serving_text_pair")
        assert set(checked["outputs"]) == signatures, kind
        for name, outputs in checked["outputs"].items():
            shapes = {key: shape for key, shape in outputs.items() if key != "input_ids_values"}
            assert all(shape[0] == 2 for shape in shapes.values()), (kind, name, shapes)

    # The child ran each warm-up request through its signature (tests/warmup_requests.py).
    if any(report[path]["warmup_answered"] is None for path in exports.values()):
        pytest.importorskip("tensorflow_serving.apis.prediction_log_pb2",
                            reason="tensorflow-serving-api (a test dependency) is not installed")
    for kind, path in exports.items():
        assert report[path]["warmup_answered"] == sorted(report[path]["outputs"]), kind

    served = report[exports["multiple_choice"]]["outputs"]["serving_text"]["input_ids_values"]
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    for text, ids in zip(STRINGS, served, strict=True):
        endings = [f"{text} ending {j}" for j in range(mc_data.SWAG_CHOICES)]
        expected, _, _ = mc_data.convert_example(mc_data.MultipleChoiceExample(
            "t", text, endings), mc_data.SWAG_CHOICES, SEQ, tokenizer)
        width = len(ids) // mc_data.SWAG_CHOICES
        assert [ids[j * width:(j + 1) * width] for j in range(mc_data.SWAG_CHOICES)] == [
            expected[j * SEQ:j * SEQ + width] for j in range(mc_data.SWAG_CHOICES)]
