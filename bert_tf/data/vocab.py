"""Learning a WordPiece vocab.txt from text (scripts/build_vocab.py).

The pieces are learnt by the `tokenizers` package's `WordPieceTrainer` (an optional
dependency, `pip install bert_tf[corpus]`) on words that bert_tf's own `BasicTokenizer` made:
the same cleaning, lower-casing and accent stripping (with `do_lower_case`), CJK splitting
and punctuation splitting that `FullTokenizer` applies before WordPiece, so the vocab fits
the tokenizer that will use it.

Layout (BERT's, with `num_unused` = N):

    id 0            [PAD]
    ids 1..N        [unused0] .. [unused{N-1}]
    id N+1          [UNK]
    id N+2          [CLS]
    id N+3          [SEP]
    id N+4          [MASK]
    ids N+5..       the learnt pieces: the alphabet (every character seen at the start of a
                    word, and as "##c" for every character seen inside one), then the merged
                    pieces in the order the trainer learnt them ("##" marks a continuation)

Google's released vocabs put 99 unused tokens before [UNK] (id 100) and the rest after
[MASK]; here they all come first, so the special ids follow from `num_unused` alone.
Every character of the training text is in the alphabet, so `FullTokenizer` gives [UNK]
on the training text only for words longer than its 100-character limit.
"""

import os
import time

from absl import logging

from bert_tf import fileio, tokenization
from bert_tf.data import corpus
from bert_tf.errors import BertTfError

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")


def special_tokens(num_unused):
    """The tokens before the learnt pieces, in id order."""
    return ["[PAD]", *(f"[unused{i}]" for i in range(num_unused)), *SPECIAL_TOKENS]


def _trainer_classes():
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    except ImportError:
        raise BertTfError("build_vocab needs the tokenizers package (its WordPiece trainer): "
                          "pip install 'bert_tf[corpus]' (or pip install tokenizers).") from None
    return Tokenizer, models, pre_tokenizers, trainers


def _words(paths, do_lower_case, counts):
    """Yields each line of `paths` as BasicTokenizer's words joined by spaces."""
    basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    for path in paths:
        for _, line in corpus._decoded_lines(path):
            counts["bytes"] += len(line)
            words = basic.tokenize(line)
            if words:
                counts["words"] += len(words)
                yield " ".join(words)


def learn_pieces(paths, num_pieces, do_lower_case):
    """The WordPiece pieces the trainer learns from `paths` (at most about `num_pieces`).

    Returns:
      (pieces in id order, counts dict with bytes and words read).
    """
    Tokenizer, models, pre_tokenizers, trainers = _trainer_classes()
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    # The text arrives already split into words by BasicTokenizer.
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordPieceTrainer(vocab_size=num_pieces, min_frequency=0,
                                        special_tokens=[], continuing_subword_prefix="##",
                                        show_progress=False)
    counts = {"bytes": 0, "words": 0}
    tokenizer.train_from_iterator(_words(paths, do_lower_case, counts), trainer=trainer)
    vocab = tokenizer.get_vocab()
    return sorted(vocab, key=vocab.get), counts


def build_vocab(options, log_fn=logging.info):
    """Learns a vocab from `options.input_file` and writes it to `options.output_file`.

    Args:
      options: `bert_tf.options.BuildVocabOptions`.
      log_fn: receives the summary lines (printf-style).

    Returns:
      A dict: output_file, vocab_size, num_pieces, alphabet (characters, "##" forms
      included), words, seconds.

    Raises:
      BertTfError: for missing, binary or non-UTF-8 input, input without text, a --num_unused
        below 0, or a --vocab_size smaller than the special tokens + unused tokens + the
        alphabet of the text; nothing is written then.
    """
    start = time.time()
    if options.num_unused < 0:
        raise BertTfError(f"--num_unused={options.num_unused} is out of range; pass 0 or more.")
    specials = special_tokens(options.num_unused)
    num_pieces = options.vocab_size - len(specials)
    if num_pieces < 1:
        raise BertTfError(f"--vocab_size={options.vocab_size} leaves no room for learnt pieces "
                          f"after {len(specials)} special and unused tokens; pass a larger "
                          "--vocab_size or a smaller --num_unused.")
    if not options.output_file:
        raise BertTfError("--output_file: no path given; pass where to write vocab.txt.")
    paths = fileio.expand_input_files(options.input_file,
                                      what="text files (comma-separated, globs allowed)")
    pieces, counts = learn_pieces(paths, num_pieces, options.do_lower_case)
    if not pieces:
        raise BertTfError(f"--input_file: {', '.join(paths)} hold(s) no text; pass UTF-8 text "
                          "files.")
    alphabet = sum(1 for piece in pieces if len(piece.removeprefix("##")) == 1)
    if len(pieces) > num_pieces:
        raise BertTfError(
            f"--vocab_size={options.vocab_size} is smaller than the {len(specials)} special "
            f"and unused tokens + the {alphabet} characters of the text's alphabet "
            f"(with their ## forms) = {len(specials) + alphabet}; pass --vocab_size of at "
            "least that (30522 for BERT-sized models) or a smaller --num_unused.")
    if len(pieces) < num_pieces:
        logging.warning("The text supports only %d pieces: the vocab has %d tokens, not the "
                        "%d asked for.", len(pieces), len(specials) + len(pieces),
                        options.vocab_size)
    directory = os.path.dirname(os.path.abspath(options.output_file))
    os.makedirs(directory, exist_ok=True)
    fileio.atomic_write_text(options.output_file, "".join(f"{t}\n" for t in specials + pieces))
    seconds = time.time() - start
    summary = {"output_file": options.output_file, "vocab_size": len(specials) + len(pieces),
               "num_pieces": len(pieces), "alphabet": alphabet, "words": counts["words"],
               "seconds": seconds}
    log_fn("Wrote %s: %d tokens (%d special and unused, %d learnt, %d of them single "
           "characters) from %d words (%.1f MB) in %.1f s", options.output_file,
           summary["vocab_size"], len(specials), len(pieces), alphabet, counts["words"],
           counts["bytes"] / 1e6, seconds)
    return summary
