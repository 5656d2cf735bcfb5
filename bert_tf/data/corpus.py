"""Raw text -> the input of create_pretraining_data.py: one sentence a line, a blank line
between documents, in `num_shards` files (scripts/prepare_corpus.py).

Inputs (`--format`, or `auto` from the file name and first bytes):

* `text`: a blank line starts a new document; every other line is a paragraph.
* `jsonl`: one JSON object a line, a document each; its `--text_key` holds the text, whose
  lines are paragraphs.
* `wiki_xml`: a MediaWiki XML export (`pages-articles.xml`, or `.xml.bz2` as downloaded),
  streamed with `xml.etree.ElementTree.iterparse` and every page freed once read, so memory
  does not grow with the dump. Kept: pages of namespace 0 (articles) that are not redirects;
  talk, user, file, template, category, ... pages are skipped. Their wikitext is cleaned by
  `clean_wikitext`.

Paragraphs are split into sentences by `sentencex` (an optional dependency, `pip install
bert_tf[corpus]`): Wikimedia's rule-based segmenter, kept up to date, for the ~300 languages
of Wikipedia, with a compiled core. Measured alternatives (docs/benchmarks-history.md):
pysbd is pure Python, orders of magnitude slower, and unreleased since 2021; NLTK's
punkt needs a model download at run time. sentencex does not split inside quotes or
brackets, which is why it is given one paragraph (one line) at a time. For Chinese
(`--language=zh`, `zh-*`, `yue`, `wuu`, `lzh`) its sentences are split further after 。！？；
(and !?; with their closing quotes and brackets, outside quotes and brackets), which sentencex
leaves joined at ；and where no space or Chinese character follows (3.5元。iPhone很贵。).

Work is spread over `num_workers` processes: the parent reads documents in batches of about
`BATCH_BYTES`, workers clean and split them, the parent writes them in input order (document
k to shard k mod num_shards), so the output does not depend on the number of workers. Shards
are written to temporary names and renamed when complete.
"""

import bz2
import dataclasses
import html
import json
import os
import re
import time
import xml.etree.ElementTree as ElementTree

from absl import logging

from bert_tf import fileio
from bert_tf.data import parallel
from bert_tf.errors import BertTfError, missing_extra

FORMATS = ("auto", "text", "jsonl", "wiki_xml")
# Text per task sent to a worker process (bytes of UTF-8).
BATCH_BYTES = 1 << 20
PROGRESS_INTERVAL_S = 10.0

# Sections whose content is not prose (cut with their subsections).
_DROPPED_SECTIONS = frozenset((
    "references", "external links", "see also", "further reading", "notes", "bibliography",
    "sources", "footnotes", "citations", "notes and references", "works cited"))
# Link targets that are not text: files, categories, interwiki / interlanguage links.
_NON_TEXT_LINK = re.compile(r"^\s*:?\s*(file|image|media|category|[a-z]{2,3}(-[a-z]+)?)\s*:",
                            re.IGNORECASE)
_COMMENT = re.compile(r"<!--.*?(-->|$)", re.DOTALL)
# Tags dropped with their content (references, maths, code, galleries, ...).
_DROPPED_TAGS = ("ref", "math", "gallery", "timeline", "score", "syntaxhighlight", "source",
                 "pre", "code", "chem", "ce", "imagemap", "mapframe", "graph", "templatedata",
                 "references", "noinclude", "includeonly")
_TAG_NAMES = "|".join(_DROPPED_TAGS)
_DROPPED_ELEMENTS = re.compile(
    rf"<({_TAG_NAMES})\b[^>]*?/>|<({_TAG_NAMES})\b[^>]*>.*?</\2\s*>", re.DOTALL | re.IGNORECASE)
_LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_TAG = re.compile(r"</?[a-zA-Z][^>]*?>")
_TEMPLATE = re.compile(r"\{\{(?:(?!\{\{|\}\}).)*?\}\}", re.DOTALL)
_TABLE = re.compile(r"\{\|(?:(?!\{\|).)*?\|\}", re.DOTALL)
_INTERNAL_LINK = re.compile(r"\[\[([^\[\]]*)\]\]")
_EXTERNAL_LINK = re.compile(r"\[(?:https?:|ftp:|mailto:|//)[^\s\]]*\s*([^\]]*)\]")
_BOLD_ITALIC = re.compile(r"'{2,}")
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_HEADING = re.compile(r"^(={1,6})\s*(.*?)\s*\1\s*$")
_SPACES = re.compile(r"\s+")


def _link_text(match):
    """Text of an internal link: [[target|text]] -> text, [[target]] -> target; nothing for
    files, categories and interlanguage links."""
    target, _, text = match.group(1).partition("|")
    if _NON_TEXT_LINK.match(target):
        return ""
    return text.rpartition("|")[2] if text else target


def _remove_nested(pattern, text):
    """Removes matches of `pattern` innermost first, until none is left (nesting)."""
    while True:
        text, count = pattern.subn("", text)
        if not count:
            return text


def clean_wikitext(text):
    """Plain paragraphs of an article's wikitext: a list of strings.

    The rules, in order: drop comments; drop <ref>, <math>, <gallery>, code and similar
    elements with their content; drop templates ({{...}}, nested ones too: infoboxes,
    citations, navigation boxes) and tables ({| ... |}); internal links become their text
    ([[a|b]] -> b, [[a]]s -> as), file, category and interlanguage links go, nested ones
    (captions) included; external links become their label ([http://x label] -> label);
    bold / italic quotes, behaviour switches (__TOC__) and remaining HTML tags go, keeping
    their content (<br> ends a line); HTML entities are decoded. Then line by line: headings
    end a paragraph and the sections References, External links, See also, Further
    reading, Notes (and similar, `_DROPPED_SECTIONS`) are cut with their subsections; list
    items (* # ; :), table and template leftovers and lines without a letter are dropped;
    every other line is a paragraph, its white space collapsed.
    """
    text = _COMMENT.sub("", text)
    text = _DROPPED_ELEMENTS.sub("", text)
    text = _remove_nested(_TEMPLATE, text)
    text = _remove_nested(_TABLE, text)
    while True:
        text, count = _INTERNAL_LINK.subn(_link_text, text)
        if not count:
            break
    text = _EXTERNAL_LINK.sub(r"\1", text)
    text = _BOLD_ITALIC.sub("", text)
    text = _MAGIC_WORD.sub("", text)
    text = _LINE_BREAK.sub("\n", text)
    text = _TAG.sub("", text)
    text = html.unescape(text)
    paragraphs, dropped_level = [], 0
    for line in text.split("\n"):
        heading = _HEADING.match(line.strip())
        if heading:
            level = len(heading.group(1))
            if dropped_level and level > dropped_level:
                continue  # a subsection of a dropped section
            dropped_level = level if heading.group(2).lower() in _DROPPED_SECTIONS else 0
            continue
        line = _SPACES.sub(" ", line).strip()
        if (dropped_level or not line or line[0] in "*#;:|!{}"
                or not any(c.isalpha() for c in line)):
            continue
        paragraphs.append(line)
    return paragraphs


# ------------------------------------------------------------------------------- readers


def _open(path):
    """Opens `path` for reading bytes, decompressing .bz2 (multi-stream dumps too)."""
    if path.endswith(".bz2"):
        return bz2.open(fileio.open_binary(path), "rb")
    return fileio.open_binary(path)


