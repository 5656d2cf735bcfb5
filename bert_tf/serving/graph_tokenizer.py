"""`GraphTokenizer`: `tokenization.FullTokenizer` in core TensorFlow ops, and BERT packing.

A graph that tokenizes with these ops loads wherever TensorFlow does (TF Serving, TF Java,
`tf.saved_model.load` without extra op libraries): no op outside core TensorFlow is used.
`GraphTokenizer(vocab, do_lower_case).tokenize(strings)` gives, for every string, the ids of
the word pieces `FullTokenizer.tokenize` gives, grouped by word. It runs FullTokenizer's steps
(see `bert_tf.tokenization`) on the strings' code points (`tf.strings.unicode_decode`):

  1. cased: one code-point table does clean-up (drop U+0000, U+FFFD, Cc but tab, newline,
     carriage return, and Cf; whitespace -> space), CJK ideograph spacing and punctuation
     splitting (ASCII symbols and Unicode P*);
  2. uncased: a first table does clean-up, CJK spacing, lower case and NFD; then the
     canonical reordering of combining marks; then a second table drops the Mn marks and
     splits punctuation. Python's `str.lower` is context free except for a capital sigma,
     which becomes a final sigma after a cased letter not followed by one (case-ignorable
     characters skipped); a per-code-point class table decides that in the graph;
  3. words are the runs of code points that Python's `str.split()` does not split on;
  4. a word of more than `max_chars_per_word` characters is [UNK]; a word in the vocab is its
     own piece; the others get greedy longest-match-first WordPiece without a loop: every
     candidate piece at every position is looked up in a `tf.lookup` hash table at once, and
     the greedy path through the positions is followed by pointer doubling.

Core TensorFlow has no Unicode normalisation op (`NormalizeUTF8` is tensorflow-text's), so
NFD is precomputed: when the tokenizer is built, Python's `unicodedata` (the one FullTokenizer
uses, so both agree on its Unicode version) gives every code point's output (its full
canonical decomposition after lower-casing, ~15k code points that change, Hangul syllables
included) and canonical combining class; the graph looks code points up there
(`tf.searchsorted` over the sorted code points) and reorders combining marks by class with a
stable sort. A table of outputs rather than an algorithm keeps the graph one lookup per code
point and exact by construction: the tables come from `tokenization`'s own per-character
rules (`clean_char`, `split_punctuation_char`, `drop_nonspacing_mark`), and a code point that
no rule changes (unassigned, private use) keeps the default (itself, or spaced if a CJK
ideograph). Building them takes a fraction of a second, once per process and casing.

`pack_inputs` makes BERT's inputs of one or two tokenized segments with bert_tf's packing rule
(`bert_tf.data.bert_inputs`): `[CLS] a [SEP] (b [SEP])`, a pair cut by popping from the longer
side, a row with an empty second text packed as a single text; or SQuAD's question cut to
`max_query_length` pieces and the context to what is left.
"""

import dataclasses
import functools
import unicodedata

import numpy as np
import tensorflow as tf

from bert_tf import errors, tokenization

# Tokens the tokenizer and `pack_inputs` need.
REQUIRED_TOKENS = ("[UNK]", "[CLS]", "[SEP]")

_SPACE = ord(" ")
_CAPITAL_SIGMA, _FINAL_SIGMA = ord("Σ"), ord("ς")
# What `str.lower` needs to know of the neighbours of a capital sigma.
_OTHER, _CASED, _CASE_IGNORABLE = 0, 1, 2
# Unassigned, private use, surrogates: no tokenization rule changes them (see the docstring).
_UNCHANGED_CATEGORIES = frozenset(("Cn", "Co", "Cs"))
_MAX_CODE_POINT = 0x10FFFF
# Canonical combining classes are < 256: a run's sort key is run * 256 + class.
_COMBINING_CLASSES = 256


