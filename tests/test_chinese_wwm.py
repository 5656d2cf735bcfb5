"""Whole-word masking of Chinese words from a word segmenter (--word_segmenter=jieba|ref_file).

The reference for the words is jieba's own segmentation of each line (`jieba.lcut`), mapped to
the pieces by the `tokenizers` package's BERT tokenizer (its character offsets), not by
bert_tf's code; the ref files are written from the same in the format of Hugging Face's
run_chinese_ref.py (one JSON list per non-blank line, positions counted with [CLS] = 0).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from envs import child_env
from finetune_helpers import read_records, unmasked_ids

from bert_tf import options, tokenization
from bert_tf.data import corpus, pretraining_data, record_writing, vocab
from bert_tf.errors import BertTfError

jieba = pytest.importorskip("jieba")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHINESE_TXT = os.path.join(REPO, "tests", "data", "chinese.txt")
SEQ, PREDS = 64, 16
CHUNK_MB = 0.004  # several chunks, so the ref file is read from the middle too


def _is_cjk(char):
    cp = ord(char)
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0xF900 <= cp <= 0xFAFF
            or 0x20000 <= cp <= 0x2FA1F)


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("zh_vocab") / "vocab.txt")
    vocab.build_vocab(options.BuildVocabOptions(
        input_file=CHINESE_TXT, output_file=path, vocab_size=1500, do_lower_case=True,
        num_unused=0), log_fn=lambda *a: None)
    return path


def _reference_lines(vocab_file):
    """Per non-blank line: (piece ids, word key per piece, ref positions), from jieba and the
    `tokenizers` tokenizer. Pieces of one multi-character all-Chinese jieba word share a key,
    a "##" piece shares its word's key, other pieces have keys of their own."""
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(vocab_file, lowercase=True, strip_accents=None,
                                       clean_text=True, handle_chinese_chars=True)
    lines, next_key = [], 0
    for line in open(CHINESE_TXT, encoding="utf-8"):
        line = line.strip()
        if not line:
            lines.append(None)
            continue
        word_of_char, start = {}, 0
        for index, word in enumerate(jieba.lcut(line)):
            grouped = len(word) > 1 and all(_is_cjk(c) for c in word)
            for k in range(len(word)):
                word_of_char[start + k] = (index, grouped, k > 0)
            start += len(word)
        encoding = tokenizer.encode(line, add_special_tokens=False)
        keys, positions, last_word = [], [], None
        for i, (token, (begin, _)) in enumerate(zip(encoding.tokens, encoding.offsets,
                                                    strict=True)):
            index, grouped, inside = word_of_char[begin]
            chinese = len(token) == 1 and _is_cjk(token)
            if chinese and grouped and inside and last_word == index:
                positions.append(i + 1)  # [CLS] is position 0
            elif not token.startswith("##"):
                next_key += 1
            keys.append(next_key)
            last_word = index if chinese and grouped else None
        lines.append((encoding.ids, keys, positions))
    return lines


@pytest.fixture(scope="module")
def reference(vocab_file):
    return _reference_lines(vocab_file)


@pytest.fixture(scope="module")
def ref_file(tmp_path_factory, reference):
    path = tmp_path_factory.mktemp("zh_ref") / "chinese.ref"
    path.write_text("".join(json.dumps(r[2]) + "\n" for r in reference if r is not None))
    return str(path)


def _create(vocab_file, output, masking="static", segmenter="jieba", ref=None, **flags):
    config = options.PretrainingDataConfig(
        vocab_file, do_whole_word_mask=True, max_seq_length=SEQ, max_predictions_per_seq=PREDS,
        dupe_factor=3, random_seed=7, masking=masking, word_segmenter=segmenter,
        word_segmenter_ref_file=ref, **flags)
    return pretraining_data.create_pretraining_data(
        CHINESE_TXT, str(output), config, num_workers=1, chunk_size_mb=CHUNK_MB,
        log_fn=lambda *a: None)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, vocab_file, ref_file):
    """{(masking, segmenter): TFRecord path}."""
    directory = tmp_path_factory.mktemp("zh_records")
    paths = {}
    for masking in ("static", "dynamic"):
        for segmenter in ("jieba", "ref_file", "none"):
            path = directory / f"{masking}_{segmenter}.tfrecord"
            _create(vocab_file, path, masking, segmenter,
                    ref_file if segmenter == "ref_file" else None)
            paths[masking, segmenter] = str(path)
    return paths