def detect_format(path):
    """The format of `path` for --format=auto: by extension, else by its first bytes."""
    name = path[:-4] if path.endswith(".bz2") else path
    if name.endswith(".xml"):
        return "wiki_xml"
    if name.endswith((".jsonl", ".json")):
        return "jsonl"
    try:
        with _open(path) as f:
            head = f.read(4096).lstrip()
    except OSError as e:
        raise BertTfError(f"--input_file: '{path}' cannot be read ({e}); pass a readable "
                          "file.") from None
    if b"\x00" in head:
        _binary_error(path)
    if head.startswith((b"<mediawiki", b"<?xml")):
        return "wiki_xml"
    return "jsonl" if head.startswith(b"{") else "text"


def _binary_error(path, line=None):
    where = f" line {line}" if line else ""
    raise BertTfError(f"--input_file: '{path}'{where} holds a NUL byte, so it is binary (or "
                      "UTF-16), not text; pass UTF-8 text, JSON lines or a MediaWiki XML "
                      "export (.xml / .xml.bz2).")


def _decoded_lines(path):
    """(line number, text) of each line of a UTF-8 file; one error naming the line if not."""
    try:
        with _open(path) as f:
            for number, raw in enumerate(f, 1):
                if b"\x00" in raw:
                    _binary_error(path, number)
                try:
                    yield number, raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise BertTfError(
                        f"--input_file: '{path}' line {number} is not valid UTF-8 (byte "
                        f"0x{raw[e.start]:02x}); convert it to UTF-8 (e.g. with iconv) or "
                        "leave it out.") from None
    except OSError as e:  # e.g. a damaged .bz2
        raise BertTfError(f"--input_file: '{path}' cannot be read ({e}); pass an intact "
                          "file.") from None


def read_text(path):
    """Documents (lists of paragraph lines) of a text file: a blank line between documents."""
    document = []
    for _, line in _decoded_lines(path):
        line = line.strip()
        if line:
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def read_jsonl(path, text_key):
    """Documents of a JSON-lines file: the lines of each object's `text_key`."""
    for number, line in _decoded_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise BertTfError(f"--input_file: '{path}' line {number} is not JSON ({e.msg}); "
                              "pass one JSON object a line, or --format=text.") from None
        text = record.get(text_key) if isinstance(record, dict) else None
        if not isinstance(text, str):
            raise BertTfError(f"--text_key: '{path}' line {number} has no string field "
                              f"'{text_key}'; pass the key that holds the text.")
        paragraphs = [p.strip() for p in text.split("\n") if p.strip()]
        if paragraphs:
            yield paragraphs


def read_wiki_xml(path):
    """(title, wikitext) of each article of a MediaWiki XML export: namespace 0, not a
    redirect. Streamed: each page is freed once read."""
    root = None
    try:
        for event, element in ElementTree.iterparse(_open(path), events=("start", "end")):
            if root is None:
                root = element
                if root.tag.rpartition("}")[2] != "mediawiki":
                    raise BertTfError(f"--input_file: '{path}' is XML but not a MediaWiki "
                                      f"export (root <{root.tag}>); pass a pages-articles "
                                      "dump or another --format.")
            if event != "end" or element.tag.rpartition("}")[2] != "page":
                continue
            fields = {child.tag.rpartition("}")[2]: child for child in element}
            revision = fields.get("revision")
            text = None
            if revision is not None:
                text = next((c.text for c in revision if c.tag.endswith("text")), None)
            namespace = fields["ns"].text if "ns" in fields else "0"
            if (namespace.strip() == "0" and "redirect" not in fields and text
                    and not text.lstrip()[:9].upper().startswith("#REDIRECT")):
                yield fields["title"].text if "title" in fields else "", text
            root.clear()  # frees the page (and any before it)
    except ElementTree.ParseError as e:
        raise BertTfError(f"--input_file: '{path}' is not a well-formed MediaWiki XML export "
                          f"({e}); pass a complete .xml / .xml.bz2 dump or another "
                          "--format.") from None
    except (OSError, EOFError) as e:
        raise BertTfError(f"--input_file: '{path}' cannot be read ({e}); pass an intact "
                          "file.") from None