@dataclasses.dataclass(frozen=True)
class _CodePointMap:
    """The code points a step maps to something else than its default, and their outputs.

    Attributes:
      keys: int32 [K], sorted code points.
      outputs: int32 [K, width], each key's output code points, zero-padded.
      lengths: int32 [K], how many of them (0: the code point is dropped).
      space_cjk: the default of a CJK ideograph is " c " (else every default is the code
        point itself).
    """

    keys: np.ndarray
    outputs: np.ndarray
    lengths: np.ndarray
    space_cjk: bool

    @classmethod
    def from_dict(cls, mapping, space_cjk):
        keys = sorted(mapping)
        width = max(3, max(len(mapping[key]) for key in keys))
        outputs = np.zeros([len(keys), width], np.int32)
        for row, key in enumerate(keys):
            outputs[row, :len(mapping[key])] = [ord(char) for char in mapping[key]]
        lengths = np.array([len(mapping[key]) for key in keys], np.int32)
        return cls(np.array(keys, np.int32), outputs, lengths, space_cjk)


@dataclasses.dataclass(frozen=True)
class _CodePointValues:
    """An int per code point: `values` [K] of the sorted `keys` [K], 0 for the others."""

    keys: np.ndarray
    values: np.ndarray

    @classmethod
    def from_dict(cls, mapping):
        keys = sorted(mapping)
        return cls(np.array(keys, np.int32), np.array([mapping[k] for k in keys], np.int32))


@dataclasses.dataclass(frozen=True)
class _Tables:
    """Everything the graph looks code points up in, for one casing."""

    first: _CodePointMap  # cased: all of step 1; uncased: clean-up, lower case, NFD
    second: _CodePointMap | None  # uncased: drop Mn, split punctuation
    combining_classes: _CodePointValues | None  # uncased: canonical combining class
    sigma_context: _CodePointValues | None  # uncased: _CASED / _CASE_IGNORABLE / _OTHER
    whitespace: np.ndarray  # int32 [K]: what `str.split()` splits on, sorted


def _sigma_context(char):
    """`_CASED`, `_CASE_IGNORABLE` or `_OTHER`: `char` as a neighbour of a capital sigma in
    the cleaned text FullTokenizer lower-cases. A dropped character is skipped as a
    case-ignorable one is; a spaced or CJK one has a space next to the sigma."""
    cleaned = tokenization.clean_char(char)
    if cleaned is None:
        return _CASE_IGNORABLE
    if cleaned != char:
        return _OTHER
    # Python's own rule, asked: after "A" a sigma is final if `char` is skipped or cased,
    # after " " only if `char` is cased (and not skipped).
    if (" " + char + "Σ").lower()[-1] == "ς":
        return _CASED
    return _CASE_IGNORABLE if ("A" + char + "Σ").lower()[-1] == "ς" else _OTHER


@functools.cache
def _tables(do_lower_case):
    """The `_Tables` of a casing, from `tokenization`'s per-character rules."""
    first, second, combining, sigma = {}, {}, {}, {}
    whitespace = []
    for code_point in range(_MAX_CODE_POINT + 1):
        char = chr(code_point)
        if char.isspace():
            whitespace.append(code_point)
        if unicodedata.category(char) in _UNCHANGED_CATEGORIES:
            continue
        default = f" {char} " if tokenization.is_chinese_char(code_point) else char
        if not do_lower_case:
            output = tokenization.clean_and_split_punctuation_char(char) or ""
            if output != default:
                first[code_point] = output
            continue
        output = unicodedata.normalize("NFD", (tokenization.clean_char(char) or "").lower())
        if output != default:
            first[code_point] = output
        output = tokenization.drop_nonspacing_mark(char)
        output = tokenization.split_punctuation_char(output) if output else ""
        if output != char:
            second[code_point] = output
        if unicodedata.combining(char):
            combining[code_point] = unicodedata.combining(char)
        context = _sigma_context(char)
        if context != _OTHER:
            sigma[code_point] = context
    if not do_lower_case:
        return _Tables(_CodePointMap.from_dict(first, space_cjk=True), None, None, None,
                       np.array(whitespace, np.int32))
    return _Tables(_CodePointMap.from_dict(first, space_cjk=True),
                   _CodePointMap.from_dict(second, space_cjk=False),
                   _CodePointValues.from_dict(combining), _CodePointValues.from_dict(sigma),
                   np.array(whitespace, np.int32))


