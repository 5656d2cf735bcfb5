"""run_classifier.py and bert_tf.tasks.classification end to end on small data (tiny model)."""

import csv
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import (
    DATA,
    PACKED_WEIGHTS_LINE,
    TOPICS,
    assert_clean_error,
    assert_ok,
    only_export,
    options,
    read_key_values,
    run_script,
    write_tiny_config,
)

from bert_tf.data import classification_features as classification_data
from bert_tf.data import input_pipeline
from bert_tf.errors import BertTfError
from bert_tf.runs import driver
from bert_tf.tasks import classification


def _read_tsv(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_script_end_to_end_eval_matches_test_results(tmp_path, vocab_file):
    """Train, eval, predict and export through the script. test.tsv is the dev set, so
    test_results.tsv (prediction pipeline: batches padded to their longest example) must
    reproduce the streaming eval metrics and the numpy GLUE accuracy."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    shutil.copy(os.path.join(TOPICS, "train.tsv"), data_dir / "train.tsv")
    shutil.copy(os.path.join(TOPICS, "dev.tsv"), data_dir / "dev.tsv")
    shutil.copy(os.path.join(TOPICS, "dev.tsv"), data_dir / "test.tsv")
    out, export = tmp_path / "out", tmp_path / "export"
    result = run_script(
        "run_classifier.py", "--task_name=tsv", "--text_a_column=sentence",
        f"--data_dir={data_dir}", f"--vocab_file={vocab_file}",
        f"--bert_config_file={write_tiny_config(tmp_path)}", f"--output_dir={out}",
        "--do_train", "--do_eval", "--do_predict", "--max_seq_length=24",
        "--train_batch_size=8", "--num_train_steps=6", "--learning_rate=1e-3",
        "--predict_batch_size=7", "--eval_batch_size=16", f"--export_dir={export}")
    assert_ok(result)
    # A process that trains never tells oneDNN its weights are frozen: its steps would run on
    # the first weights they saw.
    assert "Training" in result.stderr and PACKED_WEIGHTS_LINE not in result.stderr

    results = read_key_values(out / "eval_results.txt")
    assert set(results) == {"eval_accuracy", "eval_loss", "global_step", "loss", "accuracy"}
    assert results["global_step"] == 6
    assert results["accuracy"] == pytest.approx(results["eval_accuracy"], abs=1e-6)

    dev = _read_tsv(data_dir / "dev.tsv")[1:]
    label_ids = np.array([["food", "sports"].index(row[1]) for row in dev])
    probabilities = np.array([[float(x) for x in row]
                              for row in _read_tsv(out / "test_results.tsv")])
    assert probabilities.shape == (len(dev), 2)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    accuracy = np.mean(probabilities.argmax(axis=1) == label_ids)
    loss = np.mean(-np.log(probabilities[np.arange(len(dev)), label_ids]))
    assert accuracy == pytest.approx(results["eval_accuracy"], abs=1e-6)
    assert loss == pytest.approx(results["eval_loss"], rel=1e-4)

    # The head in the original layout, next to the encoder.
    variables = dict(tf.train.list_variables(str(out)))
    assert variables["output_weights"] == [2, 32]
    assert variables["output_bias"] == [2]
    assert variables["bert/pooler/dense/kernel"] == [32, 32]
    for name in ("train.tf_record", "eval.tf_record", "predict.tf_record"):
        assert (out / name).is_file() and (out / f"{name}.meta.json").is_file()
    exported = only_export(export)
    assert os.path.isfile(os.path.join(exported, "saved_model.pb"))
    with open(os.path.join(exported, "assets.extra", "label_list.txt")) as f:
        assert f.read() == "food\nsports\n"


def test_regression_metrics_match_numpy_on_predictions(tmp_path, vocab_file):
    """A csv task with --regression: MSE head, Pearson / Spearman in eval_results.txt equal
    to numpy's on the predicted values of the same examples."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    # The score counts the "good"s; a colour makes every text (so every prediction) distinct
    # and the offset every score, so there are no rank ties.
    colours = ["red", "blue", "green", "white", "black", "brown", "pink", "gray", "gold", "tan"]
    rows = [(" ".join(["good"] * (i % 6) + ["bad"] * (5 - i % 6) + [colours[i % 10]]),
             f"{i % 6 + i / 1000:.3f}") for i in range(40)]
    for split, part in (("train", rows[:30]), ("dev", rows[30:]), ("test", rows[30:])):
        with open(data_dir / f"{split}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "score"])
            writer.writerows(part)
    out = tmp_path / "out"
    # Enough steps to learn the scores: after 40 every prediction was 2.718 +- 1e-4, and the
    # correlations of such near-constant values swing by 1e-4 with float rounding alone.
    results = driver.run_task(options(
        "classifier", task_name="csv", data_dir=str(data_dir), text_a_column="text",
        label_column="score", regression=True, vocab_file=vocab_file,
        bert_config_file=write_tiny_config(tmp_path), output_dir=str(out), do_train=True,
        do_eval=True, do_predict=True, num_train_steps=150, eval_batch_size=4,
        predict_batch_size=3))

    assert {"pearson", "spearman", "corr", "eval_loss"} <= set(results)
    assert "eval_accuracy" not in results
    assert results == pytest.approx(read_key_values(out / "eval_results.txt"))
    predictions = np.array([float(row[0]) for row in _read_tsv(out / "test_results.tsv")])
    labels = np.array([float(score) for _, score in rows[30:]])
    assert predictions.shape == labels.shape
    assert np.std(predictions) > 0.5  # Learned (the labels' std is 1.6): not a constant guess.
    assert results["eval_loss"] == pytest.approx(np.mean((predictions - labels) ** 2), rel=1e-4)
    assert results["pearson"] == pytest.approx(np.corrcoef(predictions, labels)[0, 1], abs=1e-4)
    ranks = [np.argsort(np.argsort(v)) for v in (predictions, labels)]  # No ties here.
    assert results["spearman"] == pytest.approx(np.corrcoef(*ranks)[0, 1], abs=1e-4)


def test_glue_sentence_pair_task_writes_its_metrics(tmp_path, vocab_file):
    """MRPC: GLUE's accuracy + F1, and features whose segment ids are 1 exactly on text_b and
    its [SEP] (the original's layout: [CLS] a [SEP] b [SEP])."""
    from bert_tf import tokenization

    out = tmp_path / "out"
    mrpc = os.path.join(DATA, "glue", "MRPC")
    results = driver.run_task(options(
        "classifier", task_name="MRPC", data_dir=mrpc, vocab_file=vocab_file,
        bert_config_file=write_tiny_config(tmp_path), output_dir=str(out), do_train=True,
        do_eval=True, num_train_steps=2, train_batch_size=2, max_seq_length=64))
    assert {"accuracy", "f1", "acc_and_f1", "eval_accuracy", "eval_loss"} <= set(results)
    assert results["acc_and_f1"] == pytest.approx((results["accuracy"] + results["f1"]) / 2)
    assert results["global_step"] == 2

    tokenizer = tokenization.FullTokenizer(vocab_file)
    rows = _read_tsv(os.path.join(mrpc, "dev.tsv"))[1:]
    records = list(tf.compat.v1.io.tf_record_iterator(str(out / "eval.tf_record")))
    assert len(records) == len(rows)
    for row, record in zip(rows, records, strict=True):
        feature = tf.train.Example.FromString(record).features.feature
        a, b = tokenizer.tokenize(row[3]), tokenizer.tokenize(row[4])
        assert len(a) + len(b) + 3 <= 64  # Nothing truncated.
        expected = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        segment_ids = list(feature["segment_ids"].int64_list.value)
        assert segment_ids[:len(expected)] == expected
        assert not any(segment_ids[len(expected):])
        ids = list(feature["input_ids"].int64_list.value)[:len(expected)]
        assert ids == tokenizer.convert_tokens_to_ids(["[CLS]", *a, "[SEP]", *b, "[SEP]"])


def test_eval_and_predict_batches_are_trimmed_to_their_longest_example(tmp_path, vocab_file):
    from bert_tf import tokenization

    tokenizer = tokenization.FullTokenizer(vocab_file)
    texts = ["short", "a somewhat longer sentence here", "mid length text", "x",
             "one two three four five six seven eight nine"]
    examples = [classification_data.InputExample(f"dev-{i}", text, label="0")
                for i, text in enumerate(texts)]
    path = str(tmp_path / "eval.tf_record")
    classification_data.file_based_convert_examples_to_features(examples, ["0", "1"], 20,
                                                                tokenizer, path)
    lengths = [len(tokenizer.tokenize(text)) + 2 for text in texts]

    eval_batches = list(input_pipeline.record_input_fn(
        [path], classification.feature_spec(20), is_training=False,
        trim_keys=input_pipeline.SEQUENCE_FEATURES)({"batch_size": 2}))
    assert [batch["input_ids"].shape[1] for batch in eval_batches] == [
        max(lengths[0:2]), max(lengths[2:4]), lengths[4]]
    assert eval_batches[-1]["input_ids"].shape[0] == 1  # The last, partial batch is kept.
    assert eval_batches[0]["input_ids"].dtype == tf.int32
    train_batch = next(iter(input_pipeline.record_input_fn(
        [path], classification.feature_spec(20), is_training=True,
        trim_keys=input_pipeline.SEQUENCE_FEATURES)({"batch_size": 4})))
    assert train_batch["input_ids"].shape == (4, 20)


def test_unknown_task_exits_2_with_one_error_line(tmp_path, vocab_file):
    result = run_script(
        "run_classifier.py", "--task_name=glue-foo", f"--data_dir={TOPICS}",
        f"--vocab_file={vocab_file}", f"--bert_config_file={write_tiny_config(tmp_path)}",
        f"--output_dir={tmp_path / 'out'}", "--do_train")
    assert_clean_error(result, "--task_name", "glue-foo")


def _bad_run(tmp_path, vocab, **values):
    values = {"task_name": "tsv", "data_dir": TOPICS, "text_a_column": "sentence",
              "vocab_file": vocab, "bert_config_file": write_tiny_config(tmp_path),
              "output_dir": str(tmp_path / "out"), "do_train": True, **values}
    with pytest.raises(BertTfError) as raised:
        driver.run_task(options("classifier", **values))
    return str(raised.value)


def test_missing_column_names_the_column_and_file(tmp_path, vocab_file):
    message = _bad_run(tmp_path, vocab_file, text_a_column="review")
    assert "'review'" in message and "train.tsv" in message and "sentence, label" in message


def test_label_not_in_label_list_names_file_and_line(tmp_path, vocab_file):
    message = _bad_run(tmp_path, vocab_file, labels=["food"])
    assert "train.tsv:" in message and "'sports'" in message


@pytest.mark.parametrize("values,fragment", [
    ({"task_name": "xnli", "text_a_column": None}, "--data_dir"),  # No XNLI files there.
    ({"data_dir": "/no/such/dir"}, "--data_dir"),
    ({"max_seq_length": 512}, "--max_seq_length=512"),
    ({"num_accumulation_steps": 3}, "--num_accumulation_steps=3"),
    ({"do_train": False}, "--do_train"),
    ({"vocab_file": "/no/vocab.txt"}, "--vocab_file"),
    ({"init_checkpoint": "/no/bert_model.ckpt"}, "--init_checkpoint"),
    ({"num_train_epochs": 0.01}, "--num_train_epochs"),
])
def test_bad_flags_stop_before_training(tmp_path, vocab_file, values, fragment):
    assert fragment in _bad_run(tmp_path, vocab_file, **values)
    assert not os.path.exists(tmp_path / "out" / "checkpoint")


def test_eval_without_checkpoint_says_train_first(tmp_path, vocab_file):
    message = _bad_run(tmp_path, vocab_file, do_train=False, do_eval=True)
    assert "no checkpoint" in message and "train first" in message
