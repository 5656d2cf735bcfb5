"""WordPiece tokenization, a drop-in for the original Google BERT `tokenization.py`.

Every function and class of the original is here with the same name, arguments and output:
`FullTokenizer(vocab_file, do_lower_case).tokenize(text)` returns exactly the word pieces the
original returns, for any text (but see `DEFAULT_MAX_INPUT_CHARS_PER_WORD`). The pipeline is
the original's:

  1. clean: drop U+0000, U+FFFD and control characters (Unicode Cc/Cf except tab, newline,
     carriage return); map whitespace (those three, space and Unicode Zs) to a space;
  2. put spaces around every CJK ideograph (the original's code point ranges, extension planes
     included), so each becomes a word of its own;
  3. split on whitespace;
  4. if `do_lower_case`: lower-case, decompose (NFD) and drop non-spacing marks (Mn), i.e.
     strip accents;
  5. split off every punctuation character (ASCII 33-47, 58-64, 91-96, 123-126 and Unicode P*)
     as a word of its own;
  6. WordPiece each word: greedy longest-match-first against the vocab, continuation pieces
     prefixed "##"; a word longer than `max_input_chars_per_word` characters, or one with a
     part no piece matches, becomes the unknown token.

It is faster than the original (which looks up `unicodedata` for every character several
times) while giving identical output: steps 1-2 and 5 are `str.translate` calls on tables that
fill in each code point's mapping the first time it is seen (from the same `_is_*` rules as the
original), steps 3-4 run on the whole text at once (lower-casing and NFD never move anything
across whitespace), NFD is skipped for ASCII text, and WordPiece results are cached per word.
"""

import bisect
import collections
import re
import unicodedata

from bert_tf import errors, fileio

# The original pipeline's [UNK] and word-length limit. Note: the last Google release of
# tokenization.py defaults max_input_chars_per_word to 200; bert_tf's contract
# (docs/compatibility.md §1) fixes it at 100
# (the value of the Hugging Face implementations). Words of 101-200 characters are the only
# text where the two defaults differ.
DEFAULT_UNK_TOKEN = "[UNK]"
DEFAULT_MAX_INPUT_CHARS_PER_WORD = 100

# Tokens every BERT vocab has and the scripts rely on (see `check_vocab_has_special_tokens`).
REQUIRED_SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")

# Most distinct words whose WordPiece split is cached; the cache is emptied when it is full.
_WORD_CACHE_SIZE = 100_000

# Code point ranges of the CJK ideographs that get a word of their own, as in the original.
CHINESE_CHAR_RANGES = (
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0x3400, 0x4DBF),  # Extension A
    (0x20000, 0x2A6DF),  # Extension B
    (0x2A700, 0x2B73F),  # Extension C
    (0x2B740, 0x2B81F),  # Extension D
    (0x2B820, 0x2CEAF),  # Extension E
    (0xF900, 0xFAFF),  # Compatibility Ideographs
    (0x2F800, 0x2FA1F),  # Compatibility Ideographs Supplement
)

