"""Unit tests of bert_tf.data.bert_inputs on hand-worked examples (no TensorFlow, no vocab file)."""

import pytest

from bert_tf.data import bert_inputs

# A toy vocab: specials first, then the letters used below.
VOCAB = {token: i for i, token in enumerate(
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a1", "a2", "a3", "a4", "a5", "b1", "b2", "b3"])}


class _Tokenizer:
    def convert_tokens_to_ids(self, tokens):
        return [VOCAB[token] for token in tokens]


def _a(n):
    return [f"a{i}" for i in range(1, n + 1)]


def _b(n):
    return [f"b{i}" for i in range(1, n + 1)]


def test_truncate_seq_pair_pops_from_the_longer_then_b_on_ties():
    # 5 + 3 -> 4: a is longer twice (a5, a4 go), then 3 + 3 ties and b loses b3.
    tokens_a, tokens_b = _a(5), _b(3)
    bert_inputs.truncate_seq_pair(tokens_a, tokens_b, 5)
    assert (tokens_a, tokens_b) == (_a(3), _b(2))
    bert_inputs.truncate_seq_pair(tokens_a, tokens_b, 4)
    assert (tokens_a, tokens_b) == (_a(2), _b(2))


def test_truncate_seq_pair_leaves_a_fitting_pair_and_can_empty_both():
    tokens_a, tokens_b = _a(2), _b(1)
    bert_inputs.truncate_seq_pair(tokens_a, tokens_b, 3)
    assert (tokens_a, tokens_b) == (_a(2), _b(1))
    bert_inputs.truncate_seq_pair(tokens_a, tokens_b, 0)
    assert (tokens_a, tokens_b) == ([], [])


def test_truncate_to_fit_reserves_three_for_a_pair_and_two_for_a_single_text():
    assert bert_inputs.truncate_to_fit(_a(5), _b(3), 8) == (_a(3), _b(2))
    assert bert_inputs.truncate_to_fit(_a(5), None, 5) == (_a(3), None)
    assert bert_inputs.truncate_to_fit(_a(3), None, 5) == (_a(3), None)
    # An empty second text is a single text: only the two specials are reserved.
    assert bert_inputs.truncate_to_fit(_a(5), [], 5) == (_a(3), [])


def test_pack_tokens_segment_ids():
    tokens, segment_ids = bert_inputs.pack_tokens(_a(2), _b(1))
    assert tokens == ["[CLS]", "a1", "a2", "[SEP]", "b1", "[SEP]"]
    assert segment_ids == [0, 0, 0, 0, 1, 1]
    assert bert_inputs.pack_tokens(_a(1)) == (["[CLS]", "a1", "[SEP]"], [0, 0, 0])
    assert bert_inputs.pack_tokens([], []) == (["[CLS]", "[SEP]"], [0, 0])


def test_pad_fills_with_zeros_to_the_length_and_rejects_overflow():
    assert bert_inputs.pad([7, 8], 4) == [7, 8, 0, 0]
    assert bert_inputs.pad([7, 8], 2) == [7, 8]
    values = [1]
    assert bert_inputs.pad(values, 3) is not values
    with pytest.raises(ValueError, match="do not fit"):
        bert_inputs.pad([1, 2, 3], 2)


def test_encode_and_pad():
    tokens, segment_ids = bert_inputs.pack_tokens(["a1"], ["b2"])
    input_ids, input_mask, segment_ids = bert_inputs.encode_and_pad(
        tokens, segment_ids, _Tokenizer(), 7)
    assert input_ids == [2, 4, 3, 10, 3, 0, 0]
    assert input_mask == [1, 1, 1, 1, 1, 0, 0]
    assert segment_ids == [0, 0, 0, 1, 1, 0, 0]


def test_pack_and_pad_pair_truncated_to_max_seq_length():
    packed = bert_inputs.pack_and_pad(_a(4), _b(3), _Tokenizer(), 7)
    # 7 - 3 = 4 text tokens: a4 goes (4 > 3), b3 (a tie), then a3 (3 > 2).
    assert packed.tokens == ["[CLS]", "a1", "a2", "[SEP]", "b1", "b2", "[SEP]"]
    assert packed.input_ids == [2, 4, 5, 3, 9, 10, 3]
    assert packed.input_mask == [1] * 7
    assert packed.segment_ids == [0, 0, 0, 0, 1, 1, 1]


def test_pack_and_pad_single_text_padded():
    packed = bert_inputs.pack_and_pad(_a(2), None, _Tokenizer(), 6)
    assert packed.tokens == ["[CLS]", "a1", "a2", "[SEP]"]
    assert packed.input_ids == [2, 4, 5, 3, 0, 0]
    assert packed.input_mask == [1, 1, 1, 1, 0, 0]
    assert packed.segment_ids == [0] * 6


@pytest.mark.parametrize("tokens_b, max_seq_length, expected_tokens", [
    # The smallest lengths that still hold the specials: the texts are cut to nothing, and
    # a pair cut to nothing loses its second [SEP] too (as in the original).
    (None, 2, ["[CLS]", "[SEP]"]),
    (["b1"], 3, ["[CLS]", "[SEP]"]),
    # One text token left: the tie a1 / b1 pops b1, and the pair packs as a single text.
    (["b1"], 4, ["[CLS]", "a1", "[SEP]"]),
    (["b1"], 5, ["[CLS]", "a1", "[SEP]", "b1", "[SEP]"]),
    # Exactly full: nothing cut, no padding.
    (None, 7, ["[CLS]", "a1", "a2", "a3", "a4", "a5", "[SEP]"]),
])
def test_pack_and_pad_edge_lengths(tokens_b, max_seq_length, expected_tokens):
    packed = bert_inputs.pack_and_pad(_a(5), tokens_b, _Tokenizer(), max_seq_length)
    assert packed.tokens == expected_tokens
    num_padding = max_seq_length - len(expected_tokens)
    expected_ids = _Tokenizer().convert_tokens_to_ids(expected_tokens)
    assert packed.input_ids == expected_ids + [0] * num_padding
    assert packed.input_mask == [1] * len(expected_tokens) + [0] * num_padding
    assert len(packed.segment_ids) == max_seq_length
