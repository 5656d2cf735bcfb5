"""Chinese reading comprehension (CMRC 2018, DRCD): character spans and the CMRC 2018 metric.

tests/data/chinese/ (written by make_chinese_squad.py): cmrc_small.json, 20 paragraphs and 40
questions of unspaced Chinese with numbers, Latin names and full-width characters;
cmrc_eval.json / cmrc_eval_predictions.json, 42 questions with hand-made predictions for the
metric.

The metric is checked against `_reference_scores` below, written for this test from the
published rules of the official cmrc2018_evaluate.py (ymcui/cmrc2018): lower-case and strip;
the ideographs U+4E00..U+9FA5 and the official punctuation list are segments of their own,
the text between them is split into words (here: letter/digit runs, a number keeping its inner
"." or ",", any other character alone); F1 from the longest common run of segments (official
punctuation removed first), best over the gold answers; EM on the texts without that
punctuation; percentages over all questions.
"""

import json
import os
import random
import re

import pytest
from finetune_helpers import (
    DATA,
    assert_clean_error,
    assert_ok,
    check_prediction_files,
    load_json,
    run_script,
    squad_questions,
    write_tiny_config,
)

from bert_tf import errors, tokenization
from bert_tf.data import squad
from bert_tf.metrics import squad as squad_metrics
from bert_tf.metrics import squad_zh
from bert_tf.tasks import squad_postprocess

CHINESE = os.path.join(DATA, "chinese")
SMALL = os.path.join(CHINESE, "cmrc_small.json")
EVAL_GOLD = os.path.join(CHINESE, "cmrc_eval.json")
EVAL_PRED = os.path.join(CHINESE, "cmrc_eval_predictions.json")

# ------------------------------------------------------------------ the reference metric

# The official `sp_char` list, one character each (its two-character "……" entry can never
# equal a single character, so it is left out).
_REF_MARKS = set("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")


def _ref_words(text):
    """Words of the text between ideographs and marks."""
    words = []
    for chunk in text.split():
        # Letter/digit runs and single other characters ...
        parts = [p for p in re.split(r"([^\w]|_)", chunk) if p]
        # ... then a "." or "," between two digits joins its neighbours into one number.
        merged = []
        i = 0
        while i < len(parts):
            if (parts[i] in (".", ",") and merged and merged[-1][-1:].isdigit()
                    and i + 1 < len(parts) and parts[i + 1][:1].isdigit()):
                merged[-1] += parts[i] + parts[i + 1]
                i += 2
                continue
            merged.append(parts[i])
            i += 1
        words.extend(merged)
    return words


def _ref_segments(text, drop_marks):
    out, buffer = [], ""
    for ch in text.lower().strip():
        if drop_marks and ch in _REF_MARKS:
            continue
        if "\u4e00" <= ch <= "\u9fa5" or ch in _REF_MARKS:
            out += _ref_words(buffer) + [ch]
            buffer = ""
        else:
            buffer += ch
    return out + _ref_words(buffer)


def _ref_lcs(a, b):
    """Longest common contiguous run, by trying every run of `b` from the longest down."""
    for length in range(min(len(a), len(b)), 0, -1):
        runs_of_a = {tuple(a[i:i + length]) for i in range(len(a) - length + 1)}
        if any(tuple(b[j:j + length]) in runs_of_a for j in range(len(b) - length + 1)):
            return length
    return 0


def _ref_f1(prediction, gold):
    p, g = _ref_segments(prediction, True), _ref_segments(gold, True)
    common = _ref_lcs(p, g)
    if not common:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def _ref_em(prediction, gold):
    def strip(text):
        return "".join(ch for ch in text.lower().strip() if ch not in _REF_MARKS)
    return float(strip(prediction) == strip(gold))


def _reference_scores(gold_file, predictions):
    """{question id: (EM, F1)} (0, 0 without a prediction) and the totals in percent."""
    per_question = {}
    for qid, _, golds in squad_questions(gold_file):
        if qid not in predictions:
            per_question[qid] = (0.0, 0.0)
            continue
        per_question[qid] = (max(_ref_em(predictions[qid], g) for g in golds),
                             max(_ref_f1(predictions[qid], g) for g in golds))
    n = len(per_question)
    em = 100.0 * sum(e for e, _ in per_question.values()) / n
    f1 = 100.0 * sum(f for _, f in per_question.values()) / n
    totals = {"exact_match": em, "f1": f1, "average": (em + f1) / 2, "total": n,
              "skip": sum(1 for qid in per_question if qid not in predictions)}
    return per_question, totals


