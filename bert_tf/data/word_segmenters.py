"""Word boundaries from a word segmenter, for whole-word masking of Chinese text.

`FullTokenizer` makes every CJK character its own token, so the "##" rule of whole-word masking
sees every Chinese character as a word. With `--word_segmenter` the characters of one word of a
segmenter are grouped instead (Chinese-BERT-wwm), and Latin words keep the "##" rule:

* `jieba`: `jieba.lcut(line)` (jieba's default mode, the optional extra `bert_tf[chinese]`).
* `ref_file`: the boundaries another segmenter (e.g. LTP) found, in the format of Hugging Face's
  `examples/research_projects/mlm_wwm/run_chinese_ref.py`: one JSON list of ints per input line
  that is not blank (blank lines, the document breaks, have none), in input order. A list holds
  the positions of the pieces that continue a word, counted in the line's tokenized pieces with
  `[CLS]` at position 0 (the script tokenizes each line with `add_special_tokens=True`), so the
  first piece is position 1; only Chinese-character pieces are listed, e.g. `[2, 4, 6]` for the
  line "北京欢迎你们" segmented 北京 / 欢迎 / 你们 ([CLS] 北 京 欢 迎 你 们 [SEP]).

Both give, for each piece of a line, whether it continues the word of the piece before it: a
Chinese-character piece whose word (of more than one character, all Chinese, as
`run_chinese_ref.py`'s `get_chinese_word` keeps) started before it (with jieba, not a piece
that is [UNK], which that script never lists). The positions of a ref file
are read as they stand; `run_chinese_ref.py` itself finds them by a longest match of the line's
words anywhere in the line, which can group characters the segmenter split elsewhere in the
same line; `jieba` here uses each word where jieba put it.
"""

import json

from bert_tf.errors import BertTfError, missing_extra

SEGMENTERS = ("none", "jieba", "ref_file")
_REF_FORMAT = ("one JSON list per non-blank input line of the positions of the pieces that "
               "continue a word, [CLS] = 0, as run_chinese_ref.py writes")


def is_chinese_char(char):
    """Whether `char` (one character) is a CJK ideograph as BERT's tokenizer defines it."""
    cp = ord(char)
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F
            or 0x2B820 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF
            or 0x2F800 <= cp <= 0x2FA1F)


def chinese_continuations(words):
    """For each Chinese character of the words' text, in order: whether it continues a word.

    Args:
      words: the segmenter's words of one line (str), which joined give the line.

    Returns:
      A list of bool, one per Chinese character of the line: True for the 2nd, 3rd, ...
      character of a word of two or more characters that are all Chinese.
    """
    flags = []
    for word in words:
        chinese = [is_chinese_char(c) for c in word]
        if not any(chinese):
            continue
        whole = len(word) > 1 and all(chinese)
        flags.extend(whole and k > 0 for k in range(sum(chinese)))
    return flags


def piece_chars(tokenizer, line):
    """The pieces of `line` and which of them are Chinese characters.

    Returns:
      (pieces, chinese): `pieces` = `tokenizer.tokenize(line)` (list of str, n); `chinese` a
      list of n bools, True for a piece made from one Chinese character (the character or
      [UNK]). The i-th True belongs to the i-th Chinese character of the line.
    """
    pieces, chinese = [], []
    wordpiece = tokenizer.wordpiece_tokenizer
    for word in tokenizer.basic_tokenizer.tokenize(line):
        word_pieces = wordpiece.tokenize_words([word])  # one for a Chinese character
        pieces.extend(word_pieces)
        chinese.extend([len(word) == 1 and is_chinese_char(word)] * len(word_pieces))
    return pieces, chinese


def continuation_flags(chinese, continuations):
    """Per piece: whether it continues the previous piece's word.

    Args:
      chinese: bool per piece (`piece_chars`).
      continuations: bool per Chinese character of the line (`chinese_continuations`).

    Returns:
      A list of bool, one per piece.
    """
    if sum(chinese) != len(continuations):
        raise ValueError(f"{sum(chinese)} Chinese pieces for {len(continuations)} Chinese "
                         "characters")
    flags = iter(continuations)
    return [next(flags) if is_chinese else False for is_chinese in chinese]


class JiebaSegmenter:
    """`jieba.lcut`, loaded once per process."""

    def __init__(self):
        self._jieba = import_jieba()

    def words(self, line):
        """The jieba words (list of str) of `line`."""
        return self._jieba.lcut(line)


