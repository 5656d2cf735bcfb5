"""--pack_sequences: which examples share a row, a packed row's outputs against each example
alone in its own row (positions, attention, pooler), the records, and run_classifier.py
training on packed records against the unpacked run on the same data."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import (
    TOPICS,
    assert_clean_error,
    assert_ok,
    read_key_values,
    run_script,
    tiny_config,
)

from bert_tf import modeling
from bert_tf.data import classification_features, row_packing

tf1 = tf.compat.v1


def test_rows_fill_best_longest_first():
    lengths = [100, 30, 28, 60, 60, 8, 5]
    rows = row_packing.pack_rows(lengths, max_seq_length=128, max_per_row=8)
    # 100 opens a row (28 left); the 60s share one (8 left); 30 fits no open row; 28 fills
    # the first exactly; 8 fills the second; 5 goes to the only room left, 98 beside 30.
    assert rows == [[0, 2], [3, 4, 5], [1, 6]]
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    capped = row_packing.pack_rows([4] * 10, max_seq_length=128, max_per_row=3)
    assert [len(row) for row in capped] == [3, 3, 3, 1]


def _feature(ids, segments, label):
    padding = 32 - len(ids)
    return classification_features.InputFeatures(ids + [0] * padding,
                                                 [1] * len(ids) + [0] * padding,
                                                 segments + [0] * padding, label)


def test_packed_rows_keep_each_examples_tokens_positions_and_label():
    features = [_feature([2, 5, 6, 3], [0, 0, 0, 0], 1),
                _feature([2, 7, 3, 8, 9, 3], [0, 0, 0, 1, 1, 1], 0),
                _feature([2, 4, 3], [0, 0, 0], 1)]
    (row,) = row_packing.pack_features(features, max_seq_length=32)
    # Longest first: the pair, then the 4 pieces, then the 3; 4 slots at 32.
    padding = [0] * 19
    assert row.input_ids == [2, 7, 3, 8, 9, 3, 2, 5, 6, 3, 2, 4, 3] + padding
    assert row.segment_ids == [0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0] + padding
    assert row.position_ids == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1, 2] + padding
    assert row.input_mask == [1] * 13 + padding
    assert row.cls_positions == [0, 6, 10, 0]
    assert row.label_ids == [0, 1, 1, 0] and row.label_weights == [1.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize("variant", [
    {}, dict(position_embedding_type="relative_key_query", layer_norm_type="pre")])
def test_packed_row_gives_each_example_its_own_outputs(variant):
    """Three examples packed in one row of 32 against the same three alone (padded to 32):
    the pooled output of each and its tokens' sequence outputs agree."""
    config = modeling.BertConfig.from_dict(tiny_config(max_position_embeddings=32))
    for key, value in variant.items():
        setattr(config, key, value)
    rng = np.random.RandomState(3)
    lengths = [9, 14, 6]
    features = []
    for index, length in enumerate(lengths):
        ids = [2] + rng.randint(5, config.vocab_size, size=length - 2).tolist() + [3]
        segments = [0] * (length // 2) + [1] * (length - length // 2)
        padding = 32 - length
        features.append(classification_features.InputFeatures(
            ids + [0] * padding, [1] * length + [0] * padding, segments + [0] * padding, index))
    rows = row_packing.pack_features(features, max_seq_length=32)
    assert len(rows) == 1
    (row,) = rows
    with tf.Graph().as_default():
        alone = modeling.BertModel(
            config, is_training=False,
            input_ids=tf.constant([f.input_ids for f in features]),
            input_mask=tf.constant([f.input_mask for f in features]),
            token_type_ids=tf.constant([f.segment_ids for f in features]))
        with tf1.variable_scope(tf1.get_variable_scope(), reuse=True):
            packed = modeling.BertModel(
                config, is_training=False, input_ids=tf.constant([row.input_ids]),
                input_mask=tf.constant([row.input_mask]),
                token_type_ids=tf.constant([row.segment_ids]),
                position_ids=tf.constant([row.position_ids]),
                pooled_positions=tf.constant([row.cls_positions[:len(lengths)]]), scope="bert")
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            fetched = sess.run([alone.get_pooled_output(), alone.get_sequence_output(),
                                packed.get_pooled_output(), packed.get_sequence_output()])
    pooled_alone, sequence_alone, pooled_packed, sequence_packed = fetched
    assert pooled_packed.shape == (3, config.hidden_size)
    for slot, start in enumerate(row.cls_positions[:len(lengths)]):
        example = row.label_ids[slot]  # The label is the example's index here.
        length = lengths[example]
        np.testing.assert_allclose(pooled_packed[slot], pooled_alone[example], atol=1e-5)
        np.testing.assert_allclose(sequence_packed[0, start:start + length],
                                   sequence_alone[example, :length], atol=1e-5)


def test_records_parse_back(tmp_path):
    features = [_feature([2, 5, 6, 3], [0] * 4, 1), _feature([2, 4, 3], [0] * 3, 0)]
    rows = row_packing.pack_features(features, max_seq_length=32)
    path = str(tmp_path / "train.tf_record")
    classification_features.write_tf_examples(map(row_packing.packed_tf_example, rows), path)
    spec = row_packing.packed_feature_spec(32)
    (parsed,) = list(tf.data.TFRecordDataset(path).map(
        lambda record: tf.io.parse_single_example(record, spec)))
    assert parsed["input_ids"].numpy().tolist() == rows[0].input_ids
    assert parsed["cls_positions"].numpy().tolist() == rows[0].cls_positions
    assert parsed["label_weights"].numpy().tolist() == [1.0, 1.0, 0.0, 0.0]
    assert parsed["label_ids"].numpy().tolist() == [1, 0, 0, 0]


def _classifier_flags(minilm_converted, output_dir, *extra):
    return [f"--bert_config_file={minilm_converted}/bert_config.json",
            f"--init_checkpoint={minilm_converted}/bert_model.ckpt",
            f"--vocab_file={minilm_converted}/vocab.txt", "--task_name=tsv",
            "--text_a_column=sentence", f"--data_dir={TOPICS}", f"--output_dir={output_dir}",
            *extra]


def test_run_classifier_trains_on_packed_sequences(tmp_path, minilm_converted,
                                                   minilm_topics_classifier):
    """The session's unpacked MiniLM run (12 steps of 8 at length 20, conftest) against the
    same steps, batch of examples and seed, packed into sequences of 64: the same dev accuracy
    within 5 points, from records holding several examples each (1.0 in five runs, seeded or
    not)."""
    output_dir = tmp_path / "packed"
    result = run_script("run_classifier.py", *_classifier_flags(
        minilm_converted, output_dir, "--do_train", "--do_eval", "--pack_sequences",
        "--max_seq_length=64", "--train_batch_size=8", "--num_train_steps=12",
        "--learning_rate=1e-4", "--eval_batch_size=40", "--random_seed=1"), timeout=600)
    assert_ok(result)
    (examples, rows), = re.findall(r"(\d+) examples -> (\d+) packed sequences of 64",
                                   result.stderr)
    assert int(examples) == 240 and int(rows) <= int(examples) / 3, (examples, rows)
    results = read_key_values(output_dir / "eval_results.txt")
    expected = minilm_topics_classifier.results["eval_accuracy"]
    assert results["eval_accuracy"] >= expected - 0.05, (results, expected)
    assert results["global_step"] == 12


def test_pack_sequences_with_multi_label_is_one_error_line(tmp_path, minilm_converted):
    result = run_script("run_classifier.py", *_classifier_flags(
        minilm_converted, tmp_path / "out", "--do_train", "--pack_sequences", "--multi_label"))
    assert_clean_error(result, "--pack_sequences", "--multi_label")
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("is_regression", [False, True])
def test_loss_averages_over_the_packed_examples_only(is_regression):
    """Empty slots (weight 0) leave the loss: it is the plain mean over the real examples."""
    from bert_tf.tasks import classification as classification_task

    logits = np.array([[2.0, -1.0], [0.5, 0.3], [9.0, 9.0], [-1.0, 1.0]], np.float32)
    labels = (np.array([1.5, -0.5, 7.0, 0.25], np.float32) if is_regression
              else np.array([0, 1, 0, 1], np.int32))
    weights = np.array([1.0, 1.0, 0.0, 1.0], np.float32)
    real = weights > 0
    loss, _, _ = classification_task.classifier_loss(
        tf.constant(logits[:, :1] if is_regression else logits), tf.constant(labels),
        is_regression, example_weights=tf.constant(weights))
    if is_regression:
        expected = np.mean((logits[real, 0] - labels[real]) ** 2)
    else:
        log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        expected = -np.mean(log_probs[real, labels[real]])
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)


def test_regression_rows_keep_float_scores(tmp_path):
    features = [_feature([2, 5, 6, 3], [0] * 4, 3.5), _feature([2, 4, 3], [0] * 3, 1.25)]
    rows = row_packing.pack_features(features, max_seq_length=32)
    path = str(tmp_path / "train.tf_record")
    classification_features.write_tf_examples(map(row_packing.packed_tf_example, rows), path)
    spec = row_packing.packed_feature_spec(32, is_regression=True)
    (parsed,) = list(tf.data.TFRecordDataset(path).map(
        lambda record: tf.io.parse_single_example(record, spec)))
    assert parsed["label_ids"].numpy().tolist() == [3.5, 1.25, 0.0, 0.0]
    assert parsed["label_weights"].numpy().tolist() == [1.0, 1.0, 0.0, 0.0]
