"""Packing word pieces into BERT inputs: truncate, `[CLS] a [SEP] (b [SEP])`, ids, padding.

The one copy of the steps every feature builder shares (classification, NER, SQuAD,
extract_features), with the original Google BERT's semantics:

  truncate_seq_pair   pop from the longer of two token lists until the pair fits
  truncate_to_fit     make `a` (and `b`) fit `max_seq_length` with [CLS] and the [SEP]s
  pack_tokens         `[CLS] a [SEP]` with segment id 0, then `b [SEP]` with segment id 1
  pad                 zero-pad a list to `max_seq_length`
  encode_and_pad      tokens -> input_ids, input_mask, segment_ids, each [max_seq_length]
  pack_and_pad        all of the above for a text or a text pair

Task-specific bits stay in the task's data module: NER's label alignment to first pieces,
SQuAD's token_to_orig_map and answer positions.

Long inputs are cut into windows (SQuAD, and the classifier and NER with --doc_stride):
  compute_doc_spans     windows of at most N tokens starting every doc_stride tokens
  max_context_window    the window where a token has the most context (SQuAD's rule)
  check_is_max_context  whether a given window is that one
  max_context_windows   that window for every token at once
"""

import collections

CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"


# One packed sequence: `tokens` unpadded [num_tokens]; the id lists [max_seq_length].
PackedInputs = collections.namedtuple(
    "PackedInputs", ["tokens", "input_ids", "input_mask", "segment_ids"])
# One window of a long token list: tokens [start, start + length).
DocSpan = collections.namedtuple("DocSpan", ["start", "length"])


def truncate_seq_pair(tokens_a, tokens_b, max_length):
    """Truncates a sequence pair in place until len(tokens_a) + len(tokens_b) <= max_length.

    One token at a time from the end of the longer list (from `tokens_b` on a tie): a
    shorter sequence keeps more of its (proportionally more valuable) tokens than cutting
    both by the same fraction would.

    Args:
      tokens_a: list of tokens, shortened in place.
      tokens_b: list of tokens, shortened in place.
      max_length: the most tokens the two may hold together (>= 0).
    """
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def truncate_to_fit(tokens_a, tokens_b, max_seq_length):
    """Cuts `tokens_a` (and `tokens_b`) so that `pack_tokens` gives <= max_seq_length tokens.

    A pair (non-empty `tokens_b`) is cut by `truncate_seq_pair` to max_seq_length - 3 tokens
    ([CLS] and two [SEP]); a single text keeps its first max_seq_length - 2 tokens.

    Args:
      tokens_a: list of tokens (may be shortened in place).
      tokens_b: list of tokens, or None / [] for a single text.
      max_seq_length: the packed length limit, specials included (>= 3 for a pair).

    Returns:
      (tokens_a, tokens_b), cut to fit.
    """
    if tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    elif len(tokens_a) > max_seq_length - 2:
        tokens_a = tokens_a[:max_seq_length - 2]
    return tokens_a, tokens_b


def pack_tokens(tokens_a, tokens_b=None):
    """Packs `[CLS] a [SEP]` (segment 0) and, for a non-empty `tokens_b`, `b [SEP]` (segment 1).

    Args:
      tokens_a: list of tokens of the first segment.
      tokens_b: list of tokens of the second segment; None or [] for a single segment.

    Returns:
      (tokens, segment_ids): lists of length len(tokens_a) + 2 (+ len(tokens_b) + 1).
    """
    tokens = [CLS_TOKEN] + tokens_a + [SEP_TOKEN]
    segment_ids = [0] * len(tokens)
    if tokens_b:
        tokens += tokens_b + [SEP_TOKEN]
        segment_ids += [1] * (len(tokens_b) + 1)
    return tokens, segment_ids


def pad(values, max_seq_length):
    """Returns `values` followed by zeros up to `max_seq_length` (a new list).

    Raises:
      ValueError: `values` is longer than `max_seq_length`.
    """
    if len(values) > max_seq_length:
        raise ValueError(f"{len(values)} values do not fit in max_seq_length={max_seq_length}")
    return list(values) + [0] * (max_seq_length - len(values))


