"""create_pretraining_data: records, their statistics, determinism, inputs and errors."""

import os
import subprocess
import sys

import numpy as np
import pytest
from envs import child_env
from finetune_helpers import TRAIN_TXT, create_records, numbered_corpus, read_records, unmasked_ids

from bert_tf import tokenization
from bert_tf.data import pretraining_data, record_writing
from bert_tf.errors import BertTfError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC_KEYS = {"input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
             "masked_lm_weights", "next_sentence_labels"}


@pytest.fixture(scope="module")
def vocab(vocab_file):
    return tokenization.load_vocab(vocab_file)


@pytest.fixture(scope="module")
def persuasion(tmp_path_factory, vocab_file):
    """Default flags but dupe_factor=2 on the shipped training text: (summary, records, path)."""
    path = str(tmp_path_factory.mktemp("persuasion") / "train.tfrecord")
    summary, lines = create_records(TRAIN_TXT, path, vocab_file, dupe_factor=2)
    return summary, read_records([path]), path, lines


def test_records_hold_exactly_the_spec_keys(persuasion):
    import tensorflow as tf

    _, records, path, _ = persuasion
    spec = record_writing.pretraining_feature_spec(128, 20)
    assert set(spec) == SPEC_KEYS
    for i, serialized in enumerate(tf.data.TFRecordDataset(path).take(50)):
        example = tf.train.Example.FromString(serialized.numpy())
        assert set(example.features.feature.keys()) == SPEC_KEYS
        feature = example.features.feature
        assert len(feature["masked_lm_weights"].float_list.value) == 20
        for key in SPEC_KEYS - {"masked_lm_weights"}:
            assert len(feature[key].int64_list.value) == spec[key].shape[0]
        parsed = tf.io.parse_single_example(serialized, spec)
        np.testing.assert_array_equal(parsed["input_ids"], records["input_ids"][i])


def test_encoder_equals_tf_train_example(vocab):
    import tensorflow as tf

    # ids of 1, 2 and 3 varint bytes, positions of 1 and 2 bytes, a float list, both labels.
    input_ids = [101, 2000, 16500, 102, 7, 30000, 102]
    cases = ((10, [1, 5], [2003, 29999], 1), (10, [4], [0], 0), (300, [1, 200], [5, 6], 1))
    for max_seq_length, positions, labels, nsp in cases:
        encoder = record_writing.PretrainingExampleEncoder(len(vocab), max_seq_length, 4)
        pad, pred_pad = [0] * (max_seq_length - 7), [0] * (4 - len(labels))
        expected = tf.train.Example(features=tf.train.Features(feature={
            "input_ids": record_writing.create_int_feature(input_ids + pad),
            "input_mask": record_writing.create_int_feature([1] * 7 + pad),
            "segment_ids": record_writing.create_int_feature([0] * 4 + [1] * 3 + pad),
            "masked_lm_positions": record_writing.create_int_feature(positions + pred_pad),
            "masked_lm_ids": record_writing.create_int_feature(labels + pred_pad),
            "masked_lm_weights": record_writing.create_float_feature([1.0] * len(labels) +
                                                                     [0.0] * len(pred_pad)),
            "next_sentence_labels": record_writing.create_int_feature([nsp]),
        }))
        actual = tf.train.Example.FromString(encoder.encode(input_ids, 2, positions, labels, nsp))
        assert actual == expected