class _Locator:
    """Finds a segment (token ids) in the documents' token streams: its word keys there."""

    def __init__(self, reference):
        self.streams, self.keys = [], []
        ids, keys = [], []
        for line in [*reference, None]:
            if line is None:
                if ids:
                    self.streams.append("".join(chr(0x100 + i) for i in ids))
                    self.keys.append(keys)
                ids, keys = [], []
                continue
            ids.extend(line[0])
            keys.extend(line[1])

    def keys_of(self, segment):
        """The word keys of `segment`, or None where it occurs more than once (or nowhere)."""
        text = "".join(chr(0x100 + int(i)) for i in segment)
        found = []
        for stream, keys in zip(self.streams, self.keys, strict=True):
            start = stream.find(text)
            while start >= 0 and len(found) < 2:
                found.append(keys[start:start + len(segment)])
                start = stream.find(text, start + 1)
        return found[0] if len(found) == 1 else None


def _words(ids, sep_id, locator):
    """(the positions of each reference word of two or more pieces in one sequence (`ids`
    unpadded, unmasked), the number of its segments not located)."""
    words, unlocated = [], 0
    separators = [p for p in range(len(ids)) if ids[p] == sep_id]
    start = 1
    for end in separators:
        keys = locator.keys_of(ids[start:end])
        if keys is None:
            unlocated += 1
        else:
            by_key = {}
            for offset, key in enumerate(keys):
                by_key.setdefault(key, []).append(start + offset)
            words.extend(w for w in by_key.values() if len(w) > 1)
        start = end + 1
    return words, unlocated


def _check_words(ids, masked, sep_id, locator):
    """Counts for one sequence: (multi-piece words seen, masked ones, split ones, segments not
    located); a word is split when some but not all of its pieces in the sequence are masked."""
    words, unlocated = _words(ids, sep_id, locator)
    flags = [masked[w] for w in words]
    return np.array([len(words), sum(f.all() for f in flags),
                     sum(f.any() and not f.all() for f in flags), unlocated])


def _static_masks(path, vocab_file):
    records = read_records([path], SEQ, PREDS)
    ids = unmasked_ids(records)
    masked = np.zeros_like(ids, dtype=bool)
    weights = records["masked_lm_weights"] > 0
    for row in range(len(ids)):
        masked[row, records["masked_lm_positions"][row][weights[row]]] = True
    return records, ids, masked


def _word_counts(ids, masked, lengths, vocab_file, reference):
    locator = _Locator(reference)
    sep_id = tokenization.load_vocab(vocab_file)["[SEP]"]
    return sum(_check_words(list(ids[r][:lengths[r]]), masked[r], sep_id, locator)
               for r in range(len(ids)))


def test_static_masks_whole_jieba_words(outputs, vocab_file, reference):
    records, ids, masked = _static_masks(outputs["static", "jieba"], vocab_file)
    lengths = records["input_mask"].sum(axis=1)
    words, masked_words, split, unlocated = _word_counts(ids, masked, lengths, vocab_file,
                                                         reference)
    assert split == 0
    assert words > 3000 and masked_words > 300, (words, masked_words)
    assert unlocated < 0.05 * 2 * len(ids)
    # 15 % of the tokens ([CLS] and [SEP] counted, as Google's script does), within noise.
    fraction = masked.sum() / lengths.sum()
    assert 0.135 < fraction < 0.165, fraction
    # The same check finds split words in characters-only whole-word masking.
    records, ids, masked = _static_masks(outputs["static", "none"], vocab_file)
    counts = _word_counts(ids, masked, records["input_mask"].sum(axis=1), vocab_file, reference)
    assert counts[2] > 100, counts


