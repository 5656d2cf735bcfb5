"""Builds data/corpus/{train,eval}.txt from Jane Austen's "Persuasion" (1818).

The text is public domain. It is read from the Debian package `r-cran-janeaustenr`
(the CRAN package janeaustenr 1.0.0 by Julia Silge, which ships the Project Gutenberg
texts of Austen's six novels as R data), so no network access beyond the Debian archive
is needed and R is not needed either: the R lazy-load database inside the package is
decoded here with a minimal reader of R's XDR serialization format.

Output format (what scripts/create_pretraining_data.py reads): one sentence a line,
a blank line between documents; each chapter is one document. Chapters 1-21 go to
train.txt, chapters 22-24 (held out) to eval.txt.

Usage (from the repository root):
    apt-get download r-cran-janeaustenr      # r-cran-janeaustenr_1.0.0-1_all.deb
    python data/corpus/make_corpus.py --deb r-cran-janeaustenr_1.0.0-1_all.deb
Without --deb the script runs `apt-get download` itself in a temporary folder.
"""

import argparse
import glob
import gzip
import io
import lzma
import os
import re
import struct
import subprocess
import tarfile
import tempfile
import zlib

RDATA_DIR = "usr/lib/R/site-library/janeaustenr/data/"
# Order of the objects in the package's lazy-load database (alphabetical, as R saves them).
NOVELS = ["emma", "mansfieldpark", "northangerabbey", "persuasion", "prideprejudice",
          "sensesensibility"]
NUM_TRAIN_CHAPTERS = 21

# Abbreviations after which a period does not end a sentence.
ABBREVIATIONS = {"Mr", "Mrs", "Dr", "St", "Wm", "No", "Col", "Capt", "Sir"}
# A sentence ends at . ! or ? (plus closing quotes/brackets) followed by space and a capital
# letter or an opening quote.
SENTENCE_END = re.compile(r"([.!?]['\")\]]*)\s+(?=['\"(\[]?[A-Z])")