# ---------------------------------------------------------------------------- processing


@dataclasses.dataclass(frozen=True)
class _ProcessorConfig:
    language: str


class DocumentProcessor:
    """Cleans (wiki) and splits documents into sentences; one per worker process."""

    def __init__(self, config):
        self.language = config.language
        self._segment = _sentence_splitter()
        self._chinese = config.language.split("-")[0].lower() in CHINESE_LANGUAGES

    def sentences(self, paragraphs):
        """The sentences of a list of paragraphs."""
        sentences = (x for p in paragraphs for x in self._segment(self.language, p))
        if self._chinese:
            sentences = (x for s in sentences for x in split_chinese_sentences(s))
        return [s for s in (x.strip() for x in sentences) if s]

    def process(self, task):
        """task: (format, documents) -> list of documents, each a list of sentences (empty
        ones left out)."""
        kind, documents = task
        if kind == "wiki_xml":
            documents = [clean_wikitext(text) for text in documents]
        return [s for s in (self.sentences(d) for d in documents) if s]


# Language codes (before any "-") whose text ends sentences with 。！？；
CHINESE_LANGUAGES = ("zh", "yue", "wuu", "lzh")
_CHINESE_ENDS = frozenset("。！？；!?;")
_OPENING = "“‘「『（(【《〈［"
_CLOSING = "”’」』）)】》〉］"


def split_chinese_sentences(text):
    """`text` cut after each run of 。！？；!?; and the closing quotes and brackets right after
    it, where that run is outside quotes and brackets (or its closing mark ends them, as in
    他说：“走吧。”) and more text follows.

    Returns:
      A list of str that joined give `text`.
    """
    pieces, start, depth, i = [], 0, 0, 0
    while i < len(text):
        char = text[i]
        i += 1
        if char in _OPENING:
            depth += 1
            continue
        if char in _CLOSING:
            depth = max(depth - 1, 0)
            ends = depth == 0 and i >= 2 and text[i - 2] in _CHINESE_ENDS
        else:
            ends = depth == 0 and char in _CHINESE_ENDS
        if ends:
            while i < len(text) and (text[i] in _CHINESE_ENDS or text[i] in _CLOSING):
                i += 1
            if i < len(text):
                pieces.append(text[start:i])
                start = i
    pieces.append(text[start:])
    return pieces


def _sentence_splitter():
    try:
        import sentencex
    except ImportError:
        raise missing_extra(
            "prepare_corpus needs the sentencex package for sentence splitting", "corpus",
            "sentencex") from None
    return sentencex.segment


def _documents(paths, data_format, text_key, counts):
    """Yields (format, batch of documents) tasks over all files; counts['text_bytes']."""
    for path in paths:
        kind = detect_format(path) if data_format == "auto" else data_format
        logging.info("Reading %s as %s", path, kind)
        if kind == "wiki_xml":
            documents = (text for _, text in read_wiki_xml(path))
        elif kind == "jsonl":
            documents = read_jsonl(path, text_key)
        else:
            documents = read_text(path)
        batch, size = [], 0
        for document in documents:
            batch.append(document)
            size += len(document.encode("utf-8")) if isinstance(document, str) else sum(
                len(line.encode("utf-8")) for line in document)
            if size >= BATCH_BYTES:
                counts["text_bytes"] += size
                yield kind, batch
                batch, size = [], 0
        if batch:
            counts["text_bytes"] += size
            yield kind, batch


class _ShardWriter:
    """Writes documents to shards in turn, each under a temporary name until `close()`."""

    def __init__(self, output_dir, num_shards):
        self.paths = [os.path.join(output_dir, f"corpus-{i:05d}-of-{num_shards:05d}.txt")
                      for i in range(num_shards)]
        self._shards = fileio.WholeFiles(
            self.paths, lambda path: open(path, "w", encoding="utf-8"))
        self._files = self._shards.files
        self.num_documents = self.num_sentences = 0

    def write(self, sentences):
        f = self._files[self.num_documents % len(self._files)]
        f.write("\n".join(sentences))
        f.write("\n\n")
        self.num_documents += 1
        self.num_sentences += len(sentences)

    def close(self):
        self._shards.close()

    def abort(self):
        self._shards.abort()