def test_instances_are_well_formed(persuasion, vocab):
    summary, records, _, lines = persuasion
    cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
    n = len(records["input_ids"])
    assert n == summary["instances"] > 1000
    lengths = records["input_mask"].sum(axis=1)
    assert summary["tokens"] == lengths.sum()
    assert summary["avg_masked"] == pytest.approx(records["masked_lm_weights"].sum() / n)
    assert summary["documents"] == 21 and summary["sentences"] == 2901
    for i in range(n):
        ids, mask = records["input_ids"][i], records["input_mask"][i]
        seg = records["segment_ids"][i]
        length = lengths[i]
        np.testing.assert_array_equal(mask, np.arange(128) < length)
        assert ids[0] == cls_id and ids[length - 1] == sep_id
        assert not ids[length:].any() and not seg[length:].any()
        len_a = int((seg[:length] == 0).sum()) - 2  # [CLS] A [SEP]
        assert len_a >= 1 and length - len_a - 3 >= 1
        assert ids[len_a + 1] == sep_id and (seg[len_a + 2:length] == 1).all()
        num_masked = int(records["masked_lm_weights"][i].sum())
        positions = records["masked_lm_positions"][i][:num_masked]
        assert (np.diff(positions) > 0).all()
        assert set(positions.tolist()).isdisjoint({0, len_a + 1, length - 1})
        assert positions.max() < length
        assert not records["masked_lm_positions"][i][num_masked:].any()
        assert not records["masked_lm_ids"][i][num_masked:].any()
    # The example instance is a DEBUG line, not one of the progress and summary lines.
    assert not any("*** Example ***" in line for line in lines)
    assert any("MB/s" in line for line in lines)


def test_masked_count_is_masked_lm_prob_of_the_tokens(persuasion):
    _, records, _, _ = persuasion
    lengths = records["input_mask"].sum(axis=1)
    num_masked = records["masked_lm_weights"].sum(axis=1)
    expected = np.minimum(20, np.maximum(1, [round(x * 0.15) for x in lengths]))
    np.testing.assert_array_equal(num_masked, expected)
    assert abs((num_masked / lengths).mean() - 0.15) < 0.01


def test_short_seq_prob_shortens_sequences(tmp_path, vocab_file):
    mean_length = {}
    for short_seq_prob in (0.0, 1.0):
        output = str(tmp_path / f"short_{short_seq_prob}.tfrecord")
        create_records(TRAIN_TXT, output, vocab_file, dupe_factor=2, short_seq_prob=short_seq_prob)
        mean_length[short_seq_prob] = read_records([output])["input_mask"].sum(axis=1).mean()
    # Targets uniform in [2, 125] (one per document and pass) instead of 125; sentences
    # overshoot a target, so the mean is well above 125 / 2.
    assert mean_length[0.0] > 120
    assert 60 < mean_length[1.0] < 105


def test_masked_tokens_are_80_percent_mask_10_random_10_unchanged(persuasion, vocab):
    _, records, _, _ = persuasion
    weights = records["masked_lm_weights"] > 0
    rows = np.broadcast_to(np.arange(len(weights))[:, None], weights.shape)[weights]
    shown = records["input_ids"][rows, records["masked_lm_positions"][weights]]
    original = records["masked_lm_ids"][weights]
    assert len(shown) > 20_000
    is_mask = shown == vocab["[MASK]"]
    unchanged = (shown == original) & ~is_mask
    replaced = ~is_mask & ~unchanged
    assert abs(is_mask.mean() - 0.8) < 0.015
    assert abs(unchanged.mean() - 0.1) < 0.012
    assert abs(replaced.mean() - 0.1) < 0.012
    # Random replacements come from the whole vocab, not from the text.
    assert len(np.unique(shown[replaced])) > 0.8 * replaced.sum()


def test_next_sentence_labels_are_balanced(persuasion):
    summary, records, _, _ = persuasion
    random_fraction = records["next_sentence_labels"].mean()
    # Half of multi-sentence chunks, plus every one-sentence chunk, gets a random B.
    assert 0.45 < random_fraction < 0.62
    assert summary["random_next_fraction"] == pytest.approx(random_fraction)


