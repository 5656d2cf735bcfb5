"""TFLite models (scripts/export_tflite.py) of exports of the real MiniLM weights: fp32 outputs
equal the SavedModel's within 1e-4 for the classifier, SQuAD, NER and embedding exports, at two
shapes through one model; dynamic INT8 keeps the topic classifier's dev accuracy within 1 point
and the SQuAD exact matches within 1 question (the session's fine-tuned runs, conftest.py);
exports without their assets or with ops TFLite lacks stop with one line."""

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import (
    FINETUNE_DATA,
    TOPICS,
    assert_clean_error,
    assert_ok,
    load_json,
    random_bert_inputs,
    run_script,
)

from bert_tf.errors import BertTfError
from bert_tf.metrics import squad as squad_metrics
from bert_tf.serving import backends, tflite_export
from bert_tf.serving.predictor import Predictor

pytestmark = pytest.mark.slow
pytest.importorskip("ai_edge_litert", reason="the [tflite] extra is not installed")

SQUAD_FILE = os.path.join(FINETUNE_DATA, "squad_small.json")


@pytest.fixture(scope="module")
def exports(minilm_topics_classifier, minilm_squad, minilm_ner, minilm_encoder_exports):
    return {"classifier": minilm_topics_classifier.export, "squad": minilm_squad.export,
            "ner": minilm_ner.export, "embed": minilm_encoder_exports["mean"]}


@pytest.fixture(scope="module")
def tflite_file(tmp_path_factory, exports):
    """tflite_file(kind, quantize): the export of `kind` converted once per mode."""
    files = {}

    def convert(kind, quantize="none"):
        if (kind, quantize) not in files:
            path = str(tmp_path_factory.mktemp("tflite") / f"{kind}.{quantize}.tflite")
            tflite_export.export_tflite(exports[kind], path, quantize)
            files[kind, quantize] = path
        return files[kind, quantize]

    return convert


@pytest.mark.parametrize("kind", ["classifier", "squad", "ner", "embed"])
def test_fp32_equals_saved_model(kind, exports, tflite_file):
    predictor = Predictor.from_tflite(tflite_file(kind))
    assert predictor.config == Predictor.from_saved_model(exports[kind]).config
    saved_model = backends.SavedModelBackend(exports[kind])
    # Two shapes through one model: batch and sequence axes are dynamic.
    for inputs in (random_bert_inputs(0), random_bert_inputs(1, batch_size=2, seq_length=9)):
        expected, got = saved_model(inputs), predictor._backend(inputs)
        assert set(got) == set(expected)
        for key, value in expected.items():
            assert got[key].shape == value.shape, key
            if value.dtype.kind == "f":
                np.testing.assert_allclose(got[key], value, atol=1e-4, err_msg=key)
            else:  # NER tag_ids: the argmax of the logits
                np.testing.assert_array_equal(got[key], value, err_msg=key)


def _sizes(fp32, small):
    sizes = os.path.getsize(fp32), os.path.getsize(small)
    print(f"TFLite sizes: fp32 {sizes[0] / 1e6:.1f} MB, quantized {sizes[1] / 1e6:.1f} MB")
    return sizes


