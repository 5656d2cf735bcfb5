"""Raw text -> masked-LM / next-sentence pre-training TFRecords, streamed and in parallel.

The algorithm is the one of Google's `create_pretraining_data.py`:

* Input: text files with one sentence a line and a blank line between documents. Each line is
  tokenized (WordPiece) once; a document is its list of sentences.
* Instances (`create_instances_from_document`): consecutive sentences of a document are packed
  into a chunk until it reaches the target length, which is `max_seq_length - 3` or, with
  probability `short_seq_prob`, a random length in [2, max_seq_length - 3]. A random number of
  the chunk's sentences form segment A. Half the time (always when the chunk is one sentence)
  segment B is a span from a random other document (next_sentence_labels = 1) and the unused
  sentences of the chunk are put back to be read again; otherwise B is the rest of the chunk
  (label 0). The pair is truncated to `max_seq_length - 3` tokens by removing one token at a
  time from the longer segment, at its front or back at random.
* Masking (`create_masked_lm_predictions`): `min(max_predictions_per_seq,
  max(1, round(len(tokens) * masked_lm_prob)))` positions, never [CLS] or [SEP], chosen in
  random order; with `do_whole_word_mask` all pieces of a word ("##" continuations) are masked
  together or not at all. A chosen token becomes [MASK] 80% of the time, stays unchanged 10%
  and becomes a random vocab token 10%.
* `dupe_factor` passes over every document, each with different random choices; the instances
  are shuffled and written round-robin to the output files (tf.train.Example,
  docs/compatibility.md §3).

Choices beyond the original (`--next_sentence_objective`, `--masking`, `--word_segmenter`):

* `next_sentence_objective`: `nsp` is the above. `sop` (ALBERT's sentence-order prediction):
  A and B are always consecutive parts of the chunk (a chunk of one sentence is cut at a random
  token), swapped half the time (next_sentence_labels = 1 means swapped); no sentence is read
  from another document. `none` (MLM only, RoBERTa's FULL-SENTENCES): one segment
  `[CLS] tokens [SEP]`, consecutive sentences packed up to `max_seq_length - 2` tokens, running
  on into the next document of the chunk after a [SEP] (never masked); `short_seq_prob` does
  not apply and next_sentence_labels is 0.
* `masking=dynamic`: the records keep the tokens unmasked and carry the words to mask
  (`word_ids`, whole words under `do_whole_word_mask`) and the [MASK] id instead of
  masked_lm_* (`record_writing.DYNAMIC_FEATURES`); run_pretraining masks them afresh every epoch
  with the same rules (`bert_tf.data.dynamic_masking`).
* `word_segmenter` (`jieba` or `ref_file`, with `do_whole_word_mask`): the characters of a
  segmenter's Chinese word are one masking unit too, besides the "##" pieces
  (`bert_tf.data.word_segmenters`), and the 80/10/10 choice is made once per unit: all [MASK],
  all random tokens or all unchanged. Dynamic records then carry `whole_word_replacement` = 1.
  A piece that continues such a word travels through packing and truncation as ~id (negative)
  in the sentences; `_add_instance` turns it back into the id and a flag.

What differs from the original, so that a corpus of any size streams through bounded memory
on all cores:

* The input is cut into chunks of whole documents: about `chunk_size_mb` of text each, cut at
  the first blank line after each chunk-size boundary of a file; every file starts a new chunk
  and a new document (the original runs on into the next file's first document when a file
  does not end with a blank line). Each chunk is processed on its own, by one of
  `num_workers` processes: the random "other document" of next-sentence prediction is drawn
  from the same chunk (the original draws from the whole corpus, held in memory) -- with
  chunks of many documents this is statistically the same -- and instances are shuffled
  within their chunk. A chunk's random generator is seeded from (`random_seed`, chunk index),
  so the output is a function of the input, the flags and `chunk_size_mb`, and is byte for
  byte the same for any `num_workers`.
* Work happens on token ids; a token's sentence is tokenized once for all `dupe_factor` passes.
* In whole-word masking a "##" piece right after [CLS] or [SEP] starts a group of its own (the
  original glues it to the last word of segment A).
* Outputs are written to temporary names and renamed when complete: a failed run leaves no
  half-written file under an output name.
"""

