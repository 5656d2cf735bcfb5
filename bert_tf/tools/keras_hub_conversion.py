"""Converts BERT checkpoints between KerasHub presets and the Google layout.

A KerasHub preset directory, as `keras_hub.models.BertBackbone.save_to_preset(dir)` writes it
and `BertBackbone.from_preset(dir)` reads it:

    config.json                         {"class_name": "BertBackbone", "config": {sizes}}
    metadata.json                       versions, parameter count, tasks
    model.weights.h5                    the backbone's weights (Keras 3 `.weights.h5`)
    tokenizer.json                      BertTokenizer's config ("lowercase")
    assets/tokenizer/vocabulary.txt     the WordPiece vocabulary, one token a line
    task.json, task.weights.h5          a `BertTextClassifier` preset's head (optional)

`model.weights.h5` is read and written with h5py (no KerasHub at run time). Its datasets sit
under the snake-case class names of the backbone's layers in the order Keras saves them
(`layers/transformer_encoder_1/_self_attention_layer/query_dense/vars/0`, ...). Every
KerasHub kernel is [in, out] as Google's; the attention kernels split the hidden axis into
[heads, size_per_head] (`query` [H, heads, size], its bias [heads, size], `attention_output`
[heads, size, H]), so a weight converts by a reshape alone and converted there and back it is
the original bit for bit.

KerasHub's BertBackbone computes the tanh form of GELU and layer norms with epsilon 1e-12:
`bert_config.json` written from a preset says `"hidden_act": "gelu_tanh"`; a Google config
whose activation KerasHub cannot compute (relu, ...) or whose variant it has no form of
(relative positions, pre-LN, another epsilon) stops with one line; an exact-GELU one converts
with a warning, since the preset then computes tanh-GELU on the same weights.

The classifier head (`task="classifier"`): a `BertTextClassifier` preset holds its logits
Dense in `task.weights.h5` (`layers/dense/vars/0` [H, num_classes], `vars/1`), applied to the
pooled output after dropout; bert_tf's `output_weights` [num_classes, H] is its transpose.
"""

import json
import os

import numpy as np
from absl import logging

from bert_tf import fileio, modeling
from bert_tf.errors import BertTfError, missing_extra
from bert_tf.tools import conversion
from bert_tf.training import checkpoints

CONFIG_NAME = "config.json"
METADATA_NAME = "metadata.json"
WEIGHTS_NAME = "model.weights.h5"
TOKENIZER_NAME = "tokenizer.json"
VOCAB_ASSET = os.path.join("assets", "tokenizer", "vocabulary.txt")
TASK_CONFIG_NAME = "task.json"
TASK_WEIGHTS_NAME = "task.weights.h5"
BACKBONE_CLASS = "BertBackbone"
CLASSIFIER_CLASS = "BertTextClassifier"
# What KerasHub's BertBackbone computes and bert_tf's names for it.
KERAS_HUB_ACTIVATION = "gelu_tanh"
KERAS_HUB_LAYER_NORM_EPS = 1e-12
# The version of the files written, as KerasHub records its own in metadata.json.
_WRITTEN_VERSIONS = {"keras_version": "3.15.1", "keras_hub_version": "0.32.0"}
# The learning rate BertTextClassifier compiles with by default.
_CLASSIFIER_LEARNING_RATE = 5e-5
# The heads of `--task` a KerasHub preset has a counterpart of.
TASKS = ("classifier",)


def is_keras_hub_preset(path):
    """Whether `path` is a KerasHub preset directory (config.json + model.weights.h5) or the
    model.weights.h5 inside one."""
    directory = _preset_dir(path)
    return directory is not None and all(
        fileio.is_file(os.path.join(directory, name)) for name in (CONFIG_NAME, WEIGHTS_NAME))


def _preset_dir(path):
    if not path:
        return None
    if os.path.basename(str(path)) == WEIGHTS_NAME:
        return os.path.dirname(str(path)) or "."
    return str(path) if fileio.is_dir(path) else None


def _read_json(path):
    try:
        with fileio.open_text(path) as f:
            value = json.load(f)
    except ValueError as e:
        raise BertTfError(f"'{path}' is not valid JSON ({e}); fix or replace the file.") from None
    if not isinstance(value, dict):
        raise BertTfError(f"'{path}' must hold a JSON object; fix or replace the file.")
    return value


