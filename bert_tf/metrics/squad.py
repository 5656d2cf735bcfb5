"""The official SQuAD v1.1 and v2.0 evaluation (exact match and F1), as pure Python.

Reproduces `evaluate-v1.1.py` and `evaluate-v2.0.py` of the SQuAD site. Answers are
normalised (lower case, punctuation dropped, articles a/an/the dropped, whitespace collapsed)
and each question scores the best match over its gold answers; totals are percentages.

v1.1 (`evaluate_v1`): {"exact_match", "f1"}; a question without a prediction scores 0 (and is
reported on stderr).
v2.0 (`evaluate_v2`): {"exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
"NoAns_exact", "NoAns_f1", "NoAns_total"} (HasAns/NoAns only when there are such questions) and,
given no-answer probabilities, {"best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"}.
A question without gold answers is answered correctly only by "". A prediction counts as ""
when its no-answer probability exceeds `na_prob_thresh`.

Chinese data (CMRC 2018, DRCD) is scored by `bert_tf.metrics.squad_zh` instead (`evaluate`
and `evaluate_files` with language="zh", or "auto" to choose from the contexts).
"""

import collections
import json
import re
import string
import sys

from absl import logging

from bert_tf import errors, fileio
from bert_tf.data.squad import load_squad_dataset
from bert_tf.metrics import squad_zh

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s):
    """Lower-cases, drops punctuation and the articles a/an/the, and collapses whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES_RE.sub(" ", s)
    return " ".join(s.split())


def get_tokens(s):
    """Returns the normalised words of `s` ([] for "")."""
    if not s:
        return []
    return normalize_answer(s).split()


def exact_match_score(prediction, ground_truth):
    """1 if the normalised strings are equal, else 0 (v1.1 and v2.0)."""
    return int(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score_v1(prediction, ground_truth):
    """Word-overlap F1 of v1.1: 0 when no normalised word is shared (even if both are empty)."""
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def f1_score_v2(prediction, ground_truth):
    """Word-overlap F1 of v2.0: if either side is empty, 1 when both are, else 0."""
    gold_toks = get_tokens(ground_truth)
    pred_toks = get_tokens(prediction)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if not gold_toks or not pred_toks:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def _iter_qas(dataset):
    for article in dataset:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def _gold_texts(qa, source):
    answers = qa.get("answers")
    if not isinstance(answers, list) or not all(
            isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
        raise errors.BertTfError(
            f"{source}: question {qa['id']!r} has no \"answers\" list of {{\"text\": ...}}; "
            "only a SQuAD file with gold answers can be evaluated.")
    return [a["text"] for a in answers]


def dataset_has_answers(dataset):
    """Whether every question of `dataset` carries an "answers" list (so it can be evaluated)."""
    return all(isinstance(qa.get("answers"), list) for qa in _iter_qas(dataset))


def evaluate_v1(dataset, predictions, source="SQuAD data"):
    """The official SQuAD v1.1 evaluation.

    Args:
      dataset: the list under "data" of a SQuAD JSON file (see `load_squad_dataset`).
      predictions: {question id: answer text}.
      source: names the data in error messages.

    Returns:
      {"exact_match": percent, "f1": percent} over all questions of `dataset`.
    """
    f1 = exact_match = total = 0
    for qa in _iter_qas(dataset):
        ground_truths = _gold_texts(qa, source)
        if not ground_truths:
            raise errors.BertTfError(
                f"{source}: question {qa['id']!r} has no gold answer, which SQuAD v1.1 does "
                "not allow; evaluate SQuAD v2.0 data with --version_2.")
        total += 1
        if qa["id"] not in predictions:
            print(f"Unanswered question {qa['id']} will receive score 0.", file=sys.stderr)
            continue
        prediction = predictions[qa["id"]]
        exact_match += max(exact_match_score(prediction, gt) for gt in ground_truths)
        f1 += max(f1_score_v1(prediction, gt) for gt in ground_truths)
    if total == 0:
        raise errors.BertTfError(f"{source} has no questions to evaluate.")
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def _make_eval_dict(exact_scores, f1_scores, qid_list=None):
    if qid_list is None:
        qid_list = list(exact_scores)
    total = len(qid_list)
    return collections.OrderedDict([
        ("exact", 100.0 * sum(exact_scores[k] for k in qid_list) / total),
        ("f1", 100.0 * sum(f1_scores[k] for k in qid_list) / total),
        ("total", total),
    ])


def _find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    # Sweep the threshold up through the sorted no-answer probabilities: below the threshold
    # every question is answered "", so start from the score of answering all with "".
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = 0.0
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def evaluate_v2(dataset, predictions, na_probs=None, na_prob_thresh=1.0, source="SQuAD data"):
    """The official SQuAD v2.0 evaluation.

    Args:
      dataset: the list under "data" of a SQuAD JSON file (see `load_squad_dataset`).
      predictions: {question id: answer text, "" for no answer}; must cover every question.
      na_probs: {question id: no-answer probability (any score: higher = more likely no
        answer)}, or None for 0.0 everywhere (then no best_* keys are reported).
      na_prob_thresh: a prediction counts as "" when its no-answer probability exceeds this.
      source: names the data in error messages.

    Returns:
      An OrderedDict of percentages and counts (see the module docstring).
    """
    qid_to_has_ans = {}
    exact_raw = {}
    f1_raw = {}
    missing = []
    for qa in _iter_qas(dataset):
        qid = qa["id"]
        gold_texts = _gold_texts(qa, source)
        qid_to_has_ans[qid] = bool(gold_texts)
        gold_answers = [a for a in gold_texts if normalize_answer(a)]
        if not gold_answers:
            # For unanswerable questions the only correct answer is the empty string.
            gold_answers = [""]
        if qid not in predictions:
            missing.append(qid)
            continue
        a_pred = predictions[qid]
        exact_raw[qid] = max(exact_match_score(a_pred, a) for a in gold_answers)
        f1_raw[qid] = max(f1_score_v2(a_pred, a) for a in gold_answers)
    if not qid_to_has_ans:
        raise errors.BertTfError(f"{source} has no questions to evaluate.")
    if missing:
        # The official v2.0 script stops with a KeyError here; say which ids are missing.
        raise errors.BertTfError(
            f"the predictions have no answer for {len(missing)} of {len(qid_to_has_ans)} "
            f"questions of {source} (e.g. {missing[0]!r}); SQuAD v2.0 needs a prediction for "
            "every question (\"\" for no answer).")

    has_na_probs = na_probs is not None
    if not has_na_probs:
        na_probs = {k: 0.0 for k in predictions}
    missing_na = [qid for qid in exact_raw if qid not in na_probs]
    if missing_na:
        raise errors.BertTfError(
            f"the no-answer probabilities have no value for {len(missing_na)} questions "
            f"(e.g. {missing_na[0]!r}); give one for every question of {source}.")

    def apply_no_ans_threshold(scores):
        return {qid: float(not qid_to_has_ans[qid]) if na_probs[qid] > na_prob_thresh else s
                for qid, s in scores.items()}

    exact_thresh = apply_no_ans_threshold(exact_raw)
    f1_thresh = apply_no_ans_threshold(f1_raw)
    out_eval = _make_eval_dict(exact_thresh, f1_thresh)
    has_ans_qids = [k for k, v in qid_to_has_ans.items() if v]
    no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v]
    for prefix, qids in (("HasAns", has_ans_qids), ("NoAns", no_ans_qids)):
        if qids:
            for k, v in _make_eval_dict(exact_thresh, f1_thresh, qid_list=qids).items():
                out_eval[f"{prefix}_{k}"] = v
    if has_na_probs:
        best_exact, exact_best_thresh = _find_best_thresh(
            predictions, exact_raw, na_probs, qid_to_has_ans)
        best_f1, f1_best_thresh = _find_best_thresh(
            predictions, f1_raw, na_probs, qid_to_has_ans)
        out_eval["best_exact"] = best_exact
        out_eval["best_exact_thresh"] = exact_best_thresh
        out_eval["best_f1"] = best_f1
        out_eval["best_f1_thresh"] = f1_best_thresh
    return out_eval


def _load_json_dict(path, what, flag=None):
    fileio.require_file(path, flag=flag, what=what)
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise errors.BertTfError(f"{what} {path} is not valid UTF-8 JSON ({e}).") from e
    if not isinstance(obj, dict):
        raise errors.BertTfError(
            f"{what} {path} must be a JSON object {{question id: ...}}, not a "
            f"{type(obj).__name__}.")
    return obj


LANGUAGES = ("auto", "en", "zh")


def resolve_language(language, dataset, version_2=False, source="SQuAD data"):
    """The metric's language: "en" (SQuAD) or "zh" (CMRC 2018, `bert_tf.metrics.squad_zh`).

    Args:
      language: one of `LANGUAGES`; "auto" is "zh" when the contexts of `dataset` read as
        Chinese (`squad_zh.dataset_is_chinese`) and it is not v2.0, else "en" (said in the
        log).
      dataset: the list under "data" of the SQuAD JSON file.
      version_2: whether the v2.0 metric is asked for (it has no Chinese form).
      source: names the data in messages.

    Returns:
      "en" or "zh".
    """
    if language not in LANGUAGES:
        raise errors.BertTfError(
            f"--language={language!r}: use one of {', '.join(LANGUAGES)}.")
    if language == "zh" and version_2:
        raise errors.BertTfError(
            "--language=zh: the CMRC 2018 metric has no SQuAD v2.0 form (every question has "
            "an answer); drop --version_2 / --na_prob_file, or use --language=en.")
    if language != "auto":
        return language
    chinese, share = squad_zh.dataset_is_chinese(dataset)
    resolved = "zh" if chinese and not version_2 else "en"
    logging.info("--language=auto: %.1f%% of the context characters of %s are CJK "
                 "ideographs: the %s metric.", 100.0 * share, source,
                 "CMRC 2018 (zh)" if resolved == "zh" else "SQuAD (en)")
    return resolved


def evaluate(dataset, predictions, version_2=False, na_probs=None, na_prob_thresh=1.0,
             language="en", source="SQuAD data"):
    """The metric of `language` (`resolve_language`): `evaluate_v1`, `evaluate_v2` or
    `squad_zh.evaluate` (arguments as theirs)."""
    if resolve_language(language, dataset, version_2=version_2, source=source) == "zh":
        return squad_zh.evaluate(dataset, predictions, source=source)
    if version_2:
        return evaluate_v2(dataset, predictions, na_probs=na_probs,
                           na_prob_thresh=na_prob_thresh, source=source)
    return evaluate_v1(dataset, predictions, source=source)


def evaluate_files(data_file, pred_file, version_2=False, na_prob_file=None,
                   na_prob_thresh=1.0, language="en"):
    """Evaluates a predictions JSON file against a SQuAD JSON file (see the module docstring).

    Args:
      data_file: the SQuAD JSON file with gold answers.
      pred_file: JSON {question id: answer text}, e.g. run_squad's predictions.json.
      version_2: use the v2.0 metric (else v1.1).
      na_prob_file: v2.0 only: JSON {question id: no-answer probability}, e.g. null_odds.json.
      na_prob_thresh: v2.0 only: threshold on the no-answer probability.
      language: "en" (SQuAD), "zh" (CMRC 2018 / DRCD, `bert_tf.metrics.squad_zh`) or "auto"
        (see `resolve_language`).

    Returns:
      The metric dict.
    """
    dataset = load_squad_dataset(data_file)
    predictions = _load_json_dict(pred_file, "prediction file")
    bad = [k for k, v in predictions.items() if not isinstance(v, str)]
    if bad:
        raise errors.BertTfError(
            f"prediction file {pred_file}: the answer for {bad[0]!r} is not a string; expected "
            "{question id: answer text}.")
    source = f"SQuAD file {data_file}"
    if not version_2:
        if na_prob_file:
            raise errors.BertTfError(
                "--na_prob_file is only used by the SQuAD v2.0 metric; add --version_2.")
        return evaluate(dataset, predictions, language=language, source=source)
    resolve_language(language, dataset, version_2=True, source=source)
    na_probs = None
    if na_prob_file:
        na_probs = _load_json_dict(na_prob_file, "no-answer probability file")
        bad = [k for k, v in na_probs.items()
               if isinstance(v, bool) or not isinstance(v, (int, float))]
        if bad:
            raise errors.BertTfError(
                f"no-answer probability file {na_prob_file}: the value for {bad[0]!r} is not a "
                "number.")
    return evaluate_v2(dataset, predictions, na_probs=na_probs, na_prob_thresh=na_prob_thresh,
                       source=source)
