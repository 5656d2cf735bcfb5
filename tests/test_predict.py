"""The Predictor and scripts/predict.py against run_*.py --do_predict of the same
tiny checkpoints: from the export and from the checkpoint, in input order with mixed lengths;
the text-in export signatures against the id signature; bad input."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import (
    DATA,
    FINETUNE_DATA,
    TOPICS,
    assert_clean_error,
    assert_ok,
    load_json,
    only_export,
    options,
    run_script,
    write_tiny_config,
)

from bert_tf import tokenization
from bert_tf.data import classification_features as classification_data
from bert_tf.data import ner as ner_data
from bert_tf.data import squad as squad_data
from bert_tf.errors import BertTfError
from bert_tf.runs import driver
from bert_tf.serving import export
from bert_tf.serving.predictor import Predictor

SEQ = 24
SQUAD_FILE = os.path.join(FINETUNE_DATA, "squad_small.json")
SQUAD_SETTINGS = dict(doc_stride=8, max_query_length=6, n_best_size=5, max_answer_length=6)


def _train(kind, directory, vocab_file, **values):
    """A tiny `kind` model trained 2 steps, with --do_predict and --export_dir; returns
    (output_dir, export path, bert_config_file)."""
    config_file = write_tiny_config(directory)
    common = dict(vocab_file=vocab_file, bert_config_file=config_file,
                  output_dir=str(directory / "out"), export_dir=str(directory / "export"),
                  do_train=True, do_predict=True, num_train_steps=2, max_seq_length=SEQ,
                  train_batch_size=4, predict_batch_size=5)
    driver.run_task(options(kind, **common, **values))
    return common["output_dir"], only_export(common["export_dir"]), config_file


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, vocab_file):
    return _train("classifier", tmp_path_factory.mktemp("classifier"), vocab_file,
                  task_name="tsv", text_a_column="sentence",
                  data_dir=TOPICS)


def _predictors(trained, vocab_file, task, **settings):
    output_dir, export, config_file = trained
    return {"saved_model": Predictor.from_saved_model(export, batch_size=3),
            "checkpoint": Predictor.from_checkpoint(
                output_dir, config_file, vocab_file, task, max_seq_length=SEQ, batch_size=3,
                **settings)}


def _topic_sentences():
    with open(os.path.join(TOPICS, "test.tsv"), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f][1:]


def test_classifier_matches_run_classifier_in_input_order(classifier, vocab_file):
    output_dir = classifier[0]
    with open(os.path.join(output_dir, "test_results.tsv"), encoding="utf-8") as f:
        expected = np.array([[float(x) for x in line.split("\t")] for line in f])
    sentences = _topic_sentences()
    # Very different lengths, so the length-sorted batches mix up the order.
    long = " ".join(sentences) + " and more"
    for name, predictor in _predictors(classifier, vocab_file, "classifier").items():
        assert predictor.config.label_list == ("food", "sports")
        results = predictor.predict(sentences)
        got = np.array([list(r["probabilities"].values()) for r in results])
        np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=name)
        assert [r["label"] for r in results] == [
            ("food", "sports")[i] for i in expected.argmax(axis=1)]
        mixed = [sentences[3], long, "soccer", sentences[0], long[:40]]
        one_by_one = [predictor.predict([text])[0]["probabilities"] for text in mixed]
        for result, alone in zip(predictor.predict(mixed), one_by_one, strict=True):
            assert result["probabilities"] == pytest.approx(alone, abs=1e-6)


@pytest.mark.parametrize("values", [
    dict(multi_label=True, text_a_column="text", label_column="labels",
         data_dir=os.path.join(FINETUNE_DATA, "multi_label")),
    dict(doc_stride=4, window_aggregation="max", max_seq_length=12, text_a_column="sentence",
         data_dir=TOPICS),
], ids=["multi_label", "windows"])
def test_multi_label_and_windowed_classifiers_match_run_classifier(values, tmp_path,
                                                                   vocab_file):
    config_file = write_tiny_config(tmp_path)
    out, export = str(tmp_path / "out"), str(tmp_path / "export")
    driver.run_task(options(
        "classifier", task_name="tsv", vocab_file=vocab_file, bert_config_file=config_file,
        output_dir=out, export_dir=export, do_train=True, do_predict=True, num_train_steps=2,
        train_batch_size=4, predict_batch_size=5, **{"max_seq_length": SEQ, **values}))
    with open(os.path.join(out, "test_results.tsv"), encoding="utf-8") as f:
        expected = np.array([[float(x) for x in line.split("\t")] for line in f])
    with open(os.path.join(values["data_dir"], "test.tsv"), encoding="utf-8") as f:
        texts = [line.rstrip("\n").split("\t")[0] for line in f][1:]
    predictor = Predictor.from_saved_model(only_export(export), batch_size=3)
    results = predictor.predict(texts)
    got = np.array([list(r["probabilities"].values()) for r in results])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    if values.get("multi_label"):
        labels = predictor.config.label_list
        assert [r["labels"] for r in results] == [
            [label for label, p in zip(labels, row, strict=True) if p > 0.5] for row in expected]


@pytest.fixture(scope="module")
def squad_model(tmp_path_factory, vocab_file):
    # A fixed seed: an untrained model answers some questions with no valid span, and this one
    # answers at least one with a span, so the offsets below are checked on every run.
    return _train("squad", tmp_path_factory.mktemp("squad"), vocab_file, train_file=SQUAD_FILE,
                  predict_file=SQUAD_FILE, random_seed=2, **SQUAD_SETTINGS)


def _squad_inputs():
    with open(SQUAD_FILE, encoding="utf-8") as f:
        data = json.load(f)["data"]
    pairs = [(qa["question"], paragraph["context"]) for article in data
             for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    return [q for q, _ in pairs], [c for _, c in pairs]


def test_squad_matches_predictions_json(squad_model, vocab_file):
    output_dir = squad_model[0]
    expected = load_json(os.path.join(output_dir, "predictions.json"))
    expected_nbest = load_json(os.path.join(output_dir, "nbest_predictions.json"))
    questions, contexts = _squad_inputs()
    for name, predictor in _predictors(squad_model, vocab_file, "squad",
                                       **SQUAD_SETTINGS).items():
        results = predictor.answer(questions, contexts)
        assert [r["answer"] for r in results] == list(expected.values()), name
        # An untrained model often has no valid span ("empty", no offsets), not always.
        assert any(r["start"] is not None for r in results)
        for result, context, nbest in zip(results, contexts, expected_nbest.values(),
                                          strict=True):
            if result["start"] is not None:
                assert context[result["start"]:result["end"]] == result["answer"]
            assert [e["text"] for e in result["nbest"]] == [e["text"] for e in nbest]
            assert [e["probability"] for e in result["nbest"]] == pytest.approx(
                [e["probability"] for e in nbest], abs=1e-5)


@pytest.fixture(scope="module")
def ner_model(tmp_path_factory, vocab_file):
    return _train("ner", tmp_path_factory.mktemp("ner"), vocab_file,
                  data_dir=os.path.join(DATA, "ner"))


def test_ner_matches_test_predictions(ner_model, vocab_file):
    output_dir = ner_model[0]
    examples = ner_data.read_conll(os.path.join(DATA, "ner", "test.txt"), "test")
    with open(os.path.join(output_dir, "test_predictions.txt"), encoding="utf-8") as f:
        blocks = f.read().strip("\n").split("\n\n")
    expected = [[line.split()[-1] for line in block.splitlines()] for block in blocks]
    # Extra spaces between words: the char spans still point at each word.
    texts = ["  ".join(example.words) for example in examples]
    for name, predictor in _predictors(ner_model, vocab_file, "ner").items():
        results = predictor.tag(texts)
        assert [r["tags"] for r in results] == expected, name
        for text, result in zip(texts, results, strict=True):
            assert [text[s:e] for s, e in result["spans"]] == result["words"]


# -------------------------------------------------------------------------- serving_text


def _id_signature(loaded, features):
    """serving_default on FullTokenizer features, each padded to the batch's longest."""
    width = max(int(sum(f.input_mask)) for f in features)
    inputs = {name: tf.constant([getattr(f, name)[:width] for f in features], tf.int32)
              for name in export.SERVING_INPUT_NAMES}
    return {key: value.numpy() for key, value in loaded.signatures["serving_default"](
        **inputs).items()}


