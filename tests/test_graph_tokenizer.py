"""bert_tf.serving.graph_tokenizer against tokenization.FullTokenizer (the oracle) and
bert_tf.data.bert_inputs: the real multilingual corpus and MiniLM's vocab, every code point of
Unicode, combining-mark order, final sigma, invalid UTF-8, eager / tf.function / TF1 graph,
packing and truncation, bad vocabs."""

import itertools
import os
import unicodedata

import numpy as np
import pytest
import tensorflow as tf
from ragged_lists import ragged_lists

from bert_tf import tokenization
from bert_tf.data import bert_inputs
from bert_tf.errors import BertTfError
from bert_tf.serving import graph_tokenizer

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

# What tokenizers without FullTokenizer's rules get wrong (tf-text's BertTokenizer, NFKC
# case folding, byte limits): cleaned, case-folded and limited as FullTokenizer does.
HARD_LINES = [
    "Straße ﬁne İstanbul ＡＢＣ ½ Ǆ", "a\u00adb c\u200bd e\ufeff", "x\x00y \ufffdz",
    "a" * 101 + " b", "x " + "é" * 101 + ",y", "é" * 60, "l'argument «\u00a0vars »",
    "ΟΔΟΣ. ΑΣ'Β Σ ΣΑ Α\u00adΣ Α\u0301Σ\u0301 (ΧΑΟΣ)", "", "   ", "\u2028line\u2029sep\x1c",
    "中文字符テスト한국어 ﬀ\uf900\U0002f800x", "tab\tnew\nline\rret\x0bvt\x85nel",
]


def _lines():
    with open(os.path.join(DATA, "multilingual.txt"), encoding="utf-8") as f:
        return f.read().splitlines()


def _expected_words(tokenizer, text):
    """FullTokenizer's word pieces of `text` as ids, grouped by word."""
    words = tokenizer.basic_tokenizer.tokenize(text)
    return [tokenizer.convert_tokens_to_ids(tokenizer.wordpiece_tokenizer.tokenize_words([w]))
            for w in words]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_full_tokenizer_ids_on_every_line_of_the_multilingual_corpus(vocab_file,
                                                                     do_lower_case):
    lines = _lines()
    assert len(lines) == 3250
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    in_graph = graph_tokenizer.GraphTokenizer(vocab_file, do_lower_case)
    got = ragged_lists(in_graph.tokenize(tf.constant(lines + HARD_LINES)))
    agreeing = sum(ids == _expected_words(tokenizer, line)
                   for line, ids in zip(lines, got, strict=False))
    print(f"do_lower_case={do_lower_case}: {agreeing}/{len(lines)} lines agree")
    assert agreeing == len(lines)
    differing = [line for line, ids in zip(HARD_LINES, got[len(lines):], strict=True)
                 if ids != _expected_words(tokenizer, line)]
    assert differing == []
    flat = in_graph.tokenize_flat(tf.constant(lines[:50])).to_list()
    assert flat == [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))
                    for line in lines[:50]]


def _code_point_texts():
    """A text around each code point: every assigned one, every CJK ideograph slot and every
    97th unassigned / private-use one (surrogates cannot be UTF-8)."""
    texts = []
    for code_point in range(0x110000):
        char = chr(code_point)
        category = unicodedata.category(char)
        if category == "Cs" or (category in ("Cn", "Co") and code_point % 97 and not any(
                low <= code_point <= high for low, high in tokenization.CHINESE_CHAR_RANGES)):
            continue
        texts.append(f"x{char}y Σ{char}Σ {char}")
    return texts


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_every_code_point_gives_full_tokenizers_words(do_lower_case, tmp_path):
    texts = _code_point_texts()
    basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    words = [basic.tokenize(text) for text in texts]
    # A vocab of every word FullTokenizer makes here: a word the graph makes differently then
    # gets other ids, pieces or [UNK].
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + sorted(
        set(itertools.chain.from_iterable(words)) - {"[PAD]", "[UNK]", "[CLS]", "[SEP]"})
    vocab = {token: index for index, token in enumerate(vocab)}
    in_graph = graph_tokenizer.GraphTokenizer(vocab, do_lower_case)
    tokenize = tf.function(in_graph.tokenize_flat)
    got = []
    for start in range(0, len(texts), 20000):
        got += ragged_lists(tokenize(tf.constant(texts[start:start + 20000])))
    differing = [text for text, text_words, ids in zip(texts, words, got, strict=True)
                 if ids != [vocab[word] for word in text_words]]
    print(f"{len(texts) - len(differing)}/{len(texts)} code point texts agree")
    assert differing == []


