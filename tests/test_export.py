"""--export_dir of the three fine-tuning tasks: the SavedModel, loaded with tf.saved_model.load
in TF2 eager mode, returns what the graph-mode model_fn predicts from the same checkpoint, for
int32 (serving_default) and int64 (serving_int64) inputs, any batch size and sequence length; its
TF Serving warm-up requests parse with TF Serving's protos and each signature answers its own."""

import os

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import (
    DATA,
    TOPICS,
    check_warmup_requests,
    only_export,
    options,
    write_tiny_config,
)

from bert_tf import modeling
from bert_tf.runs import driver
from bert_tf.serving.predictor import Predictor
from bert_tf.tasks import classification, model_fn_parts, ner, squad
from bert_tf.training import estimator as estimator_lib

MAX_SEQ_LENGTH = 24


def _train_and_export(kind, directory, vocab_file, precision="fp32"):
    """Trains a tiny model for `kind` 3 steps and exports it, both in `precision`; returns
    (model_fn, output_dir, export path)."""
    config_file = write_tiny_config(directory)
    common = dict(vocab_file=vocab_file, bert_config_file=config_file,
                  output_dir=str(directory / "out"), export_dir=str(directory / "export"),
                  do_train=True, num_train_steps=3, max_seq_length=MAX_SEQ_LENGTH,
                  train_batch_size=4, precision=precision)
    bert_config = modeling.BertConfig.from_json_file(config_file)
    if kind == "classifier":
        driver.run_task(options(
            "classifier", task_name="tsv", text_a_column="sentence",
            data_dir=TOPICS, **common))
        model_fn = classification.model_fn_builder(
            model_fn_parts.Encoder(bert_config, compute_dtype=tf.as_dtype(
                {"fp32": "float32", "bf16": "bfloat16"}[precision])), 2)
    elif kind == "squad":
        driver.run_task(options(
            "squad", train_file=os.path.join(DATA, "squad", "windows_v2.json"),
            version_2_with_negative=True, doc_stride=8, max_query_length=6, **common))
        model_fn = squad.model_fn_builder(model_fn_parts.Encoder(bert_config))
    else:
        driver.run_task(options("ner", data_dir=os.path.join(DATA, "ner"), **common))
        model_fn = ner.model_fn_builder(model_fn_parts.Encoder(bert_config), 7)
    return model_fn, common["output_dir"], only_export(common["export_dir"])


