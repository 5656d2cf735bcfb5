"""The official SQuAD v1.1 / v2.0 metric (bert_tf.metrics.squad, scripts/squad_evaluate.py).

Expected values are computed by hand in the comments from the official scripts' rules.
"""

import json
import os
import re

import pytest
from finetune_helpers import run_script

from bert_tf import errors
from bert_tf.metrics import squad as squad_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "tests", "data", "squad")


def _data(name):
    return os.path.join(DATA, name)


# dev_v1.json / pred_v1.json, per question (EM, F1):
#   q1 gold "Denver Broncos" | "The Denver Broncos", pred "the denver broncos!"
#      -> normalised "denver broncos" both: EM 1, F1 1.
#   q2 gold "Santa Clara, California" | "Levi's Stadium", pred "Levi's Stadium in Santa Clara"
#      -> pred words levis stadium in santa clara (5).
#      vs "santa clara california": 2 common, P 2/5, R 2/3, F1 = 2*(4/15)/(16/15) = 1/2.
#      vs "levis stadium": 2 common, P 2/5, R 1, F1 = (4/5)/(7/5) = 4/7.  EM 0, F1 4/7.
#   q3 gold "an apple a day" -> articles dropped -> "apple day" = pred: EM 1, F1 1.
#   q4 no prediction: 0, 0.
#   q5 gold "blue", pred "red": 0, 0.
#   q6 gold "cat cat dog", pred "cat dog dog": common cat x1 + dog x1 = 2, P = R = 2/3: F1 2/3.
#   EM = 2/6 -> 33.333..; F1 = (1 + 4/7 + 1 + 0 + 0 + 2/3) / 6 = (68/21) / 6 = 34/63 -> 53.968..
V1_EXPECTED = {"exact_match": 100.0 * 2 / 6, "f1": 100.0 * 34 / 63}

# dev_v2.json / pred_v2.json, per question (EM, F1), has-answer in brackets:
#   a1 [has] gold "Normandy" | "in Normandy", pred "Normandy": 1, 1.
#   a2 [has] gold "10th and 11th centuries" (4 words), pred "11th century" (2): common "11th",
#      P 1/2, R 1/4, F1 = 2*(1/8)/(3/4) = 1/3.  EM 0.
#   n3 [no]  pred "": 1, 1.
#   n4 [no]  pred "France": 0, 0.
#   a5 [has] gold "The" normalises to "" so it is dropped and "" is the only gold: pred "": 1, 1.
#   a6 [has] gold "Rollo", pred "": 0, 0.
# exact = 3/6, f1 = (1 + 1/3 + 1 + 0 + 1 + 0)/6 = 10/18;
# HasAns (a1 a2 a5 a6): exact 2/4, f1 (7/3)/4 = 7/12; NoAns (n3 n4): exact 1/2, f1 1/2.
V2_EXPECTED = {
    "exact": 50.0, "f1": 100.0 * 10 / 18, "total": 6,
    "HasAns_exact": 50.0, "HasAns_f1": 100.0 * 7 / 12, "HasAns_total": 4,
    "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2,
}

# With na_prob_v2.json (a1 .1, a2 .9, n3 .8, n4 .95, a5 .2, a6 .3) the best threshold sweep
# starts at 2 (all "" -> both no-answer questions right) and goes up the sorted probabilities:
#   exact: a1 +1 = 3 (thr .1), a5 +1 = 4 (thr .2), a6 +0, n3 +0, a2 +0, n4 -1 (pred non-empty)
#     -> best_exact 4/6, best_exact_thresh 0.2.
#   f1:    a1 +1 = 3, a5 +1 = 4, a6 +0, n3 +0, a2 +1/3 = 13/3 (thr .9), n4 -1
#     -> best_f1 (13/3)/6 = 13/18, best_f1_thresh 0.9.
V2_BEST = {"best_exact": 100.0 * 4 / 6, "best_exact_thresh": 0.2,
           "best_f1": 100.0 * 13 / 18, "best_f1_thresh": 0.9}


def _load(name):
    with open(_data(name), encoding="utf-8") as f:
        return json.load(f)


def _assert_close(actual, expected):
    assert set(actual) == set(expected)
    for k, v in expected.items():
        assert actual[k] == pytest.approx(v, abs=1e-9), k


def test_normalize_answer_follows_official_rules():
    assert squad_metrics.normalize_answer("  The  Denver-Broncos, an  A-team!") == \
        "denverbroncos ateam"
    # Articles only as whole words; "theater" keeps its "the".
    assert squad_metrics.normalize_answer("Theater of the Absurd") == "theater of absurd"
    assert squad_metrics.normalize_answer("A") == ""


def test_v1_metric_matches_hand_computed_values(capsys):
    result = squad_metrics.evaluate_v1(_load("dev_v1.json")["data"], _load("pred_v1.json"))
    _assert_close(result, V1_EXPECTED)
    assert "Unanswered question q4 will receive score 0." in capsys.readouterr().err


def test_v1_and_v2_f1_differ_only_on_empty_answers():
    # v1.1: empty vs empty shares no word -> 0; v2.0: both empty -> 1.
    assert squad_metrics.f1_score_v1("", "") == 0
    assert squad_metrics.f1_score_v2("", "") == 1
    assert squad_metrics.f1_score_v2("a", "") == 1  # "a" normalises to no words
    assert squad_metrics.f1_score_v2("x", "") == 0
    assert squad_metrics.f1_score_v1("cat cat dog", "cat dog dog") == pytest.approx(2 / 3)


