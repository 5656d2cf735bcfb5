"""`bert_tf.encoder.config.BertConfig` on its own: the JSON round trip keeping unknown keys, and
validation messages naming the file and the key."""

import json
import re

import pytest

from bert_tf.encoder.config import BertConfig
from bert_tf.errors import BertTfError

BASE = dict(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=16, max_position_embeddings=16, type_vocab_size=2)


def _write(tmp_path, content):
    path = tmp_path / "bert_config.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_json_round_trip_keeps_every_key_including_unknown_ones(tmp_path):
    original = dict(BASE, hidden_act="relu", model_type="roberta", pad_token_id=1)
    config = BertConfig.from_json_file(_write(tmp_path, original))
    assert config.model_type == "roberta" and config.pad_token_id == 1
    assert config.hidden_act == "relu"
    # Keys the file lacks take the constructor's defaults.
    assert (config.layer_norm_type, config.position_embedding_type) == ("post", "absolute")
    again = BertConfig.from_json_file(_write(tmp_path, config.to_json_string()))
    assert again.to_dict() == config.to_dict()
    assert json.loads(config.to_json_string())["model_type"] == "roberta"


def test_to_dict_is_a_copy():
    config = BertConfig(**BASE)
    config.to_dict()["vocab_size"] = 1
    assert config.vocab_size == 30


@pytest.mark.parametrize("change, message", [
    (dict(vocab_size=0), "'vocab_size' must be a positive integer, got 0"),
    (dict(hidden_size=True), "'hidden_size' must be a positive integer, got True"),
    (dict(num_attention_heads=3), r"hidden_size \(8\) is not a multiple of "
                                  r"num_attention_heads \(3\)"),
    (dict(hidden_dropout_prob=1.0), r"'hidden_dropout_prob' must be in \[0, 1\), got 1.0"),
    (dict(hidden_act="mish"), "unknown hidden_act 'mish'; use one of gelu, "),
    (dict(layer_norm_eps=0), "'layer_norm_eps' must be a small positive number"),
    (dict(layer_norm_type="sandwich"), "unknown layer_norm_type 'sandwich'; use one of "
                                       "post, pre"),
    (dict(position_embedding_type="rotary"), "unknown position_embedding_type 'rotary'"),
])
def test_validation_messages_name_the_file_and_the_key(tmp_path, change, message):
    path = _write(tmp_path, dict(BASE, **change))
    with pytest.raises(BertTfError, match=f"^{re.escape(path)}: {message}"):
        BertConfig.from_json_file(path)


def test_a_missing_size_is_refused():
    partial = {key: value for key, value in BASE.items() if key != "num_hidden_layers"}
    config = BertConfig.from_dict(partial)
    config.num_hidden_layers = None
    with pytest.raises(BertTfError, match="^cfg: 'num_hidden_layers' must be a positive"):
        config.validate(source="cfg")


def test_unreadable_files_name_the_file_and_the_flag(tmp_path):
    missing = str(tmp_path / "absent.json")
    with pytest.raises(BertTfError,
                       match=f"'{re.escape(missing)}' does not exist.*--bert_config_file"):
        BertConfig.from_json_file(missing)
    broken = _write(tmp_path, "{not json")
    with pytest.raises(BertTfError, match=f"'{re.escape(broken)}' is not valid JSON"):
        BertConfig.from_json_file(broken)
    listed = _write(tmp_path, "[1, 2]")
    with pytest.raises(BertTfError, match=f"'{re.escape(listed)}' must hold a JSON object"):
        BertConfig.from_json_file(listed)