def _make_dir(path):
    fileio.require_local(path, "output_dir", "prepare_corpus.py writes its shards")
    if os.path.exists(path) and not os.path.isdir(path):
        raise BertTfError(f"--output_dir: '{path}' is a file, not a directory; pass a directory.")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise BertTfError(f"--output_dir: cannot create directory '{path}' ({e}); pass a "
                          "writable directory.") from None


def _check_options(options):
    if options.format not in FORMATS:
        raise BertTfError(f"--format={options.format} is not a known format; pass one of "
                          f"{', '.join(FORMATS)}.")
    for name in ("num_shards", "num_workers"):
        if getattr(options, name) < 1:
            raise BertTfError(f"--{name}={getattr(options, name)} is out of range; pass a "
                              "value at least 1.")
    if not options.output_dir:
        raise BertTfError("--output_dir: no directory given; pass where to write the shards.")


def prepare_corpus(options, log_fn=logging.info):
    """Writes `options.num_shards` files of one sentence a line (scripts/prepare_corpus.py).

    Args:
      options: `bert_tf.options.PrepareCorpusOptions`.
      log_fn: receives the progress and summary lines (printf-style).

    Returns:
      A dict: output_files, documents, sentences, text_mb (text read, after decompression),
      seconds, mb_per_s.

    Raises:
      BertTfError: an unknown --format, a missing, binary, non-UTF-8 or malformed input, input
        without text, or sentencex missing; nothing is written then.
    """
    start = time.time()
    _check_options(options)
    paths = fileio.expand_input_files(
        options.input_file, what="text, JSON-lines or MediaWiki XML files (comma-separated, "
        "globs allowed)")
    for path in paths:
        if options.format == "auto":
            detect_format(path)  # a binary file fails here, before anything is written
    _sentence_splitter()
    counts = {"text_bytes": 0}
    tasks = _documents(paths, options.format, options.text_key, counts)
    _make_dir(options.output_dir)
    writer = _ShardWriter(options.output_dir, options.num_shards)
    last_progress = time.time()
    try:
        with parallel.OrderedProcessPool(
                tasks, DocumentProcessor, _ProcessorConfig(options.language),
                options.num_workers, what="prepare_corpus", hint="pass fewer --num_workers") \
                as pool:
            for documents in pool.results():
                for sentences in documents:
                    writer.write(sentences)
                if time.time() - last_progress >= PROGRESS_INTERVAL_S:
                    last_progress = time.time()
                    log_fn("%d documents, %d sentences, %.1f MB of text, %.2f MB/s",
                           writer.num_documents, writer.num_sentences,
                           counts["text_bytes"] / 1e6,
                           counts["text_bytes"] / 1e6 / (last_progress - start))
        if not writer.num_documents:
            raise BertTfError(f"--input_file: {', '.join(paths)} hold(s) no text (no article "
                              "or document with a sentence); check the files and --format.")
    except BaseException:
        writer.abort()
        raise
    writer.close()
    seconds = time.time() - start
    summary = {"output_files": writer.paths, "documents": writer.num_documents,
               "sentences": writer.num_sentences, "text_mb": counts["text_bytes"] / 1e6,
               "seconds": seconds, "mb_per_s": counts["text_bytes"] / 1e6 / seconds}
    log_fn("Wrote %d documents, %d sentences to %d shard(s) in %s; read %.2f MB of text in "
           "%.1f s: %.2f MB/s", summary["documents"], summary["sentences"],
           len(writer.paths), options.output_dir, summary["text_mb"], seconds,
           summary["mb_per_s"])
    return summary
