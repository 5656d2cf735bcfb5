"""Converts BERT checkpoints between the Hugging Face and the Google layouts.

Hugging Face (HF) directory: `config.json` + `model.safetensors` (+ `vocab.txt`),
PyTorch names such as `bert.encoder.layer.0.attention.self.query.weight`, with
`Linear.weight` stored [out, in]. Google directory: `bert_config.json` +
`bert_model.ckpt.{index,data-*}` (+ `vocab.txt`), TF names such as
`bert/encoder/layer_0/attention/self/query/kernel`, kernels stored [in, out]
(docs/compatibility.md §2).

Contract of the two directions:
- `convert_hf_to_tf` accepts keys with or without the `bert.` prefix, LayerNorm
  parameters named `weight`/`bias` or (older files) `gamma`/`beta`, and the
  optional pre-training heads `cls.*`. Buffers (`position_ids`) and the tied
  decoder weights are skipped; anything else unknown is an error.
- `convert_tf_to_hf` writes the `BertForPreTraining` layout: `bert.`-prefixed
  encoder keys, `LayerNorm.weight`/`.bias`, `cls.*` heads when the checkpoint
  has them, and no tied `cls.predictions.decoder.*` copies (as `save_pretrained`
  does). So hf -> tf -> hf gives back every converted tensor bit for bit, under
  the normalised names.

Encoder variants (modeling's config keys) convert too: relative position types
map `encoder.layer.{i}.attention.self.distance_embedding.weight` <->
`.../attention/self/distance_embedding` (their unused absolute position table
is kept when present, not required); `layer_norm_type: "pre"` maps the final
`bert/encoder/LayerNorm/*` to `encoder.LayerNorm.*`, a key of our own since HF
BertModel has no pre-LN form (transformers reports it as unexpected).
`position_embedding_type`, `layer_norm_eps` and `layer_norm_type` are carried
between config.json and bert_config.json.

Fine-tuned task heads (`task=`, see `TASK_HEADS`): `convert_tf_to_hf(..., task=...)` writes
the layout of the matching Hugging Face class (BertForSequenceClassification for classifier /
multi_label / regression, BertForQuestionAnswering for squad, BertForTokenClassification for
ner, BertForMultipleChoice for multiple_choice): the encoder (with the pooler only where the
class has one), the head under the class's names, and config.json with `num_labels`,
`id2label` / `label2id` (from the run's label_list.txt) and `problem_type`. Head weights are
[num_outputs, H] in both layouts (no transpose):

    task            TF variables (Google layout)              HF keys
    classifier,     output_weights, output_bias               classifier.weight, .bias
    multi_label,
    regression
    squad           cls/squad/output_weights, output_bias     qa_outputs.weight, .bias
    ner             cls/ner/output_weights, output_bias       classifier.weight, .bias
    multiple_choice cls/multiple_choice/output_weights, _bias classifier.weight [1, H], .bias

`convert_hf_to_tf(..., task=...)` reads such a directory back, writes label_list.txt from
`id2label`, and makes the output directory a model directory our scripts can evaluate and
predict from (`--output_dir` of run_classifier.py / run_squad.py / run_ner.py /
run_multiple_choice.py without --do_train): it adds `global_step` 0 and a `checkpoint` state
file, and zeros for a pooler the HF class does not have (squad and ner heads do not read it).

ALBERT (config.json `model_type` "albert", a bert_config.json with `embedding_size`) goes
through `bert_tf.tools.albert_conversion`, in Hugging Face's `AlbertModel` layout.

Only numpy, safetensors' numpy API and TensorFlow are used (no PyTorch).
"""

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio, modeling
from bert_tf.encoder import settings
from bert_tf.errors import BertTfError, missing_extra
from bert_tf.tasks import base, heads, registry
from bert_tf.training import checkpoints

tf1 = tf.compat.v1

HF_CONFIG_NAME = "config.json"
HF_WEIGHTS_NAME = "model.safetensors"
TF_CONFIG_NAME = "bert_config.json"
TF_CHECKPOINT_NAME = "bert_model.ckpt"
VOCAB_NAME = "vocab.txt"

# Hugging Face `BertConfig` defaults, used for keys a config.json leaves out.
_HF_CONFIG_DEFAULTS = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
}
# The keys of a Google `bert_config.json`.
GOOGLE_CONFIG_KEYS = (
    "attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size",
    "initializer_range", "intermediate_size", "max_position_embeddings", "num_attention_heads",
    "num_hidden_layers", "type_vocab_size", "vocab_size")
