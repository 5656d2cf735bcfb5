"""prepare_corpus (text, JSON lines, MediaWiki XML) and build_vocab: outputs and bad input."""

import bz2
import json
import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf

from bert_tf import modeling, tokenization
from bert_tf import options as bert_options
from bert_tf.cli import flags as bert_flags
from bert_tf.cli import tool_flags
from bert_tf.data import corpus, vocab
from bert_tf.errors import BertTfError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIKI = os.path.join(REPO, "tests", "data", "wiki", "sample.xml")
TRAIN_TXT = os.path.join(REPO, "data", "corpus", "train.txt")


def _prepare(tmp_path, input_file, **values):
    values = {"output_dir": str(tmp_path / "out"), "num_workers": 1, **values}
    flag_values = bert_flags.parse(tool_flags.define_prepare_corpus_flags,
                                   input_file=input_file, **values)
    return corpus.prepare_corpus(bert_options.PrepareCorpusOptions.from_flags(flag_values),
                                 log_fn=lambda *args: None)


def _vocab_options(input_file, output_file, **values):
    flag_values = bert_flags.parse(tool_flags.define_build_vocab_flags, input_file=input_file,
                                   output_file=output_file, **values)
    return bert_options.BuildVocabOptions.from_flags(flag_values)


def test_wiki_export_gives_the_expected_sentences(tmp_path):
    # Two articles; the redirect, the talk page, the template page and the stub are left out.
    summary = _prepare(tmp_path, WIKI)
    expected = open(os.path.join(REPO, "tests", "data", "wiki", "sample.expected.txt")).read()
    assert open(summary["output_files"][0]).read() == expected
    assert (summary["documents"], summary["sentences"]) == (2, 15)
    # The same from the .bz2 a dump is downloaded as (two streams, as multistream dumps).
    data = open(WIKI, "rb").read()
    half = data.index(b"  <page>", len(data) // 2)
    (tmp_path / "dump.xml.bz2").write_bytes(bz2.compress(data[:half]) +
                                            bz2.compress(data[half:]))
    summary = _prepare(tmp_path / "bz2", str(tmp_path / "dump.xml.bz2"))
    assert open(summary["output_files"][0]).read() == expected


def test_clean_wikitext_rules():
    text = ("{{a|{{b|c}}}}'''Bold''' and ''it''<ref>{{cite|x}}</ref> [[A|b]]s [[c]].\n"
            "[[File:x.png|thumb|A [[d|e]] f]]\n{|\n| {| \n|inner\n|}\n|}\n"
            "Link [http://x.org label] &amp; [[Category:Z]]<!-- c -->.\n"
            "* item\n== Notes ==\nNot kept.\n=== Sub ===\nNot kept either.\n== Life ==\nKept.")
    assert corpus.clean_wikitext(text) == ["Bold and it bs c.", "Link label & .", "Kept."]


def test_text_and_jsonl_shards_and_workers(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text("First doc. It has two sentences.\nA second paragraph.\n\n\nSecond doc!\n")
    lines = [json.dumps({"text": f"Doc {i}. Line two.\n\nMore text {i}."}) for i in range(5)]
    (tmp_path / "b.jsonl").write_text("\n".join(lines) + "\n")
    summary = _prepare(tmp_path, f"{text},{tmp_path}/*.jsonl", num_shards=2)
    shards = [open(p).read() for p in summary["output_files"]]
    assert [os.path.basename(p) for p in summary["output_files"]] == [
        "corpus-00000-of-00002.txt", "corpus-00001-of-00002.txt"]
    assert shards[0] == ("First doc.\nIt has two sentences.\nA second paragraph.\n\n" +
                         "".join(f"Doc {i}.\nLine two.\nMore text {i}.\n\n" for i in (0, 2, 4)))
    assert shards[1].startswith("Second doc!\n\nDoc 1.\n")
    assert (summary["documents"], summary["sentences"]) == (7, 19)
    with_workers = _prepare(tmp_path / "w", f"{text},{tmp_path}/*.jsonl", num_shards=2,
                            num_workers=2)
    assert [open(p).read() for p in with_workers["output_files"]] == shards


def test_bad_inputs_are_one_clear_error(tmp_path):
    def error(input_file, **values):
        with pytest.raises(BertTfError) as raised:
            _prepare(tmp_path, input_file, **values)
        return str(raised.value)

    empty = tmp_path / "empty.xml"
    empty.write_text("")
    assert f"'{empty}' is not a well-formed MediaWiki XML export" in error(str(empty))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n")
    assert "hold(s) no text" in error(str(blank))
    binary = tmp_path / "dump.bin"
    binary.write_bytes(b"BZh9\x00\x01\x02garbage")
    assert f"'{binary}' holds a NUL byte" in error(str(binary))
    not_bz2 = tmp_path / "dump.xml.bz2"
    not_bz2.write_bytes(b"plain bytes, not bzip2")
    assert f"'{not_bz2}' cannot be read" in error(str(not_bz2))
    other_xml = tmp_path / "other.xml"
    other_xml.write_text("<html><body>hi</body></html>")
    assert "not a MediaWiki export" in error(str(other_xml))
    assert "--format=csv is not a known format" in error(WIKI, format="csv")
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text('{"body": "text"}\n')
    assert "--text_key: " in error(str(jsonl)) and "line 1" in error(str(jsonl))
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_scripts_print_one_error_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": REPO}
    for script, args in (("prepare_corpus.py", [f"--input_file={WIKI}", "--format=csv",
                                                f"--output_dir={tmp_path}"]),
                         ("build_vocab.py", [f"--input_file={TRAIN_TXT}", "--vocab_size=150",
                                             f"--output_file={tmp_path}/v.txt"])):
        result = subprocess.run([sys.executable, os.path.join(REPO, "scripts", script), *args],
                                capture_output=True, text=True, env=env, timeout=120)
        assert result.returncode != 0
        errors = [line for line in result.stderr.splitlines() if line.startswith(
            ("error: ", "FATAL Flags parsing error"))]
        assert len(errors) == 1, result.stderr
        assert ("--format" in errors[0]) if script == "prepare_corpus.py" else (
            "--vocab_size=150 is smaller than the 105 special" in errors[0])


@pytest.fixture(scope="module")
def learnt_vocab(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("vocab") / "vocab.txt")
    summary = vocab.build_vocab(_vocab_options(TRAIN_TXT, path, vocab_size=3000),
                                log_fn=lambda *args: None)
    return path, summary


def test_vocab_layout_size_and_unk_rate(learnt_vocab, tmp_path):
    path, summary = learnt_vocab
    tokens = open(path).read().split("\n")[:-1]
    assert len(tokens) == summary["vocab_size"] == 3000 and len(set(tokens)) == 3000
    assert tokens[:3] == ["[PAD]", "[unused0]", "[unused1]"]
    assert tokens[100:105] == ["[unused99]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert any(t.startswith("##") for t in tokens) and "elliot" in tokens
    tokenizer = tokenization.FullTokenizer(path, do_lower_case=True)
    pieces = [p for line in open(TRAIN_TXT) for p in tokenizer.tokenize(line)]
    assert pieces.count("[UNK]") / len(pieces) < 0.001
    # Deterministic: the same file again.
    again = str(tmp_path / "again.txt")
    vocab.build_vocab(_vocab_options(TRAIN_TXT, again, vocab_size=3000),
                      log_fn=lambda *args: None)
    assert open(again).read() == open(path).read()


def test_vocab_writes_the_config_sized_to_it(tmp_path):
    # make demo: configs/bert_tiny.json with one embedding row per token of the learnt vocab.
    source = os.path.join(REPO, "configs", "bert_tiny.json")
    for where in (str(tmp_path / "local"), "ram://vocab_config"):
        vocab_file, config_file = f"{where}/vocab.txt", f"{where}/bert_config.json"
        summary = vocab.build_vocab(_vocab_options(
            TRAIN_TXT, vocab_file, vocab_size=2000, bert_config_file=source,
            output_bert_config_file=config_file), log_fn=lambda *args: None)
        with tf.io.gfile.GFile(vocab_file) as f:
            assert len(f.read().splitlines()) == summary["vocab_size"] == 2000
        with tf.io.gfile.GFile(config_file) as f:
            written = json.load(f)
        expected = json.load(open(source))
        assert written.pop("vocab_size") == 2000 and expected.pop("vocab_size") == 30522
        assert {key: written[key] for key in expected} == expected
        assert modeling.BertConfig.from_json_file(config_file).vocab_size == 2000


def test_vocab_config_flags_fail_before_anything_is_written(tmp_path):
    path = str(tmp_path / "v.txt")
    config = str(tmp_path / "bert_config.json")
    for values, message in (
            (dict(output_bert_config_file=config),
             "--output_bert_config_file was given without --bert_config_file; pass both"),
            (dict(bert_config_file=os.path.join(REPO, "configs", "bert_tiny.json")),
             "--bert_config_file was given without --output_bert_config_file; pass both"),
            (dict(bert_config_file=str(tmp_path / "missing.json"),
                  output_bert_config_file=config),
             "missing.json' does not exist; pass an existing bert_config.json with "
             "--bert_config_file")):
        with pytest.raises(BertTfError, match=re.escape(message)):
            vocab.build_vocab(_vocab_options(TRAIN_TXT, path, vocab_size=2000, **values))
        assert os.listdir(tmp_path) == []


def test_vocab_uses_the_tokenizer_basic_rules_and_bad_sizes(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("Café au lait, CAFÉ! 中文字 words words\n" * 3)
    path = str(tmp_path / "v.txt")
    vocab.build_vocab(_vocab_options(str(text), path, vocab_size=60, num_unused=2),
                      log_fn=lambda *args: None)
    tokens = open(path).read().split()
    assert tokens[:7] == ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]",
                          "[MASK]"]
    assert {"中", "文", "字", "cafe", ","} <= set(tokens) and "é" not in "".join(tokens)
    tokenizer = tokenization.FullTokenizer(path)
    assert "[UNK]" not in tokenizer.tokenize("Café au lait, CAFÉ! 中文字 words")
    with pytest.raises(BertTfError, match=r"--vocab_size=20 is smaller than the 7 special and "
                                          r"unused tokens \+ the \d+ characters"):
        vocab.build_vocab(_vocab_options(str(text), path, vocab_size=20, num_unused=2))
    with pytest.raises(BertTfError, match="--vocab_size=100 leaves no room"):
        vocab.build_vocab(_vocab_options(str(text), path, vocab_size=100))
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"abc\x00def\n")
    with pytest.raises(BertTfError, match="holds a NUL byte"):
        vocab.build_vocab(_vocab_options(str(binary), path, vocab_size=200))
