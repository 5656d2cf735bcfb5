"""Converts ALBERT checkpoints between Hugging Face's `AlbertModel` layout and Google's.

`conversion.convert_hf_to_tf` hands a config.json with `model_type` "albert" here, and
`conversion.convert_tf_to_hf` a bert_config.json with `embedding_size` (ALBERT's). Names
(g: group, j: inner group; HF `Linear.weight` is [out, in], Google kernels [in, out]):

    HF (`albert.`-prefixed)                   Google
    embeddings.{word,position,token_type}_    bert/embeddings/{word,position,token_type}_
      embeddings.weight                         embeddings [*, E]
    embeddings.LayerNorm                      bert/embeddings/LayerNorm [E]
    encoder.embedding_hidden_mapping_in       bert/encoder/embedding_hidden_mapping_in [E, H]
    encoder.albert_layer_groups.{g}.          bert/encoder/transformer/group_{g}/
      albert_layers.{j}.                        inner_group_{j}/
      attention.{query,key,value}               attention_1/self/{query,key,value}
      attention.dense                           attention_1/output/dense
      attention.LayerNorm                       LayerNorm
      ffn                                       ffn_1/intermediate/dense
      ffn_output                                ffn_1/intermediate/output/dense
      full_layer_layer_norm                     LayerNorm_1
    pooler                                    bert/pooler/dense
    predictions.dense, predictions.LayerNorm  cls/predictions/transform/... [H, E], [E]
    predictions.bias                          cls/predictions/output_bias [V]
    sop_classifier.classifier                 cls/seq_relationship/output_weights [2, H], _bias

HF input keys may come with or without the `albert.` prefix; `tf_to_hf` writes them with it
(`AlbertForPreTraining` when the checkpoint has the `cls/*` heads, else `AlbertModel`), and no
tied `predictions.decoder.*` copies, so hf -> tf -> hf gives back every tensor bit for bit.
Google ALBERT has no `embedding_hidden_mapping_in` when E == H, so such HF models are refused.
"""

import os

import numpy as np
from absl import logging

from bert_tf import modeling
from bert_tf.errors import BertTfError
from bert_tf.tools import conversion
from bert_tf.training import checkpoints

HF_PREFIX = "albert."
# Hugging Face `AlbertConfig` defaults, for keys a config.json leaves out.
_HF_CONFIG_DEFAULTS = {
    "vocab_size": 30000,
    "embedding_size": 128,
    "hidden_size": 4096,
    "num_hidden_layers": 12,
    "num_hidden_groups": 1,
    "num_attention_heads": 64,
    "intermediate_size": 16384,
    "inner_group_num": 1,
    "hidden_act": "gelu_new",
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
}
_ALBERT_KEYS = ("embedding_size", "num_hidden_groups", "inner_group_num")
# Buffers, and the decoder tied to the word embeddings / prediction bias.
_HF_TIED_KEYS = {"predictions.decoder.weight": HF_PREFIX + "embeddings.word_embeddings.weight",
                 "predictions.decoder.bias": "predictions.bias"}


def is_albert_hf(hf_config):
    """Whether a HF config.json dict is an ALBERT model's."""
    return hf_config.get("model_type") == "albert"


def is_albert(config):
    """Whether a `modeling.BertConfig` is ALBERT's (it has `embedding_size`)."""
    return config.embedding_size is not None


