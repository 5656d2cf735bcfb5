"""run_ner.py and bert_tf.tasks.ner end to end on small CoNLL files (tiny model)."""

import os
import shutil

import pytest
import tensorflow as tf
from finetune_helpers import (
    DATA,
    assert_clean_error,
    assert_ok,
    only_export,
    options,
    read_key_values,
    run_script,
    write_tiny_config,
)

from bert_tf.data import ner as ner_data
from bert_tf.errors import BertTfError
from bert_tf.metrics import ner as ner_metrics
from bert_tf.runs import driver

NER_DATA = os.path.join(DATA, "ner")


def _conll_rows(path):
    """[(token, last column)] of the token lines of a CoNLL file."""
    with open(path, encoding="utf-8") as f:
        rows = [line.split() for line in f]
    return [(fields[0], fields[-1]) for fields in rows if fields and fields[0] != "-DOCSTART-"]


def _data_dir(tmp_path, dev_source="train.txt"):
    """train.txt and test.txt as shipped; dev.txt a copy of `dev_source` (the train file by
    default, so a model that fits the train data scores well on it)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for name in ("train.txt", "test.txt"):
        shutil.copy(os.path.join(NER_DATA, name), data_dir / name)
    shutil.copy(os.path.join(NER_DATA, dev_source), data_dir / "dev.txt")
    return data_dir


def test_script_end_to_end(tmp_path, vocab_file):
    data_dir = _data_dir(tmp_path)
    out, export = tmp_path / "out", tmp_path / "export"
    result = run_script(
        "run_ner.py", f"--data_dir={data_dir}", f"--vocab_file={vocab_file}",
        f"--bert_config_file={write_tiny_config(tmp_path)}", f"--output_dir={out}",
        "--do_train", "--do_eval", "--do_predict", "--max_seq_length=48",
        "--train_batch_size=2", "--num_train_steps=40", "--learning_rate=3e-3",
        "--eval_batch_size=2", f"--export_dir={export}", "--random_seed=1")
    assert_ok(result)

    with open(out / "label_list.txt") as f:
        label_list = f.read().split()
    assert label_list == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-PER"]

    # eval_predictions.txt: every dev word once, with its gold tag, in the conlleval layout.
    dev_rows = _conll_rows(data_dir / "dev.txt")
    with open(out / "eval_predictions.txt") as f:
        written = [line.split() for line in f if line.strip()]
    assert [(w[0], w[1]) for w in written] == dev_rows
    assert all(w[2] in label_list for w in written)
    results = read_key_values(out / "eval_results.txt")
    rescored = ner_metrics.evaluate_conll_file(str(out / "eval_predictions.txt"))
    assert results["f1"] == pytest.approx(rescored.overall.f1)
    assert results["precision"] == pytest.approx(rescored.overall.precision)
    assert results["recall"] == pytest.approx(rescored.overall.recall)
    # Nothing was truncated, so the streaming first-piece accuracy is conlleval's word one.
    assert results["eval_accuracy"] == pytest.approx(results["accuracy"], abs=1e-6)
    assert results["global_step"] == 40
    assert {"eval_loss", "loss", "f1_PER", "precision_LOC", "recall_ORG"} <= set(results)
    # Fitted the 3 training sentences it is evaluated on: F1 1.0 with seeds 1-8. Seeded because
    # unseeded runs vary: of 22 on one machine 20 scored 1.0 and 2 scored 0.86; one on another
    # scored 0.375.
    assert results["f1"] > 0.5

    test_rows = _conll_rows(os.path.join(NER_DATA, "test.txt"))
    with open(out / "test_predictions.txt") as f:
        predicted = [line.split() for line in f if line.strip()]
    assert [w[0] for w in predicted] == [token for token, _ in test_rows]
    assert all(w[2] in label_list for w in predicted)

    variables = dict(tf.train.list_variables(str(out)))
    assert variables["cls/ner/output_weights"] == [7, 32]
    assert variables["cls/ner/output_bias"] == [7]
    exported = only_export(export)
    with open(os.path.join(exported, "assets.extra", "label_list.txt")) as f:
        assert f.read().split() == label_list


def test_words_cut_by_max_seq_length_are_predicted_o(tmp_path, vocab_file):
    """With room for only a few word pieces the later words are dropped from the features but
    still written (as "O"), so the predictions line up with the input words, and the scores
    count the entities in cut words as missed."""
    data_dir = _data_dir(tmp_path)
    out = tmp_path / "out"
    examples = ner_data.NerProcessor().get_dev_examples(str(data_dir))
    results = driver.run_task(options(
        "ner", data_dir=str(data_dir), vocab_file=vocab_file,
        bert_config_file=write_tiny_config(tmp_path), output_dir=str(out), do_train=True,
        do_eval=True, max_seq_length=6, num_train_steps=40, train_batch_size=2,
        learning_rate=3e-3))
    with open(out / "eval_predictions.txt") as f:
        written = [line.split() for line in f if line.strip()]
    assert len(written) == sum(len(e.words) for e in examples)
    # Word 5 onwards of each sentence cannot fit in 6 pieces ([CLS] and [SEP] included).
    offset = 0
    for example in examples:
        assert all(row[2] == "O" for row in written[offset + 4:offset + len(example.words)])
        offset += len(example.words)
    # The scores are conlleval's over every word written, cut ones included.
    rescored = ner_metrics.evaluate_conll_file(str(out / "eval_predictions.txt")).overall
    assert (results["precision"], results["recall"], results["f1"]) == pytest.approx(
        (rescored.precision, rescored.recall, rescored.f1))
    # dev.txt (a copy of train.txt) has 7 entities; "British" (word 7) and "United Arab
    # Emirates" (words 3-5) do not fit in 4 pieces, so at most 5 can be found.
    assert rescored.gold_chunks == 7
    assert results["recall"] <= 5 / 7 + 1e-9
    # Learned the entities it sees: F1 0.83 (all 5, precision 1) after 40 steps with seeds
    # 1, 2 and 3; 0.67-0.83 after 20. Predicting all "O" scores 0.
    assert results["f1"] > 0.6


def test_missing_train_file_exits_2(tmp_path, vocab_file):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_script(
        "run_ner.py", f"--data_dir={empty}", f"--vocab_file={vocab_file}",
        f"--bert_config_file={write_tiny_config(tmp_path)}", f"--output_dir={tmp_path / 'o'}",
        "--do_train")
    assert_clean_error(result, "--data_dir", "train.txt")


def test_dev_tag_not_in_train_labels_names_file_and_line(tmp_path, vocab_file):
    data_dir = _data_dir(tmp_path)
    with open(data_dir / "dev.txt", "a") as f:
        f.write("\nAcme B-COMPANY\nrocks O\n")
    with pytest.raises(BertTfError, match=r"dev\.txt:\d+: tag 'B-COMPANY'"):
        driver.run_task(options(
            "ner", data_dir=str(data_dir), vocab_file=vocab_file,
            bert_config_file=write_tiny_config(tmp_path), output_dir=str(tmp_path / "out"),
            do_train=True, do_eval=True))
    assert not os.path.exists(tmp_path / "out" / "checkpoint")


def _long_document(tmp_path, num_words=300):
    """train/dev/test.txt: one 300-word sentence (far more than a 64-piece window)."""
    data_dir = tmp_path / "long"
    data_dir.mkdir()
    words = ["Peter", "Blackburn", "visited", "Paris", "today", "."] * (num_words // 6)
    tags = ["B-PER", "I-PER", "O", "B-LOC", "O", "O"] * (num_words // 6)
    text = "".join(f"{word} {tag}\n" for word, tag in zip(words, tags, strict=True))
    for name in ("train.txt", "dev.txt", "test.txt"):
        (data_dir / name).write_text(text)
    return data_dir, words


def test_doc_stride_predicts_every_word_of_a_long_document(tmp_path, vocab_file):
    data_dir, words = _long_document(tmp_path)
    out = tmp_path / "out"
    results = driver.run_task(options(
        "ner", data_dir=str(data_dir), vocab_file=vocab_file,
        bert_config_file=write_tiny_config(tmp_path), output_dir=str(out), do_train=True,
        do_eval=True, do_predict=True, max_seq_length=64, doc_stride=32, num_train_steps=4,
        train_batch_size=2, eval_batch_size=4, predict_batch_size=4))
    for name in ("eval_predictions.txt", "test_predictions.txt"):
        with open(out / name) as f:
            written = [line.split() for line in f if line.strip()]
        assert [row[0] for row in written] == words
    # The 300 words (one piece each) are 9 windows of up to 62 pieces starting every 32
    # (0, 32, ..., 256), not one truncated record.
    records = sum(1 for _ in tf.data.TFRecordDataset(str(out / "eval.tf_record")))
    assert records == 9
    # Each word is scored in exactly one window, so the streaming accuracy over scored pieces
    # is conlleval's accuracy over the 300 words.
    rescored = ner_metrics.evaluate_conll_file(str(out / "eval_predictions.txt"))
    assert results["eval_accuracy"] == pytest.approx(rescored.accuracy, abs=1e-6)
    assert results["accuracy"] == pytest.approx(rescored.accuracy)


def test_doc_stride_as_long_as_a_window_is_refused(tmp_path, vocab_file):
    data_dir, _ = _long_document(tmp_path, num_words=6)
    with pytest.raises(BertTfError, match=r"--doc_stride=62 must be smaller than a window"):
        driver.run_task(options(
            "ner", data_dir=str(data_dir), vocab_file=vocab_file,
            bert_config_file=write_tiny_config(tmp_path), output_dir=str(tmp_path / "out"),
            do_train=True, max_seq_length=64, doc_stride=62))
    assert not os.path.exists(tmp_path / "out")