# -------------------------------------------------------------------------------- metric


def test_reference_follows_the_published_rules_on_chosen_items():
    """Hand-computed from the rules, so the reference itself is checked."""
    per_question, _ = _reference_scores(EVAL_GOLD, load_json(EVAL_PRED))
    # e03: 杭州 in 浙江杭州: P 1, R 1/2 -> 2/3.
    assert per_question["e03"] == pytest.approx((0.0, 2 / 3))
    # e04: 于 2011 年 6 月 vs 2011 年: common run 2, P 2/5, R 1 -> 4/7.
    assert per_question["e04"] == pytest.approx((0.0, 4 / 7))
    # e14: apple inc . vs apple inc ("." stays): P 1, R 2/3 -> 0.8; EM 0.
    assert per_question["e14"] == pytest.approx((0.0, 0.8))
    # e16: 等 等 … … vs 等 等 (a single "…" is not a mark): P 1, R 1/2; EM 0.
    assert per_question["e16"] == pytest.approx((0.0, 2 / 3))
    # e20: spaces do not count for F1 but do for EM.
    assert per_question["e20"] == pytest.approx((0.0, 1.0))
    # e21: 鿏 (U+9FCF) is past U+9FA5, so no segment of its own: one word "鿏mt" vs "mt".
    assert per_question["e21"] == (0.0, 0.0)
    # e22: 绿茶红茶 vs 红茶绿茶: common run 2 of 4 -> 0.5 (a bag of characters would say 1).
    assert per_question["e22"] == pytest.approx((0.0, 0.5))
    # e23: 北京博物院 vs 北京故宫博物院: longest run 博物院, P 3/5, R 3/7 -> 0.5.
    assert per_question["e23"] == pytest.approx((0.0, 0.5))
    # e25: 1,000 万 vs 1000 万: P = R = 1/2.
    assert per_question["e25"] == pytest.approx((0.0, 0.5))
    # e15, e27, e36: "-", ":", "+" are removed: equal for EM and F1.
    for qid in ("e15", "e27", "e36", "e02", "e17", "e31", "e34", "e07", "e30"):
        assert per_question[qid] == (1.0, 1.0), qid
    assert per_question["e12"] == (0.0, 0.0)


def test_metric_equals_the_reference():
    predictions = load_json(EVAL_PRED)
    per_question, expected = _reference_scores(EVAL_GOLD, predictions)
    dataset = squad.load_squad_dataset(EVAL_GOLD)
    for qid, _, golds in squad_questions(EVAL_GOLD):
        if qid in predictions:
            got = (max(squad_zh.exact_match_score(predictions[qid], g) for g in golds),
                   max(squad_zh.f1_score(predictions[qid], g) for g in golds))
            assert got == pytest.approx(per_question[qid]), qid
    result = squad_zh.evaluate(dataset, predictions)
    assert result == pytest.approx(expected)
    assert result["skip"] == 1 and result["total"] == 42


@pytest.mark.parametrize("flags", [["--language=zh"], []])
def test_script_scores_chinese_data_with_the_cmrc_metric(flags):
    """--language=zh, and the default auto (the contexts are Chinese), log which it chose."""
    result = run_script("squad_evaluate.py", EVAL_GOLD, EVAL_PRED, *flags, timeout=60)
    assert_ok(result)
    _, expected = _reference_scores(EVAL_GOLD, load_json(EVAL_PRED))
    assert json.loads(result.stdout.strip().splitlines()[-1]) == pytest.approx(expected)
    if not flags:
        assert "--language=auto" in result.stderr and "CMRC 2018 (zh)" in result.stderr