def _read_vocab(vocab):
    """{token: id} of a vocab dict or file, with the tokens of REQUIRED_TOKENS.

    Raises:
      BertTfError: the file cannot be read, or a required token is missing (naming the file).
    """
    if isinstance(vocab, dict):
        missing = [token for token in REQUIRED_TOKENS if token not in vocab]
        if missing:
            raise errors.BertTfError(
                f"the vocab has no {' or '.join(missing)} token; pass the vocab.txt that came "
                "with the checkpoint (a BERT vocab lists [PAD], [UNK], [CLS], [SEP] and [MASK]).")
        return vocab
    vocab_file = vocab
    vocab = tokenization.load_vocab(vocab_file)
    tokenization.check_vocab_has_special_tokens(vocab, vocab_file, REQUIRED_TOKENS)
    return vocab


# ------------------------------------------------------------------ graph helpers (flat)
# Strings are handled as flat int32 code points with int64 row ids (which string each
# code point belongs to), so that each step is a few vectorised ops over the whole batch.
# Ragged tensors are made with validate=False: their row ids are sorted by construction, and
# the checks would be most of the ops a batch runs.


def _masked(values, mask):
    """The values [...] where `mask` (same shape) is True, in row-major order: what
    `tf.boolean_mask` gives, in 2 kernels rather than ~10 (a batch runs many)."""
    return tf.gather_nd(values, tf.where(mask))


def _lookup(keys, code_points):
    """(found bool [N], index int32 [N]) of `code_points` [N] in the sorted `keys` [K]."""
    # `tf.searchsorted` itself, without its reshapes around the op.
    index = tf.raw_ops.LowerBound(sorted_inputs=keys[None], values=code_points[None],
                                  out_type=tf.int32)[0]
    index = tf.minimum(index, len(keys) - 1)
    return tf.equal(tf.gather(keys, index), code_points), index


def _values(table, code_points):
    """`table`'s value of each code point [N] (0 for code points not in it)."""
    found, index = _lookup(table.keys, code_points)
    return tf.where(found, tf.gather(table.values, index), 0)


def _is_cjk_code_point(code_points):
    """bool [N]: the code point is in one of FullTokenizer's CJK ideograph ranges."""
    lows, highs = zip(*tokenization.CHINESE_CHAR_RANGES, strict=True)
    code_points = code_points[:, None]
    return tf.reduce_any((code_points >= list(lows)) & (code_points <= list(highs)), axis=1)


def _map_code_points(table, code_points, row_ids):
    """Replaces each code point [N] by its output in `table` ([M] code points, M >= 0).

    Returns:
      (code points int32 [M], their row ids int64 [M]).
    """
    found, index = _lookup(table.keys, code_points)
    width = table.outputs.shape[1]
    if table.space_cjk:
        cjk = tf.cast(_is_cjk_code_point(code_points), tf.int32)
        # " c " for a CJK ideograph, else the code point (the first of a row of one).
        defaults = tf.stack([cjk * _SPACE + (1 - cjk) * code_points, code_points,
                             tf.fill(tf.shape(code_points), _SPACE)], axis=1)
        default_lengths = 1 + 2 * cjk
    else:
        defaults = code_points[:, None]
        default_lengths = tf.ones_like(code_points)
    defaults = tf.pad(defaults, [[0, 0], [0, width - defaults.shape[1]]])
    outputs = tf.where(found[:, None], tf.gather(table.outputs, index), defaults)
    lengths = tf.where(found, tf.gather(table.lengths, index), default_lengths)
    return (_masked(outputs, tf.sequence_mask(lengths, width)),
            tf.repeat(row_ids, lengths))


def _is_noncharacter(code_points):
    """bool [N]: one of Unicode's 66 noncharacters (U+FDD0..U+FDEF, and U+xFFFE, U+xFFFF in
    every plane)."""
    return (((code_points >= 0xFDD0) & (code_points <= 0xFDEF))
            | tf.equal(tf.bitwise.bitwise_and(code_points, 0xFFFE), 0xFFFE))


