"""Growing the vocabulary: extend_vocab (ids never move) and the MiniLM checkpoint loaded into
a model with more WordPiece ids (`table_growth`, --new_token_init)."""

import collections
import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import tiny_config

from bert_tf import modeling, table_growth, tokenization
from bert_tf.data import vocab_extension
from bert_tf.errors import BertTfError

tf1 = tf.compat.v1

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "data", "corpus", "train.txt")
WORDS = "bert/embeddings/word_embeddings"


def corpus_words_missing_from(vocab, count):
    """The `count` most frequent words of data/corpus/train.txt that `vocab` lacks (names of
    Persuasion's people and places, old spellings)."""
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    counts = collections.Counter(
        word for line in open(CORPUS, encoding="utf-8") for word in basic.tokenize(line)
        if word.isalpha() and word not in vocab)
    words = [word for word, _ in counts.most_common(count)]
    assert len(words) == count
    return words


@pytest.fixture(scope="module")
def extended(vocab_file, tmp_path_factory):
    """MiniLM's vocab + 1194 corpus words: 994 in the [unusedN] places, 200 appended."""
    root = tmp_path_factory.mktemp("extended")
    words = corpus_words_missing_from(tokenization.load_vocab(vocab_file), 1194)
    # Capitalised and repeated: normalised as the uncased tokenizer sees them, once.
    (root / "new_words.txt").write_text(
        "\n".join([words[0].capitalize()] + words + ["", words[1]]) + "\n", encoding="utf-8")
    summary = vocab_extension.extend_vocab(vocab_file, str(root / "new_words.txt"),
                                           str(root / "vocab.txt"))
    return words, str(root / "vocab.txt"), summary


def test_extend_vocab_fills_unused_first_and_never_moves_an_id(vocab_file, extended):
    words, output, summary = extended
    old, new = tokenization.vocab_tokens(vocab_file), tokenization.vocab_tokens(output)
    assert summary == {"output_vocab_file": output, "vocab_size": 30722, "filled_unused": 994,
                       "appended": 200, "already_present": []}
    assert len(new) == 30722
    unused = [i for i, token in enumerate(old) if token.startswith("[unused")]
    for i, token in enumerate(old):
        if i not in unused:
            assert new[i] == token, i
    assert [new[i] for i in unused] == words[:994]
    assert new[30522:] == words[994:]
    # The tokenizer now reads each new word as one token with the id it was given.
    tokenizer = tokenization.FullTokenizer(output, do_lower_case=True)
    text = f"{words[0].capitalize()} met {words[-1]}."
    assert tokenizer.tokenize(text) == [words[0], "met", words[-1], "."]
    assert tokenizer.convert_tokens_to_ids([words[0], words[-1]]) == [unused[0], 30721]
    # Adding the same words again changes nothing.
    again = vocab_extension.extended_tokens(new, words)
    assert again[0] == new and len(again[1]["already_present"]) == 1194


def test_a_new_words_line_that_is_not_one_word_is_one_error(vocab_file, tmp_path):
    (tmp_path / "words.txt").write_text("kellynch\nlady russell\n", encoding="utf-8")
    with pytest.raises(BertTfError, match=(
            r"--new_words_file .*words.txt line 2: 'lady russell' is 2 words to the tokenizer "
            r"\(lady russell\); put one word without spaces or punctuation on each line.")):
        vocab_extension.extend_vocab(vocab_file, str(tmp_path / "words.txt"),
                                     str(tmp_path / "out.txt"))
    assert not (tmp_path / "out.txt").exists()
    with pytest.raises(BertTfError, match="--new_words_file: new words file .*nope.txt"):
        vocab_extension.extend_vocab(vocab_file, str(tmp_path / "nope.txt"),
                                     str(tmp_path / "out.txt"))


def _sequence_output(config, checkpoint, growth, ids):
    with tf.Graph().as_default():
        model = modeling.BertModel(config, False, tf.constant(ids))
        modeling.init_from_checkpoint(checkpoint, growth=growth)
        table = [v for v in tf1.trainable_variables() if v.op.name == WORDS][0]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            return sess.run([model.get_sequence_output(), table])


