"""ONNX exports (scripts/export_onnx.py) of models fine-tuned from the real MiniLM weights:
fp32 outputs equal the SavedModel's within 1e-4 for the classifier, SQuAD and NER exports;
dynamic INT8 keeps the real-weights classification accuracy within 1 point and the SQuAD exact
matches within 1 question (the runs of tests/test_real_weights_finetune.py)."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import (
    FINETUNE_DATA,
    TOPICS,
    assert_ok,
    load_json,
    random_bert_inputs,
    run_script,
)

from bert_tf.errors import BertTfError
from bert_tf.metrics import squad as squad_metrics
from bert_tf.serving import onnx_export
from bert_tf.serving.predictor import Predictor

pytestmark = pytest.mark.slow
pytest.importorskip("tf2onnx", reason="the [onnx] extra is not installed")
pytest.importorskip("onnxruntime", reason="the [onnx] extra is not installed")

SQUAD_FILE = os.path.join(FINETUNE_DATA, "squad_small.json")


@pytest.fixture(scope="module")
def classifier(minilm_topics_classifier):
    # conftest's: test_real_weights_finetune's run, 12 steps on the topics set.
    return minilm_topics_classifier.output_dir, minilm_topics_classifier.export


@pytest.fixture(scope="module")
def squad_model(minilm_squad):
    return minilm_squad.output_dir, minilm_squad.export


@pytest.fixture(scope="module")
def ner_model(minilm_ner):
    # conftest's: 4 steps on tests/data/ner, shared with test_tflite.
    return minilm_ner.output_dir, minilm_ner.export


@pytest.fixture(scope="module")
def fp32_onnx(tmp_path_factory):
    """fp32 ONNX file of an export, converted once per export."""
    files = {}

    def convert(export):
        if export not in files:
            files[export] = str(tmp_path_factory.mktemp("onnx") / "model.onnx")
            onnx_export.export_onnx(export, files[export])
        return files[export]

    return convert


@pytest.mark.parametrize("kind", ["classifier", "squad_model", "ner_model"])
def test_onnx_fp32_equals_saved_model(kind, request, fp32_onnx):
    export = request.getfixturevalue(kind)[1]
    onnx_file = fp32_onnx(export)
    onnx_model = Predictor.from_onnx(onnx_file)._backend
    signature = tf.saved_model.load(export).signatures["serving_default"]
    # Two shapes through one model: batch and sequence axes are dynamic.
    for inputs in (random_bert_inputs(0), random_bert_inputs(1, batch_size=2, seq_length=9)):
        expected = signature(**{k: tf.constant(v) for k, v in inputs.items()})
        got = onnx_model(inputs)
        assert set(got) == set(expected)
        for key, value in expected.items():
            if value.dtype.is_floating:
                np.testing.assert_allclose(got[key], value.numpy(), atol=1e-4, err_msg=key)
            else:  # NER tag_ids: the argmax of the logits
                np.testing.assert_array_equal(got[key], value.numpy(), err_msg=key)


def _int8_and_fp32(fp32, int8):
    assert os.path.getsize(int8) < os.path.getsize(fp32) / 2
    return Predictor.from_onnx(fp32), Predictor.from_onnx(int8)


def test_int8_classifier_accuracy_within_one_point(classifier, fp32_onnx, tmp_path):
    int8 = str(tmp_path / "int8.onnx")  # Through the script, from the export.
    assert_ok(run_script("export_onnx.py", f"--export_dir={classifier[1]}",
                         f"--output_file={int8}", "--quantize=int8"))
    with open(os.path.join(TOPICS, "dev.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    texts, gold = [text for text, _ in rows], [label for _, label in rows]
    accuracy = {}
    for name, predictor in zip(("fp32", "int8"),
                               _int8_and_fp32(fp32_onnx(classifier[1]), int8), strict=True):
        labels = [result["label"] for result in predictor.predict(texts)]
        accuracy[name] = float(np.mean([a == b for a, b in zip(labels, gold, strict=True)]))
    print(f"dev accuracy ONNX fp32 {accuracy['fp32']:.4f}, INT8 {accuracy['int8']:.4f}")
    assert accuracy["fp32"] >= 0.85
    assert abs(accuracy["int8"] - accuracy["fp32"]) <= 0.01 + 1e-9


def test_int8_squad_exact_match_within_one_question(squad_model, fp32_onnx, tmp_path):
    fp32, int8 = fp32_onnx(squad_model[1]), str(tmp_path / "int8.onnx")
    onnx_export.quantize_file(fp32, int8)
    data = load_json(SQUAD_FILE)["data"]
    qas = [(qa["question"], paragraph["context"], [a["text"] for a in qa["answers"]])
           for article in data for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    exact = {}
    for name, predictor in zip(("fp32", "int8"), _int8_and_fp32(fp32, int8), strict=True):
        results = predictor.answer([q for q, _, _ in qas], [c for _, c, _ in qas])
        exact[name] = sum(max(squad_metrics.exact_match_score(r["answer"], g) for g in golds)
                          for r, (_, _, golds) in zip(results, qas, strict=True))
    print(f"SQuAD exact matches of {len(qas)}: ONNX fp32 {exact['fp32']}, INT8 {exact['int8']}")
    assert exact["fp32"] >= 3
    assert abs(exact["int8"] - exact["fp32"]) <= 1


def _op_types(path):
    import onnx

    return {node.op_type for node in onnx.load(path).graph.node}


def test_fused_and_unfused_models_agree(classifier, fp32_onnx, tmp_path):
    # The default export is fused to ONNX Runtime's BERT operators; optimize=False
    # (--nooptimize) writes the graph as tf2onnx converts it. Both answer the same numbers
    # (the fused one is also held to TF by test_onnx_fp32_equals_saved_model).
    fused, plain = fp32_onnx(classifier[1]), str(tmp_path / "plain.onnx")
    onnx_export.export_onnx(classifier[1], plain, optimize=False)
    assert {"Attention", "SkipLayerNormalization", "BiasGelu"} <= _op_types(fused)
    assert not {"Attention", "SkipLayerNormalization", "BiasGelu"} & _op_types(plain)
    for inputs in (random_bert_inputs(2), random_bert_inputs(3, batch_size=1, seq_length=7)):
        got = Predictor.from_onnx(fused)._backend(inputs)
        expected = Predictor.from_onnx(plain)._backend(inputs)
        np.testing.assert_allclose(got["probabilities"], expected["probabilities"], atol=1e-5)


def test_int8_of_fused_model_uses_quantized_attention(classifier, fp32_onnx, tmp_path):
    int8 = str(tmp_path / "int8.onnx")
    onnx_export.quantize_file(fp32_onnx(classifier[1]), int8)
    assert "QAttention" in _op_types(int8)


def test_a_failing_tf2onnx_pass_falls_back_to_the_cautious_conversion(monkeypatch):
    """The conversion first runs tf2onnx's passes without their undo copies; when one fails it
    converts again with them, and the environment is as it was either way."""
    import onnxruntime
    import tf2onnx

    with tf.Graph().as_default() as graph:
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        tf.identity(tf.matmul(x, tf.constant(np.eye(3, dtype=np.float32) * 2.0)), name="y")
    convert = tf2onnx.convert.from_graph_def
    modes = []

    def from_graph_def(*args, **kwargs):
        modes.append(os.environ.get("TF2ONNX_CATCH_ERRORS"))
        if modes[-1] == "FALSE":
            raise ValueError("a pass failed")
        return convert(*args, **kwargs)

    monkeypatch.setattr(tf2onnx.convert, "from_graph_def", from_graph_def)
    monkeypatch.delenv("TF2ONNX_CATCH_ERRORS", raising=False)
    model = onnx_export._convert(graph.as_graph_def(), ["x:0"], ["y:0"], 13)
    assert modes == ["FALSE", "TRUE"]
    assert "TF2ONNX_CATCH_ERRORS" not in os.environ
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x:0": np.ones([2, 3], np.float32)})[0],
                               np.full([2, 3], 2.0))


def test_missing_or_broken_onnx_names_the_install_line(classifier, tmp_path, monkeypatch):
    output = str(tmp_path / "model.onnx")
    monkeypatch.setitem(sys.modules, "onnx", None)  # import raises ImportError
    with pytest.raises(BertTfError, match=r'pip install "bert-tf\[onnx\]"'):
        onnx_export.export_onnx(classifier[1], output)
    # onnx 1.19.0 beside TensorFlow 2.16's ml_dtypes fails in its import with an AttributeError.
    broken = tmp_path / "site" / "onnx"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        "raise AttributeError(\"module 'ml_dtypes' has no attribute 'float4_e2m1fn'\")\n")
    monkeypatch.delitem(sys.modules, "onnx")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(BertTfError) as error:
        onnx_export.export_onnx(classifier[1], output)
    assert "float4_e2m1fn" in str(error.value) and 'pip install "onnx!=1.19.0"' in str(error.value)
    assert not os.path.exists(output)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(BertTfError, match=r'pip install "bert-tf\[onnx\]"'):
        Predictor.from_onnx(output)
