"""Longer inputs and bigger models through the runs: --recompute_grad trains as the plain graph
does, the MiniLM checkpoint fine-tunes at 1,024 tokens with copied positions, and a classifier
fine-tunes with words added to the vocabulary (scripts/extend_vocab.py)."""

import collections
import json
import logging
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import (
    FINETUNE_DATA,
    PRETRAINING_TINY,
    TRAIN_TXT,
    assert_clean_error,
    assert_ok,
    minilm_files,
    options,
    pretrain_options,
    run_script,
    write_records,
)

from bert_tf import tokenization
from bert_tf.runs import driver, pretraining

pytestmark = pytest.mark.slow

POSITIONS = "bert/embeddings/position_embeddings"
WORDS = "bert/embeddings/word_embeddings"


def test_pretraining_with_recompute_grad_trains_like_without(tmp_path):
    # Dropout on: the recomputed layers must draw the masks of the forward pass.
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(dict(PRETRAINING_TINY, hidden_dropout_prob=0.1,
                                      attention_probs_dropout_prob=0.1)))
    write_records(str(tmp_path / "train.tfrecord"), 64)
    # Every variable (heads included) starts from one checkpoint, so only recomputation differs.
    pretraining.run_pretraining(pretrain_options(tmp_path, output_dir=str(tmp_path / "start"),
                                                 num_train_steps=2, do_eval=False))
    start = tf.train.latest_checkpoint(str(tmp_path / "start"))
    results = {}
    for recompute in (False, True):
        output_dir = str(tmp_path / f"recompute_{recompute}")
        results[recompute] = pretraining.run_pretraining(pretrain_options(
            tmp_path, output_dir=output_dir, init_checkpoint=start, num_train_steps=8,
            save_checkpoints_steps=4, keep_checkpoint_max=5, recompute_grad=recompute))
    # The same loss curve: the weights after 4 and 8 updates, and the eval losses.
    for step in (4, 8):
        plain, recomputed = (tf.train.load_checkpoint(str(tmp_path / f"recompute_{r}" /
                                                          f"model.ckpt-{step}"))
                             for r in (False, True))
        moved = 0.0
        for name in plain.get_variable_to_shape_map():
            if name.startswith(("bert/", "cls/")) and "adam" not in name:
                a, b = plain.get_tensor(name), recomputed.get_tensor(name)
                np.testing.assert_allclose(b, a, rtol=0, atol=2e-5, err_msg=name)
                moved = max(moved, np.abs(a - tf.train.load_variable(start, name)).max())
        assert moved > 1e-3  # The updates are far larger than the tolerance.
    for key in ("masked_lm_loss", "next_sentence_loss"):
        assert results[True][key] == pytest.approx(results[False][key], rel=1e-5)


def test_minilm_fine_tunes_at_1024_tokens_with_copied_positions(tmp_path, minilm_converted,
                                                                caplog):
    # tests/data/finetune/long_docs: ~600-token documents whose label is in their last
    # sentence, past MiniLM's 512 positions (at 128 tokens the dev accuracy stays <= 0.6).
    # Length buckets cut each training batch to its longest document's bucket (the same loss
    # as at 1024, ~40 % fewer positions to train); evaluation runs at the full 1024. MiniLM at
    # batch 4 fits without --recompute_grad (test_recompute.py checks its gradients, and
    # docs/training-runs.md's block runs it at 1024 tokens), which would cost a third more.
    caplog.set_level(logging.INFO)
    files = minilm_files(minilm_converted)
    output_dir = tmp_path / "out"
    results = driver.run_task(options(
        "classifier", task_name="tsv", text_a_column="text",
        data_dir=os.path.join(FINETUNE_DATA, "long_docs"), **files,
        output_dir=str(output_dir), do_train=True, do_eval=True, max_seq_length=1024,
        max_position_embeddings=1024, position_embedding_init="copy", train_batch_size=4,
        num_train_steps=12, learning_rate=1e-4, eval_batch_size=8, keep_checkpoint_max=1,
        bucket_by_length=True))
    print(f"1024 tokens: {results}")
    # 40 dev documents; measured 1.0 after 12 steps (one pass over the 48 training documents;
    # eval_loss 0.097), as after 24 and 36.
    assert results["eval_accuracy"] >= 0.9
    assert (f"{POSITIONS} 512 -> 1024 rows (copy: the learnt rows repeated)" in caplog.text)
    learnt = tf.train.load_variable(files["init_checkpoint"], POSITIONS)
    trained = tf.train.load_variable(str(output_dir / "model.ckpt-12"), POSITIONS)
    assert trained.shape == (1024, 384)
    # 12 AdamW updates at 1e-4 move a weight by a few 1e-3 (measured: at most 2.6e-3): rows
    # 0..511 started as the checkpoint's and rows 512..1023 as their copy, not as other rows.
    other_rows = np.abs(learnt - np.roll(learnt, 256, axis=0)).mean()
    for rows in (trained[:512], trained[512:]):
        assert np.abs(rows - learnt).max() < 1.5e-2
        assert 0 < np.abs(rows - learnt).mean() < 0.1 * other_rows