def _replacements(words, now, originals, mask_id):
    """Counts of masked words all [MASK], and of those with both a [MASK] piece and an
    unchanged one (impossible with one 80-10-10 choice per word)."""
    all_mask = mixed = 0
    for word in words:
        is_mask = now[word] == mask_id
        all_mask += is_mask.all()
        mixed += is_mask.any() and (now[word] == originals[word]).any()
    return all_mask, mixed


def test_static_80_10_10_is_drawn_once_per_word(outputs, vocab_file, reference):
    records, ids, masked = _static_masks(outputs["static", "jieba"], vocab_file)
    locator = _Locator(reference)
    vocab_ids = tokenization.load_vocab(vocab_file)
    lengths = records["input_mask"].sum(axis=1)
    num_words = all_mask = mixed = 0
    for row in range(len(ids)):
        words, _ = _words(list(ids[row][:lengths[row]]), vocab_ids["[SEP]"], locator)
        words = [np.array(w) for w in words if masked[row][w].all()]
        counts = _replacements(words, records["input_ids"][row], ids[row], vocab_ids["[MASK]"])
        num_words += len(words)
        all_mask += counts[0]
        mixed += counts[1]
    assert num_words > 300 and mixed == 0
    assert 0.7 < all_mask / num_words < 0.9, (all_mask, num_words)


def test_ref_file_gives_the_records_of_jieba(outputs):
    for masking in ("static", "dynamic"):
        with open(outputs[masking, "jieba"], "rb") as a, \
                open(outputs[masking, "ref_file"], "rb") as b:
            jieba_bytes, ref_bytes = a.read(), b.read()
        assert jieba_bytes == ref_bytes, masking
        with open(outputs[masking, "none"], "rb") as c:
            assert c.read() != jieba_bytes


def _dynamic_batch(path):
    import tensorflow as tf

    spec = record_writing.pretraining_feature_spec(SEQ, PREDS, dynamic=True)
    batch = next(iter(tf.data.TFRecordDataset(path).batch(10_000)
                      .map(lambda s: tf.io.parse_example(s, spec))))
    return {k: tf.cast(v, tf.int32) for k, v in batch.items()}


def test_dynamic_records_group_jieba_words(outputs, vocab_file, reference):
    import tensorflow as tf

    from bert_tf.data import dynamic_masking

    # The records carry whole_word_replacement = 1; those without a segmenter keep their keys.
    keys = {name for name, _, _ in record_writing.DYNAMIC_FEATURES}
    for segmenter, extra in (("jieba", {"whole_word_replacement"}), ("none", set())):
        first = next(iter(tf.data.TFRecordDataset(outputs["dynamic", segmenter])))
        assert set(tf.train.Example.FromString(first.numpy()).features.feature) == keys | extra
    batch = _dynamic_batch(outputs["dynamic", "jieba"])
    assert set(np.unique(batch["whole_word_replacement"])) == {1}
    assert set(np.unique(_dynamic_batch(outputs["dynamic", "none"])["whole_word_replacement"])) \
        == {0}
    ids = batch["input_ids"].numpy()
    lengths = batch["input_mask"].numpy().sum(axis=1)
    total = np.zeros(4, int)
    vocab_ids = tokenization.load_vocab(vocab_file)
    locator = _Locator(reference)
    num_words = all_mask = mixed = 0
    for seed in (1, 2):
        out = dynamic_masking.mask_batch(batch, dynamic_masking.batch_seed(seed, 0), PREDS,
                                         1500)
        weights = out["masked_lm_weights"].numpy() > 0
        positions = out["masked_lm_positions"].numpy()
        masked = np.zeros_like(ids, dtype=bool)
        now = out["input_ids"].numpy()
        for row in range(len(ids)):
            masked[row, positions[row][weights[row]]] = True
            # Each word's pieces got one 80-10-10 choice.
            words, _ = _words(list(ids[row][:lengths[row]]), vocab_ids["[SEP]"], locator)
            words = [np.array(w) for w in words if masked[row][w].all()]
            counts = _replacements(words, now[row], ids[row], vocab_ids["[MASK]"])
            num_words += len(words)
            all_mask += counts[0]
            mixed += counts[1]
        total += _word_counts(ids, masked, lengths, vocab_file, reference)
        fraction = masked.sum() / lengths.sum()
        assert 0.135 < fraction < 0.165, fraction
    assert total[2] == 0 and total[0] > 6000 and total[1] > 600, total
    assert num_words > 600 and mixed == 0
    assert 0.7 < all_mask / num_words < 0.9, (all_mask, num_words)