def test_segment_b_follows_a_or_comes_from_another_document(tmp_path, vocab_file, vocab):
    where = numbered_corpus(tmp_path / "numbers.txt", vocab)
    output = str(tmp_path / "numbers.tfrecord")
    create_records(str(tmp_path / "numbers.txt"), output, vocab_file, max_seq_length=24,
                   max_predictions_per_seq=4, dupe_factor=20)
    records = read_records([output], 24, 4)
    ids, segments = unmasked_ids(records), records["segment_ids"]
    lengths = records["input_mask"].sum(axis=1)
    counts = {0: 0, 1: 0}
    for i in range(len(ids)):
        len_a = int((segments[i][:lengths[i]] == 0).sum()) - 2
        a = [where[t] for t in ids[i][1:len_a + 1]]
        b = [where[t] for t in ids[i][len_a + 2:lengths[i] - 1]]
        for segment in (a, b):  # each segment is a contiguous span of one document
            assert len({doc for doc, _ in segment}) == 1
            assert [k for _, k in segment] == list(range(segment[0][1], segment[-1][1] + 1))
        label = records["next_sentence_labels"][i][0]
        counts[label] += 1
        if label == 0:
            assert b[0][0] == a[0][0] and b[0][1] > a[-1][1]
        else:
            assert b[0][0] != a[0][0]
    assert min(counts.values()) > 0.3 * len(ids)  # both kinds were checked


def test_each_pass_uses_every_sentence_once(tmp_path, vocab_file, vocab):
    # Documents shorter than max_seq_length - 3 and no short sequences: nothing is truncated,
    # so A segments and true-next B segments must partition the text of each pass, the
    # sentences left over by a random-next instance being "put back".
    where = numbered_corpus(tmp_path / "numbers.txt", vocab)
    output = str(tmp_path / "numbers.tfrecord")
    create_records(str(tmp_path / "numbers.txt"), output, vocab_file, dupe_factor=3,
                   short_seq_prob=0.0)
    records = read_records([output])
    ids, segments = unmasked_ids(records), records["segment_ids"]
    lengths = records["input_mask"].sum(axis=1)
    used = []
    for i in range(len(ids)):
        len_a = int((segments[i][:lengths[i]] == 0).sum()) - 2
        used.extend(ids[i][1:len_a + 1].tolist())
        if records["next_sentence_labels"][i][0] == 0:
            used.extend(ids[i][len_a + 2:lengths[i] - 1].tolist())
    assert sorted(used) == sorted(list(where) * 3)


def test_whole_word_masking_masks_all_pieces_of_a_word(tmp_path, vocab_file):
    tokenizer = tokenization.FullTokenizer(vocab_file)
    partial = {}
    for whole_word in (True, False):
        output = str(tmp_path / f"wwm_{whole_word}.tfrecord")
        create_records(TRAIN_TXT, output, vocab_file, do_whole_word_mask=whole_word, dupe_factor=1,
                       random_seed=7)
        records = read_records([output])
        original = unmasked_ids(records)
        partial[whole_word] = 0
        for i in range(len(original)):
            num_masked = int(records["masked_lm_weights"][i].sum())
            masked = set(records["masked_lm_positions"][i][:num_masked].tolist())
            tokens = tokenizer.convert_ids_to_tokens(original[i][:records["input_mask"][i].sum()])
            # Words: a piece without "##" (or right after [CLS]/[SEP]) and its "##" pieces.
            words = []
            for position, token in enumerate(tokens):
                if token in ("[CLS]", "[SEP]"):
                    continue
                if token.startswith("##") and words and words[-1][-1] == position - 1:
                    words[-1].append(position)
                else:
                    words.append([position])
            for word in words:
                hit = sum(position in masked for position in word)
                partial[whole_word] += 0 < hit < len(word)
    assert partial[True] == 0
    assert partial[False] > 50  # the check above can see a split word