def test_language_en_keeps_the_squad_metric_on_chinese_data():
    """The SQuAD metric splits on whitespace: unspaced Chinese scores F1 = EM."""
    result = squad_metrics.evaluate_files(EVAL_GOLD, EVAL_PRED, language="en")
    assert set(result) == {"exact_match", "f1"}
    assert result == squad_metrics.evaluate_v1(squad.load_squad_dataset(EVAL_GOLD),
                                               load_json(EVAL_PRED))


def test_chinese_metric_refuses_v2():
    result = run_script("squad_evaluate.py", EVAL_GOLD, EVAL_PRED, "--language=zh",
                        "--version_2", timeout=60)
    assert_clean_error(result, "--language=zh", "--version_2")
    with pytest.raises(errors.BertTfError, match="at least one gold answer"):
        squad_zh.evaluate([{"paragraphs": [{"context": "无", "qas": [
            {"id": "x", "question": "？", "answers": []}]}]}], {"x": ""})


# ----------------------------------------------------------------------- data: doc tokens


def test_chinese_context_gives_each_ideograph_a_doc_token():
    context = "2018年，ＮＢＡ总决赛在洛杉矶的球馆举行，主持人是 Tim Cook（库克）。"
    words = squad.context_words(context)
    # Between ideographs the text still splits on whitespace only ("，ＮＢＡ", "Cook（").
    assert words.doc_tokens == [
        "2018", "年", "，ＮＢＡ", "总", "决", "赛", "在", "洛", "杉", "矶", "的", "球", "馆",
        "举", "行", "，", "主", "持", "人", "是", "Tim", "Cook（", "库", "克", "）。"]
    assert words.follows_space == [True] + [False] * 19 + [True, True] + [False] * 3
    # Every character maps to the doc token that holds it, at the right place.
    rebuilt = [""] * len(words.doc_tokens)
    for char, index in zip(context, words.char_to_word_offset, strict=True):
        if not char.isspace():
            rebuilt[index] += char
    assert rebuilt == words.doc_tokens
    assert squad.join_words(words.doc_tokens, words.follows_space) == context
    # English text (CJK ideographs well under a third of it) splits on whitespace only.
    assert squad.split_context("Tokyo (東京) is big")[0] == ["Tokyo", "(東京)", "is", "big"]


