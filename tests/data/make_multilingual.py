"""Writes tests/data/multilingual.txt: real multilingual text for the tokenizer tests.

The lines come from files of the machine it runs on (Debian 12 with the PostgreSQL 15 client
and server message catalogs, and CPython 3.11's standard library); see tests/data/README.md for
the sources and their licences. Run from the repository root:

    python tests/data/make_multilingual.py

Each section takes a fixed number of distinct lines, picked by the SHA-1 of the line so that the
selection is spread over the whole source and the same on every run.
"""

import gettext
import glob
import hashlib
import os
import sys
import sysconfig

LOCALE_DIR = "/usr/share/locale"
STDLIB_DIR = sysconfig.get_paths()["stdlib"]
OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multilingual.txt")

# PostgreSQL 15 catalogs (PostgreSQL Licence). The server (postgres-15) and psql catalogs are
# the biggest; smaller languages only have the catalogs of the client tools.
PG_CATALOGS = ("postgres-15", "psql-15", "pg_dump-15", "pg_ctl-15", "pgscripts-15",
               "plpgsql-15", "pg_config-15", "pg_upgrade-15", "pg_controldata-15",
               "pg_resetwal-15", "pg_archivecleanup-15", "pg_checksums-15")

# (section name, language directory or None for English msgids, number of lines)
TRANSLATED_SECTIONS = (
    ("German", "de", 280),
    ("French", "fr", 280),
    ("Spanish", "es", 280),
    ("Italian", "it", 180),
    ("Swedish", "sv", 120),
    ("Brazilian Portuguese", "pt_BR", 100),
    ("Czech", "cs", 100),
    ("Turkish", "tr", 80),
    ("Polish", "pl", 50),
    ("Vietnamese", "vi", 100),
    ("Chinese (Simplified)", "zh_CN", 420),
    ("Japanese", "ja", 140),
    ("Korean", "ko", 90),
    ("Russian", "ru", 100),
    ("Greek", "el", 100),
)
ENGLISH_MESSAGES = 300
ENGLISH_LICENCE = 150
CODE_LINES = 380
CODE_FILES = ("textwrap.py", "json/encoder.py", "argparse.py", "difflib.py", "string.py",
              "shlex.py", "fnmatch.py")


def _pick(lines, count, min_length):
    """Returns `count` distinct lines of at least `min_length` chars, in SHA-1 order."""
    unique = {line for line in lines if len(line) >= min_length}
    ranked = sorted(unique, key=lambda line: hashlib.sha1(line.encode("utf-8")).hexdigest())
    if len(ranked) < count:
        raise SystemExit(f"only {len(ranked)} lines of >= {min_length} chars, {count} wanted")
    return ranked[:count]


def _catalog_lines(language, use_msgids=False):
    """Returns every line of every PostgreSQL message (or its English msgid) for `language`."""
    lines = []
    for domain in PG_CATALOGS:
        path = os.path.join(LOCALE_DIR, language, "LC_MESSAGES", domain + ".mo")
        if not os.path.exists(path):
            continue
        with open(path, "rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog
        for msgid, message in catalog.items():
            text = msgid if use_msgids else message
            if isinstance(text, tuple):  # A plural msgid is stored as (msgid, n).
                text = text[0]
            if not msgid or not isinstance(text, str):
                continue  # The catalog header.
            lines.extend(line.strip() for line in text.split("\n"))
    return lines


def _is_cjk_language(language):
    return language in ("zh_CN", "ja", "ko")


def main():
    sections = []
    sections.append(("English (PostgreSQL msgids)",
                     _pick(_catalog_lines("de", use_msgids=True), ENGLISH_MESSAGES, 25)))
    with open(os.path.join(STDLIB_DIR, "LICENSE.txt"), encoding="utf-8") as f:
        licence_lines = [line.strip() for line in f]
    sections.append(("English (CPython LICENSE.txt)", _pick(licence_lines, ENGLISH_LICENCE, 25)))
    code_lines = []
    for name in CODE_FILES:
        with open(os.path.join(STDLIB_DIR, name), encoding="utf-8") as f:
            code_lines.extend(line.rstrip() for line in f if not line.strip().startswith("#"))
    sections.append(("Python code (CPython stdlib)", _pick(code_lines, CODE_LINES, 25)))
    for name, language, count in TRANSLATED_SECTIONS:
        min_length = 8 if _is_cjk_language(language) else 25
        sections.append((name, _pick(_catalog_lines(language), count, min_length)))

    with open(OUTPUT, "w", encoding="utf-8", newline="\n") as f:
        for _, lines in sections:
            for line in lines:
                f.write(line + "\n")
    total = sum(len(lines) for _, lines in sections)
    for name, lines in sections:
        print(f"{len(lines):5d}  {name}")
    print(f"{total:5d}  lines, {os.path.getsize(OUTPUT)} bytes -> {OUTPUT}")
    print("catalogs:", sorted({os.path.basename(p) for p in glob.glob(
        os.path.join(LOCALE_DIR, "*", "LC_MESSAGES", "p*-15.mo"))}), file=sys.stderr)


if __name__ == "__main__":
    main()