def test_run_pretraining_reads_the_dynamic_records(outputs):
    from bert_tf.tasks import pretraining

    path = outputs["dynamic", "jieba"]
    assert pretraining.check_pretraining_records([path], SEQ, PREDS) is True
    input_fn = pretraining.input_fn_builder([path], SEQ, PREDS, is_training=True, dynamic=True,
                                            vocab_size=1500, random_seed=3)
    batch = next(iter(input_fn({"batch_size": 8})))
    assert set(batch) == set(record_writing.pretraining_feature_spec(SEQ, PREDS))
    assert batch["masked_lm_weights"].numpy().sum() > 8 * 5


def test_word_ids_follow_the_words(outputs, vocab_file, reference):
    """Positions share a word id exactly when they are pieces of one reference word."""
    batch = _dynamic_batch(outputs["dynamic", "jieba"])
    ids, word_ids = batch["input_ids"].numpy(), batch["word_ids"].numpy()
    locator = _Locator(reference)
    sep_id = tokenization.load_vocab(vocab_file)["[SEP]"]
    checked = 0
    for row in range(len(ids)):
        length = int(batch["input_mask"].numpy()[row].sum())
        seps = [p for p in range(length) if ids[row][p] == sep_id]
        start = 1
        for end in seps:
            keys = locator.keys_of(list(ids[row][start:end]))
            if keys is not None:
                for p in range(start + 1, end):
                    same_word = word_ids[row][p] == word_ids[row][p - 1]
                    assert same_word == (keys[p - start] == keys[p - start - 1]), (row, p)
                    checked += 1
            start = end + 1
    assert checked > 10_000


def test_the_documented_ref_line(vocab_file):
    from bert_tf.data import word_segmenters

    tokenizer = tokenization.FullTokenizer(vocab_file)
    line = "北京欢迎你们，iPhone很便宜"
    pieces, chinese = word_segmenters.piece_chars(tokenizer, line)
    assert pieces == tokenizer.tokenize(line)
    assert pieces[:7] == ["北", "京", "欢", "迎", "你", "们", "，"]
    words = jieba.lcut(line)
    assert words[:3] == ["北京", "欢迎", "你们"]
    flags = word_segmenters.continuation_flags(
        chinese, word_segmenters.chinese_continuations(words))
    assert words[-2:] == ["很", "便宜"]
    last = len(pieces)  # 宜, the last piece, at position len(pieces) ([CLS] = 0)
    assert [i + 1 for i, f in enumerate(flags) if f] == [2, 4, 6, last]
    assert word_segmenters.parse_ref_line(f"[2, 4, 6, {last}]\n", chinese, "x") == flags


def test_build_vocab_keeps_chinese_characters_whole(vocab_file):
    from tokenizers import BertWordPieceTokenizer

    tokens = [t.strip("\n") for t in open(vocab_file, encoding="utf-8")]
    text = open(CHINESE_TXT, encoding="utf-8").read()
    chinese = {c for c in text if _is_cjk(c)}
    # Every Chinese character of the sample on its own, none inside a longer token or "##",
    # as the tokenizers trainer's vocab has them; Latin words learn "##" pieces.
    trainer = BertWordPieceTokenizer(lowercase=True, strip_accents=None, clean_text=True,
                                     handle_chinese_chars=True)
    trainer.train([CHINESE_TXT], vocab_size=1500, min_frequency=1, limit_alphabet=10_000,
                  show_progress=False)
    for vocab_tokens in (tokens, list(trainer.get_vocab())):
        assert {t for t in vocab_tokens if any(_is_cjk(c) for c in t)} == chinese
    single = {t for t in tokens if t.startswith("##") and len(t) == 3}
    assert single == {t for t in trainer.get_vocab() if t.startswith("##") and len(t) == 3}
    assert {"##phone", "##thon"} <= set(tokens)
    tokenizer = tokenization.FullTokenizer(vocab_file)
    assert tokenizer.tokenize("我用WiFiPhone和Python。") == [
        "我", "用", "wifi", "##phone", "和", "python", "。"]