def test_truncation_counts_match_the_original_loop():
    def original(len_a, len_b, max_num_tokens):
        remove_a = remove_b = 0
        while len_a + len_b > max_num_tokens:
            if len_a > len_b:
                len_a, remove_a = len_a - 1, remove_a + 1
            else:
                len_b, remove_b = len_b - 1, remove_b + 1
        return remove_a, remove_b

    for len_a in range(1, 30):
        for len_b in range(1, 30):
            for max_num_tokens in range(2, 40, 3):
                assert (pretraining_data.truncation_counts(len_a, len_b, max_num_tokens)
                        == original(len_a, len_b, max_num_tokens))


def test_output_is_deterministic_and_independent_of_num_workers(tmp_path, vocab_file):
    outputs = {}
    for name, workers, seed in (("one", 1, 5), ("two", 2, 5), ("seed", 1, 6)):
        paths = [str(tmp_path / f"{name}_{k}.tfrecord") for k in range(2)]
        summary, _ = create_records(TRAIN_TXT, ",".join(paths), vocab_file, num_workers=workers,
                                    chunk_size_mb=0.1, dupe_factor=1, random_seed=seed)
        assert summary["chunks"] == 4
        outputs[name] = [open(p, "rb").read() for p in paths]
    assert outputs["one"] == outputs["two"]
    assert outputs["one"] != outputs["seed"]


def test_chunks_end_at_document_boundaries(tmp_path):
    with open(TRAIN_TXT, "rb") as f:
        data = f.read()
    chunks = pretraining_data.plan_chunks([TRAIN_TXT], 0.05)
    assert chunks[0].start == 0 and chunks[-1].end == len(data) and len(chunks) >= 7
    for previous, chunk in zip(chunks, chunks[1:], strict=False):
        assert previous.end == chunk.start
        assert data[:chunk.start].endswith(b"\n\n")
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_several_output_files_are_round_robin_shards(tmp_path, vocab_file):
    single = str(tmp_path / "single.tfrecord")
    shards = [str(tmp_path / f"shard_{k}.tfrecord") for k in range(3)]
    create_records(TRAIN_TXT, single, vocab_file, dupe_factor=1)
    create_records(TRAIN_TXT, ",".join(shards), vocab_file, dupe_factor=1)
    whole = read_records([single])["input_ids"]
    parts = [read_records([p])["input_ids"] for p in shards]
    assert sum(len(p) for p in parts) == len(whole)
    for k in range(3):
        np.testing.assert_array_equal(parts[k], whole[k::3])
    assert not [f for f in os.listdir(tmp_path) if ".tmp-" in f]


def test_comma_lists_and_globs_of_inputs(tmp_path, vocab_file):
    text = open(TRAIN_TXT).read().split("\n\n")
    for k in range(3):
        (tmp_path / f"part{k}.txt").write_text("\n\n".join(text[7 * k:7 * k + 7]) + "\n")
    output = str(tmp_path / "out.tfrecord")
    summary, _ = create_records(
        f"{tmp_path}/part[01].txt, {tmp_path}/part2.txt,{tmp_path}/part0.txt", output,
        vocab_file, dupe_factor=1)
    assert summary["input_files"] == [str(tmp_path / f"part{k}.txt") for k in range(3)]
    assert summary["documents"] == 21 and summary["sentences"] == 2901


