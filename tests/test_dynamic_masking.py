"""Dynamic masking: records without masks (create_pretraining_data --masking=dynamic) masked in
run_pretraining's input pipeline; statistics over many batches against the static rules."""


import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import TRAIN_TXT, create_records, read_records

from bert_tf import tokenization
from bert_tf.data import dynamic_masking, record_writing
from bert_tf.tasks import pretraining

SEQ, PREDS, BATCH = 128, 20, 64


@pytest.fixture(scope="module")
def dynamic_records(tmp_path_factory, vocab_file):
    """Whole-word dynamic records of the shipped training text: (path, raw parsed records)."""
    path = str(tmp_path_factory.mktemp("dynamic") / "train.tfrecord")
    summary, _ = create_records(TRAIN_TXT, path, vocab_file, masking="dynamic",
                                do_whole_word_mask=True, dupe_factor=1, max_seq_length=SEQ,
                                max_predictions_per_seq=PREDS)
    assert summary["avg_masked"] == 0
    spec = record_writing.pretraining_feature_spec(SEQ, PREDS, dynamic=True)
    raw = next(tf.data.TFRecordDataset(path).batch(100_000)
               .map(lambda s: tf.io.parse_example(s, spec)).as_numpy_iterator())
    return path, raw


def _masked_batches(path, num_batches, is_training, seed=5):
    dataset = pretraining.input_fn_builder(
        [path], SEQ, PREDS, is_training=is_training, shuffle=False, dynamic=True,
        vocab_size=30522, random_seed=seed)({"batch_size": BATCH})
    return list(dataset.take(num_batches).as_numpy_iterator())


def test_records_hold_the_dynamic_keys_and_word_ids(dynamic_records, vocab_file):
    path, raw = dynamic_records
    example = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(path))).numpy())
    assert set(example.features.feature) == {name for name, _, _ in record_writing.DYNAMIC_FEATURES}
    vocab = tokenization.load_vocab(vocab_file)
    inv = {i: t for t, i in vocab.items()}
    assert (raw["mask_token_id"] == vocab["[MASK]"]).all()
    for ids, word_ids, mask in zip(raw["input_ids"][:50], raw["word_ids"][:50],
                                   raw["input_mask"][:50], strict=True):
        n = mask.sum()
        tokens = [inv[i] for i in ids[:n]]
        # Word ids: 0 exactly at [CLS] / [SEP] / padding; a new word except at "##" pieces.
        assert [w == 0 for w in word_ids] == [t in ("[CLS]", "[SEP]") for t in tokens] + \
            [True] * (SEQ - n)
        for p in range(2, n - 1):
            if word_ids[p] and word_ids[p - 1]:
                same = word_ids[p] == word_ids[p - 1]
                assert same == tokens[p].startswith("##"), (tokens[p - 1], tokens[p])