# Activation names: HF -> ours where they differ (both are the tanh approximation).
_HF_TO_GOOGLE_ACTIVATION = {"gelu_pytorch_tanh": "gelu_tanh"}
_GOOGLE_TO_HF_ACTIVATION = {"gelu_tanh": "gelu_new"}
_VARIANT = settings.LayerVariant  # Our defaults of the encoder-variant keys.

# HF keys that carry no weights of their own: buffers and the decoder tied to
# the word embeddings / prediction bias.
_HF_SKIPPED_KEYS = ("embeddings.position_ids", "embeddings.token_type_ids")
_HF_TIED_KEYS = {
    "cls.predictions.decoder.weight": "embeddings.word_embeddings.weight",
    "cls.predictions.decoder.bias": "cls.predictions.bias",
}
_HF_PREFIX = "bert."


# How one fine-tuning head is stored in both layouts; each task declares its own (`hf_heads`).
TaskHead = heads.HfHead


def hf_heads():
    """{--task: `TaskHead`} of every registered task, in registration order."""
    return {name: head for task in registry.classes() for name, head in task.hf_heads.items()}


# The heads of the built-in tasks.
TASK_HEADS = hf_heads()


def task_head(task):
    """The `TaskHead` of `--task` (a converter head name, e.g. "multi_label").

    Raises:
      BertTfError: in one line, for a task whose head has no Hugging Face counterpart, or
        an unknown name.
    """
    head = hf_heads().get(task)
    if head is not None:
        return head
    if registry.known(task):
        raise BertTfError(f"--task={task}: the {task} head has no Hugging Face counterpart; "
                          "convert the encoder alone (without --task).")
    raise BertTfError(f"--task: unknown task '{task}'; use one of {', '.join(hf_heads())}.")


class WeightName:
    """One weight in both layouts.

    Attributes:
      hf: HF key without the `bert.` prefix, modern LayerNorm spelling.
      google: TF variable name.
      shape: Google-layout shape implied by the config.
      transpose: True for dense kernels (HF [out, in] vs Google [in, out]).
      group: "encoder" (required), "pooler", "heads" or "unused" (optional).
      aliases: other HF keys accepted on input for this weight.
    """

    def __init__(self, hf, google, shape, transpose=False, group="encoder", aliases=()):
        self.hf = hf
        self.google = google
        self.shape = list(shape)
        self.transpose = transpose
        self.group = group
        self.aliases = list(aliases)

    def hf_aliases(self):
        """The HF spellings accepted on input, the one written first."""
        return [self.hf] + self.aliases