import collections
import dataclasses
import os
import random
import time

from absl import logging

from bert_tf import fileio, tokenization
from bert_tf.data import parallel, record_writing, word_segmenters
from bert_tf.errors import BertTfError
from bert_tf.fileio import require_file

# Progress lines at most this often (seconds).
PROGRESS_INTERVAL_S = 5.0
MASKING_CHOICES = ("static", "dynamic")
# The sentence-level objective the instances are built for (see the module docstring).
OBJECTIVES = ("nsp", "sop", "none")


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Bytes [start, end) of `path`: whole documents, processed as one unit."""

    index: int
    path: str
    start: int
    end: int
    # --word_segmenter=ref_file: its lines for this chunk (`word_segmenters.plan_ref_files`).
    ref: tuple = ()


@dataclasses.dataclass
class ChunkResult:
    """Serialized tf.train.Examples of one chunk (in output order) and counts."""

    records: list
    num_documents: int = 0
    num_sentences: int = 0
    num_bytes: int = 0
    num_tokens: int = 0
    num_masked: int = 0
    num_random_next: int = 0
    example_text: str = ""


def _next_document_boundary(reader, offset, size):
    """The offset just after the first blank line that starts at or after `offset`."""
    reader.seek(max(offset - 1, 0))
    if offset > 0:
        reader.readline()  # the rest of the line holding byte offset - 1
    while True:
        line = reader.readline()
        if not line:
            return size
        if not line.strip():
            return reader.tell()


def plan_chunks(paths, chunk_size_mb):
    """Cuts the input files into `Chunk`s of whole documents, ~chunk_size_mb MB each."""
    chunk_bytes = max(1, int(chunk_size_mb * 1e6))
    chunks = []
    for path in paths:
        size = fileio.file_size(path)
        start = 0
        with fileio.open_binary(path) as reader:
            while start < size:
                end = size
                if start + chunk_bytes < size:
                    end = _next_document_boundary(reader, start + chunk_bytes, size)
                if end - start > 10 * chunk_bytes:
                    logging.warning("%s: bytes %d-%d hold no blank line (document break); they "
                                    "are processed as one chunk in memory.", path, start, end)
                chunks.append(Chunk(len(chunks), path, start, end))
                start = end
    return chunks


def _line_number(path, chunk_start, data, offset):
    """1-based line number in `path` of byte `offset` of `data` (read from `chunk_start`)."""
    lines_before = 0
    with fileio.open_binary(path) as reader:
        while reader.tell() < chunk_start:  # in blocks: memory stays bounded
            lines_before += reader.read(min(1 << 20, chunk_start - reader.tell())).count(b"\n")
    return lines_before + data.count(b"\n", 0, offset) + 1


def _decode_chunk(chunk, data):
    """The chunk's text; BertTfError naming the file and line for binary or non-UTF-8 data."""
    nul = data.find(b"\x00")
    if nul >= 0:
        line = _line_number(chunk.path, chunk.start, data, nul)
        raise BertTfError(f"--input_file: '{chunk.path}' line {line} holds a NUL byte, so it is "
                          "binary (or UTF-16), not UTF-8 text; pass text files with one "
                          "sentence a line.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = _line_number(chunk.path, chunk.start, data, e.start)
        raise BertTfError(f"--input_file: '{chunk.path}' line {line} is not valid UTF-8 (byte "
                          f"0x{data[e.start]:02x}); convert the file to UTF-8 (e.g. with iconv) "
                          "or leave it out.") from None


class ChunkProcessor:
    """Turns chunks of raw text into serialized pre-training examples (one per process)."""

    def __init__(self, config):
        self.config = config
        self.tokenizer = tokenization.FullTokenizer(config.vocab_file, config.do_lower_case)
        vocab = self.tokenizer.vocab
        tokenization.check_vocab_has_special_tokens(vocab, config.vocab_file)
        self.cls_id, self.sep_id, self.mask_id = vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"]
        vocab_size = max(vocab.values()) + 1
        # The original draws a random token from list(vocab.keys()); these are their ids.
        self.random_ids = list(vocab.values())
        self.is_continuation = bytearray(vocab_size)
        for token, token_id in vocab.items():
            if token.startswith("##"):
                self.is_continuation[token_id] = 1
        self.encoder = record_writing.PretrainingExampleEncoder(
            vocab_size, config.max_seq_length, config.max_predictions_per_seq,
            mask_token_id=self.mask_id)
        # With a word segmenter a piece that continues a segmenter's word is stored as ~id
        # (negative) in the sentences, so that it travels through packing and truncation.
        self.segmented = config.word_segmenter != "none"
        self.jieba = None
        if config.word_segmenter == "jieba":
            self.jieba = word_segmenters.JiebaSegmenter()

    def read_documents(self, chunk):
        """Returns (documents, number of sentences, bytes read); a document is a list of
        sentences, a sentence a non-empty list of token ids."""
        with fileio.open_binary(chunk.path) as reader:
            reader.seek(chunk.start)
            data = reader.read(chunk.end - chunk.start)
        text = _decode_chunk(chunk, data)
        tokenize, vocab = self.tokenizer.tokenize, self.tokenizer.vocab
        if self.segmented:
            tokenize = self._segmented_tokenizer(chunk)
        documents, num_sentences = [[]], 0
        for line in text.split("\n"):
            line = line.strip()
            if not line:
                if documents[-1]:
                    documents.append([])
                continue
            tokens = tokenize(line)
            if tokens and self.segmented:
                documents[-1].append(tokens)  # ids already, ~id for a continuation
                num_sentences += 1
            elif tokens:
                documents[-1].append([vocab[t] for t in tokens])
                num_sentences += 1
        return [d for d in documents if d], num_sentences, len(data)

    def _segmented_tokenizer(self, chunk):
        """A function: non-blank line -> its token ids, ~id for a piece that continues a word
        of the segmenter (jieba's words, or the chunk's lines of the ref file in turn)."""
        tokenizer, vocab = self.tokenizer, self.tokenizer.vocab
        ref_lines = iter(word_segmenters.read_ref_lines(chunk.ref) if chunk.ref else ())
        line_numbers = iter(range(chunk.ref[3] if chunk.ref else 1, 1 << 62))

        def tokenize(line):
            pieces, chinese = word_segmenters.piece_chars(tokenizer, line)
            if self.jieba is not None:
                continuations = word_segmenters.chinese_continuations(self.jieba.words(line))
                flags = word_segmenters.continuation_flags(chinese, continuations)
                # As run_chinese_ref.py, which lists Chinese characters only: not [UNK].
                flags = [f and t != "[UNK]" for t, f in zip(pieces, flags, strict=True)]
            else:
                ref_line = next(line_numbers)
                where = (f"'{chunk.ref[0]}' line {ref_line} (non-blank line {ref_line} of "
                         f"'{chunk.path}')")
                flags = word_segmenters.parse_ref_line(next(ref_lines), chinese, where)
            return [~vocab[t] if f else vocab[t] for t, f in zip(pieces, flags, strict=True)]

        return tokenize

    def process(self, chunk):
        """Creates, shuffles and serializes the instances of `chunk`: a `ChunkResult`."""
        documents, num_sentences, num_bytes = self.read_documents(chunk)
        result = ChunkResult(records=[], num_documents=len(documents),
                             num_sentences=num_sentences, num_bytes=num_bytes)
        rng = random.Random(f"{self.config.random_seed}/{chunk.index}")
        for _ in range(self.config.dupe_factor):
            if self.config.next_sentence_objective == "none":
                self._create_full_sentence_instances(documents, rng, result)
                continue
            for document_index in range(len(documents)):
                self._create_instances_from_document(documents, document_index, rng, result)
        rng.shuffle(result.records)
        return result

    def _create_instances_from_document(self, documents, document_index, rng, result):
        """Appends the instances of one document to `result` (Google's algorithm, on ids)."""
        document = documents[document_index]
        max_num_tokens = self.config.max_seq_length - 3
        # Usually fill the whole sequence; sometimes a shorter one, to reduce the mismatch
        # between pre-training and fine-tuning on short inputs.
        target_seq_length = max_num_tokens
        if rng.random() < self.config.short_seq_prob:
            target_seq_length = rng.randint(2, max_num_tokens)
        current_chunk, current_length, i = [], 0, 0
        while i < len(document):
            current_chunk.append(document[i])
            current_length += len(document[i])
            if i == len(document) - 1 or current_length >= target_seq_length:
                if self.config.next_sentence_objective == "sop":
                    self._add_sentence_order_instance(current_chunk, max_num_tokens, rng, result)
                    current_chunk, current_length = [], 0
                    i += 1
                    continue
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = [t for segment in current_chunk[:a_end] for t in segment]
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = 1
                    target_b_length = target_seq_length - len(tokens_a)
                    # Ten tries for a different document (a corpus of one document has none).
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(documents) - 1)
                        if random_document_index != document_index:
                            break
                    random_document = documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    tokens_b = []
                    for segment in random_document[random_start:]:
                        tokens_b.extend(segment)
                        if len(tokens_b) >= target_b_length:
                            break
                    # The sentences of this chunk not used for A are read again (not wasted).
                    i -= len(current_chunk) - a_end
                else:
                    is_random_next = 0
                    tokens_b = [t for segment in current_chunk[a_end:] for t in segment]
                tokens_a, tokens_b = _truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                self._add_instance(tokens_a, tokens_b, is_random_next, rng, result)
                current_chunk, current_length = [], 0
            i += 1

    def _add_sentence_order_instance(self, chunk, max_num_tokens, rng, result):
        """Sentence-order prediction (ALBERT): A and B are consecutive parts of `chunk` (a list
        of sentences), swapped half the time (label 1); one sentence is cut at a random token."""
        if len(chunk) >= 2:
            a_end = rng.randint(1, len(chunk) - 1)
            tokens_a = [t for segment in chunk[:a_end] for t in segment]
            tokens_b = [t for segment in chunk[a_end:] for t in segment]
        else:
            if len(chunk[0]) < 2:
                return  # One token cannot make two segments.
            cut = rng.randint(1, len(chunk[0]) - 1)
            tokens_a, tokens_b = chunk[0][:cut], chunk[0][cut:]
        tokens_a, tokens_b = _truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
        is_swapped = int(rng.random() < 0.5)
        if is_swapped:
            tokens_a, tokens_b = tokens_b, tokens_a
        self._add_instance(tokens_a, tokens_b, is_swapped, rng, result)

    def _create_full_sentence_instances(self, documents, rng, result):
        """MLM-only instances (RoBERTa's FULL-SENTENCES): one segment of consecutive sentences
        packed up to `max_seq_length - 2` tokens, running on into the next document of the
        chunk after a [SEP]; a sentence longer than that is cut into full-length pieces."""
        max_num_tokens = self.config.max_seq_length - 2
        tokens = []
        for document in documents:
            starts_document = True
            for sentence in document:
                separator = [self.sep_id] if starts_document and tokens else []
                starts_document = False
                if tokens and len(tokens) + len(separator) + len(sentence) > max_num_tokens:
                    self._add_instance(tokens, None, 0, rng, result)
                    tokens, separator = [], []
                tokens.extend(separator)
                while len(tokens) + len(sentence) > max_num_tokens:
                    cut = max_num_tokens - len(tokens)
                    self._add_instance(tokens + sentence[:cut], None, 0, rng, result)
                    tokens, sentence = [], sentence[cut:]
                tokens.extend(sentence)
        if tokens:
            self._add_instance(tokens, None, 0, rng, result)

    def _add_instance(self, tokens_a, tokens_b, label, rng, result):
        """Masks `[CLS] A [SEP] B [SEP]` (`[CLS] A [SEP]` when `tokens_b` is None) and appends
        its serialized example to `result` (unmasked, with word ids, for dynamic masking)."""
        input_ids = [self.cls_id, *tokens_a, self.sep_id]
        num_tokens_a = len(tokens_a)
        continues = None
        if self.segmented:
            continues = [t < 0 for t in (*input_ids, *(tokens_b or ()))]
            input_ids = [~t if t < 0 else t for t in input_ids]
            tokens_b = tokens_b and [~t if t < 0 else t for t in tokens_b]
        if tokens_b is None:
            num_tokens_a = len(input_ids) - 2  # one segment: segment_ids all 0
            candidates = [p for p in range(1, len(input_ids) - 1) if input_ids[p] != self.sep_id]
        else:
            input_ids += [*tokens_b, self.sep_id]
            candidates = [*range(1, num_tokens_a + 1), *range(num_tokens_a + 2, len(input_ids) - 1)]
        if self.config.masking == "dynamic":
            positions = labels = ()
            word_ids = [0] * len(input_ids)
            for word_id, group in enumerate(self._groups(input_ids, candidates, continues), 1):
                for position in group:
                    word_ids[position] = word_id
            record = self.encoder.encode_dynamic(input_ids, num_tokens_a, word_ids, label,
                                                 whole_word_replacement=self.segmented)
        else:
            positions, labels = self._create_masked_lm_predictions(input_ids, candidates, rng,
                                                                   continues)
            record = self.encoder.encode(input_ids, num_tokens_a, positions, labels, label)
        if not result.records and not result.example_text:
            result.example_text = self._describe(input_ids, positions, labels, label)
        result.records.append(record)
        result.num_tokens += len(input_ids)
        result.num_masked += len(positions)
        result.num_random_next += label

    def _groups(self, input_ids, candidates, continues=None):
        """The candidate positions in masking units: whole words ("##" pieces, and with a word
        segmenter the positions where `continues` (a bool per position) is True, joined to the
        position before, when that is a candidate too) with --do_whole_word_mask, else single
        positions."""
        if not self.config.do_whole_word_mask:
            return [[position] for position in candidates]
        groups = []
        is_continuation = self.is_continuation
        for position in candidates:
            joins = is_continuation[input_ids[position]] or (continues and continues[position])
            if joins and groups and groups[-1][-1] == position - 1:
                groups[-1].append(position)
            else:
                groups.append([position])
        return groups

    def _create_masked_lm_predictions(self, input_ids, candidates, rng, continues=None):
        """Masks `input_ids` in place; returns (sorted masked positions, their original ids).

        `candidates`: the positions that may be masked (all but [CLS] and [SEP]), ascending.
        `continues`: with a word segmenter, a bool per position (see `_groups`); the 80-10-10
        choice is then made once per word.
        Equivalent in distribution to the original, which shuffles all candidate groups and
        takes them in that order while they fit, with far fewer random draws: whole-word groups
        are visited in a Fisher-Yates shuffle stopped once enough positions are chosen, and
        single positions are drawn as a uniform random subset.
        """
        config = self.config
        num_tokens = len(input_ids)
        num_to_predict = min(config.max_predictions_per_seq,
                             max(1, int(round(num_tokens * config.masked_lm_prob))))
        random_draw = rng.random
        if config.do_whole_word_mask:
            groups = self._groups(input_ids, candidates, continues)
            num_groups = len(groups)
            masked, words = [], []
            for k in range(num_groups):
                if len(masked) >= num_to_predict:
                    break
                j = k + int(random_draw() * (num_groups - k))
                groups[k], groups[j] = groups[j], groups[k]
                # Groups are disjoint, so the original's "already covered" check never fires.
                if len(masked) + len(groups[k]) <= num_to_predict:
                    masked.extend(groups[k])
                    words.append(groups[k])
            masked.sort()
            if continues is not None:
                labels = [input_ids[position] for position in masked]
                self._replace_words(input_ids, sorted(words), random_draw)
                return masked, labels
        else:
            # Single positions always fit, so the original takes the first num_to_predict of a
            # uniform shuffle: a uniform random subset, drawn here by rejection (few repeats).
            num_candidates = len(candidates)
            num_masked = min(num_to_predict, num_candidates)
            chosen = set()
            while len(chosen) < num_masked:
                chosen.add(int(random_draw() * num_candidates))
            masked = sorted([candidates[c] for c in chosen])
        labels = [input_ids[position] for position in masked]
        random_ids, mask_id = self.random_ids, self.mask_id
        for position in masked:
            if random_draw() < 0.8:  # 80%: [MASK]
                input_ids[position] = mask_id
            elif random_draw() >= 0.5:  # 10%: a random token; the other 10%: unchanged
                input_ids[position] = random_ids[int(random_draw() * len(random_ids))]
        return masked, labels

    def _replace_words(self, input_ids, words, random_draw):
        """The 80-10-10 rule once per word (a list of positions): all [MASK], all random
        tokens or all unchanged."""
        random_ids, mask_id = self.random_ids, self.mask_id
        for word in words:
            if random_draw() < 0.8:
                for position in word:
                    input_ids[position] = mask_id
            elif random_draw() >= 0.5:
                for position in word:
                    input_ids[position] = random_ids[int(random_draw() * len(random_ids))]

    def _describe(self, input_ids, positions, labels, is_random_next):
        inv_vocab = self.tokenizer.inv_vocab
        tokens = " ".join(inv_vocab.get(i, "?") for i in input_ids)
        masked = " ".join(f"{p}:{inv_vocab.get(t, '?')}" for p, t in zip(positions, labels,
                                                                         strict=True))
        return (f"tokens: {tokens}\n  masked (position:original): {masked}\n"
                f"  next_sentence_labels: {is_random_next}")