def import_jieba():
    """The jieba module; BertTfError saying how to install it when it is missing."""
    try:
        import jieba
    except ImportError:
        raise missing_extra("--word_segmenter=jieba needs jieba", "chinese", "jieba") from None
    import logging

    jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict" lines
    return jieba


def parse_ref_line(text, chinese, where):
    """Per piece flags from one ref-file line.

    Args:
      text: the ref line (a JSON list of ints).
      chinese: bool per piece of the input line (`piece_chars`).
      where: "'ref' line N (for input 'path' line M)", for error messages.

    Returns:
      A list of bool, one per piece: True at the listed positions (minus one for [CLS]).
    """
    try:
        positions = json.loads(text)
    except ValueError:
        positions = None
    if not isinstance(positions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in positions):
        raise BertTfError(f"--word_segmenter_ref_file: {where} is not a JSON list of "
                          f"positions; pass {_REF_FORMAT}.")
    flags = [False] * len(chinese)
    for position in positions:
        if not 1 <= position <= len(chinese) or not chinese[position - 1]:
            raise BertTfError(
                f"--word_segmenter_ref_file: {where}: position {position} is not a Chinese "
                f"character of the line's {len(chinese)} pieces ([CLS] = 0); make the ref file "
                "from this input file with the same --vocab_file and --do_lower_case.")
        flags[position - 1] = True
    return flags


def count_lines(path, start, end, non_blank):
    """Lines in bytes [start, end) of `path` (only those that are not blank if `non_blank`)."""
    from bert_tf import fileio

    count = 0
    with fileio.open_binary(path) as reader:
        reader.seek(start)
        remaining = end - start
        while remaining > 0:
            line = reader.readline()  # chunks end at line ends
            if not line:
                break
            remaining -= len(line)
            # Blank as str.strip() sees it (U+3000 too), as the input reader does.
            count += bool(line.decode("utf-8", errors="replace").strip()) if non_blank else 1
    return count


def plan_ref_files(ref_file, input_paths, chunks):
    """Which lines of which ref file belong to each chunk.

    Args:
      ref_file: the --word_segmenter_ref_file value: comma-separated, one per input file.
      input_paths: the expanded input files (n).
      chunks: `pretraining_data.Chunk`s of those files, in order.

    Returns:
      A list with one (ref path, byte offset, number of lines, 1-based first line) per chunk.

    Raises:
      BertTfError: when the number of ref files or of their lines does not match the input.
    """
    from bert_tf import fileio

    ref_paths = [p.strip() for p in (ref_file or "").split(",") if p.strip()]
    if len(ref_paths) != len(input_paths):
        raise BertTfError(
            f"--word_segmenter_ref_file: {len(ref_paths)} file(s) for {len(input_paths)} input "
            "file(s); pass one ref file per --input_file file, comma-separated, in the order "
            f"the input files expand to ({', '.join(input_paths)}).")
    for path in ref_paths:
        fileio.require_file(path, flag="word_segmenter_ref_file", what="ref file")
    ref_of = dict(zip(input_paths, ref_paths, strict=True))
    plans, offsets, lines = [], {}, {}
    for chunk in chunks:
        ref = ref_of[chunk.path]
        num_lines = count_lines(chunk.path, chunk.start, chunk.end, non_blank=True)
        offset = offsets.get(ref, 0)
        plans.append((ref, offset, num_lines, lines.get(ref, 0) + 1))
        with fileio.open_binary(ref) as reader:
            reader.seek(offset)
            for _ in range(num_lines):
                offset += len(reader.readline())
        offsets[ref], lines[ref] = offset, lines.get(ref, 0) + num_lines
    for path, ref in ref_of.items():
        have = count_lines(ref, 0, fileio.file_size(ref), non_blank=False)
        if have != lines.get(ref, 0):
            raise BertTfError(
                f"--word_segmenter_ref_file: '{ref}' has {have} lines but '{path}' has "
                f"{lines.get(ref, 0)} non-blank lines; make the ref file from this input file "
                f"({_REF_FORMAT}).")
    return plans


def read_ref_lines(plan):
    """The ref lines (list of str) of one chunk's `plan_ref_files` entry."""
    from bert_tf import fileio

    path, offset, num_lines, _ = plan
    with fileio.open_binary(path) as reader:
        reader.seek(offset)
        return [reader.readline().decode("utf-8", errors="replace") for _ in range(num_lines)]
