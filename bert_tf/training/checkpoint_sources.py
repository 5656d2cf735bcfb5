"""Checkpoints of other libraries where a Google checkpoint is asked for (`--init_checkpoint`,
`tf2.BertEncoder.load_checkpoint`, `keras.BertEncoderLayer.load_checkpoint`).

A foreign source is recognised by its files (`SOURCES`, first match wins) and converted once
into a Google-layout directory (`bert_config.json`, `bert_model.ckpt.*`, `vocab.txt`) under
the cache directory (`$BERT_TF_CACHE_DIR`, default `~/.cache/bert_tf`,
`converted/<key>/`), keyed by the source's absolute path and the size and modification time
of each of its files: the same source is read once, a changed one again. One log line says
what was read and where its conversion is.

Each source is `(name, module, detect, read)`: `module.detect(path) -> bool` (cheap: file
names, at most an index) and `module.read(path) -> (google_tensors, bert_config, vocab_file,
do_lower_case)`, `google_tensors` {Google variable name: numpy array}, `bert_config` a
`bert_config.json` dict, `vocab_file` a path or None, `do_lower_case` a bool or None (not
known). The readers are the converters of `bert_tf/tools/`; they are imported by name when a
path is resolved (as `tasks/registry.py` imports the built-in tasks), since the tools import
this tier.
"""

import collections
import hashlib
import importlib
import json
import os
import shutil
import tempfile

from absl import logging

from bert_tf import fileio
from bert_tf.errors import BertTfError

Source = collections.namedtuple("Source", "name module detect read")

SOURCES = (
    Source("KerasHub preset", "bert_tf.tools.keras_hub_conversion", "is_keras_hub_preset",
           "read_keras_hub_preset"),
    Source("Hugging Face model", "bert_tf.tools.conversion", "is_hf_dir", "read_hf_source"),
    Source("Model Garden checkpoint", "bert_tf.tools.model_garden_conversion",
           "is_model_garden", "read_model_garden"),
)

CACHE_ENV = "BERT_TF_CACHE_DIR"
_SOURCE_FILE = "source.json"  # What was converted, beside the conversion.
_CHECKPOINT_NAME = "bert_model.ckpt"

# A source resolved to its conversion.
Converted = collections.namedtuple(
    "Converted", "source_name path prefix bert_config_file vocab_file do_lower_case")

_logged = set()  # The conversions this process has said it read.


def cache_dir():
    """Where conversions are kept: `$BERT_TF_CACHE_DIR/converted`, default
    `~/.cache/bert_tf/converted`."""
    root = os.environ.get(CACHE_ENV) or os.path.join("~", ".cache", "bert_tf")
    return os.path.join(os.path.expanduser(root), "converted")


def _function(source, attribute):
    return getattr(importlib.import_module(source.module), getattr(source, attribute))


def detect(path):
    """The `Source` whose files `path` has, or None (a Google checkpoint, or nothing)."""
    if not path or fileio.is_remote(path):
        return None
    for source in SOURCES:
        try:
            module = importlib.import_module(source.module)
        except ImportError:
            continue  # A source whose module is not installed cannot be the one.
        if getattr(module, source.detect)(path):
            return source
    return None


def _key(path):
    """A digest of `path` (absolute) and the name, size and mtime of each file under it."""
    path = os.path.abspath(path)
    stats = []
    if os.path.isdir(path):
        for directory, _, names in sorted(os.walk(path)):
            for name in sorted(names):
                stat = os.stat(os.path.join(directory, name))
                stats.append((os.path.relpath(os.path.join(directory, name), path),
                              stat.st_size, stat.st_mtime_ns))
    else:
        for name in sorted(os.listdir(os.path.dirname(path) or ".")):
            full = os.path.join(os.path.dirname(path), name)
            if name.startswith(os.path.basename(path)) and os.path.isfile(full):
                stat = os.stat(full)
                stats.append((name, stat.st_size, stat.st_mtime_ns))
    return hashlib.sha256(json.dumps([path, stats]).encode()).hexdigest()[:24]