def _encode_utf8(words):
    """UTF-8 of code-point rows [W, (chars)]: tf.string [W].

    TensorFlow 2.16 to 2.19's `tf.strings.unicode_encode` writes a noncharacter as U+FFFD,
    while Python's UTF-8 (and so FullTokenizer and the vocab) keeps it: a batch with one is
    encoded byte by byte instead (only such a batch runs these ops).
    """

    def by_bytes():
        code_points = words.flat_values[:, None]  # [N, 1]
        num_bytes = (1 + tf.cast(code_points >= 0x80, tf.int32)
                     + tf.cast(code_points >= 0x800, tf.int32)
                     + tf.cast(code_points >= 0x10000, tf.int32))  # [N, 1]
        byte_index = tf.range(4)[None]  # [1, 4]
        # Byte k of an n-byte code point carries bits 6 (n - 1 - k) and up: a lead byte
        # (k = 0) with the length's prefix, then 10xxxxxx continuation bytes.
        bits = tf.bitwise.right_shift(code_points, 6 * tf.maximum(num_bytes - 1 - byte_index, 0))
        lead = tf.bitwise.bitwise_or(tf.gather([0, 0, 0xC0, 0xE0, 0xF0], num_bytes), bits)
        continuation = tf.bitwise.bitwise_or(0x80, tf.bitwise.bitwise_and(bits, 0x3F))
        byte_values = _masked(tf.where(byte_index == 0, lead, continuation),
                              byte_index < num_bytes)
        single_bytes = tf.constant([bytes([value]) for value in range(256)])
        word_bytes = tf.math.unsorted_segment_sum(num_bytes[:, 0], words.value_rowids(),
                                                  words.nrows())
        return tf.strings.reduce_join(tf.RaggedTensor.from_row_lengths(
            tf.gather(single_bytes, byte_values), word_bytes, validate=False), axis=1)

    return tf.cond(tf.reduce_any(_is_noncharacter(words.flat_values)), by_bytes,
                   lambda: tf.strings.unicode_encode(words, "UTF-8"))


def _same_row_as_previous(row_ids):
    """bool [N]: code point i is in the same string as code point i - 1."""
    return tf.concat([[False], tf.equal(row_ids[1:], row_ids[:-1])], axis=0)


def _lower_final_sigmas(sigma_context, code_points, row_ids):
    """Code points [N] with each capital sigma that `str.lower` makes a final sigma replaced
    by one: a sigma after a cased code point and not before one, case-ignorable code points
    skipped, within its string. (Only a batch with a capital sigma runs the lookups.)"""

    def lower_final_sigmas():
        context = _values(sigma_context, code_points)
        counted = tf.not_equal(context, _CASE_IGNORABLE)
        counted_through = tf.cumsum(tf.cast(counted, tf.int32))  # counted ones up to i
        counted_before = counted_through - tf.cast(counted, tf.int32)
        # Index 0 of these is a sentinel (no such code point); position p is at p + 1.
        positions = tf.concat([[0], tf.cast(tf.where(counted)[:, 0], tf.int32) + 1], axis=0)
        padded_rows = tf.concat([[-1], row_ids], axis=0)
        padded_context = tf.concat([[_OTHER], context], axis=0)

        def cased_at(rank):
            """Whether the `rank`-th counted code point is in the same string and cased."""
            valid = (rank >= 0) & (rank < tf.size(positions) - 1)
            position = tf.gather(positions, tf.where(valid, rank + 1, 0))
            return (tf.equal(tf.gather(padded_rows, position), row_ids)
                    & tf.equal(tf.gather(padded_context, position), _CASED))

        # A sigma is counted (cased), so the next counted one has rank counted_through.
        final = (sigmas & cased_at(counted_before - 1) & ~cased_at(counted_through))
        return tf.where(final, _FINAL_SIGMA, code_points)

    sigmas = tf.equal(code_points, _CAPITAL_SIGMA)
    return tf.cond(tf.reduce_any(sigmas), lower_final_sigmas, lambda: code_points)


