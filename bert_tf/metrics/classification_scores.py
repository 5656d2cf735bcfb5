"""GLUE metrics in numpy: accuracy, F1, Matthews correlation, Pearson and Spearman.

Every function takes `predictions` and `labels` as equal-length sequences (lists or
numpy arrays) and returns a Python float. Scores are fractions (accuracy 0.85, not 85).
Degenerate inputs follow the common conventions: F1 with no positive predictions and no
positive labels is 0.0; Matthews correlation and Pearson/Spearman of a constant series are
0.0 (the formula divides by zero there).
"""

import numpy as np

from bert_tf import errors
from bert_tf.data import processors

# GLUE metric sets. Keys are the canonical task names of `bert_tf.data.classification_features`.
_ACCURACY_TASKS = ("sst-2", "qnli", "rte", "wnli", "mnli", "mnli-mm", "xnli", "csv", "tsv")
_ACCURACY_F1_TASKS = ("mrpc", "qqp")
_TASK_ALIASES = {"sst2": "sst-2", "stsb": "sts-b"}


def _as_pair(predictions, labels):
    """Returns both inputs as 1-D numpy arrays after checking they have equal length."""
    predictions = np.asarray(predictions).reshape(-1)
    labels = np.asarray(labels).reshape(-1)
    if predictions.shape != labels.shape:
        raise errors.BertTfError(
            f"metrics: got {predictions.size} predictions for {labels.size} labels; "
            "pass one prediction per example.")
    if predictions.size == 0:
        raise errors.BertTfError("metrics: no examples to score; the evaluation set is empty.")
    return predictions, labels


def accuracy(predictions, labels):
    """Fraction of examples whose prediction equals the label."""
    predictions, labels = _as_pair(predictions, labels)
    return float(np.mean(predictions == labels))


def f1_score(predictions, labels, positive_label=1):
    """Binary F1 of the `positive_label` class: 2 * precision * recall / (precision + recall)."""
    predictions, labels = _as_pair(predictions, labels)
    predicted_positive = predictions == positive_label
    actual_positive = labels == positive_label
    true_positive = float(np.sum(predicted_positive & actual_positive))
    # 2TP / (2TP + FP + FN) is the same quantity without dividing by a zero precision.
    denominator = float(np.sum(predicted_positive) + np.sum(actual_positive))
    return 2.0 * true_positive / denominator if denominator else 0.0


def matthews_corrcoef(predictions, labels):
    """Matthews correlation coefficient (multi-class R_K form; the usual formula for 2 classes).

    With confusion matrix C (rows = labels, columns = predictions), s = total, c = trace,
    t_k = row sums, p_k = column sums:
      MCC = (c*s - t.p) / sqrt((s^2 - p.p) * (s^2 - t.t)).
    """
    predictions, labels = _as_pair(predictions, labels)
    classes, index = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    num_classes = len(classes)
    label_index, prediction_index = index[:labels.size], index[labels.size:]
    confusion = np.zeros((num_classes, num_classes), dtype=np.float64)
    np.add.at(confusion, (label_index, prediction_index), 1.0)
    true_counts = confusion.sum(axis=1)
    predicted_counts = confusion.sum(axis=0)
    correct = np.trace(confusion)
    total = confusion.sum()
    numerator = correct * total - np.dot(true_counts, predicted_counts)
    denominator = np.sqrt((total ** 2 - np.dot(predicted_counts, predicted_counts)) *
                          (total ** 2 - np.dot(true_counts, true_counts)))
    return float(numerator / denominator) if denominator else 0.0


def pearson(predictions, labels):
    """Pearson correlation coefficient of two real-valued series."""
    predictions, labels = _as_pair(predictions, labels)
    x = predictions.astype(np.float64) - np.mean(predictions, dtype=np.float64)
    y = labels.astype(np.float64) - np.mean(labels, dtype=np.float64)
    denominator = np.sqrt(np.dot(x, x) * np.dot(y, y))
    return float(np.dot(x, y) / denominator) if denominator else 0.0


def rank_average_ties(values):
    """Ranks from 1, ties sharing the mean of the ranks they span: [10, 20, 20] -> 1, 2.5, 2.5."""
    values = np.asarray(values).reshape(-1)
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    ranks = np.empty(values.size, dtype=np.float64)
    start = 0
    while start < values.size:
        end = start
        while end + 1 < values.size and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        # Positions start..end (0-based) hold ranks start+1..end+1; their mean is shared.
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman(predictions, labels):
    """Spearman rank correlation: Pearson of the ranks, ties given their average rank."""
    predictions, labels = _as_pair(predictions, labels)
    return pearson(rank_average_ties(predictions), rank_average_ties(labels))