def test_serving_text_equals_id_signature(classifier, squad_model, ner_model, vocab_file):
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    texts = _topic_sentences() + ["Größe: ¡Ünïcödé! 中文 x\u00adyz naïve", "x" * 150]
    texts_b = [""] * 3 + ["and a second text, longer than the first one"] * (len(texts) - 3)

    def classifier_features(text, text_b):
        return classification_data.convert_single_example(
            0, classification_data.InputExample("t", text, text_b or None, "food"),
            ["food", "sports"], SEQ, tokenizer)

    loaded = tf.saved_model.load(classifier[1])
    features = [classifier_features(a, b) for a, b in zip(texts, texts_b, strict=True)]
    served = loaded.signatures["serving_text_pair"](text=tf.constant(texts),
                                                    text_b=tf.constant(texts_b))
    _assert_same(served, loaded, features, "probabilities")
    single = [classifier_features(text, None) for text in texts]
    _assert_same(loaded.signatures["serving_text"](text=tf.constant(texts)), loaded, single,
                 "probabilities")

    loaded = tf.saved_model.load(ner_model[1])
    examples = [ner_data.NerExample("t", text.split(), ["O"] * len(text.split()))
                for text in texts[:-1]]  # The 150-char word: [UNK], one piece either way.
    features = [ner_data.convert_single_example(0, example, ["O", "B-LOC"], SEQ, tokenizer)
                for example in examples]
    _assert_same(loaded.signatures["serving_text"](text=tf.constant(texts[:-1])), loaded,
                 features, "tag_ids")

    loaded = tf.saved_model.load(squad_model[1])
    questions, contexts = _squad_inputs()
    examples = [squad_data.SquadExample(str(i), question, squad_data.split_context(c)[0])
                for i, (question, c) in enumerate(zip(questions, contexts, strict=True))]
    windows = squad_data.convert_examples_to_features(
        examples, tokenizer, SEQ, SQUAD_SETTINGS["doc_stride"],
        SQUAD_SETTINGS["max_query_length"], is_training=False)
    first_windows = [w for w in windows if w.doc_span_index == 0]
    _assert_same(loaded.signatures["serving_text"](question=tf.constant(questions),
                                                   context=tf.constant(contexts)),
                 loaded, first_windows, "start_logits", "end_logits")