# The known Google checkpoint directory names, by the casing they were pre-trained with.
_LOWER_CASED_MODELS = (
    "uncased_L-24_H-1024_A-16",
    "uncased_L-12_H-768_A-12",
    "multilingual_L-12_H-768_A-12",
    "chinese_L-12_H-768_A-12",
)
_CASED_MODELS = (
    "cased_L-12_H-768_A-12",
    "cased_L-24_H-1024_A-16",
    "multi_cased_L-12_H-768_A-12",
)


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
    """Raises `BertTfError` if `do_lower_case` contradicts a known Google checkpoint's casing.

    The casing is not stored in the checkpoint, so (like the original) it is inferred from the
    directory name of the Google release, e.g. ".../uncased_L-12_H-768_A-12/bert_model.ckpt".
    Any other checkpoint path is accepted as it is.

    Args:
      do_lower_case: the `--do_lower_case` flag.
      init_checkpoint: the `--init_checkpoint` flag (may be empty).
    """
    if not init_checkpoint:
        return
    match = re.match("^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
    if match is None:
        return
    model_name = match.group(1)
    if model_name in _LOWER_CASED_MODELS and not do_lower_case:
        actual_flag, case_name, opposite_flag = "False", "lower-cased", "True"
    elif model_name in _CASED_MODELS and do_lower_case:
        actual_flag, case_name, opposite_flag = "True", "cased", "False"
    else:
        return
    raise errors.BertTfError(
        f"--do_lower_case={actual_flag} contradicts --init_checkpoint={init_checkpoint}: "
        f"'{model_name}' is a {case_name} model, so pass --do_lower_case={opposite_flag} to "
        "tokenize the way it was pre-trained.")


def convert_to_unicode(text):
    """Returns `text` as `str`, decoding `bytes` as UTF-8 (invalid bytes are dropped)."""
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    raise ValueError(f"Unsupported string type: {type(text)}")


def printable_text(text):
    """Returns `text` as a `str` suitable for print or logging (Python 3: as `str`)."""
    return convert_to_unicode(text)


def _read_vocab_lines(vocab_file):
    """Returns the lines of `vocab_file`, split on "\\n" only (as `tf.io.gfile` reads them).

    Raises:
      BertTfError: if the file is missing or unreadable, or is not UTF-8.
    """
    try:
        if "://" in vocab_file:
            # A remote path (gs://, hdfs://, ...): only TensorFlow's file system can read it.
            import tensorflow as tf

            with tf.io.gfile.GFile(vocab_file, "r") as reader:
                content = reader.read()
        else:
            fileio.require_file(vocab_file, what="vocab file")
            with open(vocab_file, encoding="utf-8", newline="\n") as reader:
                content = reader.read()
    except UnicodeDecodeError as e:
        raise errors.BertTfError(
            f"vocab file '{vocab_file}' is not UTF-8 text (byte {e.start}); pass the vocab.txt "
            "that came with the checkpoint.") from e
    except OSError as e:
        raise errors.BertTfError(
            f"vocab file '{vocab_file}' cannot be read ({e.strerror or e}); check the path "
            "and its permissions.") from e
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()  # The newline that ends the last line does not start another token.
    return lines


def load_vocab(vocab_file):
    """Loads a vocabulary file (one token a line) into an ordered token -> id dict.

    As in the original, a token's id is its 0-based line number and surrounding whitespace is
    stripped; a token listed twice keeps its position of first appearance in the dict but maps
    to the id of its LAST line (see `find_duplicate_tokens`).

    Raises:
      BertTfError: if the file is missing, unreadable or not UTF-8.
    """
    vocab = collections.OrderedDict()
    for index, token in enumerate(vocab_tokens(vocab_file)):
        vocab[token] = index
    return vocab


def vocab_tokens(vocab_file):
    """The tokens of `vocab_file` in id order (each line stripped), duplicates included.

    Raises:
      BertTfError: if the file is missing, unreadable or not UTF-8.
    """
    return [line.strip() for line in _read_vocab_lines(vocab_file)]


def find_duplicate_tokens(vocab_file):
    """Returns {token: [line index, ...]} for every token listed more than once in `vocab_file`.

    `load_vocab` maps such a token to its last index; ids of the earlier lines then have no
    token in `inv_vocab`.
    """
    positions = collections.defaultdict(list)
    for index, line in enumerate(_read_vocab_lines(vocab_file)):
        positions[line.strip()].append(index)
    return {token: indices for token, indices in positions.items() if len(indices) > 1}


def check_vocab_has_special_tokens(vocab, vocab_file, tokens=REQUIRED_SPECIAL_TOKENS):
    """Raises `BertTfError` naming `vocab_file` if `vocab` lacks any of `tokens`, or if the
    file lists a token twice.

    The original `FullTokenizer` accepts any vocab; the scripts call this to stop early when a
    vocab cannot serve BERT inputs (they need [CLS], [SEP], [MASK] and [UNK], and every id
    must map back to its token, which a duplicate line breaks).

    Args:
      vocab: token -> id dict, as returned by `load_vocab`.
      vocab_file: the path `vocab` was read from, named in the message.
      tokens: the tokens that must be present.
    """
    missing = [token for token in tokens if token not in vocab]
    if missing:
        raise errors.BertTfError(
            f"vocab file '{vocab_file}' has no {' or '.join(missing)} token; pass the vocab.txt "
            "that came with the checkpoint (a BERT vocab lists [PAD], [UNK], [CLS], [SEP] and "
            "[MASK]).")
    duplicates = find_duplicate_tokens(vocab_file)
    if duplicates:
        token, lines = next(iter(duplicates.items()))
        raise errors.BertTfError(
            f"vocab file '{vocab_file}' lists '{token}' on lines "
            f"{' and '.join(str(line + 1) for line in lines)} ({len(duplicates)} duplicated "
            "token(s) in all), so some ids have no token; remove the duplicate lines or pass the "
            "vocab.txt that came with the checkpoint.")


def convert_by_vocab(vocab, items):
    """Converts a sequence of tokens or ids with `vocab` (KeyError for an unknown item)."""
    return [vocab[item] for item in items]


def convert_tokens_to_ids(vocab, tokens):
    return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
    return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text):
    """Splits `text` on whitespace (Python's definition, as `str.split()`)."""
    return text.split()