def weight_names(config):
    """Every weight of an ALBERT pre-training model in both layouts.

    Args:
      config: `modeling.BertConfig` with `embedding_size`.

    Returns:
      A list of `conversion.WeightName`; `hf` keys of the encoder and pooler without the
      `albert.` prefix.
    """
    hidden, inter, width = config.hidden_size, config.intermediate_size, config.embedding_size
    sharing = config.sharing
    names = []

    def dense(hf, google, in_size, out_size, group="encoder"):
        names.append(conversion.WeightName(hf + ".weight", google + "/kernel",
                                           [in_size, out_size], transpose=True, group=group))
        names.append(conversion.WeightName(hf + ".bias", google + "/bias", [out_size],
                                           group=group))

    def layer_norm(hf, google, size, group="encoder"):
        names.append(conversion.WeightName(hf + ".weight", google + "/gamma", [size], group=group))
        names.append(conversion.WeightName(hf + ".bias", google + "/beta", [size], group=group))

    for table, rows in (("word", config.vocab_size),
                        ("position", config.max_position_embeddings),
                        ("token_type", config.type_vocab_size)):
        names.append(conversion.WeightName(f"embeddings.{table}_embeddings.weight",
                                           f"bert/embeddings/{table}_embeddings", [rows, width]))
    layer_norm("embeddings.LayerNorm", "bert/embeddings/LayerNorm", width)
    if width != hidden:
        dense("encoder.embedding_hidden_mapping_in", "bert/encoder/embedding_hidden_mapping_in",
              width, hidden)
    for g in range(sharing.num_hidden_groups):
        for j in range(sharing.inner_group_num):
            hf = f"encoder.albert_layer_groups.{g}.albert_layers.{j}"
            google = f"bert/encoder/transformer/group_{g}/inner_group_{j}"
            for part in ("query", "key", "value"):
                dense(f"{hf}.attention.{part}", f"{google}/attention_1/self/{part}", hidden,
                      hidden)
            dense(f"{hf}.attention.dense", f"{google}/attention_1/output/dense", hidden, hidden)
            layer_norm(f"{hf}.attention.LayerNorm", f"{google}/LayerNorm", hidden)
            dense(f"{hf}.ffn", f"{google}/ffn_1/intermediate/dense", hidden, inter)
            dense(f"{hf}.ffn_output", f"{google}/ffn_1/intermediate/output/dense", inter, hidden)
            layer_norm(f"{hf}.full_layer_layer_norm", f"{google}/LayerNorm_1", hidden)
    dense("pooler", "bert/pooler/dense", hidden, hidden, group="pooler")
    dense("predictions.dense", "cls/predictions/transform/dense", hidden, width, group="heads")
    layer_norm("predictions.LayerNorm", "cls/predictions/transform/LayerNorm", width,
               group="heads")
    names.append(conversion.WeightName("predictions.bias", "cls/predictions/output_bias",
                                       [config.vocab_size], group="heads",
                                       aliases=["predictions.decoder.bias"]))
    # [2, H] in both layouts.
    names.append(conversion.WeightName("sop_classifier.classifier.weight",
                                       "cls/seq_relationship/output_weights", [2, hidden],
                                       group="heads"))
    names.append(conversion.WeightName("sop_classifier.classifier.bias",
                                       "cls/seq_relationship/output_bias", [2], group="heads"))
    return names


def hf_config_to_bert_config(hf_config, source=conversion.HF_CONFIG_NAME):
    """A validated `modeling.BertConfig` (with the ALBERT keys) of an ALBERT config.json.

    Raises:
      BertTfError: for a setting the Google ALBERT layout cannot express.
    """
    values = {key: hf_config.get(key, default) for key, default in _HF_CONFIG_DEFAULTS.items()}
    if values["embedding_size"] == values["hidden_size"]:
        raise BertTfError(f"{source}: embedding_size equals hidden_size; Google's ALBERT layout "
                          "has no embedding_hidden_mapping_in then, so this model cannot be "
                          "converted.")
    act = values["hidden_act"]
    values["hidden_act"] = {"gelu_pytorch_tanh": "gelu_tanh"}.get(act, act)
    config = modeling.BertConfig.from_dict(values)
    config.validate(source=source)
    return config


def bert_config_to_hf_config(config, architecture="AlbertForPreTraining"):
    """The HF config.json dict of an ALBERT `modeling.BertConfig`."""
    hf_config = {"architectures": [architecture], "model_type": "albert"}
    for key, value in bert_config_json(config).items():
        hf_config[key] = value
    hf_config["hidden_act"] = {"gelu_tanh": "gelu_new"}.get(config.hidden_act, config.hidden_act)
    return hf_config