def read_deb_member(deb_path, member_suffixes):
    """Returns {suffix: bytes} for files in the data archive of a .deb (an `ar` archive)."""
    with open(deb_path, "rb") as f:
        data = f.read()
    if not data.startswith(b"!<arch>\n"):
        raise ValueError(f"{deb_path} is not a .deb (ar) archive")
    pos, found = 8, {}
    while pos < len(data):
        name = data[pos:pos + 16].decode().strip().rstrip("/")
        size = int(data[pos + 48:pos + 58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size % 2)
        if name.startswith("data.tar"):
            raw = lzma.decompress(body) if name.endswith(".xz") else body
            with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
                for member in tar.getmembers():
                    for suffix in member_suffixes:
                        if member.name.endswith(suffix):
                            found[suffix] = tar.extractfile(member).read()
    return found


class _RUnserializer:
    """Reads the subset of R's XDR serialization used by character-vector data."""

    def __init__(self, data):
        self.data, self.pos, self.refs = data, 0, []
        if data[:2] != b"X\n":
            raise ValueError("not an XDR-serialized R object")
        self.pos = 2
        version = self._int()
        self._int()  # writer version
        self._int()  # minimal reader version
        if version == 3:
            encoding_length = self._int()  # then the native encoding name
            self.pos += encoding_length

    def _int(self):
        value = struct.unpack(">i", self.data[self.pos:self.pos + 4])[0]
        self.pos += 4
        return value

    def read(self):
        flags = self._int()
        sexp_type, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if sexp_type == 254:  # NULL
            return None
        if sexp_type == 255:  # back-reference to a symbol
            return self.refs[(flags >> 8) - 1]
        if sexp_type == 1:  # symbol
            symbol = self.read()
            self.refs.append(symbol)
            return symbol
        if sexp_type == 9:  # CHARSXP
            length = self._int()
            if length == -1:
                return None
            value = self.data[self.pos:self.pos + length].decode("utf-8")
            self.pos += length
            return value
        if sexp_type == 2:  # pairlist (attributes)
            if has_attr:
                self.read()
            tag = self.read() if has_tag else None
            head = self.read()
            return [(tag, head)] + (self.read() or [])
        if sexp_type in (16, 19):  # character vector, list
            value = [self.read() for _ in range(self._int())]
        elif sexp_type in (10, 13):  # logical, integer
            n = self._int()
            value = list(struct.unpack(f">{n}i", self.data[self.pos:self.pos + 4 * n]))
            self.pos += 4 * n
        elif sexp_type == 14:  # double
            n = self._int()
            value = list(struct.unpack(f">{n}d", self.data[self.pos:self.pos + 8 * n]))
            self.pos += 8 * n
        else:
            raise ValueError(f"unsupported R object type {sexp_type}")
        if has_attr:
            self.read()
        return value


def read_novel_lines(deb_path, novel):
    """Returns the lines of one novel from the package's R lazy-load database."""
    files = read_deb_member(deb_path, [RDATA_DIR + "Rdata.rdx", RDATA_DIR + "Rdata.rdb"])
    index = _RUnserializer(gzip.decompress(files[RDATA_DIR + "Rdata.rdx"])).read()
    offset, length = index[0][NOVELS.index(novel)]
    chunk = files[RDATA_DIR + "Rdata.rdb"][offset:offset + length]
    # Each entry: 4-byte big-endian uncompressed size, then a zlib stream.
    return _RUnserializer(zlib.decompress(chunk[4:])).read()


def split_sentences(paragraph):
    """Splits one paragraph (a single line of text) into sentences with simple rules."""
    sentences, start = [], 0
    for match in SENTENCE_END.finditer(paragraph):
        words = paragraph[start:match.start()].split()
        last_word = words[-1].rstrip(".") if words else ""
        if match.group(1) == "." and (last_word in ABBREVIATIONS or len(last_word) == 1):
            continue  # "Mr. Elliot", "F. W." are not sentence ends
        sentences.append(paragraph[start:match.end(1)].strip())
        start = match.end()
    sentences.append(paragraph[start:].strip())
    return [s for s in sentences if s]


def chapters_to_documents(lines):
    """Groups the novel's lines into chapters, each a list of sentences."""
    chapters, paragraph_lines = [], []

    def flush_paragraph():
        if paragraph_lines and chapters:
            paragraph = re.sub(r"\s+", " ", " ".join(paragraph_lines)).strip()
            chapters[-1].extend(split_sentences(paragraph))
        paragraph_lines.clear()

    for line in lines:
        line = line or ""
        if re.fullmatch(r"Chapter \d+", line.strip()):
            flush_paragraph()
            chapters.append([])
        elif not line.strip():
            flush_paragraph()
        elif line.strip() != "Finis":
            paragraph_lines.append(line)
    flush_paragraph()
    return chapters


def write_documents(path, documents):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(doc) for doc in documents) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deb", help="path of r-cran-janeaustenr_*.deb (default: apt-get it)")
    parser.add_argument("--output_dir", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        deb = args.deb
        if not deb:
            subprocess.run(["apt-get", "download", "r-cran-janeaustenr"], cwd=tmp, check=True)
            deb = glob.glob(os.path.join(tmp, "r-cran-janeaustenr_*.deb"))[0]
        chapters = chapters_to_documents(read_novel_lines(deb, "persuasion"))
    if len(chapters) != 24:
        raise ValueError(f"expected 24 chapters of Persuasion, found {len(chapters)}")
    for name, documents in (("train.txt", chapters[:NUM_TRAIN_CHAPTERS]),
                            ("eval.txt", chapters[NUM_TRAIN_CHAPTERS:])):
        path = os.path.join(args.output_dir, name)
        write_documents(path, documents)
        num_sentences = sum(len(d) for d in documents)
        print(f"{path}: {len(documents)} documents, {num_sentences} sentences, "
              f"{os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