def _import_h5py():
    try:
        import h5py
    except ImportError:
        raise missing_extra("reading and writing KerasHub presets needs the h5py package",
                            "convert", "h5py") from None
    return h5py


def preset_bert_config(preset_config, source):
    """The `bert_config.json` dict of a preset's config.json dict (a BertBackbone's).

    Raises:
      BertTfError: naming `source` when config.json is not a BertBackbone's.
    """
    class_name = preset_config.get("class_name")
    if class_name != BACKBONE_CLASS:
        raise BertTfError(f"{source}: class_name is '{class_name}', not '{BACKBONE_CLASS}'; "
                          "pass the preset of a keras_hub.models.BertBackbone (other "
                          "architectures do not convert).")
    values = preset_config.get("config", {})
    keys = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim")
    missing = [key for key in keys if key not in values]
    if missing:
        raise BertTfError(f"{source}: the BertBackbone config lacks '{missing[0]}'; pass a "
                          "preset written by BertBackbone.save_to_preset.")
    dropout = values.get("dropout", 0.1)
    return {"vocab_size": values["vocabulary_size"], "hidden_size": values["hidden_dim"],
            "num_hidden_layers": values["num_layers"],
            "num_attention_heads": values["num_heads"],
            "intermediate_size": values["intermediate_dim"],
            "hidden_act": KERAS_HUB_ACTIVATION, "hidden_dropout_prob": dropout,
            "attention_probs_dropout_prob": dropout,
            "max_position_embeddings": values.get("max_sequence_length", 512),
            "type_vocab_size": values.get("num_segments", 2), "initializer_range": 0.02,
            "layer_norm_eps": KERAS_HUB_LAYER_NORM_EPS}


def backbone_config(config):
    """config.json's dict (a BertBackbone's) for the `modeling.BertConfig` `config`."""
    return {
        "module": "keras_hub.src.models.bert.bert_backbone", "class_name": BACKBONE_CLASS,
        "config": {
            "name": "bert_backbone", "trainable": True,
            "dtype": {"module": "keras", "class_name": "DTypePolicy",
                      "config": {"name": "float32"}, "registered_name": None},
            "vocabulary_size": config.vocab_size, "num_layers": config.num_hidden_layers,
            "num_heads": config.num_attention_heads, "hidden_dim": config.hidden_size,
            "intermediate_dim": config.intermediate_size,
            "dropout": config.hidden_dropout_prob,
            "max_sequence_length": config.max_position_embeddings,
            "num_segments": config.type_vocab_size},
        "registered_name": f"keras_hub>{BACKBONE_CLASS}"}


def check_expressible(config, source):
    """Raises BertTfError (one line naming `source`) for a config KerasHub's BertBackbone has
    no form of; warns for exact GELU, which KerasHub computes in its tanh form."""
    variant = modeling.LayerVariant()
    for key in ("position_embedding_type", "layer_norm_type"):
        if getattr(config, key) != getattr(variant, key):
            raise BertTfError(f"{source}: {key} is '{getattr(config, key)}'; KerasHub's "
                              f"BertBackbone has only '{getattr(variant, key)}', convert a "
                              "standard BERT model.")
    if config.layer_norm_eps != KERAS_HUB_LAYER_NORM_EPS:
        raise BertTfError(f"{source}: layer_norm_eps is {config.layer_norm_eps}; KerasHub's "
                          f"BertBackbone computes {KERAS_HUB_LAYER_NORM_EPS}, convert a model "
                          "trained with it.")
    act = config.hidden_act
    if act == "gelu":
        logging.warning("%s: hidden_act is 'gelu' (exact erf form); KerasHub's BertBackbone "
                        "computes the tanh form, so its outputs differ slightly from bert_tf's "
                        "on the same weights.", source)
    elif act not in ("gelu_tanh", "gelu_new"):
        raise BertTfError(f"{source}: hidden_act is '{act}'; KerasHub's BertBackbone computes "
                          "GELU only (tanh form), convert a GELU model.")