def bert_config_json(config):
    """The bert_config.json dict of an ALBERT config: Google's keys, `layer_norm_eps` and
    the ALBERT keys (as Google's albert_config.json has them)."""
    out = {key: getattr(config, key) for key in conversion.GOOGLE_CONFIG_KEYS}
    out["layer_norm_eps"] = config.layer_norm_eps
    out["embedding_size"] = config.embedding_size
    out["num_hidden_groups"] = config.sharing.num_hidden_groups
    out["inner_group_num"] = config.sharing.inner_group_num
    return out


# Hugging Face's AlbertModel / AlbertForPreTraining keys, as `conversion.hf_to_google_weights`
# reads them.
LAYOUT = conversion.HfLayout("ALBERT", HF_PREFIX, weight_names, _HF_TIED_KEYS,
                             "convert an AlbertModel / AlbertForPreTraining")


def google_to_hf_weights(google_tensors, config, source="checkpoint"):
    """Renames and transposes Google ALBERT tensors into HF `AlbertForPreTraining` keys
    (`albert.`-prefixed encoder and pooler, `predictions.*` / `sop_classifier.*` heads when
    present); other variables (optimizer slots, task heads) are ignored.

    Raises:
      BertTfError: on missing encoder variables or shape mismatches.
    """
    hf, missing = {}, []
    for weight in weight_names(config):
        value = google_tensors.get(weight.google)
        if value is None:
            if weight.group == "encoder":
                missing.append(weight.google)
            continue
        if list(value.shape) != weight.shape:
            raise BertTfError(f"{source}: variable '{weight.google}' has shape "
                              f"{list(value.shape)} but the ALBERT config implies "
                              f"{weight.shape}; use the config that came with the checkpoint.")
        key = weight.hf if weight.group == "heads" else HF_PREFIX + weight.hf
        hf[key] = np.ascontiguousarray(value.T if weight.transpose else value, dtype=np.float32)
    if missing:
        raise BertTfError(f"{source}: lacks {len(missing)} ALBERT variables (e.g. "
                          f"'{missing[0]}'); pass the ALBERT checkpoint its config belongs to.")
    return hf


def _refuse_task(task):
    if task is not None:
        raise BertTfError(f"--task={task}: fine-tuned ALBERT heads are not converted; convert "
                          "the encoder alone (without --task).")


def convert_hf_to_tf(hf_dir, output_dir, hf_config, hf_tensors, skip_unknown=False, task=None):
    """`conversion.convert_hf_to_tf` for an ALBERT directory already read (`read_hf_dir`):
    writes bert_config.json (with the ALBERT keys), bert_model.ckpt.* and vocab.txt (when
    there is one: a SentencePiece model is not read by bert_tf's WordPiece tokenizer).

    Returns:
      The checkpoint prefix written.
    """
    _refuse_task(task)
    config = hf_config_to_bert_config(hf_config,
                                      source=os.path.join(hf_dir, conversion.HF_CONFIG_NAME))
    google = conversion.hf_to_google_weights(
        hf_tensors, config, source=os.path.join(hf_dir, conversion.HF_WEIGHTS_NAME),
        skip_unknown=skip_unknown, layout=LAYOUT)
    prefix = os.path.join(output_dir, conversion.TF_CHECKPOINT_NAME)
    checkpoints.write_tf_checkpoint(google, prefix)
    conversion.write_json(bert_config_json(config),
                          os.path.join(output_dir, conversion.TF_CONFIG_NAME))
    conversion.copy_if_present(os.path.join(hf_dir, conversion.VOCAB_NAME),
                               os.path.join(output_dir, conversion.VOCAB_NAME))
    logging.info("Wrote %d ALBERT variables to %s", len(google), prefix)
    return prefix


def tf_to_hf_tensors(config, init_checkpoint, task=None):
    """(HF tensors, config.json dict) of a Google ALBERT checkpoint, for
    `conversion.convert_tf_to_hf`."""
    _refuse_task(task)
    names = [weight.google for weight in weight_names(config)]
    hf = google_to_hf_weights(checkpoints.read_tf_checkpoint(init_checkpoint, names), config,
                              source=f"checkpoint '{init_checkpoint}'")
    has_heads = any(not key.startswith(HF_PREFIX) for key in hf)
    return hf, bert_config_to_hf_config(
        config, architecture="AlbertForPreTraining" if has_heads else "AlbertModel")