def test_masks_follow_the_static_rules_over_many_batches(dynamic_records):
    path, raw = dynamic_records
    num_records = len(raw["input_ids"])
    batches = _masked_batches(path, num_records // BATCH, is_training=False)
    mask_id = int(raw["mask_token_id"][0, 0])
    counts = {"tokens": 0, "masked": 0, "mask": 0, "same": 0}
    for k, batch in enumerate(batches):
        rows = slice(k * BATCH, (k + 1) * BATCH)
        original, word_ids = raw["input_ids"][rows], raw["word_ids"][rows]
        weights = batch["masked_lm_weights"] > 0
        positions = batch["masked_lm_positions"]
        num_tokens = batch["input_mask"].sum(axis=1)
        wanted = np.minimum(PREDS, np.maximum(1, np.round(num_tokens * 0.15)))
        assert (weights.sum(axis=1) <= wanted).all()
        for i in range(BATCH):
            chosen = positions[i][weights[i]]
            assert (np.diff(chosen) > 0).all() and (positions[i][~weights[i]] == 0).all()
            # Never [CLS], [SEP] or padding; whole words or nothing.
            assert (word_ids[i][chosen] > 0).all()
            words = set(word_ids[i][chosen].tolist())
            assert set(np.flatnonzero(np.isin(word_ids[i], list(words)))) == set(chosen)
            assert (batch["masked_lm_ids"][i][weights[i]] == original[i][chosen]).all()
            unchanged = np.setdiff1d(np.arange(SEQ), chosen)
            assert (batch["input_ids"][i][unchanged] == original[i][unchanged]).all()
            now = batch["input_ids"][i][chosen]
            counts["mask"] += int((now == mask_id).sum())
            counts["same"] += int((now == original[i][chosen]).sum())
        counts["tokens"] += int(num_tokens.sum())
        counts["masked"] += int(weights.sum())
    assert counts["masked"] > 10_000
    assert abs(counts["masked"] / counts["tokens"] - 0.15) < 0.01, counts
    assert abs(counts["mask"] / counts["masked"] - 0.8) < 0.02, counts
    assert abs(counts["same"] / counts["masked"] - 0.1) < 0.02, counts
    random = counts["masked"] - counts["mask"] - counts["same"]
    assert abs(random / counts["masked"] - 0.1) < 0.02, counts


def test_masks_are_new_every_epoch_and_repeatable(dynamic_records):
    path, raw = dynamic_records
    per_epoch = len(raw["input_ids"]) // BATCH + 1  # the partial batch straddles epochs
    num_records = len(raw["input_ids"])
    batches = _masked_batches(path, 2 * per_epoch, is_training=True)
    again = _masked_batches(path, 2 * per_epoch, is_training=True)

    def positions_of(batches):
        rows = [row for b in batches for row in b["masked_lm_positions"]]
        return np.array(rows[:num_records]), np.array(rows[num_records:2 * num_records])

    first, second = positions_of(batches)
    assert (first == positions_of(again)[0]).all()  # same seed, same masks
    same_record = np.array([b["input_mask"] for b in batches]).reshape(-1, SEQ)
    assert (same_record[:num_records] == same_record[num_records:2 * num_records]).all()
    assert (first != second).any(axis=1).mean() > 0.95
    other_seed = _masked_batches(path, 1, is_training=True, seed=6)[0]
    assert (other_seed["masked_lm_positions"] != batches[0]["masked_lm_positions"]).any()


def test_selection_takes_words_in_random_order_while_they_fit():
    # One row, words of lengths 3, 1, 2 (ids 1, 2, 3); 7 tokens -> round(1.05) = 1 position
    # wanted at 15 %, so only the one-token word can be chosen, whatever the order.
    word_ids = tf.constant([[0, 1, 1, 1, 2, 3, 3, 0]])
    features = {"input_ids": tf.constant([[101, 5, 6, 7, 8, 9, 10, 102]]),
                "input_mask": tf.constant([[1] * 7 + [0]]), "segment_ids": tf.zeros([1, 8],
                                                                                    tf.int32),
                "word_ids": word_ids, "next_sentence_labels": tf.zeros([1, 1], tf.int32),
                "mask_token_id": tf.constant([[103]])}
    for seed in range(10):
        out = dynamic_masking.mask_batch(features, tf.constant([seed, 0], tf.int64), 4, 200)
        assert out["masked_lm_positions"].numpy().tolist() == [[4, 0, 0, 0]]
        assert out["masked_lm_weights"].numpy().tolist() == [[1, 0, 0, 0]]
    # 3 wanted (masked_lm_prob 0.45): {1,1,1} alone, or {2} + {3,3}; never a partial word.
    seen = set()
    for seed in range(40):
        out = dynamic_masking.mask_batch(features, tf.constant([seed, 0], tf.int64), 4, 200,
                                         masked_lm_prob=0.45)
        seen.add(tuple(out["masked_lm_positions"].numpy()[0][:3]))
    assert seen == {(1, 2, 3), (4, 5, 6)}


def test_static_and_dynamic_records_mixed_are_an_error(tmp_path, dynamic_records, vocab_file):
    static = str(tmp_path / "static.tfrecord")
    create_records(TRAIN_TXT, static, vocab_file, dupe_factor=1, max_seq_length=SEQ,
                   max_predictions_per_seq=PREDS)
    assert read_records([static], SEQ, PREDS)["input_ids"].shape[0] > 0
    assert pretraining.check_pretraining_records([dynamic_records[0]], SEQ, 7) is True
    with pytest.raises(Exception, match="holds records for dynamic masking but .* static"):
        pretraining.check_pretraining_records([static, dynamic_records[0]], SEQ, PREDS)