def backbone_layout(config):
    """Where each Google variable sits in a BertBackbone's model.weights.h5.

    Args:
      config: `modeling.BertConfig`.

    Returns:
      (weights, groups): `weights` is a list of (h5 dataset path, Google name, KerasHub
      shape); `groups` is a list of (h5 group path, the layer name Keras records in its
      `vars` attributes) of every layer saved, weights or not, in the order Keras saves them.
    """
    hidden, inter = config.hidden_size, config.intermediate_size
    heads = config.num_attention_heads
    size = hidden // heads
    weights, groups = [], [("", "bert_backbone")]

    def layer(path, name, *variables):
        groups.append((path, name))
        for index, (google, shape) in enumerate(variables):
            weights.append((f"{path}/vars/{index}".lstrip("/"), google, list(shape)))

    for index, name in enumerate(("token_ids", "segment_ids", "padding_mask")):
        layer(f"layers/input_layer{f'_{index}' if index else ''}", name)
    emb = "bert/embeddings"
    layer("layers/reversible_embedding", "token_embedding",
          (f"{emb}/word_embeddings", [config.vocab_size, hidden]))
    layer("layers/position_embedding", "position_embedding",
          (f"{emb}/position_embeddings", [config.max_position_embeddings, hidden]))
    layer("layers/embedding", "segment_embedding",
          (f"{emb}/token_type_embeddings", [config.type_vocab_size, hidden]))
    layer("layers/add", "embeddings_add")
    layer("layers/layer_normalization", "embeddings_layer_norm",
          (f"{emb}/LayerNorm/gamma", [hidden]), (f"{emb}/LayerNorm/beta", [hidden]))
    layer("layers/dropout", "embeddings_dropout")
    for i in range(config.num_hidden_layers):
        path = f"layers/transformer_encoder{f'_{i}' if i else ''}"
        google = f"bert/encoder/layer_{i}"
        attention = f"{path}/_self_attention_layer"
        layer(path, f"transformer_layer_{i}")
        layer(attention, "self_attention_layer")
        for part in ("query", "key", "value"):
            layer(f"{attention}/{part}_dense", part,
                  (f"{google}/attention/self/{part}/kernel", [hidden, heads, size]),
                  (f"{google}/attention/self/{part}/bias", [heads, size]))
        layer(f"{attention}/output_dense", "attention_output",
              (f"{google}/attention/output/dense/kernel", [heads, size, hidden]),
              (f"{google}/attention/output/dense/bias", [hidden]))
        layer(f"{attention}/_softmax", f"softmax{f'_{i}' if i else ''}")
        layer(f"{attention}/_dropout_layer", f"dropout{f'_{i}' if i else ''}")
        layer(f"{path}/_self_attention_dropout", "self_attention_dropout")
        for norm, google_norm in (("_self_attention_layer_norm", "attention/output/LayerNorm"),
                                  ("_feedforward_layer_norm", "output/LayerNorm")):
            layer(f"{path}/{norm}", norm.lstrip("_"), (f"{google}/{google_norm}/gamma", [hidden]),
                  (f"{google}/{google_norm}/beta", [hidden]))
        for dense, google_dense, shape in (
                ("_feedforward_intermediate_dense", "intermediate/dense", [hidden, inter]),
                ("_feedforward_output_dense", "output/dense", [inter, hidden])):
            layer(f"{path}/{dense}", dense.lstrip("_"), (f"{google}/{google_dense}/kernel", shape),
                  (f"{google}/{google_dense}/bias", shape[1:]))
        layer(f"{path}/_feedforward_dropout", "feedforward_dropout")
    layer("layers/dense", "pooled_dense", ("bert/pooler/dense/kernel", [hidden, hidden]),
          ("bert/pooler/dense/bias", [hidden]))
    return weights, groups


def _google_shape(config, google):
    return {w.google: w.shape for w in conversion.weight_names(config)}[google]


def read_h5(path, names):
    """{dataset path: float32 array} of the datasets `names` in the .weights.h5 `path`.

    Raises:
      BertTfError: naming the file and the first dataset it lacks.
    """
    h5py = _import_h5py()
    try:
        with fileio.open_binary(path) as raw, h5py.File(raw, "r") as f:
            missing = [name for name in names if name not in f]
            if missing:
                raise BertTfError(f"'{path}' lacks {len(missing)} of the {len(names)} weights "
                                  f"of the BERT its config.json describes (e.g. '{missing[0]}')"
                                  "; pass the preset's own model.weights.h5.")
            return {name: np.asarray(f[name], dtype=np.float32) for name in names}
    except OSError as e:
        raise BertTfError(f"cannot read '{path}' ({str(e).splitlines()[0]}); pass an "
                          "uncorrupted Keras .weights.h5 file.") from None


