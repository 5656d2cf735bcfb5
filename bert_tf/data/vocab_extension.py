"""Growing a vocab.txt with new words (scripts/extend_vocab.py).

A token's id is its line number, and a checkpoint's word embeddings and MLM output bias are
tables indexed by it, so an existing token never moves: each new word first takes the place
of an `[unusedN]` placeholder (in id order, as the BERT authors suggest for fine-tuning
vocabularies), then the rest are appended after the last line. The config's `vocab_size`
must then be the new line count; loading the old checkpoint grows its tables
(`bert_tf.table_growth`, `--new_token_init`).

A new word is added as a whole-word token (no "##"), normalised as `FullTokenizer` sees
words (lower-cased and accents stripped with `do_lower_case`); WordPiece then matches it
whole, because it takes the longest piece in the vocab.
"""

import re

from absl import logging

from bert_tf import fileio, tokenization
from bert_tf.errors import BertTfError

_UNUSED = re.compile(r"^\[unused\d+\]$")


def read_new_words(new_words_file, do_lower_case=True):
    """The words of `new_words_file` (one a line; blank lines skipped), normalised as
    `BasicTokenizer` normalises words, duplicates dropped, in file order.

    Raises:
      BertTfError: if the file is missing or a line is not one word for the tokenizer
        (spaces or punctuation split it), naming the line.
    """
    fileio.require_file(new_words_file, flag="new_words_file", what="new words file")
    basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    words = []
    with fileio.open_text(new_words_file) as reader:
        for number, line in enumerate(reader, 1):
            if not line.strip():
                continue
            tokens = basic.tokenize(line)
            if len(tokens) != 1:
                raise BertTfError(
                    f"--new_words_file {new_words_file} line {number}: {line.strip()!r} is "
                    f"{len(tokens)} words to the tokenizer ({' '.join(tokens)}); put one word "
                    "without spaces or punctuation on each line.")
            if tokens[0] not in words:
                words.append(tokens[0])
    return words


def extended_tokens(tokens, new_words):
    """`tokens` (a vocab's lines, in id order) with `new_words` added.

    Args:
      tokens: list of str; tokens[i] has id i.
      new_words: list of str.

    Returns:
      (new token list, summary dict: filled_unused, appended, already_present).
      Every token of `tokens` that is not an `[unusedN]` keeps its id.
    """
    present = set(tokens)
    result = list(tokens)
    unused_ids = [index for index, token in enumerate(tokens) if _UNUSED.match(token)]
    already, filled, appended = [], 0, 0
    for word in new_words:
        if word in present:
            already.append(word)
            continue
        present.add(word)
        if filled < len(unused_ids):
            result[unused_ids[filled]] = word
            filled += 1
        else:
            result.append(word)
            appended += 1
    return result, {"filled_unused": filled, "appended": appended, "already_present": already}


def extend_vocab(vocab_file, new_words_file, output_vocab_file, do_lower_case=True):
    """Writes `output_vocab_file`: `vocab_file` with the words of `new_words_file` added.

    Returns:
      dict: output_vocab_file, vocab_size (lines written), filled_unused, appended,
      already_present (words the vocab had).

    Raises:
      BertTfError: for a missing input, no output path, or a line of `new_words_file` that is
        not one word; nothing is written then.
    """
    if not output_vocab_file:
        raise BertTfError("--output_vocab_file: no path given; pass where to write the vocab.")
    tokens = tokenization.vocab_tokens(vocab_file)
    words = read_new_words(new_words_file, do_lower_case)
    result, summary = extended_tokens(tokens, words)
    fileio.atomic_write_text(output_vocab_file, "".join(token + "\n" for token in result))
    summary = {"output_vocab_file": output_vocab_file, "vocab_size": len(result), **summary}
    grows = (f"; use \"vocab_size\": {len(result)} in bert_config.json: the checkpoint's "
             "tables grow when it is loaded (--new_token_init)") if summary["appended"] else ""
    logging.info("Wrote %s: %d tokens (%d new words in [unusedN] places, %d appended, %d "
                 "already there)%s.", output_vocab_file, len(result), summary["filled_unused"],
                 summary["appended"], len(summary["already_present"]), grows)
    return summary
