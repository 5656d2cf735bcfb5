"""--next_sentence_objective=nsp|sop|none: record layout and labels, the graph and eval results."""


import pytest
import tensorflow as tf
from finetune_helpers import PRETRAINING_TINY as TINY
from finetune_helpers import (
    TRAIN_TXT,
    create_records,
    numbered_corpus,
    pretrain_options,
    read_records,
    unmasked_ids,
)

from bert_tf import modeling, tokenization
from bert_tf.errors import BertTfError
from bert_tf.runs.pretraining import run_pretraining
from bert_tf.tasks import model_fn_parts, pretraining
from bert_tf.training import estimator as estimator_lib


@pytest.fixture(scope="module")
def vocab(vocab_file):
    return tokenization.load_vocab(vocab_file)


def _segments(records, i):
    n = records["input_mask"][i].sum()
    len_a = int((records["segment_ids"][i][:n] == 0).sum()) - 2
    return n, len_a


def test_sop_segments_are_consecutive_and_swapped_half_the_time(tmp_path, vocab_file, vocab):
    where = numbered_corpus(tmp_path / "numbers.txt", vocab)
    output = str(tmp_path / "sop.tfrecord")
    create_records(str(tmp_path / "numbers.txt"), output, vocab_file, max_seq_length=24,
                   max_predictions_per_seq=4, dupe_factor=20, next_sentence_objective="sop")
    records = read_records([output], 24, 4)
    ids = unmasked_ids(records)
    labels = records["next_sentence_labels"][:, 0]
    assert abs(labels.mean() - 0.5) < 0.05, labels.mean()
    for i in range(len(ids)):
        n, len_a = _segments(records, i)
        a = [where[t] for t in ids[i][1:len_a + 1]]
        b = [where[t] for t in ids[i][len_a + 2:n - 1]]
        assert a and b
        first, second = (b, a) if labels[i] else (a, b)
        # One document, in order: the second part starts where the first one ends (no
        # truncation at the joint for pairs that fit).
        assert {doc for doc, _ in first + second} == {first[0][0]}
        joined = [k for _, k in first + second]
        assert joined == sorted(joined)
        if n < 24:
            assert joined == list(range(joined[0], joined[-1] + 1))


def test_none_packs_one_full_segment_across_documents(tmp_path, vocab_file, vocab):
    where = numbered_corpus(tmp_path / "numbers.txt", vocab)
    output = str(tmp_path / "none.tfrecord")
    create_records(str(tmp_path / "numbers.txt"), output, vocab_file, max_seq_length=32,
                   max_predictions_per_seq=5, dupe_factor=1, next_sentence_objective="none")
    records = read_records([output], 32, 5)
    ids = unmasked_ids(records)
    assert (records["segment_ids"] == 0).all() and (records["next_sentence_labels"] == 0).all()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    lengths = records["input_mask"].sum(axis=1)
    words = []
    for i in range(len(ids)):
        row = ids[i][:lengths[i]].tolist()
        assert row[0] == cls and row[-1] == sep
        # Runs of consecutive words of one document, a [SEP] where the next document starts.
        runs = [[]]
        for token in row[1:-1]:
            if token == sep:
                runs.append([])
            else:
                runs[-1].append(where[token])
        for run in runs:
            assert run and [k for _, k in run] == list(range(run[0][1], run[-1][1] + 1))
            assert len({doc for doc, _ in run}) == 1
            words.extend(k for _, k in run)
        for left, right in zip(runs, runs[1:], strict=False):
            assert right[0][0] == left[-1][0] + 1 and right[0][1] == left[-1][1] + 1
        masked = records["masked_lm_positions"][i][records["masked_lm_weights"][i] > 0]
        assert not set(masked) & {p for p, t in enumerate(row) if t in (cls, sep)}
    assert sorted(words) == sorted(k for _, k in where.values())  # each word once
    # Full length: all sequences but the few that end a chunk are within a sentence of full.
    assert (lengths >= 32 - 7).mean() > 0.8


def test_none_graph_has_no_sentence_head_and_eval_has_no_sentence_metrics(tmp_path, vocab_file):
    config = modeling.BertConfig.from_dict(TINY)

    def build(objective):
        with tf.Graph().as_default():
            ints = lambda width: tf.zeros([2, width], tf.int32)  # noqa: E731
            features = {"input_ids": ints(16), "input_mask": ints(16) + 1,
                        "segment_ids": ints(16), "masked_lm_positions": ints(4),
                        "masked_lm_ids": ints(4), "masked_lm_weights": tf.ones([2, 4]),
                        "next_sentence_labels": ints(1)}
            spec = pretraining.model_fn_builder(
                model_fn_parts.Encoder(config), next_sentence_objective=objective)(
                features, None, estimator_lib.ModeKeys.EVAL, {})
            names = [v.name for v in tf.compat.v1.global_variables()]
            return sorted(spec.eval_metric_ops), [n for n in names if "seq_relationship" in n]

    assert build("none") == (["masked_lm_accuracy", "masked_lm_loss"], [])
    metrics, head = build("sop")
    assert metrics == ["masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy",
                       "sentence_order_loss"]
    assert len(head) == 2  # cls/seq_relationship/output_weights and output_bias


def test_run_pretraining_on_dynamic_none_records_and_objective_mismatch(tmp_path, vocab_file):
    # Records from the shipped text with the MiniLM vocab; TINY's vocab (99 ids) is too small,
    # so the config gets the vocab's size.
    import json


    small = tmp_path / "small.txt"
    small.write_text("\n\n".join(open(TRAIN_TXT).read().split("\n\n")[:3]) + "\n")
    records = str(tmp_path / "train.tfrecord")
    create_records(str(small), records, vocab_file, max_seq_length=16, max_predictions_per_seq=4,
                   dupe_factor=1, masking="dynamic", next_sentence_objective="none")
    (tmp_path / "bert_config.json").write_text(json.dumps({**TINY, "vocab_size": 30522}))
    with pytest.raises(BertTfError, match="written with --next_sentence_objective=none"):
        run_pretraining(pretrain_options(tmp_path, input_file=records))
    assert not (tmp_path / "out").exists()
    results = run_pretraining(pretrain_options(
        tmp_path, input_file=records, next_sentence_objective="none", num_train_steps=4,
        save_checkpoints_steps=4, max_eval_steps=2, report_majority_baseline=True))
    assert sorted(results) == ["global_step", "loss", "majority_baseline_accuracy",
                               "masked_lm_accuracy", "masked_lm_loss"]
    assert results["global_step"] == 4
    reader = tf.train.load_checkpoint(str(tmp_path / "out"))
    assert not [n for n in reader.get_variable_to_shape_map() if "seq_relationship" in n]