def test_prepare_corpus_splits_chinese_sentences(tmp_path):
    documents = open(CHINESE_TXT, encoding="utf-8").read().strip().split("\n\n")
    # One paragraph per document, as raw text has them.
    raw = tmp_path / "raw.txt"
    raw.write_text("\n\n".join("".join(d.split("\n")) for d in documents) + "\n")
    out = tmp_path / "out"
    corpus.prepare_corpus(options.PrepareCorpusOptions(
        input_file=str(raw), output_dir=str(out), language="zh", num_workers=1),
        log_fn=lambda *a: None)
    written = open(out / "corpus-00000-of-00001.txt", encoding="utf-8").read()
    assert written.strip().split("\n\n") == documents
    assert corpus.split_chinese_sentences("他说：“走吧。”然后走了；她笑了。3.5元。iPhone很贵！") \
        == ["他说：“走吧。”", "然后走了；", "她笑了。", "3.5元。", "iPhone很贵！"]
    assert corpus.split_chinese_sentences("他问：“真的吗？你去吗？”（注：是。）好") \
        == ["他问：“真的吗？你去吗？”", "（注：是。）", "好"]


def test_ref_files_for_several_inputs(tmp_path, vocab_file, ref_file):
    """One ref file per input file, in the order the inputs expand to; a line of full-width
    spaces is a blank line (a document break) in both readers."""
    documents = open(CHINESE_TXT, encoding="utf-8").read().strip().split("\n\n")
    refs = iter(open(ref_file).read().splitlines())
    inputs, ref_files = [], []
    for k, part in enumerate((documents[:20], documents[20:])):
        text = "\n\u3000\u3000\n".join(part) + "\n"
        (tmp_path / f"in{k}.txt").write_text(text, encoding="utf-8")
        lines = [next(refs) for line in text.splitlines() if line.strip()]
        (tmp_path / f"in{k}.ref").write_text("".join(f"{r}\n" for r in lines))
        inputs.append(str(tmp_path / f"in{k}.txt"))
        ref_files.append(str(tmp_path / f"in{k}.ref"))
    written = []
    for segmenter, ref in (("jieba", None), ("ref_file", ",".join(ref_files))):
        config = options.PretrainingDataConfig(
            vocab_file, do_whole_word_mask=True, max_seq_length=SEQ,
            max_predictions_per_seq=PREDS, dupe_factor=1, word_segmenter=segmenter,
            word_segmenter_ref_file=ref)
        summary = pretraining_data.create_pretraining_data(
            str(tmp_path / "in*.txt"), str(tmp_path / f"{segmenter}.tfrecord"), config,
            num_workers=1, chunk_size_mb=CHUNK_MB, log_fn=lambda *a: None)
        assert summary["documents"] == len(documents)
        written.append((tmp_path / f"{segmenter}.tfrecord").read_bytes())
    assert written[0] == written[1]


def _bad_ref(tmp_path, lines):
    path = tmp_path / "bad.ref"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_bad_ref_files_are_one_line_errors(tmp_path, vocab_file, ref_file):
    lines = open(ref_file).read().splitlines()
    out = tmp_path / "o.tfrecord"
    short = _bad_ref(tmp_path, lines[:-1])
    with pytest.raises(BertTfError) as e:
        _create(vocab_file, out, segmenter="ref_file", ref=short)
    assert str(e.value) == (
        f"--word_segmenter_ref_file: '{short}' has {len(lines) - 1} lines but '{CHINESE_TXT}' "
        f"has {len(lines)} non-blank lines; make the ref file from this input file (one JSON "
        "list per non-blank input line of the positions of the pieces that continue a word, "
        "[CLS] = 0, as run_chinese_ref.py writes).")
    # [SEP]'s position (one past the pieces), a Latin piece's.
    for number, position in _bad_positions(vocab_file):
        bad = list(lines)
        bad[number - 1] = json.dumps([position])
        path = _bad_ref(tmp_path, bad)
        with pytest.raises(BertTfError) as e:
            _create(vocab_file, out, segmenter="ref_file", ref=path)
        message = str(e.value)
        assert "\n" not in message
        assert message.startswith(
            f"--word_segmenter_ref_file: '{path}' line {number} (non-blank line {number} of "
            f"'{CHINESE_TXT}'): position {position} is not a Chinese character of the line's ")
        assert message.endswith("pieces ([CLS] = 0); make the ref file from this input file "
                                "with the same --vocab_file and --do_lower_case.")
    path = _bad_ref(tmp_path, ["[1, 2"] + lines[1:])
    with pytest.raises(BertTfError, match=r"line 1 .* is not a JSON list of positions; pass"):
        _create(vocab_file, out, segmenter="ref_file", ref=path)
    assert not out.exists()