NONCHARACTERS = [chr(c) for c in range(0xFDD0, 0xFDF0)] + [
    chr(plane + low) for plane in range(0, 0x110000, 0x10000) for low in (0xFFFE, 0xFFFF)]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_noncharacters_are_kept_as_full_tokenizer_keeps_them(do_lower_case):
    # TensorFlow 2.16-2.19 write a noncharacter as U+FFFD when they encode code points as
    # UTF-8; FullTokenizer keeps it, so a vocab word with one must still be found, and a word
    # that is not must still split into its pieces.
    assert len(NONCHARACTERS) == 66
    texts = [f"a{char}\u00e9 Σ{char}\u4e2d{char}\U0001f600 {char}zz" for char in NONCHARACTERS]
    texts += ["plain ascii text"]  # in the same batch: its words go the byte-wise way too
    tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    words = [tokenizer.tokenize(text) for text in texts]
    pieces = sorted({word for text_words in words for word in text_words[:-1]}
                    | {"plain", "ascii", "text"}
                    | set(NONCHARACTERS) | {"##zz"})  # the last word splits: char + ##zz
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + pieces)}
    in_graph = graph_tokenizer.GraphTokenizer(vocab, do_lower_case)
    got = ragged_lists(in_graph.tokenize(tf.constant(texts)))
    expected = [[[vocab[word]] for word in text_words[:-1]]
                + ([[vocab[text_words[-1][0]], vocab["##zz"]]] if len(text_words) > 3 else
                   [[vocab[text_words[-1]]]])
                for text_words in words]
    assert got == expected


def test_utf8_of_code_points_of_every_length_with_a_noncharacter_in_the_batch():
    # The byte-wise encoder runs for a batch with a noncharacter: check it on code points of
    # one to four UTF-8 bytes, each length's first and last, and on empty rows.
    code_points = [0x1, 0x41, 0x7F, 0x80, 0x7FF, 0x800, 0xFDD0, 0xFFFD, 0xFFFF, 0x10000,
                   0x1F600, 0x10FFFF, 0x10FFFE]
    rows = [code_points, [], code_points[::-1], [0xE9], [0xFDEF, 0x61]]
    got = graph_tokenizer._encode_utf8(tf.ragged.constant(rows, tf.int32)).numpy().tolist()
    assert got == ["".join(map(chr, row)).encode("utf-8") for row in rows]


def test_combining_marks_are_reordered_as_nfd_does(vocab_file):
    # Marks of canonical class > 0 that are not Mn survive accent stripping, so their order
    # after NFD's reordering shows in the output.
    kept = [chr(c) for c in range(0x110000)
            if unicodedata.combining(chr(c)) and unicodedata.category(chr(c)) != "Mn"]
    assert len(kept) > 10
    marks = ["\u0301", "\u0323", "\u093c", "\u0f71"]  # Mn of classes 230, 220, 7, 129
    texts = [f"a{x}{y}b" for x, y in itertools.product(kept, kept)]
    texts += [f"a{x}{m}{y}" for x, m, y in itertools.product(kept[:6], marks, kept[-6:])]
    texts += [f"{x}{m}{y}b" for x, m, y in itertools.product(kept[-6:], marks, kept[:6])]
    words = [tokenization.BasicTokenizer(do_lower_case=True).tokenize(t) for t in texts]
    vocab = ["[UNK]", "[CLS]", "[SEP]"] + sorted(set(itertools.chain.from_iterable(words)))
    vocab = {token: index for index, token in enumerate(vocab)}
    got = graph_tokenizer.GraphTokenizer(vocab, True).tokenize_flat(tf.constant(texts))
    assert got.to_list() == [[vocab[word] for word in text_words] for text_words in words]


def test_invalid_utf8_bytes_are_dropped_as_full_tokenizer_drops_them(vocab_file):
    texts = [b"caf\xc3", b"\xff\xfeabc", b"na\xc3\xafve \xe2\x82 x", b"\xc3\xa9\x80t\xf0\x9f",
             b"ok \xed\xa0\x80 surrogate"]
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    got = graph_tokenizer.GraphTokenizer(vocab_file, True).tokenize_flat(tf.constant(texts))
    assert got.to_list() == [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t))
                             for t in texts]


def test_max_chars_per_word(vocab_file):
    vocab = tokenization.load_vocab(vocab_file)
    in_graph = graph_tokenizer.GraphTokenizer(vocab, True, max_chars_per_word=5)
    got = in_graph.tokenize(tf.constant(["hello worlds ok", ""])).to_list()
    assert got == [[[vocab["hello"]], [vocab["[UNK]"]], [vocab["ok"]]], []]