def _inputs(batch_size, seq_length, seed):
    """Random int32 input_ids / input_mask / segment_ids [batch_size, seq_length] with padding."""
    rng = np.random.RandomState(seed)
    lengths = rng.randint(2, seq_length + 1, size=batch_size)
    lengths[0] = seq_length
    positions = np.arange(seq_length)[None, :]
    input_mask = (positions < lengths[:, None]).astype(np.int32)
    input_ids = rng.randint(1000, 5000, size=(batch_size, seq_length)).astype(np.int32)
    segment_ids = ((positions >= lengths[:, None] // 2) & (input_mask == 1)).astype(np.int32)
    return {"input_ids": input_ids * input_mask, "input_mask": input_mask,
            "segment_ids": segment_ids}


def _graph_predictions(model_fn, model_dir, batches):
    """Graph-mode predictions of the checkpoint for each batch (one graph, batches of any
    shape)."""
    def input_fn(params):
        dataset = tf.data.Dataset.from_tensors(batches[0])
        for batch in batches[1:]:
            dataset = dataset.concatenate(tf.data.Dataset.from_tensors(batch))
        return dataset

    estimator = estimator_lib.Estimator(model_fn, model_dir)
    return list(estimator.predict(input_fn, yield_single_examples=False))


@pytest.mark.parametrize("kind,output_keys", [
    ("classifier", {"probabilities"}),
    ("squad", {"start_logits", "end_logits"}),
    ("ner", {"tag_ids"}),
])
def test_saved_model_matches_graph_predictions(kind, output_keys, tmp_path, minilm_dir):
    model_fn, model_dir, export_path = _train_and_export(
        kind, tmp_path, os.path.join(minilm_dir, "vocab.txt"))
    loaded = tf.saved_model.load(export_path)
    assert {"serving_default", "serving_int64"} <= set(loaded.signatures)
    for name, dtype in (("serving_default", tf.int32), ("serving_int64", tf.int64)):
        specs = loaded.signatures[name].structured_input_signature[1]
        assert set(specs) == {"input_ids", "input_mask", "segment_ids"}
        assert all(spec.dtype == dtype and spec.shape.as_list() == [None, None]
                   for spec in specs.values())

    batches = [_inputs(batch_size, seq_length, seed) for batch_size, seq_length, seed in
               ((3, MAX_SEQ_LENGTH, 0), (1, 7, 1), (5, 11, 2))]
    graph_outputs = _graph_predictions(model_fn, model_dir, batches)
    assert len(graph_outputs) == len(batches)
    for inputs, expected in zip(batches, graph_outputs, strict=True):
        batch_size = len(inputs["input_ids"])
        assert set(expected) == output_keys
        for name, dtype in (("serving_default", tf.int32), ("serving_int64", tf.int64)):
            served = loaded.signatures[name](**{key: tf.constant(value, dtype)
                                                for key, value in inputs.items()})
            assert set(served) == output_keys
            for key in output_keys:
                assert served[key].shape[0] == batch_size
                np.testing.assert_allclose(served[key].numpy(), expected[key], atol=1e-5,
                                           err_msg=f"{kind} {name} {key}")
    # Plain numpy arrays (int64 by default) are converted by either signature, where
    # TensorFlow converts a loaded signature's arguments (2.19 and later; before, they must be
    # tensors, as above).
    if tuple(int(part) for part in tf.__version__.split(".")[:2]) >= (2, 19):
        served = loaded.signatures["serving_default"](
            **{key: np.asarray(value, np.int64) for key, value in inputs.items()})
        for key in output_keys:
            np.testing.assert_allclose(served[key].numpy(), expected[key], atol=1e-5)

    # TF Serving's warm-up file: a request per signature (text ones too), each answered; the
    # id requests pack a short text and one cut at max_seq_length.
    answers = check_warmup_requests(export_path, loaded)
    assert {"serving_default", "serving_int64", "serving_text"} <= set(answers)
    assert ("serving_text_pair" in answers) == (kind == "classifier")
    for name in ("serving_default", "serving_int64"):
        for key in output_keys:
            np.testing.assert_allclose(answers[name][key], answers["serving_text"][key],
                                       atol=1e-5, err_msg=f"{kind} {name} {key}")


def test_bf16_export_serves_the_trained_weights_cast_once(tmp_path, minilm_dir):
    """A bf16 export reads bf16 copies of its weights made once on load (not casts every
    request): they must hold the restored weights, and never be saved."""
    model_fn, model_dir, export_path = _train_and_export(
        "classifier", tmp_path, os.path.join(minilm_dir, "vocab.txt"), precision="bf16")
    saved = tf.train.load_checkpoint(os.path.join(export_path, "variables", "variables"))
    names = saved.get_variable_to_dtype_map()
    assert "bert/encoder/layer_0/attention/self/query/kernel" in names
    assert not [name for name in names if "bfloat16" in name]
    assert set(names.values()) <= {tf.float32, tf.int64}

    loaded = tf.saved_model.load(export_path)
    batches = [_inputs(3, MAX_SEQ_LENGTH, 0), _inputs(2, 9, 1)]
    for inputs, expected in zip(batches, _graph_predictions(model_fn, model_dir, batches),
                                strict=True):
        served = loaded.signatures["serving_default"](**{
            key: tf.constant(value) for key, value in inputs.items()})["probabilities"]
        # The graph's Session casts the restored weights the same way: the same bf16 model.
        np.testing.assert_allclose(served.numpy(), expected["probabilities"], atol=1e-5)

    # The Predictor on the checkpoint (its own Session) makes its copies after the restore too.
    texts = ["a bowl of noodle soup", "the match went to penalties after extra time"]
    from_checkpoint = Predictor.from_checkpoint(
        model_dir, str(tmp_path / "bert_config.json"), os.path.join(minilm_dir, "vocab.txt"),
        "classifier", max_seq_length=MAX_SEQ_LENGTH, precision_name="bf16").predict(texts)
    from_export = Predictor.from_saved_model(export_path).predict(texts)
    for got, expected in zip(from_checkpoint, from_export, strict=True):
        assert got["probabilities"] == pytest.approx(expected["probabilities"], abs=1e-5)