def encode_and_pad(tokens, segment_ids, tokenizer, max_seq_length):
    """Converts packed `tokens` to ids and zero-pads ids, mask and segment ids.

    Args:
      tokens: the packed tokens [num_tokens], num_tokens <= max_seq_length.
      segment_ids: their segment ids [num_tokens].
      tokenizer: anything with `convert_tokens_to_ids` (a `tokenization.FullTokenizer`).
      max_seq_length: length of every returned list.

    Returns:
      (input_ids, input_mask, segment_ids), each [max_seq_length]; input_mask is 1 for the
      real tokens and 0 for padding (only real tokens are attended to).
    """
    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    input_mask = [1] * len(input_ids)
    return (pad(input_ids, max_seq_length), pad(input_mask, max_seq_length),
            pad(segment_ids, max_seq_length))


def pack_and_pad(tokens_a, tokens_b, tokenizer, max_seq_length):
    """Truncates, packs and pads a text or text pair: `[CLS] a [SEP] (b [SEP])`.

    Args:
      tokens_a: word pieces of the first text (may be shortened in place).
      tokens_b: word pieces of the second text, or None / [] for a single text (may be
        shortened in place).
      tokenizer: anything with `convert_tokens_to_ids`.
      max_seq_length: length of the id lists, specials included (>= 3 for a pair, >= 2
        otherwise).

    Returns:
      `PackedInputs`: tokens [num_tokens <= max_seq_length] and input_ids, input_mask,
      segment_ids [max_seq_length].
    """
    tokens_a, tokens_b = truncate_to_fit(tokens_a, tokens_b, max_seq_length)
    tokens, segment_ids = pack_tokens(tokens_a, tokens_b)
    return PackedInputs(tokens, *encode_and_pad(tokens, segment_ids, tokenizer, max_seq_length))


# ------------------------------------------------------------------------------- windows


def compute_doc_spans(num_doc_tokens, max_tokens_for_doc, doc_stride):
    """Cuts `num_doc_tokens` tokens into windows of at most `max_tokens_for_doc`.

    Windows start `doc_stride` tokens apart (less if a window is shorter); the last one ends at
    the last token.

    Returns:
      A list of `DocSpan(start, length)`.
    """
    doc_spans = []
    start_offset = 0
    while start_offset < num_doc_tokens:
        length = min(num_doc_tokens - start_offset, max_tokens_for_doc)
        doc_spans.append(DocSpan(start=start_offset, length=length))
        if start_offset + length == num_doc_tokens:
            break
        start_offset += min(length, doc_stride)
    return doc_spans


def check_is_max_context(doc_spans, cur_span_index, position):
    """Whether window `cur_span_index` is the best one for the token at `position`.

    A token's score in a window is min(tokens left of it, tokens right of it) in that window,
    plus 0.01 * window length to prefer longer windows; the first window with the highest score
    wins. E.g. with windows "bought a new bat" and "a new bat and a ball", "bat" has 1 left /
    0 right context in the first and 2 left / 3 right in the second, so the second wins.

    Args:
      doc_spans: the `DocSpan`s of the document.
      cur_span_index: index of the window being built.
      position: index of the token in the WordPiece-tokenized document.

    Returns:
      bool.
    """
    return cur_span_index == max_context_window(doc_spans, position)


def max_context_window(doc_spans, position):
    """The index of the window where the token at `position` has the most context (see
    `check_is_max_context`), or None when no window holds it."""
    best_score = None
    best_span_index = None
    for span_index, doc_span in enumerate(doc_spans):
        end = doc_span.start + doc_span.length - 1
        if position < doc_span.start or position > end:
            continue
        num_left_context = position - doc_span.start
        num_right_context = end - position
        score = min(num_left_context, num_right_context) + 0.01 * doc_span.length
        if best_score is None or score > best_score:
            best_score = score
            best_span_index = span_index
    return best_span_index


def max_context_windows(doc_spans, num_tokens):
    """For every token position, the index of the window where it has the most context.

    The same rule as `check_is_max_context`, for all `num_tokens` positions at once.

    Returns:
      A list of window indices [num_tokens].
    """
    return [max_context_window(doc_spans, position) for position in range(num_tokens)]