class FullTokenizer:
    """Runs end-to-end tokenization: `BasicTokenizer`, then `WordpieceTokenizer`."""

    def __init__(self, vocab_file, do_lower_case=True):
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

    def tokenize(self, text):
        """Returns the word pieces (a list of str) of `text` (str, or UTF-8 bytes)."""
        return self.wordpiece_tokenizer.tokenize_words(self.basic_tokenizer.tokenize(text))

    def convert_tokens_to_ids(self, tokens):
        return convert_by_vocab(self.vocab, tokens)

    def convert_ids_to_tokens(self, ids):
        return convert_by_vocab(self.inv_vocab, ids)


class BasicTokenizer:
    """Runs basic tokenization (cleaning, CJK and punctuation splitting, lower casing)."""

    def __init__(self, do_lower_case=True):
        """Constructs a BasicTokenizer.

        Args:
          do_lower_case: whether to lower-case the input and strip its accents.
        """
        self.do_lower_case = do_lower_case

    def tokenize(self, text):
        """Returns the words of `text` (steps 1-5 of the module docstring), a list of str."""
        text = convert_to_unicode(text)
        if self.do_lower_case:
            text = text.translate(_CLEAN_TABLE).lower()
            if not text.isascii():
                # Only non-ASCII text can have accents (or decompose at all).
                text = unicodedata.normalize("NFD", text).translate(_DROP_MN_TABLE)
            # After NFD: a decomposition can produce punctuation (U+1FEF -> "`").
            text = text.translate(_SPLIT_PUNCTUATION_TABLE)
        else:
            text = text.translate(_CLEAN_AND_SPLIT_PUNCTUATION_TABLE)
        return text.split()


class WordpieceTokenizer:
    """Runs WordPiece tokenization (greedy longest-match-first against the vocab).

    The split of each word is cached; the cache is dropped when `vocab` is replaced or changes
    size, or `unk_token` or `max_input_chars_per_word` change.
    """

    def __init__(self, vocab, unk_token=DEFAULT_UNK_TOKEN,
                 max_input_chars_per_word=DEFAULT_MAX_INPUT_CHARS_PER_WORD):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word
        # Word -> tuple of pieces, valid for the settings in `_cache_key`.
        self._cache = {}
        self._cache_key = None
        self._max_word_start_len = self._max_continuation_len = None

    def tokenize(self, text):
        """Tokenizes a piece of text into its word pieces.

        For example, "unaffable" gives ["un", "##aff", "##able"] with a vocab that has those
        pieces.

        Args:
          text: a single word or whitespace-separated words, already passed through
            `BasicTokenizer`.

        Returns:
          A list of word pieces (str).
        """
        return self.tokenize_words(whitespace_tokenize(convert_to_unicode(text)))

    def tokenize_words(self, words):
        """Returns the word pieces of a list of words (each without whitespace)."""
        cache = self._current_cache()
        cached_pieces = cache.get
        pieces = []
        for word in words:
            word_pieces = cached_pieces(word)
            if word_pieces is None:
                if len(cache) >= _WORD_CACHE_SIZE:
                    cache.clear()
                word_pieces = cache[word] = self._split_word(word)
            pieces.extend(word_pieces)
        return pieces

    def _current_cache(self):
        """Returns the word cache, emptied first if the vocab or the settings changed."""
        key = (id(self.vocab), len(self.vocab), self.unk_token, self.max_input_chars_per_word)
        if key != self._cache_key:
            # The key last: another thread that sees it finds the lengths it goes with.
            self._max_word_start_len, self._max_continuation_len = _max_piece_lengths(self.vocab)
            self._cache = {}
            self._cache_key = key
        return self._cache

    def _split_word(self, word):
        """Returns the word pieces of one word, as a tuple (the original's algorithm).

        The original tries every end position from the end of the word down; here the search
        starts at the length of the longest vocab piece that begins with the piece's first
        character, as no longer piece can match.
        """
        if len(word) > self.max_input_chars_per_word:
            return (self.unk_token,)
        vocab = self.vocab
        if word in vocab:
            return (word,)
        pieces = []
        max_piece_len = self._max_word_start_len
        start = 0
        while start < len(word):
            end = min(len(word), start + max_piece_len.get(word[start], 0))
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocab:
                    break
                end -= 1
            else:
                return (self.unk_token,)
            pieces.append(piece)
            start = end
            max_piece_len = self._max_continuation_len
        return tuple(pieces)