def test_bad_inputs_give_one_clear_error(tmp_path, vocab_file):
    output = tmp_path / "out.tfrecord"
    output.write_bytes(b"previous complete output")

    def error(input_file, vocab=vocab_file):
        with pytest.raises(BertTfError) as raised:
            create_records(input_file, str(output), vocab)
        return str(raised.value)

    missing = str(tmp_path / "missing.txt")
    assert "--input_file" in error(missing) and missing in error(missing)
    pattern = str(tmp_path / "nothing*.txt")
    assert "--input_file" in error(pattern) and f"'{pattern}' matches no files" in error(pattern)
    assert "--input_file: no input" in error(" , ")

    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("First line.\nSecond line.\n\nCaf\u00e9 au lait.\n".encode("latin-1"))
    message = error(str(latin1))
    assert f"'{latin1}' line 4 is not valid UTF-8" in message and "iconv" in message

    # Also when the bad line is in a later chunk, and with worker processes.
    lines = [f"Sentence {k} of the text." if k % 10 else "" for k in range(1, 3001)]
    lines[2499] = "Bad \xff byte."
    late = tmp_path / "late.txt"
    late.write_bytes("\n".join(lines).encode("utf-8").replace(b"\xc3\xbf", b"\xff"))
    with pytest.raises(BertTfError, match=f"'{late}' line 2500 is not valid UTF-8"):
        create_records(str(late), str(output), vocab_file, num_workers=2, chunk_size_mb=0.01)

    binary = tmp_path / "model.bin"
    binary.write_bytes(b"GGUF\n\x00\x01\x02\x03")
    assert f"'{binary}' line 2 holds a NUL byte" in error(str(binary))

    blank = tmp_path / "blank.txt"
    blank.write_text("\n   \n\n")
    assert "hold(s) no text" in error(str(blank))

    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
    assert f"vocab file '{bad_vocab}' has no [MASK] token" in error(TRAIN_TXT, str(bad_vocab))

    with pytest.raises(BertTfError, match="--masked_lm_prob=1.5 is out of range"):
        create_records(TRAIN_TXT, str(output), vocab_file, masked_lm_prob=1.5)
    # Nothing was written over the earlier output, and no temporary file is left behind.
    assert output.read_bytes() == b"previous complete output"
    assert sorted(os.listdir(tmp_path)) == ["blank.txt", "late.txt", "latin1.txt", "model.bin",
                                            "out.tfrecord", "vocab.txt"]


def test_script_runs_with_the_original_flags(tmp_path, vocab_file):
    script = os.path.join(REPO, "scripts", "create_pretraining_data.py")
    env = child_env()
    corpus = tmp_path / "small.txt"
    corpus.write_text("\n\n".join(open(TRAIN_TXT).read().split("\n\n")[:4]) + "\n")
    outputs = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    result = subprocess.run(
        [sys.executable, script, f"--input_file={corpus}", f"--output_file={','.join(outputs)}",
         f"--vocab_file={vocab_file}", "--do_lower_case=True", "--do_whole_word_mask=True",
         "--max_seq_length=64", "--max_predictions_per_seq=10", "--random_seed=1",
         "--dupe_factor=2", "--masked_lm_prob=0.15", "--short_seq_prob=0.1",
         "--num_workers=2", "--chunk_size_mb=0.02"],
        capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "MB/s" in result.stderr and "masked per instance" in result.stderr
    records = read_records(outputs, 64, 10)
    assert len(records["input_ids"]) > 100

    result = subprocess.run(
        [sys.executable, script, f"--input_file={tmp_path}/*.md", "--output_file=x",
         f"--vocab_file={vocab_file}"], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --input_file: pattern '{tmp_path}/*.md' matches no files; check the pattern "
        "and the directory."]


def test_a_worker_that_cannot_start_is_an_error_not_a_hang(tmp_path, vocab_file):
    # Worker processes re-import the caller's main module; without an `if __name__` guard
    # each worker dies at start. multiprocessing.Pool would restart them forever.
    user_script = tmp_path / "make_data.py"
    user_script.write_text(
        "from bert_tf import options\n"
        "from bert_tf.data import pretraining_data\n"
        f"config = options.PretrainingDataConfig({vocab_file!r})\n"
        f"pretraining_data.create_pretraining_data({TRAIN_TXT!r}, {str(tmp_path / 'o.tfrecord')!r},"
        " config, num_workers=2, chunk_size_mb=0.05)\n")
    result = subprocess.run([sys.executable, str(user_script)], capture_output=True, text=True,
                            env=child_env(), timeout=240)
    assert result.returncode != 0
    assert "a worker process died" in result.stderr
    assert 'if __name__ == "__main__":' in result.stderr