def write_h5(path, groups, datasets):
    """Writes a Keras 3 `.weights.h5`: every group of `groups` ((path, layer name), as
    `backbone_layout` gives them) with its `vars` subgroup, and `datasets` {path: array}."""
    h5py = _import_h5py()
    fileio.make_parent_dir(path)
    with fileio.replaced_on_success(path) as tmp_path, h5py.File(tmp_path, "w") as f:
        for group, name in groups:
            target = f.require_group(f"{group}/vars") if group else f.require_group("vars")
            target.attrs["name"] = name
        for name, value in datasets.items():
            f.create_dataset(name, data=value)


def read_preset_weights(preset_dir, config):
    """{Google name: float32 array} of the backbone in `preset_dir`'s model.weights.h5."""
    weights_path = os.path.join(preset_dir, WEIGHTS_NAME)
    layout, _ = backbone_layout(config)
    stored = read_h5(weights_path, [path for path, _, _ in layout])
    google = {}
    for path, name, shape in layout:
        if list(stored[path].shape) != shape:
            raise BertTfError(f"'{weights_path}': '{path}' has shape {list(stored[path].shape)} "
                              f"but config.json implies {shape}; pass the preset's own "
                              "model.weights.h5.")
        google[name] = stored[path].reshape(_google_shape(config, name))
    return google


def read_keras_hub_preset(path):
    """Reads a KerasHub BERT preset (the directory, or its model.weights.h5).

    Returns:
      (google_tensors, bert_config_dict, vocab_file, do_lower_case): {Google variable name:
      float32 array} of the encoder (with the pooler), the `bert_config.json` dict, the path
      of assets/tokenizer/vocabulary.txt (None when the preset has none) and the tokenizer's
      "lowercase" (None without tokenizer.json).

    Raises:
      BertTfError: one line naming the file, for another architecture or weights that do not
        fit config.json.
    """
    preset_dir = _preset_dir(path)
    config_path = os.path.join(preset_dir, CONFIG_NAME)
    bert_config = preset_bert_config(_read_json(config_path), config_path)
    config = modeling.BertConfig.from_dict(bert_config)
    config.validate(source=config_path)
    google = read_preset_weights(preset_dir, config)
    vocab_file = os.path.join(preset_dir, VOCAB_ASSET)
    tokenizer_path = os.path.join(preset_dir, TOKENIZER_NAME)
    do_lower_case = None
    if fileio.is_file(tokenizer_path):
        tokenizer = _read_json(tokenizer_path).get("config", {})
        do_lower_case = bool(tokenizer.get("lowercase", False))
        if do_lower_case and not tokenizer.get("strip_accents", False):
            logging.warning("%s: lowercase without strip_accents; bert_tf's uncased "
                            "FullTokenizer also strips accents.", tokenizer_path)
    return google, bert_config, vocab_file if fileio.is_file(vocab_file) else None, do_lower_case


def _require_vocab(preset_dir, vocab_file):
    if vocab_file is None:
        raise BertTfError(f"KerasHub preset '{preset_dir}' has no {VOCAB_ASSET} (its tokenizer "
                          "was not saved); save the BertTokenizer into the preset too "
                          "(tokenizer.save_to_preset(dir)).")


def _task_head_check(task):
    if task is not None and task not in TASKS:
        raise BertTfError(f"--task={task}: a KerasHub preset has only a classifier head "
                          "(BertTextClassifier); pass --task=classifier or convert the encoder "
                          "alone (without --task).")
    return conversion.task_head(task) if task else None


def read_classifier_head(preset_dir, hidden_size):
    """{Google name: array} of a BertTextClassifier preset's logits Dense (output_weights
    [num_classes, H], output_bias [num_classes])."""
    task_path = os.path.join(preset_dir, TASK_CONFIG_NAME)
    class_name = (_read_json(task_path).get("class_name") if fileio.is_file(task_path)
                  else None)
    if class_name != CLASSIFIER_CLASS:
        raise BertTfError(f"{task_path}: class_name is '{class_name}', not '{CLASSIFIER_CLASS}'"
                          "; pass a BertTextClassifier preset for --task=classifier, or "
                          "convert the encoder alone.")
    weights_path = os.path.join(preset_dir, TASK_WEIGHTS_NAME)
    stored = read_h5(weights_path, ["layers/dense/vars/0", "layers/dense/vars/1"])
    kernel, bias = stored["layers/dense/vars/0"], stored["layers/dense/vars/1"]
    if kernel.ndim != 2 or kernel.shape[0] != hidden_size:
        raise BertTfError(f"'{weights_path}': the logits kernel has shape {list(kernel.shape)}, "
                          f"not [{hidden_size}, num_classes]; pass the classifier's own preset.")
    head = conversion.task_head("classifier")
    (weights_name, _), (bias_name, _) = head.names()
    return {weights_name: np.ascontiguousarray(kernel.T), bias_name: bias}