def _max_piece_lengths(vocab):
    """Returns {first char: length of the longest piece starting with it} for the first piece
    of a word and for continuation pieces (counted without their "##")."""
    max_word_start_len, max_continuation_len = {}, {}
    for token in vocab:
        # Any entry can be a word's first piece, even a "##" one (`WordpieceTokenizer.tokenize`
        # may be given "##ing").
        if token and len(token) > max_word_start_len.get(token[0], 0):
            max_word_start_len[token[0]] = len(token)
        if token.startswith("##") and len(token) > 2:
            if len(token) - 2 > max_continuation_len.get(token[2], 0):
                max_continuation_len[token[2]] = len(token) - 2
    return max_word_start_len, max_continuation_len


def _is_whitespace(char):
    """Checks whether `char` is a whitespace character."""
    # \t, \n, and \r are technically control characters but we treat them
    # as whitespace since they are generally considered as such.
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char):
    """Checks whether `char` is a control character."""
    # These are technically control characters but we count them as whitespace.
    if char in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
    """Checks whether `char` is a punctuation character."""
    cp = ord(char)
    # All non-letter/number ASCII counts as punctuation, even "^", "$" and "`", which are not
    # in the Unicode punctuation class.
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


# CHINESE_CHAR_RANGES as sorted half-open bounds: a code point is in a range when an odd
# number of bounds are <= it (one C call, where a scan of the ranges is ~8 comparisons).
_CHINESE_CHAR_BOUNDS = tuple(sorted(bound for low, high in CHINESE_CHAR_RANGES
                                    for bound in (low, high + 1)))


def is_chinese_char(cp):
    """Checks whether code point `cp` is a CJK ideograph (see `CHINESE_CHAR_RANGES`)."""
    # Hangul, Hiragana and Katakana are not included: those scripts separate words by spaces.
    return bisect.bisect_right(_CHINESE_CHAR_BOUNDS, cp) % 2 == 1


class _LazyTranslateTable(dict):
    """A `str.translate` table that computes a code point's mapping the first time it is seen.

    `str.translate` looks code points up with `[]`, so `__missing__` fills the table in; after
    that each lookup runs in C. The table grows to at most the number of distinct code points
    seen.
    """

    def __init__(self, map_char):
        super().__init__()
        self._map_char = map_char  # char -> replacement str, or None to delete it.

    def __missing__(self, code_point):
        replacement = self._map_char(chr(code_point))
        self[code_point] = replacement
        return replacement


def clean_char(char):
    """Steps 1-2: None (drop) for control chars, " " for whitespace, " c " for CJK."""
    cp = ord(char)
    if cp == 0 or cp == 0xFFFD or _is_control(char):
        return None
    if _is_whitespace(char):
        return " "
    if is_chinese_char(cp):
        return f" {char} "
    return char


def split_punctuation_char(char):
    """Step 5: punctuation becomes a word of its own."""
    return f" {char} " if _is_punctuation(char) else char


def drop_nonspacing_mark(char):
    """Step 4: accents are the non-spacing marks (Mn) left after NFD."""
    return None if unicodedata.category(char) == "Mn" else char


def clean_and_split_punctuation_char(char):
    """Steps 1, 2 and 5 at once (valid when no lower-casing comes between them)."""
    cleaned = clean_char(char)
    return split_punctuation_char(char) if cleaned == char else cleaned


_CLEAN_TABLE = _LazyTranslateTable(clean_char)
_SPLIT_PUNCTUATION_TABLE = _LazyTranslateTable(split_punctuation_char)
_DROP_MN_TABLE = _LazyTranslateTable(drop_nonspacing_mark)
_CLEAN_AND_SPLIT_PUNCTUATION_TABLE = _LazyTranslateTable(clean_and_split_punctuation_char)