def _bad_positions(vocab_file):
    """(non-blank line number, position) of [SEP] in line 250 and of a Latin piece."""
    lines = [x for x in open(CHINESE_TXT, encoding="utf-8").read().splitlines() if x.strip()]
    tokenizer = tokenization.FullTokenizer(vocab_file)
    latin = next(n for n, line in enumerate(lines, 1) if "WiFi" in line)
    pieces = tokenizer.tokenize(lines[latin - 1])
    return [(250, len(tokenizer.tokenize(lines[249])) + 1),
            (latin, next(i for i, p in enumerate(pieces) if p.isascii() and p.isalpha()) + 1)]


def test_flag_combinations_are_one_line_errors(tmp_path, vocab_file, ref_file):
    out = tmp_path / "o.tfrecord"
    cases = [
        (dict(segmenter="jieba", do_whole_word_mask=False),
         "--word_segmenter=jieba groups the characters of a word for whole-word masking; "
         "pass --do_whole_word_mask=True too."),
        (dict(segmenter="ref_file"),
         "--word_segmenter=ref_file: no --word_segmenter_ref_file given; pass the ref file(s) "
         "(run_chinese_ref.py's output), one per input file."),
        (dict(segmenter="jieba", ref=ref_file),
         "--word_segmenter_ref_file is read only with --word_segmenter=ref_file (not jieba); "
         "pass --word_segmenter=ref_file or drop --word_segmenter_ref_file."),
        (dict(segmenter="ref_file", ref=f"{ref_file},{ref_file}"),
         "--word_segmenter_ref_file: 2 file(s) for 1 input file(s); pass one ref file per "
         "--input_file file, comma-separated, in the order the input files expand to "
         f"({CHINESE_TXT})."),
    ]
    for flags, message in cases:
        do_whole_word_mask = flags.pop("do_whole_word_mask", True)
        config_flags = {"do_whole_word_mask": do_whole_word_mask}
        with pytest.raises(BertTfError) as e:
            _create_with(vocab_file, out, config_flags, **flags)
        assert str(e.value) == message


def _create_with(vocab_file, output, config_flags, segmenter, ref=None):
    config = options.PretrainingDataConfig(
        vocab_file, max_seq_length=SEQ, max_predictions_per_seq=PREDS, word_segmenter=segmenter,
        word_segmenter_ref_file=ref, **config_flags)
    return pretraining_data.create_pretraining_data(CHINESE_TXT, str(output), config,
                                                    num_workers=1, log_fn=lambda *a: None)


def test_jieba_missing_is_one_line_saying_what_to_install(tmp_path, vocab_file):
    script = os.path.join(REPO, "scripts", "create_pretraining_data.py")
    code = ("import runpy, sys; sys.modules['jieba'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    result = subprocess.run(
        [sys.executable, "-c", code, script, f"--input_file={CHINESE_TXT}",
         f"--output_file={tmp_path / 'o.tfrecord'}", f"--vocab_file={vocab_file}",
         "--do_whole_word_mask=True", "--word_segmenter=jieba", "--num_workers=1"],
        capture_output=True, text=True, env=child_env(), timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        'error: --word_segmenter=jieba needs jieba: pip install "bert-tf[chinese]" (or pip '
        'install jieba).']
    assert not (tmp_path / "o.tfrecord").exists()