def resolve(path):
    """The `Converted` of a foreign source at `path`, converted now or earlier; None when
    `path` is no foreign source.

    Raises:
      BertTfError: from the source's reader, naming its file, when it cannot be converted.
    """
    source = detect(path)
    if source is None:
        return None
    # A file (a preset's model.weights.h5) is read with the directory it belongs to.
    target = os.path.join(cache_dir(), _key(os.path.dirname(os.path.abspath(path))
                                            if os.path.isfile(path) else path))
    converted = os.path.isfile(os.path.join(target, _SOURCE_FILE))
    if not converted:
        _convert(source, path, target)
    with open(os.path.join(target, _SOURCE_FILE), encoding="utf-8") as f:
        recorded = json.load(f)
    vocab = os.path.join(target, "vocab.txt")
    result = Converted(source.name, path, os.path.join(target, _CHECKPOINT_NAME),
                       os.path.join(target, "bert_config.json"),
                       vocab if os.path.isfile(vocab) else None, recorded["do_lower_case"])
    if target not in _logged:
        _logged.add(target)
        logging.info("%s is a %s: read its weights%s and config (hidden_act %s)%s, %s %s.",
                     path, source.name,
                     ", vocabulary" if result.vocab_file else "", recorded["hidden_act"],
                     "" if result.do_lower_case is None else
                     (", uncased" if result.do_lower_case else ", cased"),
                     "using its conversion" if converted else "converted once to",
                     result.prefix)
    return result


def _convert(source, path, target):
    """Writes the Google-layout conversion of `path` to `target`, whole or not at all."""
    from bert_tf.training import checkpoints  # It resolves paths through this module.

    tensors, bert_config, vocab_file, do_lower_case = _function(source, "read")(path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = tempfile.mkdtemp(dir=os.path.dirname(target), prefix=".tmp_")
    try:
        checkpoints.write_tf_checkpoint(tensors, os.path.join(tmp, _CHECKPOINT_NAME))
        fileio.atomic_write_text(os.path.join(tmp, "bert_config.json"),
                                 json.dumps(bert_config, indent=2, sort_keys=True) + "\n")
        if vocab_file:
            fileio.copy_file(vocab_file, os.path.join(tmp, "vocab.txt"))
        fileio.atomic_write_text(os.path.join(tmp, _SOURCE_FILE), json.dumps({
            "source": source.name, "path": os.path.abspath(path),
            "hidden_act": bert_config.get("hidden_act"), "do_lower_case": do_lower_case}))
        try:
            os.rename(tmp, target)
        except OSError:  # Another process converted it first: keep its copy.
            if not os.path.isfile(os.path.join(target, _SOURCE_FILE)):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# The bert_config.json keys that make two models different models (dropout rates and the
# initializer range are settings of a run).
_ARCHITECTURE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                      "intermediate_size", "max_position_embeddings", "type_vocab_size",
                      "hidden_act", "layer_norm_eps")


def check_config_agrees(bert_config_file, converted):
    """Raises BertTfError (one line) when `--bert_config_file` describes another model than
    the foreign source `converted` (a `Converted`)."""
    with fileio.open_text(bert_config_file) as f:
        given = json.load(f)
    with open(converted.bert_config_file, encoding="utf-8") as f:
        source = json.load(f)
    defaults = {"hidden_act": "gelu", "layer_norm_eps": 1e-12}
    for key in _ARCHITECTURE_KEYS:
        mine = given.get(key, defaults.get(key))
        theirs = source.get(key, defaults.get(key))
        if mine != theirs:
            raise BertTfError(
                f"--bert_config_file {bert_config_file}: {key} is {mine!r} but the "
                f"{converted.source_name} {converted.path} has {theirs!r}; leave "
                "--bert_config_file out to take the source's config, or pass one that matches.")


def check_vocab_agrees(vocab_file, converted):
    """Raises BertTfError (one line) when `--vocab_file` holds other tokens than the foreign
    source's vocabulary."""
    if converted.vocab_file is None:
        return
    with fileio.open_text(vocab_file) as f:
        given = [line.rstrip("\n") for line in f]
    with open(converted.vocab_file, encoding="utf-8") as f:
        source = [line.rstrip("\n") for line in f]
    if given != source:
        first = next((i for i, (a, b) in enumerate(zip(given, source, strict=False)) if a != b),
                     min(len(given), len(source)))
        raise BertTfError(
            f"--vocab_file {vocab_file}: differs from the vocabulary of the "
            f"{converted.source_name} {converted.path} ({len(given)} vs {len(source)} tokens, "
            f"first difference at line {first + 1}); leave --vocab_file out to take the "
            "source's.")