def weight_names(config):
    """Lists every weight of a BERT pre-training model in both layouts.

    Args:
      config: `modeling.BertConfig`.

    Returns:
      A list of `WeightName`, embeddings first, then layers in order, the
      pooler, and the `cls/*` pre-training heads.
    """
    hidden, inter = config.hidden_size, config.intermediate_size
    names = []

    def dense(hf, google, in_size, out_size, group="encoder"):
        names.append(WeightName(hf + ".weight", google + "/kernel", [in_size, out_size],
                                transpose=True, group=group))
        names.append(WeightName(hf + ".bias", google + "/bias", [out_size], group=group))

    def layer_norm(hf, google, group="encoder"):
        # Older HF files name the LayerNorm parameters gamma / beta.
        names.append(WeightName(hf + ".weight", google + "/gamma", [hidden], group=group,
                                aliases=[hf + ".gamma"]))
        names.append(WeightName(hf + ".bias", google + "/beta", [hidden], group=group,
                                aliases=[hf + ".beta"]))

    relative = config.position_embedding_type != _VARIANT.position_embedding_type
    for table, rows in (("word", config.vocab_size),
                        ("position", config.max_position_embeddings),
                        ("token_type", config.type_vocab_size)):
        # HF keeps a position table that relative position types never read.
        group = "unused" if relative and table == "position" else "encoder"
        names.append(WeightName(f"embeddings.{table}_embeddings.weight",
                                f"bert/embeddings/{table}_embeddings", [rows, hidden],
                                group=group))
    layer_norm("embeddings.LayerNorm", "bert/embeddings/LayerNorm")
    for i in range(config.num_hidden_layers):
        hf, google = f"encoder.layer.{i}", f"bert/encoder/layer_{i}"
        for part in ("query", "key", "value"):
            dense(f"{hf}.attention.self.{part}", f"{google}/attention/self/{part}",
                  hidden, hidden)
        if relative:
            names.append(WeightName(
                f"{hf}.attention.self.distance_embedding.weight",
                f"{google}/attention/self/distance_embedding",
                [2 * config.max_position_embeddings - 1, hidden // config.num_attention_heads]))
        dense(f"{hf}.attention.output.dense", f"{google}/attention/output/dense", hidden, hidden)
        layer_norm(f"{hf}.attention.output.LayerNorm", f"{google}/attention/output/LayerNorm")
        dense(f"{hf}.intermediate.dense", f"{google}/intermediate/dense", hidden, inter)
        dense(f"{hf}.output.dense", f"{google}/output/dense", inter, hidden)
        layer_norm(f"{hf}.output.LayerNorm", f"{google}/output/LayerNorm")
    if config.layer_norm_type == "pre":
        layer_norm("encoder.LayerNorm", "bert/encoder/LayerNorm")
    dense("pooler.dense", "bert/pooler/dense", hidden, hidden, group="pooler")
    dense("cls.predictions.transform.dense", "cls/predictions/transform/dense", hidden, hidden,
          group="heads")
    layer_norm("cls.predictions.transform.LayerNorm", "cls/predictions/transform/LayerNorm",
               group="heads")
    # The decoder bias is the same parameter as cls.predictions.bias (tied).
    names.append(WeightName("cls.predictions.bias", "cls/predictions/output_bias",
                            [config.vocab_size], group="heads",
                            aliases=["cls.predictions.decoder.bias"]))
    # Google stores the next-sentence weights [2, hidden], like PyTorch: no transpose.
    names.append(WeightName("cls.seq_relationship.weight", "cls/seq_relationship/output_weights",
                            [2, hidden], group="heads"))
    names.append(WeightName("cls.seq_relationship.bias", "cls/seq_relationship/output_bias",
                            [2], group="heads"))
    return names


def hf_config_to_bert_config(hf_config, source=HF_CONFIG_NAME):
    """Maps a HF `config.json` dict to a validated `modeling.BertConfig`.

    Keeps `layer_norm_eps`, `position_embedding_type` (and our `layer_norm_type`)
    beside the Google keys; HF bookkeeping keys are dropped.

    Args:
      hf_config: dict read from config.json.
      source: file name for error messages.

    Returns:
      `modeling.BertConfig`.

    Raises:
      BertTfError: for a model type or setting the Google layout cannot express.
    """
    model_type = hf_config.get("model_type", "bert")
    if model_type != "bert":
        raise BertTfError(f"{source}: model_type '{model_type}' is not 'bert'; only BERT "
                          "checkpoints can be converted.")
    values = {key: hf_config.get(key, default) for key, default in _HF_CONFIG_DEFAULTS.items()}
    act = values["hidden_act"]
    values["hidden_act"] = _HF_TO_GOOGLE_ACTIVATION.get(act, act)
    # Encoder variants; `validate` rejects values modeling does not implement.
    values["position_embedding_type"] = hf_config.get("position_embedding_type", "absolute")
    values["layer_norm_type"] = hf_config.get("layer_norm_type", _VARIANT.layer_norm_type)
    config = modeling.BertConfig.from_dict(values)
    config.validate(source=source)
    return config


def bert_config_to_hf_config(config, architecture="BertForPreTraining"):
    """Maps a `modeling.BertConfig` to a HF `config.json` dict for `BertForPreTraining`."""
    hf_config = {"architectures": [architecture], "model_type": "bert"}
    for key in GOOGLE_CONFIG_KEYS:
        hf_config[key] = getattr(config, key)
    act = hf_config["hidden_act"]
    hf_config["hidden_act"] = _GOOGLE_TO_HF_ACTIVATION.get(act, act)
    hf_config["layer_norm_eps"] = config.layer_norm_eps
    hf_config["position_embedding_type"] = config.position_embedding_type
    if config.layer_norm_type != _VARIANT.layer_norm_type:
        hf_config["layer_norm_type"] = config.layer_norm_type  # Ours; HF keeps unknown keys.
    hf_config["pad_token_id"] = getattr(config, "pad_token_id", 0)
    return hf_config


def bert_config_json(config):
    """The Google `bert_config.json` dict: the standard keys plus `layer_norm_eps` and the
    encoder-variant keys that differ from their defaults."""
    out = {key: getattr(config, key) for key in GOOGLE_CONFIG_KEYS}
    out["layer_norm_eps"] = config.layer_norm_eps
    for key in ("position_embedding_type", "layer_norm_type"):
        if getattr(config, key) != getattr(_VARIANT, key):
            out[key] = getattr(config, key)
    return out


@dataclasses.dataclass(frozen=True)
class HfLayout:
    """What differs between the Hugging Face model layouts `hf_to_google_weights` reads.

    Attributes:
      model: the model's name in messages ("BERT").
      prefix: the base model's key prefix ("bert."), which the keys may also lack.
      weight_names: `weight_names(config)` -> the `WeightName`s of the layout.
      tied_keys: {key: the key it is tied to} (either without `prefix`): dropped when equal.
      convert_what: what to pass instead, for the unknown-keys message.
    """

    model: str
    prefix: str
    weight_names: object
    tied_keys: dict
    convert_what: str


# Hugging Face's BertModel / BertForPreTraining keys.
BERT_LAYOUT = HfLayout("BERT", _HF_PREFIX, weight_names, _HF_TIED_KEYS,
                       "convert a BERT model")


def hf_to_google_weights(hf_tensors, config, source=HF_WEIGHTS_NAME, skip_unknown=False,
                         layout=None):
    """Renames and transposes HF tensors into the Google layout.

    Args:
      hf_tensors: dict HF key -> numpy array (keys with or without the layout's prefix).
      config: `modeling.BertConfig` the tensors must fit.
      source: file name for error messages.
      skip_unknown: drop keys that are not the model's weights instead of failing.
      layout: an `HfLayout` (default `BERT_LAYOUT`; ALBERT: `albert_conversion.LAYOUT`).

    Returns:
      dict Google variable name -> float32 numpy array in Google shape.

    Raises:
      BertTfError: on unknown keys, missing encoder weights or shape mismatches.
    """
    layout = layout or BERT_LAYOUT
    tensors = {}
    for key, value in hf_tensors.items():
        name = key[len(layout.prefix):] if key.startswith(layout.prefix) else key
        if name in tensors:
            raise BertTfError(f"{source}: holds '{name}' both with and without the "
                              f"'{layout.prefix}' prefix; keep one copy.")
        tensors[name] = value
    google = _take_weights(tensors, layout.weight_names(config), config, source, layout)
    for key in _HF_SKIPPED_KEYS:
        tensors.pop(key, None)
    for tied, target in layout.tied_keys.items():
        value = tensors.pop(tied, None)
        target = target[len(layout.prefix):] if target.startswith(layout.prefix) else target
        reference = hf_tensors.get(target, hf_tensors.get(layout.prefix + target))
        if value is not None and (reference is None or not np.array_equal(value, reference)):
            logging.warning("%s: '%s' differs from '%s' it is tied to; the Google layout "
                            "keeps only the latter.", source, tied, target)
    if tensors and not skip_unknown:
        unknown = sorted(tensors)
        shown = ", ".join(unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise BertTfError(f"{source}: {len(unknown)} keys are not {layout.model} weights "
                          f"({shown}); {layout.convert_what} or pass --skip_unknown_keys to "
                          "drop them.")
    return google


def _take_weights(tensors, names, config, source, layout):
    """Pops each of `names` (`WeightName`s) out of `tensors` (keys without the prefix) into
    {Google name: float32 array in Google shape}; raises for missing encoder weights and for
    shapes the config does not imply."""
    google, missing = {}, []
    for weight in names:
        present = [alias for alias in weight.hf_aliases() if alias in tensors]
        if not present:
            if weight.group == "encoder":
                missing.append(weight.hf)
            elif weight.group == "pooler":
                logging.warning("%s: no pooler weights; bert/pooler/* stays uninitialised.",
                                source)
            continue
        value = tensors.pop(present[0])
        hf_shape = weight.shape[::-1] if weight.transpose else weight.shape
        if list(value.shape) != hf_shape:
            raise BertTfError(
                f"{source}: '{present[0]}' has shape {list(value.shape)} but the config implies "
                f"{hf_shape}; use the config.json that came with the weights.")
        value = value.T if weight.transpose else value
        google[weight.google] = np.ascontiguousarray(value, dtype=np.float32)
    if missing and "distance_embedding" in missing[0]:
        raise BertTfError(f"{source}: lacks '{missing[0]}', which position_embedding_type "
                          f"'{config.position_embedding_type}' of the config needs; pass the "
                          "config.json that came with the weights.")
    if missing:
        raise BertTfError(f"{source}: lacks {len(missing)} {layout.model} weights (e.g. "
                          f"'{missing[0]}'); pass a Hugging Face {layout.model} model whose "
                          "config.json matches its weights.")
    return google


def google_to_hf_weights(google_tensors, config, source="checkpoint"):
    """Renames and transposes Google-layout tensors into HF `BertForPreTraining` keys.

    Args:
      google_tensors: dict TF variable name -> numpy array; may hold extra
        variables (optimizer slots, fine-tuning heads), which are ignored.
      config: `modeling.BertConfig`.
      source: what the tensors came from, for error messages.

    Returns:
      dict HF key -> contiguous float32 array. Encoder keys get the `bert.`
      prefix; `cls.*` heads are included when present.

    Raises:
      BertTfError: on missing encoder variables or shape mismatches.
    """
    check_google_weights(google_tensors, config, source)
    hf = {}
    for weight in weight_names(config):
        value = google_tensors.get(weight.google)
        if value is None:
            continue
        key = weight.hf if weight.group == "heads" else _HF_PREFIX + weight.hf
        value = value.T if weight.transpose else value
        hf[key] = np.ascontiguousarray(value, dtype=np.float32)
    return hf


def check_google_weights(google_tensors, config, source="checkpoint", groups=("encoder",)):
    """Raises unless `google_tensors` has every weight of `groups` and each weight it has
    has the shape `config` implies.

    Args:
      google_tensors: dict TF variable name -> numpy array.
      config: `modeling.BertConfig`.
      source: what the tensors came from, for error messages.
      groups: the `WeightName.group`s that must all be present.

    Raises:
      BertTfError: in one line, naming the first missing or misshapen variable.
    """
    missing = []
    for weight in weight_names(config):
        value = google_tensors.get(weight.google)
        if value is None:
            if weight.group in groups:
                missing.append(weight.google)
            continue
        if list(value.shape) != weight.shape:
            raise BertTfError(f"{source}: variable '{weight.google}' has shape "
                              f"{list(value.shape)} but the BERT config implies {weight.shape}; "
                              "use the bert_config.json that came with the checkpoint.")
    if missing:
        raise BertTfError(f"{source}: lacks {len(missing)} BERT variables (e.g. '{missing[0]}'); "
                          "pass a BERT checkpoint with --init_checkpoint.")


def read_hf_dir(hf_dir):
    """Reads a HF BERT directory.

    Args:
      hf_dir: directory holding config.json and model.safetensors.

    Returns:
      (config dict, dict key -> numpy array).

    Raises:
      BertTfError: if a file is missing or unreadable.
    """
    if not os.path.isdir(hf_dir):
        raise BertTfError(f"--hf_dir: '{hf_dir}' is not a directory; pass the Hugging Face model "
                          "directory that holds config.json and model.safetensors.")
    config_path = os.path.join(hf_dir, HF_CONFIG_NAME)
    weights_path = os.path.join(hf_dir, HF_WEIGHTS_NAME)
    if not os.path.isfile(config_path):
        raise BertTfError(f"--hf_dir: '{config_path}' does not exist; a Hugging Face model "
                          "directory needs its config.json.")
    if not os.path.isfile(weights_path):
        hint = (" (only pytorch_model.bin is there: re-save it with safe_serialization=True)"
                if os.path.isfile(os.path.join(hf_dir, "pytorch_model.bin")) else "")
        raise BertTfError(f"--hf_dir: '{weights_path}' does not exist{hint}; pass a directory "
                          "with the weights in model.safetensors.")
    try:
        with open(config_path, encoding="utf-8") as f:
            hf_config = json.load(f)
    except ValueError as e:
        raise BertTfError(f"'{config_path}' is not valid JSON ({e}); fix or replace the "
                          "file.") from None
    if not isinstance(hf_config, dict):
        raise BertTfError(f"'{config_path}' must hold a JSON object; fix or replace the file.")
    safetensors_numpy = _import_safetensors()
    try:
        tensors = safetensors_numpy.load_file(weights_path)
    except Exception as e:  # safetensors raises its own error types for bad files.
        raise BertTfError(f"cannot read '{weights_path}' ({str(e).splitlines()[0]}); pass an "
                          "uncorrupted float32/float16 safetensors file.") from None
    return hf_config, tensors


def is_hf_dir(path):
    """Whether `path` is a Hugging Face model directory (config.json + model.safetensors)."""
    return bool(path) and all(fileio.is_file(os.path.join(str(path), name))
                              for name in (HF_CONFIG_NAME, HF_WEIGHTS_NAME))


def read_hf_source(hf_dir):
    """Reads a HF BERT directory as `--init_checkpoint` takes it (a task head, being no BERT
    weight, is dropped).

    Returns:
      (google_tensors, bert_config_dict, vocab_file, do_lower_case): the encoder (and
      pre-training heads) under Google names, the `bert_config.json` dict, vocab.txt's path
      (None when the directory has none) and tokenizer_config.json's do_lower_case (None
      when it does not say).
    """
    hf_config, hf_tensors = read_hf_dir(hf_dir)
    config = hf_config_to_bert_config(hf_config, source=os.path.join(hf_dir, HF_CONFIG_NAME))
    google = hf_to_google_weights(hf_tensors, config, skip_unknown=True,
                                  source=os.path.join(hf_dir, HF_WEIGHTS_NAME))
    vocab_file = os.path.join(hf_dir, VOCAB_NAME)
    tokenizer_config = os.path.join(hf_dir, "tokenizer_config.json")
    do_lower_case = None
    if fileio.is_file(tokenizer_config):
        with fileio.open_text(tokenizer_config) as f:
            do_lower_case = json.load(f).get("do_lower_case")
    return (google, bert_config_json(config),
            vocab_file if fileio.is_file(vocab_file) else None, do_lower_case)


def convert_hf_to_tf(hf_dir, output_dir, skip_unknown=False, task=None):
    """Converts a HF BERT directory into a Google BERT directory.

    Writes `output_dir/bert_config.json`, `output_dir/bert_model.ckpt.*` and
    copies `vocab.txt` when `hf_dir` has one. With `task` (a key of `TASK_HEADS`) the HF
    model's task head is converted too, and the directory is made a model directory (see the
    module docstring), with label_list.txt from config.json's id2label.

    Args:
      hf_dir: directory with config.json and model.safetensors.
      output_dir: directory to write (created if needed).
      skip_unknown: drop non-BERT keys instead of failing.
      task: None (encoder and pre-training heads) or a fine-tuning head.

    Returns:
      The checkpoint prefix written.

    Raises:
      BertTfError: on missing files, non-BERT configs or weights.
    """
    fileio.require_local(output_dir, "output_dir", "convert_checkpoint.py writes")
    hf_config, hf_tensors = read_hf_dir(hf_dir)
    from bert_tf.tools import albert_conversion  # It imports this module.
    if albert_conversion.is_albert_hf(hf_config):
        return albert_conversion.convert_hf_to_tf(hf_dir, output_dir, hf_config, hf_tensors,
                                                  skip_unknown, task)
    config = hf_config_to_bert_config(hf_config, source=os.path.join(hf_dir, HF_CONFIG_NAME))
    head_tensors = {}
    if task is not None:
        hf_tensors, head_tensors = _split_hf_head(hf_tensors, task_head(task), config,
                                                  os.path.join(hf_dir, HF_WEIGHTS_NAME))
    google = hf_to_google_weights(hf_tensors, config, skip_unknown=skip_unknown,
                                  source=os.path.join(hf_dir, HF_WEIGHTS_NAME))
    google.update(head_tensors)
    prefix = os.path.join(output_dir, TF_CHECKPOINT_NAME)
    if task is not None:
        make_model_dir(google, config, hf_config, task_head(task), output_dir)
    checkpoints.write_tf_checkpoint(google, prefix)
    if task is not None:
        # The state file makes the directory a model_dir whose latest checkpoint is this one.
        checkpoints.write_state(output_dir, TF_CHECKPOINT_NAME)
    write_json(bert_config_json(config), os.path.join(output_dir, TF_CONFIG_NAME))
    copy_if_present(os.path.join(hf_dir, VOCAB_NAME), os.path.join(output_dir, VOCAB_NAME))
    logging.info("Wrote %d variables to %s", len(google), prefix)
    return prefix


def convert_tf_to_hf(bert_config_file, init_checkpoint, output_dir, vocab_file=None,
                     task=None, label_list_file=None):
    """Converts a Google BERT checkpoint into a HF `BertForPreTraining` directory.

    Writes `output_dir/config.json` and `output_dir/model.safetensors`, and
    copies the vocab (`vocab_file`, else a vocab.txt beside the config). With `task` (a key
    of `TASK_HEADS`) it writes the fine-tuned model in the layout of the task's HF class
    instead (see the module docstring).

    Args:
      bert_config_file: the checkpoint's bert_config.json.
      init_checkpoint: checkpoint prefix or directory.
      output_dir: directory to write (created if needed).
      vocab_file: optional vocab.txt to copy.
      task: None, or the fine-tuning head to convert.
      label_list_file: the run's label_list.txt (the label of each output, in order) for
        classifier / multi_label / ner; default: label_list.txt beside the checkpoint.

    Returns:
      The path of the model.safetensors written.

    Raises:
      BertTfError: on missing files or a checkpoint that does not fit the config.
    """
    fileio.require_local(output_dir, "output_dir", "convert_checkpoint.py writes")
    config = modeling.BertConfig.from_json_file(bert_config_file)
    from bert_tf.tools import albert_conversion  # It imports this module.
    if albert_conversion.is_albert(config):
        hf, hf_config = albert_conversion.tf_to_hf_tensors(config, init_checkpoint, task)
    elif task is None:
        names = [weight.google for weight in weight_names(config)]
        hf = google_to_hf_weights(checkpoints.read_tf_checkpoint(init_checkpoint, names), config,
                                  source=f"checkpoint '{init_checkpoint}'")
        has_heads = any(key.startswith("cls.") for key in hf)
        hf_config = bert_config_to_hf_config(
            config, architecture="BertForPreTraining" if has_heads else "BertModel")
    else:
        hf, hf_config = _tf_task_to_hf(config, init_checkpoint, task_head(task),
                                       label_list_file)

    safetensors_numpy = _import_safetensors()
    os.makedirs(output_dir, exist_ok=True)
    weights_path = os.path.join(output_dir, HF_WEIGHTS_NAME)
    with fileio.replaced_on_success(weights_path) as tmp_path:
        # transformers refuses safetensors files without this metadata.
        safetensors_numpy.save_file(hf, tmp_path, metadata={"format": "pt"})
        os.chmod(tmp_path, 0o644)  # safetensors makes the file owner-only; match the others.
    write_json(hf_config, os.path.join(output_dir, HF_CONFIG_NAME))
    if vocab_file is None:
        vocab_file = os.path.join(os.path.dirname(bert_config_file), VOCAB_NAME)
    elif not os.path.isfile(vocab_file):
        raise BertTfError(f"--vocab_file: '{vocab_file}' does not exist; pass the checkpoint's "
                          "vocab.txt or leave the flag out.")
    copy_if_present(vocab_file, os.path.join(output_dir, VOCAB_NAME))
    logging.info("Wrote %d tensors to %s", len(hf), weights_path)
    return weights_path


def _encoder_google_names(config, head):
    """Google names of the encoder weights a task's HF class has (the pooler only if used)."""
    groups = ("encoder", "unused", "pooler") if head.has_pooler else ("encoder", "unused")
    return [w.google for w in weight_names(config) if w.group in groups]


def _tf_task_to_hf(config, init_checkpoint, head, label_list_file):
    """(HF tensors, config.json dict) of a fine-tuned checkpoint with the task head `head`."""
    source = f"checkpoint '{init_checkpoint}'"
    head_names = head.names()
    tensors = checkpoints.read_tf_checkpoint(init_checkpoint, _encoder_google_names(config, head) +
                                             [google for google, _ in head_names])
    for google, _ in head_names:
        if google not in tensors:
            raise BertTfError(f"{source}: lacks '{google}'; pass the checkpoint of a run of "
                              f"this task (--task={_task_name(head)}) or pick the task it was "
                              "fine-tuned for.")
    _warn_unconverted_head_variables(init_checkpoint, head)
    hf = google_to_hf_weights(tensors, config, source=source)
    weight = tensors[head_names[0][0]]
    if weight.ndim != 2 or weight.shape[1] != config.hidden_size:
        raise BertTfError(f"{source}: '{head_names[0][0]}' has shape {list(weight.shape)}, "
                          f"not [outputs, {config.hidden_size}]; pick the task it was "
                          "fine-tuned for.")
    for google, key in head_names:
        hf[key] = np.ascontiguousarray(tensors[google], dtype=np.float32)
    hf_config = bert_config_to_hf_config(config, architecture=head.architecture)
    num_outputs = weight.shape[0]
    if head.architecture != "BertForMultipleChoice":
        hf_config["num_labels"] = num_outputs
    if head.problem_type:
        hf_config["problem_type"] = head.problem_type
    if head.has_labels:
        labels = _read_label_list(label_list_file or os.path.join(
            os.path.dirname(checkpoints.resolve_checkpoint(init_checkpoint)), base.LABEL_LIST_FILE))
        if len(labels) != num_outputs:
            raise BertTfError(f"--label_list: {len(labels)} labels but the head has "
                              f"{num_outputs} outputs; pass the label_list.txt of this run.")
        hf_config["id2label"] = {str(i): label for i, label in enumerate(labels)}
        hf_config["label2id"] = {label: i for i, label in enumerate(labels)}
    return hf, hf_config


def _warn_unconverted_head_variables(init_checkpoint, head):
    """Logs a warning naming the head's variables the Hugging Face class has no place for
    (NER's `--use_crf` transitions: BertForTokenClassification tags by argmax)."""
    if not head.google_scope:
        return
    converted = {google for google, _ in head.names()}
    left = sorted(name for name, _ in tf.train.list_variables(
        checkpoints.resolve_checkpoint(init_checkpoint))
        if name.startswith(head.google_scope + "/") and name not in converted
        and not name.endswith(("/adam_m", "/adam_v")) and "/accum" not in name)
    if left:
        logging.warning("%s has no place in %s for %s: not converted (the Hugging Face model "
                        "scores without them).", init_checkpoint, head.architecture,
                        ", ".join(left))


def _task_name(head):
    return next(name for name, value in hf_heads().items() if value is head)


def _read_label_list(path):
    if not os.path.isfile(path):
        raise BertTfError(f"--label_list: '{path}' does not exist; pass the label_list.txt the "
                          "run wrote to its --output_dir (the label of each output, in order).")
    with open(path, encoding="utf-8") as f:
        labels = [line.rstrip("\n") for line in f if line.strip()]
    if not labels:
        raise BertTfError(f"--label_list: '{path}' is empty; it needs one label a line.")
    return labels


def _split_hf_head(hf_tensors, head, config, source):
    """(encoder tensors, {Google name: head tensor}) of a HF task model's tensors."""
    tensors = dict(hf_tensors)
    google = {}
    for google_name, key in head.names():
        value = tensors.pop(key, None)
        if value is None:
            raise BertTfError(f"{source}: lacks '{key}'; pass a Hugging Face "
                              f"{head.architecture} model or pick the task it was fine-tuned "
                              "for.")
        google[google_name] = np.ascontiguousarray(value, dtype=np.float32)
    width = google[head.names()[0][0]].shape
    if len(width) != 2 or width[1] != config.hidden_size:
        raise BertTfError(f"{source}: '{head.names()[0][1]}' has shape {list(width)}, not "
                          f"[outputs, {config.hidden_size}]; pick the task it was fine-tuned "
                          "for.")
    return tensors, google


def make_model_dir(google, config, hf_config, head, output_dir):
    """Adds what our scripts need to evaluate / predict from `output_dir`: global_step, a
    zero pooler where the HF class has none, and label_list.txt from id2label."""
    google["global_step"] = np.zeros((), dtype=np.int64)
    hidden = config.hidden_size
    google.setdefault("bert/pooler/dense/kernel", np.zeros((hidden, hidden), np.float32))
    google.setdefault("bert/pooler/dense/bias", np.zeros((hidden,), np.float32))
    id2label = hf_config.get("id2label")
    if head.has_labels and id2label:
        labels = [id2label[key] for key in sorted(id2label, key=int)]
        fileio.atomic_write_text(os.path.join(output_dir, base.LABEL_LIST_FILE),
                                 "".join(f"{label}\n" for label in labels))


def _import_safetensors():
    try:
        import safetensors.numpy as safetensors_numpy
    except ImportError:
        raise missing_extra("converting Hugging Face checkpoints needs the safetensors package",
                            "convert", "safetensors") from None
    return safetensors_numpy


def write_json(obj, path):
    fileio.make_parent_dir(path)
    fileio.atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def copy_if_present(source, target):
    if source and fileio.is_file(source):
        fileio.copy_file(source, target)