def test_dynamic_int8_classifier_accuracy_within_one_point(tflite_file):
    fp32, int8 = tflite_file("classifier"), tflite_file("classifier", "dynamic")
    fp32_size, int8_size = _sizes(fp32, int8)
    assert int8_size < fp32_size / 3  # int8 weights: a quarter, plus the float parts
    with open(os.path.join(TOPICS, "dev.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    texts, gold = [text for text, _ in rows], [label for _, label in rows]
    accuracy = {}
    for name, path in (("fp32", fp32), ("int8", int8)):
        labels = [result["label"] for result in Predictor.from_tflite(path).predict(texts)]
        accuracy[name] = float(np.mean([a == b for a, b in zip(labels, gold, strict=True)]))
    print(f"dev accuracy TFLite fp32 {accuracy['fp32']:.4f}, INT8 {accuracy['int8']:.4f}")
    assert accuracy["fp32"] >= 0.85
    assert abs(accuracy["int8"] - accuracy["fp32"]) <= 0.01 + 1e-9


def test_dynamic_int8_squad_exact_match_within_one_question(tflite_file):
    fp32, int8 = tflite_file("squad"), tflite_file("squad", "dynamic")
    _sizes(fp32, int8)
    data = load_json(SQUAD_FILE)["data"]
    qas = [(qa["question"], paragraph["context"], [a["text"] for a in qa["answers"]])
           for article in data for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    exact = {}
    for name, path in (("fp32", fp32), ("int8", int8)):
        results = Predictor.from_tflite(path).answer([q for q, _, _ in qas],
                                                     [c for _, c, _ in qas])
        exact[name] = sum(max(squad_metrics.exact_match_score(r["answer"], g) for g in golds)
                          for r, (_, _, golds) in zip(results, qas, strict=True))
    print(f"SQuAD exact matches of {len(qas)}: TFLite fp32 {exact['fp32']}, "
          f"INT8 {exact['int8']}")
    assert exact["fp32"] >= 3
    assert abs(exact["int8"] - exact["fp32"]) <= 1


def test_float16_embedding_close_to_fp32(exports, tflite_file):
    fp32, half = tflite_file("embed"), tflite_file("embed", "float16")
    fp32_size, half_size = _sizes(fp32, half)
    assert half_size < fp32_size * 0.55
    texts = ["A fine match at the stadium.", "Stir the onions into the sauce."]
    expected = Predictor.from_saved_model(exports["embed"]).embed(texts)
    got = Predictor.from_tflite(half).embed(texts)
    cosine = (got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(
        expected, axis=1)
    assert cosine.min() > 0.9999


def test_predict_script_answers_from_tflite(exports, tflite_file, tmp_path):
    input_file, output_file = tmp_path / "texts.txt", tmp_path / "answers.jsonl"
    texts = ["the striker scored twice in the second half", "bake the bread for an hour"]
    input_file.write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert_ok(run_script("predict.py", f"--tflite_file={tflite_file('classifier')}",
                         f"--input_file={input_file}", f"--output_file={output_file}"))
    lines = [json.loads(line) for line in output_file.read_text().splitlines()]
    expected = Predictor.from_saved_model(exports["classifier"]).predict(texts)
    assert [line["label"] for line in lines] == [result["label"] for result in expected]
    for line, result in zip(lines, expected, strict=True):
        for label, p in result["probabilities"].items():
            assert abs(line["probabilities"][label] - p) < 1e-4


def _handmade_export(path, assets_from=None):
    """A SavedModel whose serving_default adds a new axis with a strided slice (`x[:, :,
    None]`), which TFLite's built-in StridedSlice lacks; with the assets.extra/ of the export
    `assets_from`."""
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        inputs = {name: tf1.placeholder(tf.int32, [None, None], name=name)
                  for name in ("input_ids", "input_mask", "segment_ids")}
        mask = tf.cast(inputs["input_mask"], tf.float32)
        scores = tf.reduce_sum(mask[:, :, None] * tf.cast(inputs["input_ids"], tf.float32)[
            :, None, :], axis=[1, 2])
        with tf1.Session() as session:
            builder = tf1.saved_model.Builder(path)
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
                "serving_default": tf1.saved_model.predict_signature_def(
                    inputs, {"scores": scores})})
            builder.save()
    if assets_from:
        tf.io.gfile.makedirs(os.path.join(path, "assets.extra"))
        for name in ("predict_config.json", "vocab.txt"):
            tf.io.gfile.copy(os.path.join(assets_from, "assets.extra", name),
                             os.path.join(path, "assets.extra", name))
    return path


def test_bad_exports_stop_with_one_line(minilm_encoder_exports, tmp_path):
    no_assets = _handmade_export(str(tmp_path / "no_assets"))
    output = tmp_path / "model.tflite"
    result = run_script("export_tflite.py", f"--export_dir={no_assets}",
                        f"--output_file={output}")
    assert_clean_error(result, no_assets, "predict_config.json")
    unsupported = _handmade_export(str(tmp_path / "unsupported"), minilm_encoder_exports["cls"])
    with pytest.raises(BertTfError) as error:
        tflite_export.export_tflite(unsupported, str(output))
    assert unsupported in str(error.value) and "tf.StridedSlice" in str(error.value)
    assert "\n" not in str(error.value)
    result = run_script("export_tflite.py", f"--export_dir={unsupported}",
                        f"--output_file={output}")
    assert_clean_error(result, unsupported, "tf.StridedSlice")
    assert not output.exists()


def test_missing_litert_names_the_install_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)  # import raises ImportError
    with pytest.raises(BertTfError, match=r'pip install "bert-tf\[tflite\]"'):
        Predictor.from_tflite(str(tmp_path / "model.tflite"))
