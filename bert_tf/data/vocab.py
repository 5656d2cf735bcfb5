"""Learning a WordPiece vocab.txt from text (scripts/build_vocab.py).

Words come from bert_tf's own `BasicTokenizer`: the same cleaning, lower-casing and accent
stripping (with `do_lower_case`), CJK splitting and punctuation splitting that
`FullTokenizer` applies before WordPiece, so the vocab fits the tokenizer that will use it.
The pieces are learnt as the `tokenizers` package's WordPiece trainer and Google's vocabs do
(byte-pair-encoding merges on word counts, "##" on pieces inside a word): every word starts
as its characters (`w ##o ##r ##d`), and the most frequent adjacent pair is merged into a new
piece until the vocab is full. Ties go to the alphabetically first pair, so the output is a
function of the text alone: the `tokenizers` trainer (tried first) breaks ties by hash-map
order and gave a different vocab.txt on every run (4 to 12 of 3000 pieces differed between
three runs on data/corpus/train.txt), which a reproducible pipeline cannot have. All words
are counted in memory (their distinct forms): for corpora of many GB, learn from a sample of
the shards.

Layout (BERT's, with `num_unused` = N):

    id 0            [PAD]
    ids 1..N        [unused0] .. [unused{N-1}]
    id N+1          [UNK]
    id N+2          [CLS]
    id N+3          [SEP]
    id N+4          [MASK]
    ids N+5..       the learnt pieces: the alphabet (every character seen at the start of a
                    word, then every "##c" seen inside one, each in code point order), then
                    the merged pieces in the order they were learnt

Google's released vocabs put 99 unused tokens before [UNK] (id 100) and the rest after
[MASK]; here they all come first, so the special ids follow from `num_unused` alone.
Every character of the training text is in the alphabet, so `FullTokenizer` gives [UNK]
on the training text only for words longer than its 100-character limit (left out here).
"""

import collections
import copy
import heapq
import time

from absl import logging

from bert_tf import fileio, modeling, tokenization
from bert_tf.data import corpus
from bert_tf.errors import BertTfError

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
# FullTokenizer maps longer words to [UNK] whatever the vocab.
MAX_WORD_CHARS = 100


def special_tokens(num_unused):
    """The tokens before the learnt pieces, in id order."""
    return ["[PAD]", *(f"[unused{i}]" for i in range(num_unused)), *SPECIAL_TOKENS]


def count_words(paths, do_lower_case):
    """Counter of BasicTokenizer's words over the lines of `paths`; and the bytes read."""
    basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    counts, num_bytes = collections.Counter(), 0
    for path in paths:
        for _, line in corpus._decoded_lines(path):
            num_bytes += len(line)
            counts.update(basic.tokenize(line))
    return counts, num_bytes


def _pairs(symbols):
    return zip(symbols, symbols[1:], strict=False)