def _write_vocab(path):
    """A vocab covering cmrc_small.json: every character (and "##" + it), Latin words of up to 4
    letters whole (longer ones come out as pieces)."""
    tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    for lower in (True, False):  # Uncased and cased pieces.
        basic = tokenization.BasicTokenizer(do_lower_case=lower)
        for _, context, _ in squad_questions(SMALL):
            for word in basic.tokenize(context):
                tokens.update(word)
                tokens.update("##" + c for c in word)
                if len(word) <= 4:
                    tokens.add(word)
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    with open(SMALL, encoding="utf-8") as f:
        for paragraph in (p for a in json.load(f)["data"] for p in a["paragraphs"]):
            for qa in paragraph["qas"]:
                for word in basic.tokenize(qa["question"]):
                    tokens.update(word)
                    tokens.update("##" + c for c in word)
    path.write_text("\n".join(sorted(tokens)) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def chinese_vocab(tmp_path_factory):
    return _write_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt")


def _decoded(pieces):
    return "".join(piece.removeprefix("##") for piece in pieces)


def test_every_training_window_covers_exactly_the_answer(chinese_vocab):
    """The pieces of each window's span spell the answer, and start where the answer starts:
    the document's pieces before them spell as many characters as the context has (spaces
    aside) before `answer_start` (so a repeated answer text is not taken at another place)."""
    tokenizer = tokenization.FullTokenizer(chinese_vocab, do_lower_case=True)
    examples = squad.read_squad_examples(SMALL, is_training=True)
    assert len(examples) == 40  # no answer skipped
    answer_starts = {}
    with open(SMALL, encoding="utf-8") as f:
        for paragraph in (p for a in json.load(f)["data"] for p in a["paragraphs"]):
            for qa in paragraph["qas"]:
                before = paragraph["context"][:qa["answers"][0]["answer_start"]]
                answer_starts[qa["id"]] = len("".join(before.split()))
    doc_stride = 16
    features = squad.convert_examples_to_features(
        examples, tokenizer, max_seq_length=48, doc_stride=doc_stride, max_query_length=16,
        is_training=True)
    assert len(features) > len(examples)  # long paragraphs take several windows
    covered = set()
    for feature in features:
        example = examples[feature.example_index]
        assert "[UNK]" not in feature.tokens
        if (feature.start_position, feature.end_position) == (0, 0):
            continue
        pieces = feature.tokens[feature.start_position:feature.end_position + 1]
        assert _decoded(pieces) == example.orig_answer_text.lower().replace(" ", ""), (
            example.qas_id)
        doc_pieces = [p for token in example.doc_tokens for p in tokenizer.tokenize(token)]
        doc_offset = feature.tokens.index("[SEP]") + 1
        window_start = feature.doc_span_index * doc_stride
        window = feature.tokens[doc_offset:-1]
        assert doc_pieces[window_start:window_start + len(window)] == window
        pieces_before = doc_pieces[:window_start + feature.start_position - doc_offset]
        assert len(_decoded(pieces_before)) == answer_starts[example.qas_id], example.qas_id
        covered.add(example.qas_id)
    assert covered == {e.qas_id for e in examples}


def test_an_unknown_character_in_the_answer_still_gives_the_answer(chinese_vocab, tmp_path):
    """A span with [UNK] cannot be found in the tokenized original text, so the answer falls
    back to the span's doc tokens: with a doc token per ideograph, exactly the span's text
    (with the context as one doc token it would be the whole paragraph)."""
    vocab = tmp_path / "vocab.txt"
    with open(chinese_vocab, encoding="utf-8") as f:
        vocab.write_text("".join(line for line in f if line.strip() not in ("鸿", "##鸿")),
                         encoding="utf-8")
    tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
    example = next(e for e in squad.read_squad_examples(SMALL, is_training=False)
                   if e.qas_id == "zh-27")
    features = squad.convert_examples_to_features(
        [example], tokenizer, max_seq_length=128, doc_stride=64, max_query_length=16,
        is_training=False)
    (feature,) = features
    start = feature.tokens.index("[UNK]")
    assert feature.tokens[start + 1] == "蒙"
    start_logits = [-10.0] * 128
    end_logits = [-10.0] * 128
    start_logits[start] = end_logits[start + 1] = 10.0
    predictions, _, _ = squad_postprocess.compute_predictions(
        [example], features, [squad_postprocess.RawResult(feature.unique_id, start_logits,
                                                          end_logits)],
        n_best_size=5, max_answer_length=10, do_lower_case=True)
    assert predictions["zh-27"] == "鸿蒙"


@pytest.mark.parametrize("pred_text, orig_text, do_lower_case, expected", [
    ("ｎｂａ 总 决 赛", "，ＮＢＡ总决赛", True, "ＮＢＡ总决赛"),   # full-width, lower-cased
    ("ＮＢＡ 总", "，ＮＢＡ总", False, "ＮＢＡ总"),
    ("《 三 体 》", "《三体》。", True, "《三体》"),            # Chinese punctuation kept inside
    ("三 体", "《三体》。", True, "三体"),
    ("tim cook", "（Tim Cook）", True, "Tim Cook"),          # Latin words inside Chinese
    ("2011 年 6 月", "2011年6月30日", True, "2011年6月"),
    ("8848 . 86 米", "8848.86米。", True, "8848.86米"),
])
def test_get_final_text_maps_chinese_back(pred_text, orig_text, do_lower_case, expected):
    assert squad_postprocess.get_final_text(pred_text, orig_text, do_lower_case) == expected


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_every_nbest_answer_is_a_substring_of_its_context(chinese_vocab, do_lower_case):
    """Random logits put the n best anywhere in the document: every span maps back to text of
    the context, cased and with its punctuation, and the predicted one to its place."""
    tokenizer = tokenization.FullTokenizer(chinese_vocab, do_lower_case=do_lower_case)
    examples = squad.read_squad_examples(SMALL, is_training=False)
    contexts = {qid: context for qid, context, _ in squad_questions(SMALL)}
    features = squad.convert_examples_to_features(
        examples, tokenizer, max_seq_length=48, doc_stride=16, max_query_length=16,
        is_training=False)
    rng = random.Random(0)
    results = [squad_postprocess.RawResult(
        f.unique_id, [rng.gauss(0, 1) for _ in range(48)], [rng.gauss(0, 1) for _ in range(48)])
        for f in features]
    spans = {}
    predictions, nbest, _ = squad_postprocess.compute_predictions(
        examples, features, results, n_best_size=20, max_answer_length=12,
        do_lower_case=do_lower_case, spans=spans)
    assert not any("[UNK]" in f.tokens for f in features)
    texts = [entry["text"] for entries in nbest.values() for entry in entries]
    assert len(texts) > 20 * len(examples) * 0.8
    for qid, entries in nbest.items():
        for entry in entries:
            assert entry["text"] and entry["text"] in contexts[qid], (qid, entry["text"])
    # The CJK and Latin mixtures come back as the context writes them.
    assert any(re.search(r"[A-Za-z]", t) and re.search("[\u4e00-\u9fa5]", t) for t in texts)
    for example in examples:
        span = spans[example.qas_id]
        text = example.doc_text(span.first_token, span.last_token)[span.start:span.end]
        assert text == predictions[example.qas_id]


def test_predictor_offsets_point_at_the_answer_in_a_chinese_context(chinese_vocab):
    """Predictor.answer's "start" / "end": the character offsets of the answer in the context
    (checked on the postprocessing's spans, without a model)."""
    from bert_tf.serving import predictor

    tokenizer = tokenization.FullTokenizer(chinese_vocab, do_lower_case=True)
    contexts = [context for _, context, _ in squad_questions(SMALL)]
    examples, starts = [], []
    for i, context in enumerate(contexts):
        words = squad.context_words(context)
        examples.append(squad.SquadExample(str(i), "？", words.doc_tokens,
                                           follows_space=words.follows_space))
        starts.append(predictor._word_starts(words.char_to_word_offset, len(words.doc_tokens)))
    features = squad.convert_examples_to_features(
        examples, tokenizer, max_seq_length=64, doc_stride=24, max_query_length=4,
        is_training=False)
    rng = random.Random(1)
    results = [squad_postprocess.RawResult(
        f.unique_id, [rng.gauss(0, 1) for _ in range(64)], [rng.gauss(0, 1) for _ in range(64)])
        for f in features]
    spans = {}
    predictions, _, _ = squad_postprocess.compute_predictions(
        examples, features, results, n_best_size=20, max_answer_length=12,
        do_lower_case=True, spans=spans)
    for example, context, word_starts in zip(examples, contexts, starts, strict=True):
        start, end = predictor._context_offsets(example, spans[example.qas_id], word_starts)
        assert context[start:end] == predictions[example.qas_id]


def test_run_squad_trains_predicts_and_scores_chinese(tmp_path, chinese_vocab):
    with open(chinese_vocab, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    out = tmp_path / "out"
    result = run_script(
        "run_squad.py", f"--vocab_file={chinese_vocab}",
        f"--bert_config_file={write_tiny_config(tmp_path, vocab_size=vocab_size)}",
        f"--output_dir={out}", "--do_train", f"--train_file={SMALL}", "--do_predict",
        f"--predict_file={SMALL}", "--max_seq_length=64", "--doc_stride=24",
        "--max_query_length=16", "--train_batch_size=8", "--num_train_steps=8",
        "--learning_rate=1e-3", "--n_best_size=10", "--max_answer_length=10")
    assert_ok(result)
    predictions = check_prediction_files(out, SMALL, n_best_size=10, max_answer_words=10)
    nbest = load_json(out / "nbest_predictions.json")
    assert all(entry["text"] != "empty" for entries in nbest.values() for entry in entries)
    # eval_results.json has the CMRC 2018 metric (the contexts are Chinese) ...
    _, expected = _reference_scores(SMALL, predictions)
    assert load_json(out / "eval_results.json") == pytest.approx(expected)
    # ... as squad_evaluate.py --language=zh gives on the written predictions.
    evaluated = run_script("squad_evaluate.py", SMALL, str(out / "predictions.json"),
                           "--language=zh", timeout=60)
    assert_ok(evaluated)
    assert json.loads(evaluated.stdout.strip().splitlines()[-1]) == pytest.approx(expected)