def glue_metrics(task_name, predictions, labels, is_regression=False):
    """The metrics GLUE reports for `task_name`, as a dict of floats.

    CoLA: {"mcc"}; SST-2, QNLI, RTE, WNLI, MNLI (-mm), XNLI and the generic csv/tsv task:
    {"accuracy"}; MRPC and QQP: {"accuracy", "f1", "acc_and_f1"} (F1 of class 1, acc_and_f1 =
    their mean); STS-B: {"pearson", "spearman", "corr"} (corr = their mean).

    Args:
      task_name: a task name of `bert_tf.data.processors.PROCESSORS` (case-insensitive).
      predictions: predicted label ids (or real values for STS-B), one per example.
      labels: gold label ids (or real values), one per example.
      is_regression: score as STS-B does whatever the task (a regression csv/tsv task).
    """
    task = processors.normalize_task_name(task_name)
    task = _TASK_ALIASES.get(task, task)
    if is_regression:
        task = "sts-b"
    if task == "cola":
        return {"mcc": matthews_corrcoef(predictions, labels)}
    if task in _ACCURACY_TASKS:
        return {"accuracy": accuracy(predictions, labels)}
    if task in _ACCURACY_F1_TASKS:
        acc = accuracy(predictions, labels)
        f1 = f1_score(predictions, labels)
        return {"accuracy": acc, "f1": f1, "acc_and_f1": (acc + f1) / 2.0}
    if task == "sts-b":
        pearson_corr = pearson(predictions, labels)
        spearman_corr = spearman(predictions, labels)
        return {"pearson": pearson_corr, "spearman": spearman_corr,
                "corr": (pearson_corr + spearman_corr) / 2.0}
    known = sorted(("cola", "sts-b") + _ACCURACY_TASKS + _ACCURACY_F1_TASKS)
    raise errors.BertTfError(f"--task_name: no GLUE metrics for task '{task_name}'; "
                             f"use one of {', '.join(known)}.")


def per_class_recall(predictions, labels, label_list):
    """{"recall_<label>": recall of each class} (0.0 for a class absent from `labels`).

    Args:
      predictions, labels: predicted and gold label ids, one per example.
      label_list: the class names, in id order.
    """
    predictions, labels = _as_pair(predictions, labels)
    results = {}
    for class_id, name in enumerate(label_list):
        gold = labels == class_id
        hits = float(np.sum(gold & (predictions == class_id)))
        results[f"recall_{name}"] = hits / float(np.sum(gold)) if np.any(gold) else 0.0
    return results


def multi_label_metrics(probabilities, labels, label_list, threshold=0.5):
    """Multi-label metrics: a label is predicted where its probability is >= `threshold`.

    F1 with no predicted and no gold positives is 0.0 (as `f1_score`).

    Args:
      probabilities: float [N, C], one probability per label.
      labels: multi-hot [N, C] gold labels.
      label_list: the C label names.
      threshold: the decision threshold.

    Returns:
      {"micro_f1": F1 over all (example, label) decisions, "macro_f1": mean of the per-label
      F1s, "exact_match": fraction of examples whose whole label set is right, "f1_<label>":
      each label's F1, "threshold"}.
    """
    probabilities = np.asarray(probabilities, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    if probabilities.shape != labels.shape or probabilities.ndim != 2 or not labels.size:
        raise errors.BertTfError(
            f"multi-label metrics: probabilities {list(probabilities.shape)} and labels "
            f"{list(labels.shape)} must both be [examples, labels] and not empty.")
    predicted = probabilities >= threshold

    def f1(axis=None):
        true_positive = np.sum(predicted & labels, axis=axis)
        denominator = np.sum(predicted, axis=axis) + np.sum(labels, axis=axis)
        return np.where(denominator > 0, 2.0 * true_positive / np.maximum(denominator, 1), 0.0)

    per_label = f1(axis=0)
    results = {"micro_f1": float(f1()), "macro_f1": float(np.mean(per_label)),
               "exact_match": float(np.mean(np.all(predicted == labels, axis=1))),
               "threshold": float(threshold)}
    results.update({f"f1_{name}": float(value)
                    for name, value in zip(label_list, per_label, strict=True)})
    return results