def test_v2_metric_matches_hand_computed_values():
    result = squad_metrics.evaluate_v2(_load("dev_v2.json")["data"], _load("pred_v2.json"))
    _assert_close(result, V2_EXPECTED)
    assert list(result)[:3] == ["exact", "f1", "total"]


def test_v2_metric_with_na_probs_adds_best_thresholds():
    result = squad_metrics.evaluate_v2(_load("dev_v2.json")["data"], _load("pred_v2.json"),
                                       na_probs=_load("na_prob_v2.json"))
    _assert_close(result, {**V2_EXPECTED, **V2_BEST})


def test_v2_na_prob_thresh_turns_confident_no_answers_into_empty_predictions():
    # Threshold .85: a2 (.9) and n4 (.95) count as "": a2 has an answer -> 0, 0 (was 0, 1/3);
    # n4 has none -> 1, 1 (was 0, 0).
    # exact = (1+0+1+1+1+0)/6 = 4/6, f1 the same; HasAns 2/4 both; NoAns 2/2 both.
    result = squad_metrics.evaluate_v2(_load("dev_v2.json")["data"], _load("pred_v2.json"),
                                       na_probs=_load("na_prob_v2.json"), na_prob_thresh=0.85)
    _assert_close(result, {
        "exact": 100.0 * 4 / 6, "f1": 100.0 * 4 / 6, "total": 6,
        "HasAns_exact": 50.0, "HasAns_f1": 50.0, "HasAns_total": 4,
        "NoAns_exact": 100.0, "NoAns_f1": 100.0, "NoAns_total": 2, **V2_BEST})


def test_v2_requires_a_prediction_for_every_question():
    preds = _load("pred_v2.json")
    del preds["a6"]
    with pytest.raises(errors.BertTfError, match="no answer for 1 of 6 questions.*'a6'"):
        squad_metrics.evaluate_v2(_load("dev_v2.json")["data"], preds)


def test_v1_rejects_questions_without_gold_answers():
    with pytest.raises(errors.BertTfError, match="'n3' has no gold answer.*--version_2"):
        squad_metrics.evaluate_v1(_load("dev_v2.json")["data"], _load("pred_v2.json"))


def _run_script(*args):
    return run_script("squad_evaluate.py", *args, timeout=60)


def test_script_prints_one_json_line_for_v1():
    proc = _run_script(_data("dev_v1.json"), _data("pred_v1.json"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    _assert_close(json.loads(lines[0]), V1_EXPECTED)


def test_script_v2_with_flags():
    proc = _run_script(_data("dev_v2.json"), _data("pred_v2.json"), "--version_2",
                       "--na_prob_file", _data("na_prob_v2.json"), "--na_prob_thresh=0.85")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["exact"] == pytest.approx(100.0 * 4 / 6)
    assert result["NoAns_f1"] == pytest.approx(100.0)
    assert result["best_f1_thresh"] == pytest.approx(0.9)


def test_script_takes_the_official_v2_scripts_spellings(tmp_path):
    """`evaluate-v2.0.py data pred --na-prob-file F --na-prob-thresh T --out-file O`, as the
    original README types it: the same result as our spellings, and the file written."""
    out = tmp_path / "eval.json"
    official = _run_script(_data("dev_v2.json"), _data("pred_v2.json"), "--na-prob-file",
                           _data("na_prob_v2.json"), "--na-prob-thresh", "0.85", "--out-file",
                           str(out))
    ours = _run_script(_data("dev_v2.json"), _data("pred_v2.json"), "--version_2",
                       "--na_prob_file", _data("na_prob_v2.json"), "--na_prob_thresh=0.85")
    assert official.returncode == 0, official.stderr
    assert json.loads(official.stdout) == json.loads(ours.stdout)
    assert json.loads(out.read_text()) == json.loads(ours.stdout)


@pytest.mark.parametrize("content, expected", [
    ('{"version": "1.1"}', 'has no "data" list of articles'),
    ('[1, 2]', 'has no "data" list of articles'),
    ('{"data": [{"title": "x"}]}', r'data\[0\] has no "paragraphs" list'),
    ('{"data": [{"paragraphs": [{"context": "c"}]}]}',
     r'data\[0\].paragraphs\[0\] needs a "context" string and a "qas" list'),
    ('{"data": [{"paragraphs": [{"context": "c", "qas": [{"question": "q"}]}]}]}',
     r'qas\[0\] needs an "id"'),
    ('{"data": ', "is not valid UTF-8 JSON"),
])
def test_script_rejects_non_squad_json(tmp_path, content, expected):
    bad = tmp_path / "not_squad.json"
    bad.write_text(content)
    proc = _run_script(str(bad), _data("pred_v1.json"))
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ")
    assert str(bad) in lines[0]
    assert re.search(expected, lines[0]), lines[0]


def test_script_reports_missing_files_and_bad_usage(tmp_path):
    missing = str(tmp_path / "nope.json")
    proc = _run_script(_data("dev_v1.json"), missing)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and missing in proc.stderr
    assert "does not exist" in proc.stderr

    proc = _run_script(_data("dev_v1.json"))
    assert proc.returncode == 2
    assert "expected 2 arguments DATA_FILE PRED_FILE, got 1" in proc.stderr

    # A predictions file that is not {id: text}.
    bad_pred = tmp_path / "pred.json"
    bad_pred.write_text('["q1"]')
    proc = _run_script(_data("dev_v1.json"), str(bad_pred))
    assert proc.returncode == 2
    assert f"prediction file {bad_pred} must be a JSON object" in proc.stderr
