"""GLUE metrics against values computed by hand (the arithmetic is in the comments)."""

import math

import pytest

from bert_tf import errors
from bert_tf.metrics import classification_scores as metrics

# A binary example used by several tests:
#   labels      1 1 1 1 0 0 0 0 1 0
#   predictions 1 1 1 0 0 0 1 0 1 1
# TP = positions 0,1,2,8 = 4; FN = position 3 = 1; FP = positions 6,9 = 2; TN = 4,5,7 = 3.
LABELS = [1, 1, 1, 1, 0, 0, 0, 0, 1, 0]
PREDICTIONS = [1, 1, 1, 0, 0, 0, 1, 0, 1, 1]


def test_accuracy():
    # Correct: TP + TN = 4 + 3 = 7 of 10.
    assert metrics.accuracy(PREDICTIONS, LABELS) == pytest.approx(0.7)


def test_f1():
    # precision = 4 / (4 + 2) = 2/3, recall = 4 / (4 + 1) = 4/5,
    # F1 = 2 * (2/3) * (4/5) / (2/3 + 4/5) = (16/15) / (22/15) = 8/11.
    assert metrics.f1_score(PREDICTIONS, LABELS) == pytest.approx(8 / 11)
    # Class 0 as positive: TP0 = 3, FP0 = 1 (pos 3), FN0 = 2 -> 2*3 / (2*3 + 1 + 2) = 6/9.
    assert metrics.f1_score(PREDICTIONS, LABELS, positive_label=0) == pytest.approx(2 / 3)


def test_f1_no_positives_is_zero():
    assert metrics.f1_score([0, 0, 0], [0, 0, 0]) == 0.0


def test_matthews_binary():
    # MCC = (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN))
    #     = (4*3 - 2*1) / sqrt(6 * 5 * 5 * 4) = 10 / sqrt(600) = 0.40824829...
    assert metrics.matthews_corrcoef(PREDICTIONS, LABELS) == pytest.approx(10 / math.sqrt(600))


def test_matthews_perfect_inverse_and_constant():
    assert metrics.matthews_corrcoef([0, 1, 1, 0], [0, 1, 1, 0]) == pytest.approx(1.0)
    assert metrics.matthews_corrcoef([1, 0, 0, 1], [0, 1, 1, 0]) == pytest.approx(-1.0)
    # Constant predictions: the denominator is 0, reported as 0 (the usual convention).
    assert metrics.matthews_corrcoef([1, 1, 1, 1], [0, 1, 1, 0]) == 0.0


def test_matthews_multiclass():
    # labels 0 0 1 1 2 2, predictions 0 1 1 1 2 0. Confusion (rows label, cols prediction):
    #   [[1,1,0],[0,2,0],[1,0,1]]; c = trace = 4, s = 6, t = row sums (2,2,2),
    #   p = column sums (2,3,1). cov numerator = c*s - t.p = 24 - (4+6+2) = 12;
    #   s^2 - p.p = 36 - (4+9+1) = 22; s^2 - t.t = 36 - 12 = 24.
    #   MCC = 12 / sqrt(22 * 24) = 12 / sqrt(528).
    assert metrics.matthews_corrcoef([0, 1, 1, 1, 2, 0], [0, 0, 1, 1, 2, 2]) == pytest.approx(
        12 / math.sqrt(528))


def test_pearson():
    # x = 1 2 3 4, y = 2 4 5 9: mean x 2.5, mean y 5; dx = -1.5 -.5 .5 1.5, dy = -3 -1 0 4.
    # sum dx*dy = 4.5 + 0.5 + 0 + 6 = 11; sum dx^2 = 5; sum dy^2 = 9 + 1 + 0 + 16 = 26.
    # r = 11 / sqrt(5 * 26) = 11 / sqrt(130).
    assert metrics.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130))


def test_rank_average_ties():
    # Sorted: 10 (rank 1), 20, 20 (ranks 2, 3 -> 2.5 each), 30 (rank 4).
    assert list(metrics.rank_average_ties([20, 10, 30, 20])) == [2.5, 1.0, 4.0, 2.5]


def test_spearman_with_ties():
    # x = 1 2 2 3 -> ranks 1 2.5 2.5 4; y = 1 3 2 4 -> ranks 1 3 2 4.
    # Rank means 2.5 and 2.5; dx = -1.5 0 0 1.5, dy = -1.5 .5 -.5 1.5.
    # sum dx*dy = 2.25 + 0 + 0 + 2.25 = 4.5; sum dx^2 = 4.5; sum dy^2 = 2.25+.25+.25+2.25 = 5.
    # rho = 4.5 / sqrt(4.5 * 5) = 4.5 / sqrt(22.5).
    assert metrics.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    # A monotone but non-linear relation is perfectly rank-correlated.
    assert metrics.spearman([1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)


def test_glue_metrics_per_task():
    assert metrics.glue_metrics("CoLA", PREDICTIONS, LABELS) == {
        "mcc": pytest.approx(10 / math.sqrt(600))}
    for task in ("sst-2", "SST2", "qnli", "rte", "wnli", "mnli", "mnli-mm", "xnli", "csv"):
        assert metrics.glue_metrics(task, PREDICTIONS, LABELS) == {"accuracy": pytest.approx(0.7)}
    for task in ("mrpc", "qqp"):
        # acc_and_f1 = (7/10 + 8/11) / 2 = (77 + 80) / 220 = 157/220.
        assert metrics.glue_metrics(task, PREDICTIONS, LABELS) == {
            "accuracy": pytest.approx(0.7), "f1": pytest.approx(8 / 11),
            "acc_and_f1": pytest.approx(157 / 220)}
    # Pearson 11/sqrt(130) (above); Spearman of 1 2 3 4 vs 2 4 5 9 (same order) = 1.
    result = metrics.glue_metrics("sts-b", [1, 2, 3, 4], [2, 4, 5, 9])
    assert result == {"pearson": pytest.approx(11 / math.sqrt(130)),
                      "spearman": pytest.approx(1.0),
                      "corr": pytest.approx((11 / math.sqrt(130) + 1) / 2)}
    assert metrics.glue_metrics("csv", [1, 2, 3, 4], [2, 4, 5, 9],
                                is_regression=True)["spearman"] == pytest.approx(1.0)


def test_glue_metrics_bad_inputs():
    with pytest.raises(errors.BertTfError, match="unknown_task.*cola"):
        metrics.glue_metrics("unknown_task", [1], [1])
    with pytest.raises(errors.BertTfError, match="2 predictions for 3 labels"):
        metrics.accuracy([1, 0], [1, 0, 1])
    with pytest.raises(errors.BertTfError, match="empty"):
        metrics.accuracy([], [])