def convert_keras_hub_to_tf(preset_dir, output_dir, task=None):
    """Converts a KerasHub BERT preset into a Google BERT directory.

    Writes `output_dir/bert_config.json` (hidden_act "gelu_tanh", as KerasHub computes),
    `bert_model.ckpt.*` and `vocab.txt`; with `task="classifier"` a BertTextClassifier
    preset's head too, as a model directory (`global_step`, a `checkpoint` state file).

    Returns:
      The checkpoint prefix written.

    Raises:
      BertTfError: one line naming the file, for another architecture, a preset without its
        vocabulary or weights that do not fit config.json.
    """
    fileio.require_local(output_dir, "output_dir", "convert_checkpoint.py writes")
    head = _task_head_check(task)
    if not is_keras_hub_preset(preset_dir):
        raise BertTfError(f"--keras_hub_preset: '{preset_dir}' is not a KerasHub preset "
                          f"directory (it needs {CONFIG_NAME} and {WEIGHTS_NAME}); pass the "
                          "directory BertBackbone.save_to_preset wrote.")
    google, bert_config, vocab_file, do_lower_case = read_keras_hub_preset(preset_dir)
    _require_vocab(preset_dir, vocab_file)
    config = modeling.BertConfig.from_dict(bert_config)
    prefix = os.path.join(output_dir, conversion.TF_CHECKPOINT_NAME)
    if head is not None:
        google.update(read_classifier_head(preset_dir, config.hidden_size))
        conversion.make_model_dir(google, config, {}, head, output_dir)
    checkpoints.write_tf_checkpoint(google, prefix)
    if head is not None:
        checkpoints.write_state(output_dir, conversion.TF_CHECKPOINT_NAME)
    conversion.write_json(bert_config, os.path.join(output_dir, conversion.TF_CONFIG_NAME))
    fileio.copy_file(vocab_file, os.path.join(output_dir, conversion.VOCAB_NAME))
    logging.info("Wrote %d variables to %s (KerasHub preset %s, %s).", len(google), prefix,
                 preset_dir, "uncased" if do_lower_case else "cased")
    return prefix


def _tokenizer_config(do_lower_case):
    return {"module": "keras_hub.src.models.bert.bert_tokenizer", "class_name": "BertTokenizer",
            "config": {"name": "bert_tokenizer", "trainable": True,
                       "dtype": {"module": "keras", "class_name": "DTypePolicy",
                                 "config": {"name": "int32"}, "registered_name": None},
                       "config_file": TOKENIZER_NAME, "vocabulary": None,
                       "sequence_length": None, "lowercase": bool(do_lower_case),
                       # FullTokenizer strips accents exactly when it lower-cases.
                       "strip_accents": bool(do_lower_case), "split": True,
                       "suffix_indicator": "##", "oov_token": "[UNK]", "special_tokens": None,
                       "special_tokens_in_strings": False},
            "registered_name": "keras_hub>BertTokenizer"}


def _classifier_config(backbone, num_classes, dropout):
    return {"module": "keras_hub.src.models.bert.bert_text_classifier",
            "class_name": CLASSIFIER_CLASS,
            "config": {"backbone": backbone, "preprocessor": None,
                       "name": "bert_text_classifier", "num_classes": num_classes,
                       "activation": "linear", "dropout": dropout},
            "registered_name": f"keras_hub>{CLASSIFIER_CLASS}"}


