"""Tests for bert_tf.runs.extract_features and scripts/extract_features.py.

A tiny random BERT checkpoint is written once per module; its activations are checked against
the float64 numpy reference in tests/numpy_bert.py, which shares no code with the library.
"""

import json
import os

import numpy as np
import numpy_bert
import pytest
import tensorflow as tf
from finetune_helpers import run_script, tiny_config

from bert_tf import modeling, tokenization
from bert_tf.errors import BertTfError
from bert_tf.runs import extract_features as ef

tf1 = tf.compat.v1

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox", "jump",
         "##s", "over", "lazy", "dog", "hello", "world", ",", ".", "!", "a", "b", "c", "|"]
TINY = tiny_config(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=4,
                   intermediate_size=24, max_position_embeddings=24, initializer_range=0.5)
NUM_HEADS = TINY["num_attention_heads"]

LINES = [
    "The quick brown fox jumps.",
    "hello world ||| the lazy dog!",
    "",
    "a b c ||| x ||| the dog",
    "the quick brown fox jumps over the lazy dog " * 3,
]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A random tiny BERT saved as a Google-layout checkpoint, with its weights as numpy."""
    model_dir = tmp_path_factory.mktemp("tiny_bert")
    vocab_file = str(model_dir / "vocab.txt")
    with open(vocab_file, "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")
    config_file = str(model_dir / "bert_config.json")
    with open(config_file, "w") as f:
        json.dump(TINY, f)
    checkpoint = str(model_dir / "bert_model.ckpt")
    with tf.Graph().as_default():
        tf1.set_random_seed(7)
        modeling.BertModel(modeling.BertConfig(**TINY), False,
                           tf1.placeholder(tf.int32, [None, None]))
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            weights = {v.name[:-2]: session.run(v) for v in tf1.global_variables()}
            tf1.train.Saver().save(session, checkpoint)
    input_file = str(model_dir / "input.txt")
    with open(input_file, "w", encoding="utf-8") as f:
        f.write("\n".join(LINES) + "\n")
    return dict(vocab_file=vocab_file, config_file=config_file, checkpoint=checkpoint,
                weights=weights, input_file=input_file, dir=model_dir)


def _tokenizer(model):
    return tokenization.FullTokenizer(model["vocab_file"], do_lower_case=True)


def _features(model, seq_length=12):
    examples = ef.read_examples(model["input_file"])
    return ef.convert_examples_to_features(examples, seq_length, _tokenizer(model))


def _reference_layers(model, feature):
    """The numpy float64 encoder layers [n_tokens, H] of one unpadded feature."""
    n = len(feature.tokens)
    ids, mask, types = (np.array([getattr(feature, key)[:n]])
                        for key in ("input_ids", "input_mask", "input_type_ids"))
    layers, _ = numpy_bert.bert_forward(model["weights"], ids, mask, types, NUM_HEADS)
    return [layer[0] for layer in layers]


def test_read_examples_splits_pairs_and_numbers_lines(tiny_model):
    examples = ef.read_examples(tiny_model["input_file"])
    assert [e.unique_id for e in examples] == list(range(len(LINES)))
    assert (examples[0].text_a, examples[0].text_b) == ("The quick brown fox jumps.", None)
    assert (examples[1].text_a, examples[1].text_b) == ("hello world", "the lazy dog!")
    assert (examples[2].text_a, examples[2].text_b) == ("", None)
    # As the original's greedy regex: the pair splits at the last " ||| ".
    assert (examples[3].text_a, examples[3].text_b) == ("a b c ||| x", "the dog")


def test_convert_examples_layout_segments_and_truncation(tiny_model):
    tokenizer = _tokenizer(tiny_model)
    seq_length = 12
    features = _features(tiny_model, seq_length)
    single, pair, blank, _, long = features
    assert single.tokens == ["[CLS]"] + tokenizer.tokenize(LINES[0]) + ["[SEP]"]
    assert single.tokens[1:4] == ["the", "quick", "brown"]  # lower-cased by the tokenizer
    assert single.input_type_ids[:len(single.tokens)] == [0] * len(single.tokens)

    a, b = tokenizer.tokenize("hello world"), tokenizer.tokenize("the lazy dog!")
    assert pair.tokens == ["[CLS]", *a, "[SEP]", *b, "[SEP]"]
    assert pair.tokens.count("[SEP]") == 2
    assert pair.input_type_ids == [0] * (len(a) + 2) + [1] * (len(b) + 1) + [0] * (
        seq_length - len(pair.tokens))
    assert blank.tokens == ["[CLS]", "[SEP]"]

    for feature in features:
        assert len(feature.input_ids) == len(feature.input_mask) == seq_length
        assert feature.input_mask == [1] * len(feature.tokens) + [0] * (
            seq_length - len(feature.tokens))
        assert feature.input_ids[:len(feature.tokens)] == tokenizer.convert_tokens_to_ids(
            feature.tokens)
    # A single text is cut to seq_length - 2 word pieces, keeping its start.
    assert long.tokens == ["[CLS]"] + tokenizer.tokenize(LINES[4])[:seq_length - 2] + ["[SEP]"]

    # A pair is cut to seq_length - 3 word pieces, one at a time from the longer text.
    example = ef.InputExample(0, "the quick brown fox jumps over", "a b")
    (feature,) = ef.convert_examples_to_features([example], 8, tokenizer)
    assert feature.tokens == ["[CLS]", "the", "quick", "brown", "[SEP]", "a", "b", "[SEP]"]


def test_parse_layer_indexes_and_its_errors():
    assert ef.parse_layer_indexes("-1,-2,-3,-4", 6) == [-1, -2, -3, -4]
    assert ef.parse_layer_indexes(" 0, -1 ,5", 6) == [0, -1, 5]
    with pytest.raises(BertTfError, match=r"--layers: layer index -9 .*-6 to 5.*6-layer"):
        ef.parse_layer_indexes("-1,-9", 6)
    with pytest.raises(BertTfError, match=r"--layers: layer index 6 "):
        ef.parse_layer_indexes("6", 6)
    with pytest.raises(BertTfError, match=r"--layers: 'last' is not an integer"):
        ef.parse_layer_indexes("-1,last", 6)
    with pytest.raises(BertTfError, match=r"--layers: no layer index"):
        ef.parse_layer_indexes("", 6)


def test_layer_outputs_match_numpy_reference_in_both_padding_modes(tiny_model):
    features = _features(tiny_model)
    config = modeling.BertConfig.from_json_file(tiny_model["config_file"])
    layer_indexes = [-1, 0, -2]
    # The fixed-length run also looks embeddings up by one-hot matmul: same values expected.
    runs = {padding: list(ef.extract_layer_outputs(
        config, tiny_model["checkpoint"], features, layer_indexes, batch_size=2,
        padding=padding, use_one_hot_embeddings=padding == "max_seq_length"))
        for padding in ef.PADDING_MODES}
    for padding, results in runs.items():
        assert [f.unique_id for f, _ in results] == [f.unique_id for f in features]
        for feature, outputs in results:
            reference = _reference_layers(tiny_model, feature)
            assert len(outputs) == len(layer_indexes)
            for layer_index, output in zip(layer_indexes, outputs, strict=True):
                assert output.shape == (len(feature.tokens), TINY["hidden_size"])
                np.testing.assert_allclose(output, reference[layer_index], atol=1e-4,
                                           err_msg=f"padding={padding} layer={layer_index}")
    for (_, longest), (_, fixed) in zip(runs["longest"], runs["max_seq_length"], strict=True):
        for a, b in zip(longest, fixed, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("use_xla", [False, True])
def test_script_writes_original_json_lines(tiny_model, tmp_path, use_xla):
    output_file = tmp_path / "out" / "features.jsonl"
    ran_ops_file = tmp_path / "ran_ops.json"
    result = run_script(
        "extract_features.py",
        f"--input_file={tiny_model['input_file']}", f"--output_file={output_file}",
        f"--vocab_file={tiny_model['vocab_file']}",
        f"--bert_config_file={tiny_model['config_file']}",
        f"--init_checkpoint={tiny_model['checkpoint']}", "--layers=-1,0", "--max_seq_length=12",
        "--batch_size=2", "--do_lower_case=True", f"--use_xla={use_xla}",
        ran_ops_file=ran_ops_file)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "examples/sec" in result.stderr
    # An XLA-compiled cluster runs as an _XlaCompile and an _XlaRun kernel; the trace saw the
    # model's kernels either way (its matmuls, whichever kernel runs them here).
    ran_ops = json.loads(ran_ops_file.read_text())
    xla_ops = {op for op in ran_ops if "Xla" in op}
    assert ({"_XlaCompile", "_XlaRun"} <= xla_ops) if use_xla else not xla_ops, ran_ops
    assert [op for op in ran_ops if "MatMul" in op], ran_ops
    assert os.listdir(output_file.parent) == ["features.jsonl"]  # No temp file left behind.

    features = _features(tiny_model, seq_length=12)
    lines = output_file.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(LINES)
    for line, feature in zip(lines, features, strict=True):
        record = json.loads(line)
        assert list(record) == ["linex_index", "features"]
        assert record["linex_index"] == feature.unique_id
        assert [token["token"] for token in record["features"]] == feature.tokens
        reference = _reference_layers(tiny_model, feature)
        for position, token in enumerate(record["features"]):
            assert list(token) == ["token", "layers"]
            assert [list(layer) for layer in token["layers"]] == [["index", "values"]] * 2
            assert [layer["index"] for layer in token["layers"]] == [-1, 0]
            for layer in token["layers"]:
                values = layer["values"]
                assert len(values) == TINY["hidden_size"]
                assert values == [round(v, 6) for v in values]
                np.testing.assert_allclose(values, reference[layer["index"]][position],
                                           atol=1e-4)


def test_script_bad_layers_exit_2_with_one_line(tiny_model, tmp_path):
    output_file = tmp_path / "features.jsonl"
    result = run_script(
        "extract_features.py",
        f"--input_file={tiny_model['input_file']}", f"--output_file={output_file}",
        f"--vocab_file={tiny_model['vocab_file']}",
        f"--bert_config_file={tiny_model['config_file']}",
        f"--init_checkpoint={tiny_model['checkpoint']}", "--layers=-1,-9", "--max_seq_length=12")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert error_lines == ["error: --layers: layer index -9 is out of range; use comma-separated "
                           "integers from -4 to 3 for this 4-layer model (-1 is the last layer)."]
    assert not output_file.exists()


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("case, pattern", [
    ("missing_input", r"--input_file: input file '.*nope.txt' does not exist"),
    ("empty_input", r"--input_file: '.*empty.txt' has no text"),
    ("missing_vocab", r"--vocab_file: vocab file '.*nope.txt' does not exist"),
    ("missing_config", r"--bert_config_file: BERT config file '.*nope.txt' does not exist"),
    ("missing_checkpoint", r"--init_checkpoint: checkpoint '.*nope.ckpt' does not exist"),
    ("no_output", r"--output_file: no output file given"),
    ("too_long", r"--max_seq_length=100 is longer than max_position_embeddings \(24\)"),
    ("bad_padding", r"--padding: unknown value 'shortest'; use one of longest, max_seq_length"),
    ("vocab_without_cls", r"vocab file '.*small_vocab.txt' has no \[CLS\] token"),
    ("shape_mismatch", r"variable 'bert/embeddings/word_embeddings' has shape \[23, 16\]"),
])
def test_bad_input_raises_clear_error(tiny_model, tmp_path, case, pattern):
    kwargs = dict(input_file=tiny_model["input_file"], output_file=str(tmp_path / "out.jsonl"),
                  vocab_file=tiny_model["vocab_file"], bert_config_file=tiny_model["config_file"],
                  init_checkpoint=tiny_model["checkpoint"], max_seq_length=12)
    nope = str(tmp_path / "nope.txt")
    if case == "missing_input":
        kwargs["input_file"] = nope
    elif case == "empty_input":
        kwargs["input_file"] = _write(tmp_path / "empty.txt", "\n  \n")
    elif case == "missing_vocab":
        kwargs["vocab_file"] = nope
    elif case == "missing_config":
        kwargs["bert_config_file"] = nope
    elif case == "missing_checkpoint":
        kwargs["init_checkpoint"] = str(tmp_path / "nope.ckpt")
    elif case == "no_output":
        kwargs["output_file"] = ""
    elif case == "too_long":
        kwargs["max_seq_length"] = 100
    elif case == "bad_padding":
        kwargs["padding"] = "shortest"
    elif case == "vocab_without_cls":
        kwargs["vocab_file"] = _write(tmp_path / "small_vocab.txt",
                                      "\n".join(t for t in VOCAB if t != "[CLS]") + "\n")
    elif case == "shape_mismatch":
        kwargs["bert_config_file"] = _write(tmp_path / "config.json",
                                            json.dumps({**TINY, "vocab_size": 40}))
    with pytest.raises(BertTfError, match=pattern):
        ef.run_extract_features(**kwargs)
    assert not os.path.exists(tmp_path / "out.jsonl")


def test_failed_write_keeps_earlier_output(tmp_path):
    output_file = tmp_path / "features.jsonl"
    output_file.write_text("earlier output\n")

    def records():
        yield {"linex_index": 0, "features": []}
        raise BertTfError("stopped halfway")

    with pytest.raises(BertTfError, match="stopped halfway"):
        ef.write_jsonl(records(), str(output_file))
    assert output_file.read_text() == "earlier output\n"
    assert os.listdir(tmp_path) == ["features.jsonl"]

    assert ef.write_jsonl(iter([{"linex_index": 0, "features": []}]), str(output_file)) == 1
    assert json.loads(output_file.read_text()) == {"linex_index": 0, "features": []}


MINILM_LINES = [
    "Hello, world! This is BERT.",
    "The quick brown fox ||| jumps over the lazy dog.",
    "Résumé naïve café",
]


@pytest.mark.slow
def test_script_on_minilm_matches_bert_model_sequence_output(minilm_converted, tmp_path):
    vocab_file = os.path.join(minilm_converted, "vocab.txt")
    config_file = os.path.join(minilm_converted, "bert_config.json")
    checkpoint = os.path.join(minilm_converted, "bert_model.ckpt")
    input_file = _write(tmp_path / "input.txt", "\n".join(MINILM_LINES) + "\n")
    output_file = tmp_path / "features.jsonl"
    seq_length = 32
    result = run_script(
        "extract_features.py",
        f"--input_file={input_file}", f"--output_file={output_file}", f"--vocab_file={vocab_file}",
        f"--bert_config_file={config_file}", f"--init_checkpoint={checkpoint}", "--layers=-1",
        f"--max_seq_length={seq_length}", "--batch_size=2", "--padding=longest")
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in output_file.read_text(encoding="utf-8").splitlines()]

    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    features = ef.convert_examples_to_features(ef.read_examples(input_file), seq_length,
                                               tokenizer)
    assert [r["linex_index"] for r in records] == [0, 1, 2]
    assert [[t["token"] for t in r["features"]] for r in records] == [f.tokens for f in features]
    assert records[1]["features"][0]["token"] == "[CLS]"

    # Reference: BertModel run directly on the whole fixed-length batch, restored with a Saver.
    config = modeling.BertConfig.from_json_file(config_file)
    with tf.Graph().as_default():
        model = modeling.BertModel(
            config, False, tf.constant([f.input_ids for f in features]),
            tf.constant([f.input_mask for f in features]),
            tf.constant([f.input_type_ids for f in features]))
        with tf1.Session() as session:
            tf1.train.Saver(tf1.trainable_variables()).restore(session, checkpoint)
            sequence_output = session.run(model.get_sequence_output())

    fixed = list(ef.extract_layer_outputs(config, checkpoint, features, [-1], batch_size=3,
                                          padding="max_seq_length"))
    for record, feature, (_, (fixed_output,)) in zip(records, features, fixed, strict=True):
        values = np.array([t["layers"][0]["values"] for t in record["features"]])
        assert [t["layers"][0]["index"] for t in record["features"]] == [-1] * len(values)
        expected = sequence_output[features.index(feature), :len(feature.tokens)]
        assert values.shape == expected.shape == (len(feature.tokens), config.hidden_size)
        np.testing.assert_allclose(values, expected, atol=1e-5)
        np.testing.assert_allclose(values, fixed_output, atol=1e-5)


def test_values_are_rounded_exactly_as_python_round():
    rng = np.random.RandomState(3)
    # Random activations, plus values whose 7th decimal is an exact tie (k + 0.5) * 1e-6.
    values = np.concatenate([rng.randn(20000) * 3, rng.randn(1995) * 1e-5, rng.randn(100) * 1e3,
                             np.array([0.0078125, -0.0078125, 0.0234375, 2.0 ** -20, 0.0])])
    values = values.astype(np.float32).reshape(-1, 10)
    feature = ef.InputFeatures(5, [f"t{i}" for i in range(len(values))], None, None, None)
    record = ef.feature_to_json(feature, [values, values[:, ::-1]], [-1, -3])
    assert record["linex_index"] == 5
    for position, token in enumerate(record["features"]):
        assert token["token"] == f"t{position}"
        assert [layer["index"] for layer in token["layers"]] == [-1, -3]
        assert token["layers"][0]["values"] == [round(float(x), 6) for x in values[position]]
        assert token["layers"][1]["values"] == [
            round(float(x), 6) for x in values[position, ::-1]]
    # Ties round half to even; JSON text is the repr of the rounded doubles, as the original's.
    assert '"values": [0.0, 1e-06, 0.023438, -0.007812, 0.007812, ' in json.dumps(record)