def test_minilm_with_the_extended_vocab_keeps_its_outputs(minilm_converted, extended, caplog):
    words, vocab, _ = extended
    checkpoint = os.path.join(minilm_converted, "bert_model.ckpt")
    config = json.load(open(os.path.join(minilm_converted, "bert_config.json")))
    learnt = tf.train.load_variable(checkpoint, WORDS)
    # Text without the new words has the same ids with both vocabs.
    text = "She was very happy to see her sister again after the long winter."
    ids = np.array([tokenization.FullTokenizer(vocab).convert_tokens_to_ids(
        ["[CLS]"] + tokenization.FullTokenizer(vocab).tokenize(text) + ["[SEP]"])], np.int32)
    original, _ = _sequence_output(modeling.BertConfig(**config), checkpoint, None, ids)
    caplog.set_level(logging.INFO)
    grown, table = _sequence_output(modeling.BertConfig(**dict(config, vocab_size=30722)),
                                    checkpoint, table_growth.GrowthOptions(new_token_init="mean"),
                                    ids)
    np.testing.assert_allclose(grown, original, atol=1e-5)
    np.testing.assert_array_equal(table[:30522], learnt)
    np.testing.assert_allclose(table[30522:], np.repeat(learnt.mean(0, keepdims=True), 200, 0),
                               atol=1e-6)
    assert (f"{WORDS} 30522 -> 30722 rows (mean: new rows the mean learnt row)"
            in caplog.text)
    # "random": the new rows come from the config's initializer (stddev initializer_range).
    _, table = _sequence_output(modeling.BertConfig(**dict(config, vocab_size=30722)),
                                checkpoint, table_growth.GrowthOptions(new_token_init="random"),
                                ids)
    np.testing.assert_array_equal(table[:30522], learnt)
    assert 0.5 * 0.02 < table[30522:].std() < 0.02  # Truncated at 2 stddev.


def test_the_mlm_output_bias_grows_with_the_vocabulary(tmp_path):
    def build(vocab_size):
        config = modeling.BertConfig(**tiny_config(vocab_size=vocab_size))
        modeling.BertModel(config, False, tf.constant([[1, 2, 3]]))
        with tf1.variable_scope("cls/predictions"):
            return tf1.get_variable("output_bias", [vocab_size],
                                    initializer=tf1.random_normal_initializer())

    with tf.Graph().as_default():
        build(30)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            tf1.train.Saver().save(sess, str(tmp_path / "model.ckpt"))
    learnt = tf.train.load_variable(str(tmp_path / "model.ckpt"), "cls/predictions/output_bias")
    with tf.Graph().as_default():
        bias = build(34)
        modeling.init_from_checkpoint(str(tmp_path / "model.ckpt"),
                                      growth=table_growth.GrowthOptions())
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            value = sess.run(bias)
    np.testing.assert_array_equal(value[:30], learnt)
    np.testing.assert_allclose(value[30:], [learnt.astype(np.float64).mean()] * 4, rtol=1e-6)


def test_grown_tables_go_through_the_converter_and_the_release_export(minilm_converted,
                                                                      tmp_path):
    from bert_tf.tools import conversion
    from bert_tf.training import checkpoints

    checkpoint = os.path.join(minilm_converted, "bert_model.ckpt")
    config = json.load(open(os.path.join(minilm_converted, "bert_config.json")))
    grown_config = dict(config, vocab_size=30722, max_position_embeddings=1024)
    (tmp_path / "bert_config.json").write_text(json.dumps(grown_config))
    # A checkpoint with both tables grown, as a fine-tuning run saves it.
    with tf.Graph().as_default():
        modeling.BertModel(modeling.BertConfig(**grown_config), False, tf.constant([[101, 102]]))
        modeling.init_from_checkpoint(checkpoint, growth=table_growth.GrowthOptions())
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            tf1.train.Saver().save(sess, str(tmp_path / "grown" / "model.ckpt"))
    grown = str(tmp_path / "grown" / "model.ckpt")
    conversion.convert_tf_to_hf(str(tmp_path / "bert_config.json"), grown, str(tmp_path / "hf"),
                                vocab_file=os.path.join(minilm_converted, "vocab.txt"))
    conversion.convert_hf_to_tf(str(tmp_path / "hf"), str(tmp_path / "back"))
    back = str(tmp_path / "back" / "bert_model.ckpt")
    for name in (WORDS, "bert/embeddings/position_embeddings"):
        np.testing.assert_array_equal(tf.train.load_variable(back, name),
                                      tf.train.load_variable(grown, name))
    assert json.load(open(tmp_path / "back" / "bert_config.json"))["vocab_size"] == 30722
    names = checkpoints.export_release_checkpoint(grown, str(tmp_path / "bert_config.json"),
                                                  str(tmp_path / "release"))
    assert WORDS in names
    assert tf.train.load_variable(str(tmp_path / "release" / "bert_model.ckpt"),
                                  WORDS).shape == (30722, 384)
    # The checkpoint's own (smaller) config does not describe the grown tables: one error.
    with pytest.raises(BertTfError, match=(
            r"--bert_config_file .*bert_config.json: vocab_size is 30522 but the checkpoint's "
            r"bert/embeddings/word_embeddings has 30722 rows; pass the config the checkpoint "
            r"was trained with \(\"vocab_size\": 30722\)")):
        checkpoints.export_release_checkpoint(
            grown, os.path.join(minilm_converted, "bert_config.json"), str(tmp_path / "bad"))
