"""Nested Python lists of a RaggedTensor, as `RaggedTensor.to_list()` gives them.

`to_list()` of the preprocessors' [texts, words, pieces] ids took ~16 s for the 3,250 lines of
tests/data/multilingual.txt; slicing the flat values by the row splits takes milliseconds.
"""


def ragged_lists(ragged):
    """`ragged.to_list()`, from its flat values and row splits (an eager RaggedTensor)."""
    values = ragged.flat_values.numpy().tolist()
    for splits in reversed(ragged.nested_row_splits):
        bounds = splits.numpy().tolist()
        values = [values[start:end] for start, end in zip(bounds[:-1], bounds[1:], strict=True)]
    return values