def _assert_same(served, loaded, features, *keys):
    """The text signature's packed ids are the FullTokenizer features' and its outputs those
    of serving_default on them."""
    expected = _id_signature(loaded, features)
    width = served["input_ids"].shape[1]
    np.testing.assert_array_equal(served["input_ids"].numpy(),
                                  [f.input_ids[:width] for f in features])
    for key in keys:
        np.testing.assert_allclose(served[key].numpy(), expected[key], atol=1e-5, err_msg=key)


def test_serving_text_packs_full_tokenizer_features_of_the_multilingual_corpus(classifier,
                                                                               vocab_file):
    """Every corpus line, cut at max_seq_length, alone and paired with the next one (the
    tokenizer itself, cased and uncased: tests/test_graph_tokenizer.py)."""
    with open(os.path.join(DATA, "multilingual.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) == 3250
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    loaded = tf.saved_model.load(classifier[1])
    agreeing = {"serving_text": 0, "serving_text_pair": 0}
    for start in range(0, len(lines), 650):
        texts = lines[start:start + 650]
        texts_b = lines[start + 1:start + 651] + lines[:1]
        for name, inputs, pairs in (
                ("serving_text", {"text": texts}, [(text, None) for text in texts]),
                ("serving_text_pair", {"text": texts, "text_b": texts_b[:len(texts)]},
                 list(zip(texts, texts_b, strict=False)))):
            served = loaded.signatures[name](**{k: tf.constant(v) for k, v in inputs.items()})
            served = served["input_ids"].numpy().tolist()
            width = len(served[0])
            for (text, text_b), ids in zip(pairs, served, strict=True):
                feature = classification_data.convert_single_example(
                    0, classification_data.InputExample("t", text, text_b, "food"),
                    ["food", "sports"], SEQ, tokenizer)
                agreeing[name] += ids == feature.input_ids[:width]
    assert agreeing == {"serving_text": len(lines), "serving_text_pair": len(lines)}


# ------------------------------------------------------------------------------ bad input


def test_export_without_assets_names_what_is_missing(classifier, tmp_path):
    old = tmp_path / "old_export"
    shutil.copytree(classifier[1], old)
    shutil.rmtree(old / "assets.extra")
    with pytest.raises(BertTfError, match="predict_config.json or vocab.txt.*Re-export"):
        Predictor.from_saved_model(str(old))


def test_a_corrupt_saved_model_names_the_export(classifier, tmp_path):
    broken = tmp_path / "broken_export"
    shutil.copytree(classifier[1], broken)
    (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
    with pytest.raises(BertTfError, match=f"SavedModel {broken} cannot be loaded: .*parse"):
        Predictor.from_saved_model(str(broken))


def test_script_answers_jsonl_and_stops_at_a_bad_line(classifier, tmp_path):
    sentences = _topic_sentences()[:3]
    good = tmp_path / "in.jsonl"
    good.write_text("".join(json.dumps({"id": i, "text": s}) + "\n"
                            for i, s in enumerate(sentences)), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert_ok(run_script("predict.py", f"--export_dir={classifier[1]}",
                         f"--input_file={good}", "--input_format=jsonl",
                         f"--output_file={out}"))
    expected = Predictor.from_saved_model(classifier[1]).predict(sentences)
    written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r.pop("id") for r in written] == [0, 1, 2]
    for row, want in zip(written, expected, strict=True):
        assert row["label"] == want["label"]
        # predict.py keeps the weights packed (prediction_process): other fp32 kernels.
        assert row["probabilities"] == pytest.approx(want["probabilities"], abs=1e-5)

    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text(encoding="utf-8") + '{"txt": "no text key"}\n',
                   encoding="utf-8")
    assert_clean_error(run_script("predict.py", f"--export_dir={classifier[1]}",
                                  f"--input_file={bad}", "--input_format=jsonl",
                                  f"--output_file={tmp_path / 'never.jsonl'}"),
                       f"{bad}:4", "no text")
    assert not (tmp_path / "never.jsonl").exists()


_FROZEN_WEIGHTS_CHILD = """
import json, sys
from bert_tf.serving import prediction_process
assert prediction_process.assume_frozen_weights()
from bert_tf.serving.predictor import Predictor
classifier_export, classifier_dir, config_file, vocab_file, ner_export = sys.argv[1:6]
texts = json.loads(sys.argv[6])
predictors = {
    "classifier": Predictor.from_saved_model(classifier_export, batch_size=2),
    "classifier_bf16": Predictor.from_checkpoint(
        classifier_dir, config_file, vocab_file, "classifier", max_seq_length=24,
        batch_size=2, precision_name="bf16"),
    "ner": Predictor.from_saved_model(ner_export, batch_size=2),
}
# Each model twice, the others in between: a kernel keeps the weights of its own model.
answers = {name: [] for name in predictors}
for _ in range(2):
    for name, predictor in predictors.items():
        answers[name].append((predictor.tag if name == "ner" else predictor.predict)(texts))
print("ANSWERS" + json.dumps(answers))
"""


def test_a_prediction_process_keeps_packed_weights_and_answers_the_same(
        classifier, ner_model, vocab_file):
    """scripts/predict.py's process assumes frozen weights (oneDNN keeps each weight in its
    kernel's layout): several models in one process, batches of several shapes, the same
    answers as this process, which does not."""
    import subprocess
    import sys

    from envs import child_env

    texts = _topic_sentences() + ["Ada Lovelace lives in London", "a short one"]
    completed = subprocess.run(
        [sys.executable, "-c", _FROZEN_WEIGHTS_CHILD, classifier[1], classifier[0],
         classifier[2], vocab_file, ner_model[1], json.dumps(texts)],
        capture_output=True, text=True, env=child_env(), timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    answers = json.loads(completed.stdout.split("ANSWERS")[1])
    expected = {
        "classifier": Predictor.from_saved_model(classifier[1]).predict(texts),
        "classifier_bf16": Predictor.from_checkpoint(
            classifier[0], classifier[2], vocab_file, "classifier", max_seq_length=SEQ,
            precision_name="bf16").predict(texts),
        "ner": Predictor.from_saved_model(ner_model[1]).tag(texts),
    }
    for name, rounds in answers.items():
        for got_round in rounds:
            for got, want in zip(got_round, expected[name], strict=True):
                if name == "ner":
                    assert got["tags"] == want["tags"]
                else:
                    assert got["probabilities"] == pytest.approx(want["probabilities"],
                                                                 abs=1e-5), name


# -------------------------------------------------------------------- fill_mask and embed


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A random tiny pre-training checkpoint (encoder + masked-LM head) and its weights."""
    from bert_tf import modeling
    from bert_tf.tasks import pretraining

    directory = tmp_path_factory.mktemp("pretrained")
    config_file = write_tiny_config(directory)
    bert_config = modeling.BertConfig.from_json_file(config_file)
    checkpoint = str(directory / "bert_model.ckpt")
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(3)
        ids = tf.compat.v1.placeholder(tf.int32, [None, None])
        model = modeling.BertModel(bert_config, False, ids)
        positions = tf.zeros([1, 1], tf.int32)
        pretraining.masked_lm_output(bert_config, model.get_sequence_output(),
                                     model.get_embedding_table(), positions, positions,
                                     tf.zeros([1, 1]))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            # A non-zero output bias, so the reference must add it.
            bias = [v for v in tf.compat.v1.global_variables()
                    if v.name == "cls/predictions/output_bias:0"][0]
            session.run(bias.assign(tf.random.normal(bias.shape, seed=4)))
            weights = {v.name[:-2]: session.run(v) for v in tf.compat.v1.global_variables()}
            tf.compat.v1.train.Saver().save(session, checkpoint)
    return dict(checkpoint=checkpoint, config_file=config_file, weights=weights)


def _reference_last_layer(weights, features):
    import numpy_bert

    n = int(sum(features.input_mask))
    ids, mask, segments = (np.array([getattr(features, key)[:n]])
                           for key in ("input_ids", "input_mask", "segment_ids"))
    layers, _ = numpy_bert.bert_forward(weights, ids, mask, segments, num_heads=2)
    return layers[-1][0]  # [n, H]


def test_embed_and_fill_mask_match_numpy(pretrained, vocab_file):
    import numpy_bert

    from bert_tf.data import bert_inputs

    texts = ["the cat sat on the mat.", "a much longer sentence about the weather in june"]
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    packed = [bert_inputs.pack_and_pad(tokenizer.tokenize(t), None, tokenizer, SEQ) for t in texts]
    last = [_reference_last_layer(pretrained["weights"], p) for p in packed]
    embedder = Predictor.from_checkpoint(
        pretrained["checkpoint"], pretrained["config_file"], vocab_file, "embed",
        max_seq_length=SEQ)
    np.testing.assert_allclose(embedder.embed(texts, pooling="cls"),
                               [layer[0] for layer in last], atol=1e-5)
    np.testing.assert_allclose(embedder.embed(texts, pooling="mean"),
                               [layer.mean(0) for layer in last], atol=1e-5)

    masked = ["the [MASK] sat on the [MASK].", "no mask here", "[MASK]"]
    filler = Predictor.from_checkpoint(
        pretrained["checkpoint"], pretrained["config_file"], vocab_file, "fill_mask",
        max_seq_length=SEQ)
    results = filler.fill_mask(masked, top_k=3)
    assert [len(r) for r in results] == [2, 0, 1]
    w = {k: np.asarray(v, np.float64) for k, v in pretrained["weights"].items()}
    for text, result in zip(masked, results, strict=True):
        pieces = []
        for k, part in enumerate(text.split("[MASK]")):
            pieces += (["[MASK]"] if k else []) + tokenizer.tokenize(part)
        features = bert_inputs.pack_and_pad(pieces, None, tokenizer, SEQ)
        layer = _reference_last_layer(pretrained["weights"], features)
        for position, top in zip([i for i, t in enumerate(features.tokens) if t == "[MASK]"],
                                 result, strict=True):
            h = numpy_bert.gelu(layer[position] @ w["cls/predictions/transform/dense/kernel"]
                                + w["cls/predictions/transform/dense/bias"])
            h = numpy_bert.layer_norm(h, w["cls/predictions/transform/LayerNorm/gamma"],
                                      w["cls/predictions/transform/LayerNorm/beta"])
            logits = h @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
            probs = numpy_bert.softmax(logits)
            best = np.argsort(-probs)[:3]
            assert [e["token"] for e in top] == tokenizer.convert_ids_to_tokens(list(best))
            assert [e["probability"] for e in top] == pytest.approx(probs[best], abs=1e-5)