def _reorder_combining_marks(combining_classes, code_points, row_ids):
    """NFD's canonical ordering: each run of combining marks (class > 0) stably sorted by
    class. Runs never cross strings, so the row ids stay as they are. (Only a batch with two
    marks in a row runs the sort.)"""
    classes = _values(combining_classes, code_points)
    marks = classes > 0
    continues_run = marks & tf.concat([[False], marks[:-1]], axis=0) & _same_row_as_previous(
        row_ids)

    def reorder():
        run = tf.cumsum(tf.cast(~continues_run, tf.int64))
        order = tf.argsort(run * _COMBINING_CLASSES + tf.cast(classes, tf.int64), stable=True)
        return tf.gather(code_points, order)

    return tf.cond(tf.reduce_any(continues_run), reorder, lambda: code_points)


def _split_on_whitespace(whitespace, code_points, row_ids):
    """Words: the runs of code points `str.split()` does not split on.

    Returns:
      (words: int32 RaggedTensor [W, (chars)], their strings' row ids int64 [W]).
    """
    spaces, _ = _lookup(whitespace, code_points)
    after_space = tf.concat([[True], spaces[:-1]], axis=0) | ~_same_row_as_previous(row_ids)
    starts = ~spaces & after_space
    word_ids = tf.cumsum(tf.cast(starts, tf.int64)) - 1
    words = tf.RaggedTensor.from_value_rowids(
        _masked(code_points, ~spaces), _masked(word_ids, ~spaces),
        nrows=tf.reduce_sum(tf.cast(starts, tf.int64)), validate=False)
    return words, _masked(row_ids, starts)