def _persuasion_places(path, new_words):
    """A TSV of data/corpus sentences naming Uppercross or the Musgroves (label "musgrove") or
    Kellynch, Captain Harville or Captain Benwick (label "other"), each naming one group only:
    all of these names are words MiniLM's vocab lacks."""
    groups = {"musgrove": {"musgrove", "musgroves", "uppercross"},
              "other": {"kellynch", "harville", "benwick"}}
    assert set().union(*groups.values()) <= set(new_words)
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    rows = []
    for line in open(TRAIN_TXT, encoding="utf-8"):
        words = set(basic.tokenize(line))
        labels = [label for label, names in groups.items() if words & names]
        if len(labels) == 1 and len(line.split()) <= 40:
            rows.append((re.sub(r"\s+", " ", line.strip()), labels[0]))
    with open(path, "w", encoding="utf-8") as f:
        f.write("text\tlabel\n" + "".join(f"{text}\t{label}\n" for text, label in rows))
    return collections.Counter(label for _, label in rows)


def test_a_classifier_fine_tunes_with_words_added_to_the_vocab(tmp_path, minilm_converted):
    files = minilm_files(minilm_converted)
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    vocab = tokenization.load_vocab(files["vocab_file"])
    counts = collections.Counter(word for line in open(TRAIN_TXT, encoding="utf-8")
                                 for word in basic.tokenize(line)
                                 if word.isalpha() and word not in vocab)
    # 994 fill the [unusedN] places, 200 are appended; the names the labels depend on last,
    # so they are appended: their rows start as the mean row, all alike.
    names = ["musgrove", "musgroves", "uppercross", "kellynch", "harville", "benwick"]
    new_words = [word for word, _ in counts.most_common(1194) if word not in names] + names
    assert len(new_words) == 1194
    (tmp_path / "new_words.txt").write_text("\n".join(new_words) + "\n", encoding="utf-8")
    grown = tmp_path / "grown"
    grown.mkdir()
    completed = run_script("extend_vocab.py", f"--vocab_file={files['vocab_file']}",
                           f"--new_words_file={tmp_path / 'new_words.txt'}",
                           f"--output_vocab_file={grown / 'vocab.txt'}")
    assert_ok(completed)
    assert "vocab_size 30722 (994 in [unusedN] places, 200 appended" in completed.stdout
    data = tmp_path / "data"
    data.mkdir()
    counts = _persuasion_places(data / "train.tsv", new_words)
    # Evaluated on its own training sentences: the claim is that it trains.
    (data / "dev.tsv").write_text((data / "train.tsv").read_text(encoding="utf-8"),
                                  encoding="utf-8")
    assert min(counts.values()) >= 50
    base = dict(task_name="tsv", text_a_column="text", data_dir=str(data),
                vocab_file=str(grown / "vocab.txt"), init_checkpoint=files["init_checkpoint"],
                do_train=True, do_eval=True, max_seq_length=64, train_batch_size=16,
                num_train_steps=30, learning_rate=1e-4, keep_checkpoint_max=1,
                new_token_init="mean")
    # The checkpoint's own config: the grown vocab has ids it has no row for.
    with pytest.raises(Exception, match=(
            r"--vocab_file .*vocab.txt has token id 30721 but vocab_size in .*bert_config.json "
            r"is 30522; .* set \"vocab_size\": 30722 in")):
        driver.run_task(options("classifier", **base,
                                bert_config_file=files["bert_config_file"],
                                output_dir=str(tmp_path / "wrong")))
    config = json.load(open(files["bert_config_file"]))
    (grown / "bert_config.json").write_text(json.dumps(dict(config, vocab_size=30722)))
    results = driver.run_task(options(
        "classifier", **base, bert_config_file=str(grown / "bert_config.json"),
        output_dir=str(tmp_path / "out")))
    print(f"new words: {results}, {dict(counts)}")
    majority = max(counts.values()) / sum(counts.values())
    assert results["eval_accuracy"] >= majority + 0.1
    # The names' rows started equal (the mean row) and training moved them apart.
    table = tf.train.load_variable(str(tmp_path / "out" / "model.ckpt-30"), WORDS)
    ids = tokenization.load_vocab(str(grown / "vocab.txt"))
    assert [ids[name] for name in names] == list(range(30716, 30722))
    rows = table[[ids[name] for name in names]]
    assert np.abs(rows - rows[:1]).max() > 1e-3


def test_extend_vocab_errors_are_one_line(tmp_path, minilm_converted):
    (tmp_path / "words.txt").write_text("anne\nwent-ward\n", encoding="utf-8")
    completed = run_script("extend_vocab.py",
                           f"--vocab_file={os.path.join(minilm_converted, 'vocab.txt')}",
                           f"--new_words_file={tmp_path / 'words.txt'}",
                           f"--output_vocab_file={tmp_path / 'out.txt'}")
    assert_clean_error(completed, "--new_words_file", "line 2", "'went-ward' is 3 words")
    assert not (tmp_path / "out.txt").exists()