def truncation_counts(len_a, len_b, max_num_tokens):
    """How many tokens the original `truncate_seq_pair` removes from A and from B.

    It removes one token at a time from the longer segment (from B on a tie) until the pair
    fits; which segment loses a token depends only on the lengths, so the counts have a closed
    form: the longer one first loses its surplus, then B and A lose a token in turn.
    """
    excess = len_a + len_b - max_num_tokens
    remove_a = remove_b = 0
    if excess <= 0:
        return 0, 0
    if len_a > len_b:
        remove_a = min(excess, len_a - len_b)
    else:
        remove_b = min(excess, len_b - len_a)
    excess -= remove_a + remove_b
    return remove_a + excess // 2, remove_b + (excess + 1) // 2


def _truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Truncates the pair to `max_num_tokens` tokens as the original does: one token at a time
    from the longer segment, from its front or its back with probability 1/2 each.

    Only the number of front and back removals matters for the result, so they are drawn at
    once: the fronts of n removals are the set bits of n random bits (binomial(n, 1/2)).
    """
    remove_a, remove_b = truncation_counts(len(tokens_a), len(tokens_b), max_num_tokens)
    if remove_a:
        front = bin(rng.getrandbits(remove_a)).count("1")
        tokens_a = tokens_a[front:len(tokens_a) - (remove_a - front)]
    if remove_b:
        front = bin(rng.getrandbits(remove_b)).count("1")
        tokens_b = tokens_b[front:len(tokens_b) - (remove_b - front)]
    return tokens_a, tokens_b


def _check_config(config, num_workers, chunk_size_mb):
    """BertTfError naming the flag for any value outside its range."""
    checks = [
        ("max_seq_length", config.max_seq_length >= 5,
         "a value at least 5 ([CLS] A [SEP] B [SEP] with two text tokens)"),
        ("max_predictions_per_seq", config.max_predictions_per_seq >= 1, "a value at least 1"),
        ("dupe_factor", config.dupe_factor >= 1, "a value at least 1"),
        ("masked_lm_prob", 0.0 <= config.masked_lm_prob <= 1.0, "a value between 0 and 1"),
        ("short_seq_prob", 0.0 <= config.short_seq_prob <= 1.0, "a value between 0 and 1"),
        ("num_workers", num_workers >= 1, "a value at least 1"),
        ("chunk_size_mb", chunk_size_mb > 0, "a positive value"),
        ("masking", config.masking in MASKING_CHOICES, " or ".join(MASKING_CHOICES)),
        ("next_sentence_objective", config.next_sentence_objective in OBJECTIVES,
         " or ".join(OBJECTIVES)),
        ("word_segmenter", config.word_segmenter in word_segmenters.SEGMENTERS,
         " or ".join(word_segmenters.SEGMENTERS)),
    ]
    values = {**dataclasses.asdict(config), "num_workers": num_workers,
              "chunk_size_mb": chunk_size_mb}
    for flag, ok, requirement in checks:
        if not ok:
            raise BertTfError(f"--{flag}={values[flag]} is out of range; pass "
                              f"{requirement}.")
    _check_segmenter_config(config)


def _check_segmenter_config(config):
    """BertTfError for --word_segmenter / --word_segmenter_ref_file that do not go together."""
    segmenter, ref_file = config.word_segmenter, config.word_segmenter_ref_file
    if segmenter != "none" and not config.do_whole_word_mask:
        raise BertTfError(f"--word_segmenter={segmenter} groups the characters of a word for "
                          "whole-word masking; pass --do_whole_word_mask=True too.")
    if segmenter == "ref_file" and not ref_file:
        raise BertTfError("--word_segmenter=ref_file: no --word_segmenter_ref_file given; pass "
                          "the ref file(s) (run_chinese_ref.py's output), one per input file.")
    if ref_file and segmenter != "ref_file":
        raise BertTfError(f"--word_segmenter_ref_file is read only with --word_segmenter="
                          f"ref_file (not {segmenter}); pass --word_segmenter=ref_file or drop "
                          "--word_segmenter_ref_file.")
    if segmenter == "jieba":
        word_segmenters.import_jieba()  # a missing extra fails here, not in a worker


def _output_files(output_file, input_paths):
    paths = [p.strip() for p in (output_file or "").split(",") if p.strip()]
    if not paths:
        raise BertTfError("--output_file: no output given; pass one TFRecord path or several "
                          "comma-separated (shards).")
    if len(set(paths)) != len(paths):
        raise BertTfError(f"--output_file: '{output_file}' names a file twice; pass distinct "
                          "paths.")
    inputs = {os.path.abspath(p) for p in input_paths if "://" not in p}
    for path in paths:
        if "://" not in path and os.path.abspath(path) in inputs:
            raise BertTfError(f"--output_file: '{path}' is also an input file; pass another "
                              "path.")
    return paths


def _write_results(results, output_paths, total_mb, start_time, log_fn):
    """Writes the records of `results` (ChunkResults) round-robin; returns a Counter of totals."""
    import tensorflow as tf

    for path in output_paths:
        directory = os.path.dirname(path)
        if directory:
            tf.io.gfile.makedirs(directory)
    totals = collections.Counter()
    last_progress = time.time()
    with record_writing.RoundRobinRecordWriter(output_paths) as writer:
        for result in results:
            for record in result.records:
                writer.write(record)
            if result.example_text and not totals["instances"]:
                # At DEBUG (--verbosity=1): log_fn gets only the progress and summary.
                logging.debug("*** Example ***\n%s", result.example_text)
            totals.update(documents=result.num_documents, sentences=result.num_sentences,
                          bytes=result.num_bytes, instances=len(result.records),
                          tokens=result.num_tokens, masked=result.num_masked,
                          random_next=result.num_random_next)
            if time.time() - last_progress >= PROGRESS_INTERVAL_S:
                last_progress = time.time()
                log_fn("read %d documents (%.1f of %.1f MB), wrote %d instances, %.2f MB/s",
                       totals["documents"], totals["bytes"] / 1e6, total_mb,
                       totals["instances"], totals["bytes"] / 1e6 / (last_progress - start_time))
        if not totals["instances"]:
            writer.abort()  # no empty output files for an empty corpus
    return totals


def create_pretraining_data(input_file, output_file, config, num_workers=None,
                            chunk_size_mb=1.0, log_fn=logging.info):
    """Writes pre-training TFRecords for the text in `input_file` (the script's work).

    Args:
      input_file: comma-separated files and glob patterns: one sentence a line, a blank line
        between documents, UTF-8.
      output_file: comma-separated output TFRecord paths; examples go to them in turn.
      config: a `PretrainingDataConfig`.
      num_workers: worker processes (default: the number of CPUs). Does not change the output.
      chunk_size_mb: MB of text per chunk (see the module docstring). Changes the output.
      log_fn: receives the progress and summary lines (printf-style, like logging.info).

    Returns:
      A dict summary: input_files, output_files, chunks, documents, sentences, input_mb,
      instances, tokens, avg_masked (masked tokens per instance), random_next_fraction,
      seconds, mb_per_s (MB of input text per second, all dupe_factor passes included).

    Raises:
      BertTfError: for missing inputs, patterns that match nothing, binary or non-UTF-8 input,
        input without text, a vocab without [UNK]/[CLS]/[SEP]/[MASK] or a flag out of range.
    """
    start_time = time.time()
    if num_workers is None:
        num_workers = os.cpu_count() or 1
    _check_config(config, num_workers, chunk_size_mb)
    require_file(config.vocab_file, flag="vocab_file", what="vocab file")
    tokenization.check_vocab_has_special_tokens(tokenization.load_vocab(config.vocab_file),
                                                config.vocab_file)
    input_paths = fileio.expand_input_files(
        input_file, what="text files (comma-separated, globs allowed) with one sentence a line")
    output_paths = _output_files(output_file, input_paths)
    chunks = plan_chunks(input_paths, chunk_size_mb)
    if config.word_segmenter == "ref_file":
        plans = word_segmenters.plan_ref_files(config.word_segmenter_ref_file, input_paths,
                                               chunks)
        chunks = [dataclasses.replace(c, ref=plan) for c, plan in zip(chunks, plans, strict=True)]
    total_mb = sum(chunk.end - chunk.start for chunk in chunks) / 1e6
    log_fn("Reading %d input file(s), %.2f MB in %d chunk(s), with %d worker(s)",
           len(input_paths), total_mb, len(chunks), min(num_workers, max(len(chunks), 1)))

    with parallel.OrderedProcessPool(
            chunks, ChunkProcessor, config, num_workers, num_tasks=len(chunks),
            what="create_pretraining_data",
            hint="pass a smaller --chunk_size_mb or fewer --num_workers") as pool:
        totals = _write_results(pool.results(), output_paths, total_mb, start_time, log_fn)
    if not totals["instances"]:
        raise BertTfError(f"--input_file: {', '.join(input_paths)} hold(s) no text; pass "
                          "text files with one sentence a line and a blank line between "
                          "documents.")
    seconds = time.time() - start_time
    summary = {
        "input_files": input_paths,
        "output_files": output_paths,
        "chunks": len(chunks),
        "documents": totals["documents"],
        "sentences": totals["sentences"],
        "input_mb": totals["bytes"] / 1e6,
        "instances": totals["instances"],
        "tokens": totals["tokens"],
        "avg_masked": totals["masked"] / totals["instances"],
        "random_next_fraction": totals["random_next"] / totals["instances"],
        "seconds": seconds,
        "mb_per_s": totals["bytes"] / 1e6 / seconds,
    }
    log_fn("Wrote %d instances (%d tokens, %.2f masked per instance (masking=%s), %.1f%% "
           "next_sentence_labels = 1 (objective=%s)) to %s", summary["instances"],
           summary["tokens"], summary["avg_masked"], config.masking,
           100 * summary["random_next_fraction"], config.next_sentence_objective,
           ", ".join(output_paths))
    log_fn("Read %d documents, %d sentences, %.2f MB in %.1f s: %.2f MB/s (dupe_factor=%d)",
           summary["documents"], summary["sentences"], summary["input_mb"], seconds,
           summary["mb_per_s"], config.dupe_factor)
    return summary