class GraphTokenizer(tf.Module):
    """`tokenization.FullTokenizer` in core TensorFlow ops (see the module docstring).

    Works eagerly, in a `tf.function` and in a TF1 graph (its vocab hash table then needs
    `tf.compat.v1.tables_initializer()`, which a SavedModel's main op runs).

    Attributes:
      vocab_size: the number of ids (the highest id + 1).
      cls_id, sep_id, unk_id: the ids of [CLS], [SEP], [UNK].
      do_lower_case, max_chars_per_word: as given.
    """

    def __init__(self, vocab, do_lower_case,
                 max_chars_per_word=tokenization.DEFAULT_MAX_INPUT_CHARS_PER_WORD, name=None):
        """Builds the tokenizer's tables.

        Args:
          vocab: {token: id} (`tokenization.load_vocab`), or the path of a vocab file (one
            token a line; local or remote).
          do_lower_case: lower-case and strip accents, as `FullTokenizer(do_lower_case=...)`.
          max_chars_per_word: longer words become [UNK].
          name: the module's name.

        Raises:
          BertTfError: the vocab file cannot be read or lacks [UNK], [CLS] or [SEP].
        """
        super().__init__(name=name)
        vocab = _read_vocab(vocab)
        self.do_lower_case = bool(do_lower_case)
        self.max_chars_per_word = int(max_chars_per_word)
        self.vocab_size = max(vocab.values()) + 1
        self.cls_id, self.sep_id, self.unk_id = (vocab[token] for token in
                                                 ("[CLS]", "[SEP]", "[UNK]"))
        # The longest piece a word can start with, and continue with (without its "##"):
        # longer candidates are never looked up.
        self._max_start_chars = max(len(token) for token in vocab)
        self._max_continuation_chars = max(
            (len(token) - 2 for token in vocab if token.startswith("##")), default=0)
        self._tables = _tables(self.do_lower_case)
        self._vocab_table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(vocab), tf.string),
                tf.constant(list(vocab.values()), tf.int64)),
            default_value=-1)

    def tokenize(self, strings):
        """The word-piece ids of each string, by word.

        Args:
          strings: tf.string [B] (UTF-8; invalid bytes are dropped, as FullTokenizer does).

        Returns:
          int32 RaggedTensor [B, (words), (pieces)]: FullTokenizer's words (after splitting on
          whitespace and punctuation) and each one's pieces ([UNK] alone for a word that has
          no split into vocab pieces or more than `max_chars_per_word` characters).
        """
        strings = tf.convert_to_tensor(strings, tf.string)
        decoded = tf.strings.unicode_decode(strings, "UTF-8", errors="ignore")
        words, word_rows = self._words(decoded.flat_values, decoded.value_rowids())
        return tf.RaggedTensor.from_value_rowids(
            self._word_pieces(words), word_rows,
            nrows=tf.shape(strings, out_type=tf.int64)[0], validate=False)

    def tokenize_flat(self, strings):
        """The word-piece ids of each string: int32 RaggedTensor [B, (pieces)]."""
        return self.tokenize(strings).merge_dims(1, 2)

    def _words(self, code_points, row_ids):
        """Steps 1-3 of the module docstring on flat code points [N] and their row ids."""
        tables = self._tables
        if tables.second is not None:
            code_points = _lower_final_sigmas(tables.sigma_context, code_points, row_ids)
        code_points, row_ids = _map_code_points(tables.first, code_points, row_ids)
        if tables.second is not None:
            code_points = _reorder_combining_marks(tables.combining_classes, code_points,
                                                   row_ids)
            code_points, row_ids = _map_code_points(tables.second, code_points, row_ids)
        return _split_on_whitespace(tables.whitespace, code_points, row_ids)

    def _word_pieces(self, words):
        """WordPiece of words [W, (chars)]: int32 [W, (pieces)].

        A word in the vocab is its own piece (one lookup for all words); the others are split
        by `_wordpiece_split`; a too long word, or one with a part no piece matches, is [UNK].
        """
        word_strings = _encode_utf8(words)
        num_chars = tf.cast(words.row_lengths(), tf.int32)
        num_words = tf.size(num_chars)
        too_long = num_chars > self.max_chars_per_word
        whole_ids = tf.cast(self._vocab_table.lookup(word_strings), tf.int32)
        to_split = tf.cast(tf.where(~too_long & (whole_ids < 0))[:, 0], tf.int32)
        split_ids, split_owner, split = self._wordpiece_split(tf.gather(word_strings, to_split),
                                                              tf.gather(num_chars, to_split))
        split_ok = tf.scatter_nd(to_split[:, None], split, [num_words])
        whole_ids = tf.where(too_long | ((whole_ids < 0) & ~split_ok), self.unk_id, whole_ids)
        one_piece = tf.cast(tf.where(~split_ok)[:, 0], tf.int32)
        piece_words = tf.concat([one_piece, tf.gather(to_split, split_owner)], axis=0)
        piece_ids = tf.concat([tf.gather(whole_ids, one_piece), split_ids], axis=0)
        # Each word's pieces are together and in order in one of the two parts: a stable sort
        # by word interleaves the parts.
        order = tf.argsort(piece_words, stable=True)
        return tf.RaggedTensor.from_value_rowids(
            tf.gather(piece_ids, order), tf.cast(tf.gather(piece_words, order), tf.int64),
            nrows=tf.cast(num_words, tf.int64), validate=False)

    def _wordpiece_split(self, word_strings, num_chars):
        """Greedy longest-match-first split of words [S] of `num_chars` [S] characters.

        Without a loop: every candidate piece at every character position of every word is
        looked up at once, giving each position's longest piece and so the position after it
        (`following`, a fixed point at the word's end and at a `failed` sink). The greedy
        split visits following^j(0) for j = 0, 1, ...: computed for every j < 2^k by
        pointer doubling, k growing until every word's path has reached a fixed point
        (2^k > the most pieces of a word; at most max_chars_per_word).

        Returns:
          (piece ids int32 [P], their words' indices into the S words int32 [P] (in order),
          bool [S]: the word has a split).
        """
        positions = tf.ragged.range(num_chars)  # [S, (chars)]
        owner = tf.cast(positions.value_rowids(), tf.int32)
        position = positions.flat_values
        longest = tf.where(position > 0, self._max_continuation_chars, self._max_start_chars)
        candidates = tf.ragged.range(
            tf.minimum(longest, tf.gather(num_chars, owner) - position))  # [positions, (n)]
        at = tf.cast(candidates.value_rowids(), tf.int32)  # index into position
        lengths = candidates.flat_values + 1
        starts = tf.gather(position, at)
        texts = tf.strings.substr(tf.gather(word_strings, tf.gather(owner, at)), starts,
                                  lengths, unit="UTF8_CHAR")
        texts = tf.where(starts > 0, tf.strings.join(["##", texts]), texts)
        ids = tf.cast(self._vocab_table.lookup(texts), tf.int32)
        num_positions = tf.size(position)
        found = ids >= 0
        best = tf.maximum(tf.math.unsorted_segment_max(
            tf.where(found, lengths, 0), at, num_positions), 0)
        chosen = found & tf.equal(lengths, tf.gather(best, at))
        best_id = tf.math.unsorted_segment_max(tf.where(chosen, ids, -1), at, num_positions)

        # `following` and `piece_at` are [S, width] tables, flattened: word w's position p is
        # at w * width + p, so that following^(2^k) is one flat gather of itself.
        num_words = tf.size(num_chars)
        failed = tf.reduce_max(tf.concat([num_chars, [0]], axis=0)) + 1  # the sink's position
        width = failed + 1
        word_base = tf.range(num_words) * width
        cells = tf.gather(word_base, owner) + position
        following = tf.tensor_scatter_nd_update(
            tf.reshape(word_base[:, None] + tf.range(width)[None], [-1]), cells[:, None],
            tf.where(best > 0, cells + best, cells - position + failed))
        piece_at = tf.scatter_nd(cells[:, None], best_id, [num_words * width])

        def unfinished(visited, jump):
            """Some path has not yet reached a fixed point (its word's end or the sink)."""
            del jump
            last = visited[:, -1]
            return tf.reduce_any(tf.not_equal(tf.gather(following, last), last))

        def double(visited, jump):
            """following^j(0) for j < 2^k, following^(2^k) -> the same for k + 1."""
            return tf.concat([visited, tf.gather(jump, visited)], axis=1), tf.gather(jump, jump)

        visited, _ = tf.while_loop(
            unfinished, double, (word_base[:, None], following),
            shape_invariants=(tf.TensorShape([None, None]), following.shape),
            maximum_iterations=self.max_chars_per_word.bit_length())
        visited -= word_base[:, None]
        split = tf.equal(visited[:, -1], num_chars)
        pieces = (visited < num_chars[:, None]) & split[:, None]
        return (_masked(tf.gather(piece_at, visited + word_base[:, None]), pieces),
                _masked(tf.tile(tf.range(num_words)[:, None],
                                [1, tf.shape(visited)[1]]), pieces),
                split)