def _write_classifier(output_dir, tensors, config, backbone, source):
    """Writes task.json and task.weights.h5 of the classifier head in `tensors`."""
    (weights_name, _), (bias_name, _) = conversion.task_head("classifier").names()
    for name in (weights_name, bias_name):
        if name not in tensors:
            raise BertTfError(f"{source}: lacks '{name}'; pass the checkpoint of a "
                              "run_classifier.py run for --task=classifier.")
    weights = tensors[weights_name]
    if weights.ndim != 2 or weights.shape[1] != config.hidden_size:
        raise BertTfError(f"{source}: '{weights_name}' has shape {list(weights.shape)}, not "
                          f"[num_labels, {config.hidden_size}]; pass a classifier's checkpoint.")
    conversion.write_json(_classifier_config(backbone, int(weights.shape[0]),
                                             config.hidden_dropout_prob),
                          os.path.join(output_dir, TASK_CONFIG_NAME))
    # The optimizer's iterations and learning rate, as a compiled classifier saves them (a
    # file without them makes Keras warn when the task loads).
    write_h5(os.path.join(output_dir, TASK_WEIGHTS_NAME),
             [("", "bert_text_classifier"), ("layers/dense", "logits"),
              ("layers/dropout", "classifier_dropout"), ("optimizer", "adam")],
             {"layers/dense/vars/0": np.ascontiguousarray(weights.T, dtype=np.float32),
              "layers/dense/vars/1": np.asarray(tensors[bias_name], dtype=np.float32),
              "optimizer/vars/0": np.zeros((), np.int64),
              "optimizer/vars/1": np.asarray(_CLASSIFIER_LEARNING_RATE, np.float32)})


def convert_tf_to_keras_hub(bert_config_file, init_checkpoint, output_dir, vocab_file=None,
                            do_lower_case=True, task=None):
    """Converts a Google BERT checkpoint into a KerasHub preset directory.

    Writes config.json, metadata.json, model.weights.h5, tokenizer.json (`do_lower_case` as
    "lowercase" and "strip_accents") and assets/tokenizer/vocabulary.txt (`vocab_file`, else
    the vocab.txt beside the config); with `task="classifier"` also the BertTextClassifier's
    task.json and task.weights.h5.

    Returns:
      The path of the model.weights.h5 written.

    Raises:
      BertTfError: one line, for a config KerasHub cannot express, a missing vocabulary or a
        checkpoint that does not fit the config.
    """
    fileio.require_local(output_dir, "output_dir", "convert_checkpoint.py writes")
    head = _task_head_check(task)
    config = modeling.BertConfig.from_json_file(bert_config_file)
    check_expressible(config, bert_config_file)
    if vocab_file is None:
        vocab_file = os.path.join(os.path.dirname(bert_config_file), conversion.VOCAB_NAME)
    if not fileio.is_file(vocab_file):
        raise BertTfError(f"--vocab_file: '{vocab_file}' does not exist; a KerasHub preset "
                          "needs its vocabulary, pass the checkpoint's vocab.txt.")
    source = f"checkpoint '{init_checkpoint}'"
    layout, groups = backbone_layout(config)
    names = [google for _, google, _ in layout]
    head_names = [google for google, _ in head.names()] if head else []
    tensors = checkpoints.read_tf_checkpoint(init_checkpoint, names + head_names)
    conversion.google_to_hf_weights(tensors, config, source=source)  # Names and shapes.
    missing = [name for name in names if name not in tensors]
    if missing:
        raise BertTfError(f"{source}: lacks '{missing[0]}'; a KerasHub BertBackbone needs the "
                          "pooler, pass a checkpoint that has it.")
    backbone = backbone_config(config)
    write_h5(os.path.join(output_dir, WEIGHTS_NAME), groups,
             {path: np.ascontiguousarray(tensors[google], dtype=np.float32).reshape(shape)
              for path, google, shape in layout})
    conversion.write_json(backbone, os.path.join(output_dir, CONFIG_NAME))
    if head is not None:
        _write_classifier(output_dir, tensors, config, backbone, source)
    conversion.write_json(
        dict(_WRITTEN_VERSIONS, parameter_count=int(sum(tensors[n].size for n in names)),
             tasks=["MaskedLM", "TextClassifier", "TextEmbedder"]),
        os.path.join(output_dir, METADATA_NAME))
    conversion.write_json(_tokenizer_config(do_lower_case),
                          os.path.join(output_dir, TOKENIZER_NAME))
    fileio.copy_file(vocab_file, os.path.join(output_dir, VOCAB_ASSET))
    logging.info("Wrote KerasHub preset %s (%d weights, %s).", output_dir, len(layout),
                 "uncased" if do_lower_case else "cased")
    return os.path.join(output_dir, WEIGHTS_NAME)