def _merge(symbols, first, second, merged):
    """`symbols` with each adjacent (first, second) replaced by `merged`, left to right."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == first and symbols[i + 1] == second:
            out.append(merged)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def learn_wordpieces(word_counts, num_pieces):
    """WordPiece pieces learnt from {word: count}: the alphabet, then merges (see the module
    docstring), until there are `num_pieces` (or no pair is left).

    Returns:
      (pieces in id order, alphabet size). More than `num_pieces` pieces when the alphabet
      alone is larger.
    """
    words = [w for w in sorted(word_counts) if len(w) <= MAX_WORD_CHARS]
    counts = [word_counts[w] for w in words]
    symbols = [[w[0], *("##" + c for c in w[1:])] for w in words]
    alphabet = sorted({s for word in symbols for s in word}, key=lambda s: (s[:2] == "##", s))
    pieces, known = list(alphabet), set(alphabet)
    pair_counts, where = collections.Counter(), collections.defaultdict(set)
    for i, word in enumerate(symbols):
        for pair in _pairs(word):
            pair_counts[pair] += counts[i]
            where[pair].add(i)
    # Max-heap by count, ties to the alphabetically first pair; stale entries are skipped.
    heap = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(heap)
    while len(pieces) < num_pieces and heap:
        negative_count, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -negative_count or negative_count == 0:
            continue
        first, second = pair
        merged = first + second[2:]
        changed = set()
        for i in sorted(where.pop(pair)):
            old = symbols[i]
            if pair not in set(_pairs(old)):
                continue
            new = symbols[i] = _merge(old, first, second, merged)
            for p in _pairs(old):
                pair_counts[p] -= counts[i]
                changed.add(p)
            for p in _pairs(new):
                pair_counts[p] += counts[i]
                where[p].add(i)
                changed.add(p)
        for p in changed:
            if pair_counts[p] > 0:
                heapq.heappush(heap, (-pair_counts[p], p))
            else:
                del pair_counts[p]
        if merged not in known:
            known.add(merged)
            pieces.append(merged)
    return pieces, len(alphabet)


def build_vocab(options, log_fn=logging.info):
    """Learns a vocab from `options.input_file` and writes it to `options.output_file`.

    Args:
      options: `bert_tf.options.BuildVocabOptions`.
      log_fn: receives the summary lines (printf-style).

    With `options.output_bert_config_file`, also writes `options.bert_config_file` there with
    `vocab_size` set to the size of the vocab written, so a model built from it has one
    embedding row (and one masked-LM output) per token.

    Returns:
      A dict: output_file, vocab_size, num_pieces, alphabet (characters, "##" forms
      included), words, seconds.

    Raises:
      BertTfError: for missing, binary or non-UTF-8 input, input without text, a --num_unused
        below 0, a --vocab_size smaller than the special tokens + unused tokens + the
        alphabet of the text, or a missing or unreadable --bert_config_file (or one of
        --bert_config_file and --output_bert_config_file without the other); nothing is
        written then.
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
    config = _config_to_size(options)
    paths = fileio.expand_input_files(options.input_file,
                                      what="text files (comma-separated, globs allowed)")
    word_counts, num_bytes = count_words(paths, options.do_lower_case)
    if not word_counts:
        raise BertTfError(f"--input_file: {', '.join(paths)} hold(s) no text; pass UTF-8 text "
                          "files.")
    pieces, alphabet = learn_wordpieces(word_counts, num_pieces)
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
    fileio.make_parent_dir(options.output_file)
    fileio.atomic_write_text(options.output_file, "".join(f"{t}\n" for t in specials + pieces))
    vocab_size = len(specials) + len(pieces)
    seconds = time.time() - start
    summary = {"output_file": options.output_file, "vocab_size": vocab_size,
               "num_pieces": len(pieces), "alphabet": alphabet,
               "words": sum(word_counts.values()), "seconds": seconds}
    log_fn("Wrote %s: %d tokens (%d special and unused, %d learnt, %d of them single "
           "characters) from %d words (%.1f MB) in %.1f s", options.output_file,
           summary["vocab_size"], len(specials), len(pieces), alphabet, summary["words"],
           num_bytes / 1e6, seconds)
    if config is not None:
        write_sized_config(config, vocab_size, options.output_bert_config_file)
        log_fn("Wrote %s: %s with vocab_size %d", options.output_bert_config_file,
               options.bert_config_file, vocab_size)
    return summary


def _config_to_size(options):
    """The `modeling.BertConfig` of `options.bert_config_file` if a sized copy is asked for,
    else None; read before the vocab is learnt, so a bad config stops the run before it writes."""
    config_file, output_file = options.bert_config_file, options.output_bert_config_file
    if not config_file and not output_file:
        return None
    if not config_file or not output_file:
        given, missing = (("bert_config_file", "output_bert_config_file") if config_file else
                          ("output_bert_config_file", "bert_config_file"))
        raise BertTfError(f"--{given} was given without --{missing}; pass both (the config "
                          "to size and where to write the sized copy) or neither.")
    return modeling.BertConfig.from_json_file(config_file)


def write_sized_config(config, vocab_size, output_file):
    """Writes the `modeling.BertConfig` `config` to `output_file` with `vocab_size` replaced
    (`config` itself is left as it is); returns `output_file`."""
    sized = copy.copy(config)
    sized.vocab_size = vocab_size
    fileio.atomic_write_text(output_file, sized.to_json_string())
    return output_file