# ----------------------------------------------------------------------------- packing


def _head(pieces, lengths):
    """The first `lengths` [B] values of each row of `pieces` [B, (n)]."""
    row_ids = pieces.value_rowids()
    position = tf.range(tf.size(row_ids, out_type=tf.int64)) - tf.gather(
        pieces.row_starts(), row_ids)
    keep = position < tf.gather(lengths, row_ids)
    return tf.RaggedTensor.from_value_rowids(
        _masked(pieces.values, keep), _masked(row_ids, keep),
        nrows=pieces.nrows(), validate=False)


def _pair_lengths(length_a, length_b, budget):
    """`bert_inputs.truncate_seq_pair`'s lengths: pop from the longer ([B] each; b on a tie)
    until the two hold at most `budget` pieces."""
    budget = tf.cast(budget, length_a.dtype)
    fits = length_a + length_b <= budget
    # The shorter one is kept whole if the longer one can fill the rest without getting
    # shorter than it; else both end at half the budget, a with the odd piece.
    shorter_kept = 2 * tf.minimum(length_a, length_b) <= budget
    a_longer = length_a > length_b
    cut_a = tf.where(shorter_kept, tf.where(a_longer, budget - length_b, length_a),
                     (budget + 1) // 2)
    cut_b = tf.where(shorter_kept, tf.where(a_longer, length_b, budget - length_a),
                     budget // 2)
    return tf.where(fits, length_a, cut_a), tf.where(fits, length_b, cut_b)


def _as_pieces(segment):
    """A segment as int32 [B, (pieces)] (word-grouped [B, (words), (pieces)] merged)."""
    if segment.ragged_rank > 1:
        segment = segment.merge_dims(1, 2)
    return tf.cast(segment, tf.int32)


def pack_inputs(segments, seq_length, cls_id, sep_id, max_query_length=None):
    """BERT's inputs of one or two tokenized segments, as bert_tf's feature builders pack them.

    `[CLS] a [SEP]` (type 0) and, for a row whose second segment is not empty, `b [SEP]`
    (type 1), cut to `seq_length`: a single text keeps its first seq_length - 2 pieces, a pair
    is cut by popping from the longer side to seq_length - 3 (`bert_inputs.truncate_to_fit`).
    With `max_query_length` (SQuAD: question, context), the first segment keeps its first
    `max_query_length` pieces and the second what is left of seq_length - 3, and both [SEP]s
    are always there (the first window of `squad.convert_examples_to_features`).

    Args:
      segments: [a] or [a, b]: int RaggedTensors [B, (pieces)] or [B, (words), (pieces)]
        (`GraphTokenizer.tokenize`).
      seq_length: the packed length, specials included (>= 3 for two segments): a Python
        int, or an int scalar Tensor (then the outputs' second dimension is not static).
      cls_id, sep_id: the ids of [CLS] and [SEP] (`GraphTokenizer.cls_id`, `.sep_id`).
      max_query_length: SQuAD's question limit, or None.

    Returns:
      {"input_word_ids", "input_mask", "input_type_ids"}: int32 [B, seq_length], zero-padded.
    """
    if len(segments) not in (1, 2):
        raise ValueError(f"pack_inputs takes one or two segments, not {len(segments)}")
    static_length = tf.get_static_value(seq_length)
    first = _as_pieces(segments[0])
    length_a = first.row_lengths()
    seq_length = tf.cast(seq_length, length_a.dtype)
    num_rows = first.nrows()
    specials = tf.ones([num_rows, 1], tf.int32)
    if len(segments) == 1:
        second = first[:, :0]
        length_a, length_b = tf.minimum(length_a, seq_length - 2), tf.zeros_like(length_a)
    else:
        second = _as_pieces(segments[1])
        length_b = second.row_lengths()
        budget = seq_length - 3
        if max_query_length is not None:
            length_a = tf.minimum(length_a, tf.minimum(
                tf.cast(max_query_length, length_a.dtype), budget))
            length_b = tf.minimum(length_b, budget - length_a)
        else:
            pair_a, pair_b = _pair_lengths(length_a, length_b, budget)
            single = tf.equal(length_b, 0)
            length_a = tf.where(single, tf.minimum(length_a, seq_length - 2), pair_a)
            length_b = tf.where(single, tf.zeros_like(pair_b), pair_b)
    has_second = length_b > 0 if max_query_length is None else tf.ones_like(length_b, tf.bool)
    second_sep = tf.RaggedTensor.from_tensor(specials * sep_id,
                                             lengths=tf.cast(has_second, tf.int64))
    a_part = tf.concat([tf.RaggedTensor.from_tensor(specials * cls_id),
                        _head(first, length_a), tf.RaggedTensor.from_tensor(specials * sep_id)],
                       axis=1)
    b_part = tf.concat([_head(second, length_b), second_sep], axis=1)
    word_ids = tf.concat([a_part, b_part], axis=1)
    type_ids = tf.concat([tf.zeros_like(a_part), tf.ones_like(b_part)], axis=1)
    shape = ([None, int(static_length)] if static_length is not None
             else tf.stack([num_rows, seq_length]))
    return {"input_word_ids": word_ids.to_tensor(shape=shape),
            "input_mask": tf.ones_like(word_ids).to_tensor(shape=shape),
            "input_type_ids": type_ids.to_tensor(shape=shape)}
