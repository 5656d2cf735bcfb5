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
SQuAD's document windows and their token_to_orig_map / max-context maps.
"""

import collections

CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"


# One packed sequence: `tokens` unpadded [num_tokens]; the id lists [max_seq_length].
PackedInputs = collections.namedtuple(
    "PackedInputs", ["tokens", "input_ids", "input_mask", "segment_ids"])


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
