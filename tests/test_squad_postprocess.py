"""Hand-worked checks of SQuAD postprocessing: text mapping, span filter, null score, n-best."""

import math
import types

import pytest

from bert_tf.tasks import squad_postprocess
from bert_tf.tasks.squad_postprocess import RawResult


@pytest.mark.parametrize("pred_text, orig_text, do_lower_case, expected", [
    # BasicTokenizer: "steve smith ' s"; "steve smith" is characters 0-10 there, which are
    # characters 0-10 of the original after aligning the space-stripped texts.
    ("steve smith", "Steve Smith's", True, "Steve Smith"),
    ("smith", "Steve Smith's", True, "Smith"),
    # The first occurrence in the tokenized text wins: "s" of "steve", not the final "s".
    ("s", "Steve Smith's", True, "S"),
    # Cased: the tokenized text is "Steve Smith ' s", which does not contain "Smith's".
    ("Smith's", "Steve Smith's", False, "Steve Smith's"),
])
def test_get_final_text(pred_text, orig_text, do_lower_case, expected):
    assert squad_postprocess.get_final_text(pred_text, orig_text, do_lower_case) == expected


def test_is_valid_span():
    # Positions 4-6 are doc pieces 0-2; position 5 is not in its max-context window.
    feature = types.SimpleNamespace(tokens=["[CLS]", "q", "?", "[SEP]", "a", "b", "c", "[SEP]"],
                                    token_to_orig_map={4: 0, 5: 1, 6: 2},
                                    token_is_max_context={4: True, 5: False, 6: True})
    assert squad_postprocess._is_valid_span(feature, 4, 6, max_answer_length=3)
    assert squad_postprocess._is_valid_span(feature, 6, 6, max_answer_length=1)
    assert not squad_postprocess._is_valid_span(feature, 4, 6, max_answer_length=2)  # too long
    assert not squad_postprocess._is_valid_span(feature, 5, 5, max_answer_length=30)  # context
    assert not squad_postprocess._is_valid_span(feature, 6, 4, max_answer_length=30)  # end<start
    assert not squad_postprocess._is_valid_span(feature, 0, 0, max_answer_length=30)  # [CLS]
    assert not squad_postprocess._is_valid_span(feature, 4, 7, max_answer_length=30)  # [SEP]
    assert not squad_postprocess._is_valid_span(feature, 4, 8, max_answer_length=30)  # padding


def test_min_null_score_takes_the_first_lowest_window():
    # Null scores 3 + 1 = 4, 1 + 1 = 2, 0 + 2 = 2: window 1 is the first with the lowest.
    results = [RawResult(1, [3.0, 9.0], [1.0, 9.0]), RawResult(2, [1.0, 9.0], [1.0, 9.0]),
               RawResult(3, [0.0, 9.0], [2.0, 9.0])]
    null = squad_postprocess._min_null_score(results)
    assert null == (2.0, 1, 1.0, 1.0)
    assert squad_postprocess._min_null_score([]) == (1000000, 0, 0, 0)


def test_nbest_to_json():
    nbest = [squad_postprocess._NbestPrediction("", 1.0, 1.0),
             squad_postprocess._NbestPrediction("a", 0.0, 0.0),
             squad_postprocess._NbestPrediction("b", -1.0, 1.0)]
    nbest_json, best_non_null_entry = squad_postprocess._nbest_to_json(nbest)
    # Softmax of the total scores [2, 0, 0].
    total = math.exp(2) + 2
    assert [entry["probability"] for entry in nbest_json] == pytest.approx(
        [math.exp(2) / total, 1 / total, 1 / total])
    assert [(e["text"], e["start_logit"], e["end_logit"]) for e in nbest_json] == [
        ("", 1.0, 1.0), ("a", 0.0, 0.0), ("b", -1.0, 1.0)]
    assert best_non_null_entry is nbest[1]