def test_same_ids_in_a_tf1_graph_and_a_tf_function(vocab_file):
    lines = _lines()[::50]
    in_graph = graph_tokenizer.GraphTokenizer(vocab_file, True)
    eager = in_graph.tokenize(tf.constant(lines)).to_list()
    traced = tf.function(in_graph.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    assert traced(tf.constant(lines)).to_list() == eager
    with tf.Graph().as_default():
        strings = tf.compat.v1.placeholder(tf.string, [None])
        ids = graph_tokenizer.GraphTokenizer(vocab_file, True).tokenize(strings)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.tables_initializer())
            value = session.run(ids, {strings: lines})
    assert value.to_list() == eager


# ----------------------------------------------------------------------------- packing


def _ragged(rows):
    return tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=1, row_splits_dtype=tf.int64)


def _pieces(length, base):
    return list(range(base, base + length))


@pytest.mark.parametrize("seq_length", [9, 10])
def test_pack_inputs_cuts_and_packs_as_the_feature_builders(seq_length):
    pairs = list(itertools.product(range(12), range(12)))
    firsts = [_pieces(a, 100) for a, _ in pairs]
    seconds = [_pieces(b, 200) for _, b in pairs]
    packed = graph_tokenizer.pack_inputs([_ragged(firsts), _ragged(seconds)], seq_length,
                                         cls_id=1, sep_id=2)
    single = graph_tokenizer.pack_inputs([_ragged(firsts)], seq_length, cls_id=1, sep_id=2)
    vocab = {"[CLS]": 1, "[SEP]": 2, **{i: i for i in range(100, 300)}}
    ids = type("Ids", (), {"convert_tokens_to_ids": staticmethod(
        lambda tokens: [vocab[t] for t in tokens])})
    for row, (first, second) in enumerate(zip(firsts, seconds, strict=True)):
        want = bert_inputs.pack_and_pad(list(first), list(second), ids, seq_length)
        for got, name in ((packed, "pair"), (single, "single")):
            if name == "single":
                want = bert_inputs.pack_and_pad(list(first), None, ids, seq_length)
            np.testing.assert_array_equal(got["input_word_ids"][row], want.input_ids, name)
            np.testing.assert_array_equal(got["input_mask"][row], want.input_mask, name)
            np.testing.assert_array_equal(got["input_type_ids"][row], want.segment_ids, name)
    assert packed["input_word_ids"].dtype == tf.int32
    assert packed["input_word_ids"].shape == [len(pairs), seq_length]


def test_pack_inputs_squad_cuts_the_question_then_the_context(vocab_file):
    in_graph = graph_tokenizer.GraphTokenizer(vocab_file, True)
    questions = ["who wrote the longest question ever asked here?", "why?"]
    contexts = ["a context " * 20, ""]
    packed = graph_tokenizer.pack_inputs(
        [in_graph.tokenize(tf.constant(questions)), in_graph.tokenize(tf.constant(contexts))],
        seq_length=16, cls_id=in_graph.cls_id, sep_id=in_graph.sep_id, max_query_length=4)
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    for row, (question, context) in enumerate(zip(questions, contexts, strict=True)):
        query = tokenizer.tokenize(question)[:4]
        doc = tokenizer.tokenize(context)[:16 - 3 - len(query)]
        tokens = ["[CLS]", *query, "[SEP]", *doc, "[SEP]"]
        want = bert_inputs.pad(tokenizer.convert_tokens_to_ids(tokens), 16)
        assert packed["input_word_ids"][row].numpy().tolist() == want
        assert packed["input_type_ids"][row].numpy().tolist() == bert_inputs.pad(
            [0] * (len(query) + 2) + [1] * (len(doc) + 1), 16)


# --------------------------------------------------------------------------- bad input


def test_a_vocab_without_special_tokens_names_the_file(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\nhello\n", encoding="utf-8")
    with pytest.raises(BertTfError, match=f"vocab file '{vocab}' has no \\[CLS\\] or \\[SEP\\]"):
        graph_tokenizer.GraphTokenizer(str(vocab), True)
    with pytest.raises(BertTfError, match="vocab file .*missing.txt"):
        graph_tokenizer.GraphTokenizer(str(tmp_path / "missing.txt"), True)
    with pytest.raises(BertTfError, match="the vocab has no \\[UNK\\] token"):
        graph_tokenizer.GraphTokenizer({"[CLS]": 0, "[SEP]": 1}, True)
