"""run_squad.py and bert_tf.tasks.squad end to end on small SQuAD files (tiny model)."""

import json
import os

import pytest
import tensorflow as tf
from finetune_helpers import (
    DATA,
    FINETUNE_DATA,
    assert_clean_error,
    assert_ok,
    check_prediction_files,
    load_json,
    only_export,
    options,
    run_script,
    squad_questions,
    write_tiny_config,
)

from bert_tf.errors import BertTfError
from bert_tf.runs import driver

WINDOWS_V2 = os.path.join(DATA, "squad", "windows_v2.json")
SMALL_V1 = os.path.join(FINETUNE_DATA, "squad_small.json")


def test_script_v2_train_predict_evaluate_export(tmp_path, vocab_file):
    out, export = tmp_path / "out", tmp_path / "export"
    result = run_script(
        "run_squad.py", f"--vocab_file={vocab_file}",
        f"--bert_config_file={write_tiny_config(tmp_path)}", f"--output_dir={out}",
        "--do_train", f"--train_file={WINDOWS_V2}", "--do_predict",
        f"--predict_file={WINDOWS_V2}", "--version_2_with_negative", "--max_seq_length=32",
        "--doc_stride=8", "--max_query_length=6", "--train_batch_size=4",
        "--num_train_steps=6", "--learning_rate=1e-3", "--n_best_size=5",
        "--max_answer_length=4", f"--export_dir={export}")
    assert_ok(result)
    check_prediction_files(out, WINDOWS_V2, n_best_size=5, max_answer_words=4, version_2=True)

    eval_results = load_json(out / "eval_results.json")
    assert eval_results["total"] == 3
    assert eval_results["HasAns_total"] == 2 and eval_results["NoAns_total"] == 1
    for key in ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1",
                "best_exact", "best_f1"):
        assert 0.0 <= eval_results[key] <= 100.0
    # The same numbers as the official-metric script on the written files.
    evaluated = run_script("squad_evaluate.py", WINDOWS_V2, str(out / "predictions.json"),
                           "--version_2", f"--na_prob_file={out / 'null_odds.json'}")
    assert_ok(evaluated)
    assert json.loads(evaluated.stdout.strip().splitlines()[-1]) == pytest.approx(eval_results)

    variables = dict(tf.train.list_variables(str(out)))
    assert variables["cls/squad/output_weights"] == [2, 32]
    assert variables["cls/squad/output_bias"] == [2]
    assert os.path.isfile(os.path.join(only_export(export), "saved_model.pb"))


def test_predict_v1_over_several_windows(tmp_path, vocab_file):
    """Prediction only (random weights): the long paragraph is cut into several windows and
    every question still gets exactly one answer from its own context."""
    out = tmp_path / "out"
    results = driver.run_task(options(
        "squad", vocab_file=vocab_file, bert_config_file=write_tiny_config(tmp_path),
        output_dir=str(out), do_predict=True, predict_file=SMALL_V1, max_seq_length=40,
        doc_stride=16, max_query_length=12, predict_batch_size=5, n_best_size=20,
        max_answer_length=3))
    check_prediction_files(out, SMALL_V1, n_best_size=20, max_answer_words=3)
    assert set(results) == {"exact_match", "f1"}
    assert results == load_json(out / "eval_results.json")
    windows = sum(1 for _ in tf.data.TFRecordDataset(str(out / "eval.tf_record")))
    assert windows > len(squad_questions(SMALL_V1))


def test_non_squad_json_exits_2_naming_the_flag(tmp_path, vocab_file):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"question": "what?", "context": "a list, not SQuAD"}]))
    result = run_script(
        "run_squad.py", f"--vocab_file={vocab_file}",
        f"--bert_config_file={write_tiny_config(tmp_path)}", f"--output_dir={tmp_path / 'o'}",
        "--do_predict", f"--predict_file={bad}", "--max_seq_length=128")
    assert_clean_error(result, "--predict_file", str(bad), '"data"')


@pytest.mark.parametrize("values,fragment", [
    ({"do_train": True}, "--train_file"),
    ({"do_predict": True}, "--predict_file"),
    ({"do_predict": True, "predict_file": __file__}, "not valid UTF-8 JSON"),
    ({"do_predict": True, "predict_file": SMALL_V1, "max_query_length": 61},
     "--max_query_length=61"),
    ({"do_train": True, "train_file": os.path.join(DATA, "squad", "dev_v1.json")},
     "exactly 1 answer"),
    ({"do_predict": True, "predict_file": SMALL_V1, "n_best_size": 0}, "--n_best_size"),
])
def test_bad_inputs_stop_early(tmp_path, vocab_file, values, fragment):
    with pytest.raises(BertTfError, match=fragment):
        driver.run_task(options(
            "squad", vocab_file=vocab_file, bert_config_file=write_tiny_config(tmp_path),
            output_dir=str(tmp_path / "out"), **{"max_seq_length": 64, "max_query_length": 16,
                                                 **values}))
    assert not os.path.exists(tmp_path / "out" / "checkpoint")
