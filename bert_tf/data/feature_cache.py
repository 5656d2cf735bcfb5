"""Cached feature files: a task's TFRecord features are reused when what they were built from
is unchanged (the examples, the labels, the tokenizer, the lengths and the task's settings),
and rebuilt otherwise or when a record is damaged.
"""

import hashlib
import json

from absl import logging

from bert_tf import errors, fileio

# Bumped when the TFRecord contents change for the same inputs, so old caches are rebuilt.
FEATURE_CACHE_FORMAT = 1


def tokenizer_fingerprint(tokenizer):
    """A digest of everything that decides a `FullTokenizer`'s output (vocab and settings)."""
    try:
        vocab = tokenizer.vocab
        settings = [tokenizer.basic_tokenizer.do_lower_case,
                    tokenizer.wordpiece_tokenizer.unk_token,
                    tokenizer.wordpiece_tokenizer.max_input_chars_per_word]
    except AttributeError as e:
        raise errors.BertTfError(
            f"feature cache: the tokenizer lacks {e.name!r}; pass a "
            "tokenization.FullTokenizer.") from None
    digest = hashlib.sha256(json.dumps(settings).encode("utf-8"))
    for token, index in vocab.items():
        digest.update(f"{index}\t{token}\n".encode())
    return digest.hexdigest()


def examples_fingerprint(examples):
    """A digest of the examples' contents (every attribute: ids, texts, labels), in order."""
    digest = hashlib.sha256()
    for example in examples:
        if not vars(example):  # A PaddingInputExample: no fields of its own.
            digest.update(b"<padding>\n")
        else:
            fields = json.dumps(vars(example), sort_keys=True, ensure_ascii=False, default=str)
            digest.update(fields.encode("utf-8") + b"\n")
    return digest.hexdigest()


def cached_tfrecord_file(output_file, key, write_fn):
    """Reuses `output_file` if its sidecar `<output_file>.meta.json` holds `key`, else rebuilds.

    The sidecar stores `key` (a JSON-able dict describing everything the file was built
    from) and the record file's size. When both match and every record reads back (CRCs
    checked, so a damaged file is rebuilt), the file is reused; otherwise the sidecar is
    deleted, `write_fn()` writes `output_file` (whole, via a temporary name) and a
    new sidecar is written after it, so a run stopped half-way leaves no sidecar that could
    vouch for a partial file. Delete either file to force a rebuild.

    Returns:
      True if the existing file was reused, False if it was (re)built.
    """
    meta_file = output_file + ".meta.json"
    if fileio.is_file(output_file) and fileio.is_file(meta_file):
        try:
            with fileio.open_text(meta_file) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            meta = None
        if (isinstance(meta, dict) and meta.get("key") == key and
                meta.get("record_file_size") == fileio.file_size(output_file)):
            from bert_tf.data import record_integrity

            # Every CRC: bytes can flip.
            bad_offset = record_integrity.first_bad_offset(output_file)
            if bad_offset is None:
                logging.info("Reusing cached features %s", output_file)
                return True
            logging.warning("Cached features %s are corrupt at byte %d; rebuilding them.",
                            output_file, bad_offset)
    if fileio.is_file(meta_file):
        import tensorflow as tf

        tf.io.gfile.remove(meta_file)
    write_fn()
    meta = {"key": key, "record_file_size": fileio.file_size(output_file)}
    fileio.atomic_write_text(meta_file, json.dumps(meta, indent=1, sort_keys=True))
    return False


def feature_cache_key(task, examples, label_list, max_seq_length, tokenizer, **settings):
    """The sidecar key of a feature file: what decides its contents (`settings`: the task's
    other options that change the features, e.g. doc_stride)."""
    return {
        **settings,
        "format": FEATURE_CACHE_FORMAT,
        "task": task,
        "max_seq_length": max_seq_length,
        "label_list": list(label_list) if label_list else None,
        "num_examples": len(examples),
        "examples_sha256": examples_fingerprint(examples),
        "tokenizer_sha256": tokenizer_fingerprint(tokenizer),
    }
