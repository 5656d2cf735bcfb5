"""Checkpoint conversion between the Hugging Face and Google BERT layouts."""

import json
import logging
import os

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf
from finetune_helpers import run_script

from bert_tf import modeling
from bert_tf.errors import BertTfError
from bert_tf.tasks import pretraining
from bert_tf.tools import conversion
from bert_tf.training import checkpoints

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Written by tests/fixtures/make_minilm_reference.py with transformers: the keys
# BertForPreTraining has and the ones its save_pretrained writes, for a tiny config.
with open(os.path.join(REPO, "tests", "fixtures", "bert_for_pretraining_keys.json")) as _f:
    HF_KEYS = json.load(_f)
# Written by tests/fixtures/make_pretraining_reference.py with transformers, for the
# same tiny config: a BertForPreTraining as save_pretrained writes it, its outputs,
# and what loading needs (BertConfig defaults, BertModel's saved keys).
PRETRAINING_TINY = os.path.join(REPO, "tests", "fixtures", "pretraining_tiny")
with open(os.path.join(PRETRAINING_TINY, "transformers_facts.json")) as _f:
    HF_FACTS = json.load(_f)


def _strip_prefix(tensors):
    return {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in tensors.items()}


def _make_tiny_hf_dir(path, legacy=False, seed=0):
    """Writes a random BertForPreTraining directory with the keys transformers saves.

    legacy=True mimics older files: no `bert.` prefix, LayerNorm gamma/beta, the
    tied decoder weights written out, and a position_ids buffer.
    """
    rng = np.random.default_rng(seed)
    tensors = {key: rng.standard_normal(shape).astype(np.float32)
               for key, shape in HF_KEYS["saved_shapes"].items()}
    if legacy:
        embeddings = tensors["bert.embeddings.word_embeddings.weight"]
        tensors["cls.predictions.decoder.weight"] = embeddings
        tensors["cls.predictions.decoder.bias"] = tensors["cls.predictions.bias"]
        renamed = {}
        for key, value in tensors.items():
            key = key[len("bert."):] if key.startswith("bert.") else key
            if "LayerNorm." in key:
                key = key.replace(".weight", ".gamma").replace(".bias", ".beta")
            renamed[key] = value
        renamed["embeddings.position_ids"] = np.arange(64, dtype=np.int64)[None]
        tensors = renamed
    os.makedirs(path, exist_ok=True)
    safetensors.numpy.save_file(tensors, os.path.join(path, "model.safetensors"),
                                metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(dict(HF_KEYS["bert_config"], model_type="bert", hidden_act="gelu"), f)
    with open(os.path.join(path, "vocab.txt"), "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                          [f"w{i}" for i in range(94)]) + "\n")
    return tensors


def _run_script(*args):
    return run_script("convert_checkpoint.py", *args, timeout=120)


def test_minilm_checkpoint_has_google_names_and_layout(minilm_dir, minilm_converted):
    hf = safetensors.numpy.load_file(os.path.join(minilm_dir, "model.safetensors"))
    prefix = os.path.join(minilm_converted, "bert_model.ckpt")
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()

    # docs/compatibility.md §2, for 6 layers and no pre-training heads (MiniLM ships none).
    expected = {f"bert/embeddings/{t}_embeddings" for t in ("word", "position", "token_type")}
    expected |= {"bert/embeddings/LayerNorm/gamma", "bert/embeddings/LayerNorm/beta",
                 "bert/pooler/dense/kernel", "bert/pooler/dense/bias"}
    for i in range(6):
        for dense in ("attention/self/query", "attention/self/key", "attention/self/value",
                      "attention/output/dense", "intermediate/dense", "output/dense"):
            expected |= {f"bert/encoder/layer_{i}/{dense}/kernel",
                         f"bert/encoder/layer_{i}/{dense}/bias"}
        for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
            expected |= {f"bert/encoder/layer_{i}/{norm}/gamma",
                         f"bert/encoder/layer_{i}/{norm}/beta"}
    assert set(shapes) == expected  # No global_step, like Google's released checkpoints.
    assert shapes["bert/encoder/layer_0/intermediate/dense/kernel"] == [384, 1536]
    assert shapes["bert/embeddings/word_embeddings"] == [30522, 384]

    # PyTorch Linear weights are [out, in]; Google kernels [in, out].
    np.testing.assert_array_equal(
        reader.get_tensor("bert/encoder/layer_3/output/dense/kernel"),
        hf["encoder.layer.3.output.dense.weight"].T)
    np.testing.assert_array_equal(reader.get_tensor("bert/embeddings/LayerNorm/gamma"),
                                  hf["embeddings.LayerNorm.weight"])
    np.testing.assert_array_equal(reader.get_tensor("bert/embeddings/word_embeddings"),
                                  hf["embeddings.word_embeddings.weight"])

    config = json.load(open(os.path.join(minilm_converted, "bert_config.json")))
    hf_config = json.load(open(os.path.join(minilm_dir, "config.json")))
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "hidden_act", "max_position_embeddings", "type_vocab_size",
                "initializer_range", "hidden_dropout_prob", "attention_probs_dropout_prob"):
        assert config[key] == hf_config[key], key
    with open(os.path.join(minilm_dir, "vocab.txt"), "rb") as a, \
            open(os.path.join(minilm_converted, "vocab.txt"), "rb") as b:
        assert a.read() == b.read()
    # Written whole: no temporary files left behind.
    assert sorted(os.listdir(minilm_converted)) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "vocab.txt"]


def test_minilm_hf_tf_hf_round_trip_is_bit_exact(minilm_dir, minilm_converted, tmp_path):
    conversion.convert_tf_to_hf(os.path.join(minilm_converted, "bert_config.json"),
                                os.path.join(minilm_converted, "bert_model.ckpt"),
                                str(tmp_path))
    original = safetensors.numpy.load_file(os.path.join(minilm_dir, "model.safetensors"))
    original.pop("embeddings.position_ids")  # A buffer, not a weight.
    back = safetensors.numpy.load_file(str(tmp_path / "model.safetensors"))
    assert all(key.startswith("bert.") for key in back)  # BertForPreTraining layout.
    back = _strip_prefix(back)
    assert set(back) == set(original)
    for key, value in original.items():
        assert back[key].dtype == np.float32, key
        assert np.array_equal(back[key], value), key
    hf_config = json.load(open(tmp_path / "config.json"))
    assert hf_config["hidden_size"] == 384 and hf_config["num_hidden_layers"] == 6
    assert (tmp_path / "vocab.txt").read_bytes() == open(
        os.path.join(minilm_dir, "vocab.txt"), "rb").read()


@pytest.mark.parametrize("legacy", [False, True], ids=["save_pretrained", "legacy_names"])
def test_tiny_model_with_heads_round_trips_to_transformers_keys(tmp_path, legacy):
    original = _make_tiny_hf_dir(tmp_path / "hf", legacy=legacy)
    conversion.convert_hf_to_tf(str(tmp_path / "hf"), str(tmp_path / "tf"))
    reader = tf.train.load_checkpoint(str(tmp_path / "tf" / "bert_model.ckpt"))
    np.testing.assert_array_equal(reader.get_tensor("cls/seq_relationship/output_weights"),
                                  original["cls.seq_relationship.weight"])  # [2, H] both sides.
    np.testing.assert_array_equal(reader.get_tensor("cls/predictions/transform/dense/kernel"),
                                  original["cls.predictions.transform.dense.weight"].T)

    conversion.convert_tf_to_hf(str(tmp_path / "tf" / "bert_config.json"),
                                str(tmp_path / "tf" / "bert_model.ckpt"), str(tmp_path / "back"))
    back = safetensors.numpy.load_file(str(tmp_path / "back" / "model.safetensors"))
    # Exactly the keys transformers' own save_pretrained writes for BertForPreTraining.
    assert sorted(back) == HF_KEYS["saved_keys"]
    # What we leave out is only what BertForPreTraining ties (decoder weight and bias).
    assert set(HF_KEYS["state_dict_keys"]) - set(back) == {
        "cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    for key, value in back.items():
        source = key[len("bert."):] if legacy and key.startswith("bert.") else key
        if legacy and "LayerNorm." in source:
            source = source.replace(".weight", ".gamma").replace(".bias", ".beta")
        assert np.array_equal(value, original[source]), key
    hf_config = json.load(open(tmp_path / "back" / "config.json"))
    assert hf_config["architectures"] == ["BertForPreTraining"]
    for key, value in HF_KEYS["bert_config"].items():
        assert hf_config[key] == value, key


def test_tied_decoder_that_differs_is_reported(tmp_path, caplog):
    _make_tiny_hf_dir(tmp_path / "hf")
    tensors = safetensors.numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    tensors["cls.predictions.decoder.weight"] = np.zeros([99, 32], np.float32)
    safetensors.numpy.save_file(tensors, str(tmp_path / "hf" / "model.safetensors"))
    with caplog.at_level(logging.WARNING):
        conversion.convert_hf_to_tf(str(tmp_path / "hf"), str(tmp_path / "tf"))
    assert "'cls.predictions.decoder.weight' differs from" in caplog.text


def test_prediction_bias_saved_only_as_decoder_bias_is_used(tmp_path):
    _make_tiny_hf_dir(tmp_path / "hf")
    tensors = safetensors.numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    bias = tensors.pop("cls.predictions.bias")
    tensors["cls.predictions.decoder.bias"] = bias
    safetensors.numpy.save_file(tensors, str(tmp_path / "hf" / "model.safetensors"))
    conversion.convert_hf_to_tf(str(tmp_path / "hf"), str(tmp_path / "tf"))
    reader = tf.train.load_checkpoint(str(tmp_path / "tf" / "bert_model.ckpt"))
    np.testing.assert_array_equal(reader.get_tensor("cls/predictions/output_bias"), bias)


def test_tf_to_hf_shape_mismatch_names_checkpoint_variable_and_shapes(minilm_converted,
                                                                      tmp_path):
    config = json.load(open(os.path.join(minilm_converted, "bert_config.json")))
    (tmp_path / "bert_config.json").write_text(json.dumps(dict(config, vocab_size=30000)))
    prefix = os.path.join(minilm_converted, "bert_model.ckpt")
    with pytest.raises(BertTfError, match=(
            rf"checkpoint '{prefix}': variable 'bert/embeddings/word_embeddings' has shape "
            r"\[30522, 384\] but the BERT config implies \[30000, 384\]")):
        conversion.convert_tf_to_hf(str(tmp_path / "bert_config.json"), prefix,
                                    str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_unknown_keys_are_named_or_skipped(tmp_path):
    _make_tiny_hf_dir(tmp_path / "hf")
    tensors = safetensors.numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    tensors["classifier.weight"] = np.zeros([3, 32], np.float32)
    safetensors.numpy.save_file(tensors, str(tmp_path / "hf" / "model.safetensors"))
    with pytest.raises(BertTfError, match=r"1 keys are not BERT weights \(classifier.weight\); "
                                          r".*--skip_unknown_keys"):
        conversion.convert_hf_to_tf(str(tmp_path / "hf"), str(tmp_path / "tf"))
    assert not (tmp_path / "tf").exists()  # Nothing written before the error.
    conversion.convert_hf_to_tf(str(tmp_path / "hf"), str(tmp_path / "tf"), skip_unknown=True)
    names = dict(tf.train.list_variables(str(tmp_path / "tf" / "bert_model.ckpt")))
    assert len(names) == len(HF_KEYS["saved_keys"])


def test_non_bert_inputs_are_rejected(tmp_path):
    _make_tiny_hf_dir(tmp_path / "hf")
    config_path = tmp_path / "hf" / "config.json"
    config = json.load(open(config_path))
    config_path.write_text(json.dumps(dict(config, model_type="roberta")))
    with pytest.raises(BertTfError, match="model_type 'roberta' is not 'bert'"):
        conversion.convert_hf_to_tf(str(tmp_path / "hf"), str(tmp_path / "tf"))
    config_path.write_text(json.dumps(dict(config, position_embedding_type="relative_key")))
    with pytest.raises(BertTfError, match="position_embedding_type 'relative_key'"):
        conversion.convert_hf_to_tf(str(tmp_path / "hf"), str(tmp_path / "tf"))
    config_path.write_text(json.dumps(dict(config, num_hidden_layers=3)))
    with pytest.raises(BertTfError, match=r"lacks 16 BERT weights \(e.g. "
                                          r"'encoder.layer.2.attention.self.query.weight'\)"):
        conversion.convert_hf_to_tf(str(tmp_path / "hf"), str(tmp_path / "tf"))


def test_tf_to_hf_rejects_missing_checkpoint(minilm_converted, tmp_path):
    with pytest.raises(BertTfError, match=r"--init_checkpoint: cannot read checkpoint "
                                          r"'.*nowhere.ckpt'"):
        conversion.convert_tf_to_hf(os.path.join(minilm_converted, "bert_config.json"),
                                    str(tmp_path / "nowhere.ckpt"), str(tmp_path / "out"))


def test_checkpoint_shape_mismatch_names_variable_and_both_shapes(minilm_converted):
    config = modeling.BertConfig.from_json_file(
        os.path.join(minilm_converted, "bert_config.json"))
    config.intermediate_size = 1024  # The checkpoint has 1536.
    prefix = os.path.join(minilm_converted, "bert_model.ckpt")
    with tf.Graph().as_default():
        input_ids = tf.compat.v1.placeholder(tf.int32, [1, 8])
        modeling.BertModel(config, is_training=False, input_ids=input_ids)
        with pytest.raises(BertTfError) as info:
            modeling.get_assignment_map_from_checkpoint(tf.compat.v1.trainable_variables(),
                                                        prefix)
    message = str(info.value)
    assert "variable 'bert/encoder/layer_0/intermediate/dense/" in message
    assert ("[384, 1536]" in message and "[384, 1024]" in message) or (
        "[1536]" in message and "[1024]" in message), message


def test_script_converts_both_ways(tmp_path):
    original = _make_tiny_hf_dir(tmp_path / "hf")
    result = _run_script("--direction=hf_to_tf", f"--hf_dir={tmp_path / 'hf'}",
                         f"--output_dir={tmp_path / 'tf'}")
    assert result.returncode == 0, result.stderr
    result = _run_script("--direction=tf_to_hf",
                         f"--bert_config_file={tmp_path / 'tf' / 'bert_config.json'}",
                         f"--init_checkpoint={tmp_path / 'tf' / 'bert_model.ckpt'}",
                         f"--output_dir={tmp_path / 'back'}")
    assert result.returncode == 0, result.stderr
    back = safetensors.numpy.load_file(str(tmp_path / "back" / "model.safetensors"))
    assert set(back) == set(original)
    assert all(np.array_equal(back[key], original[key]) for key in original)
    assert (tmp_path / "back" / "vocab.txt").read_text() == (tmp_path / "hf" /
                                                             "vocab.txt").read_text()


@pytest.mark.parametrize("case", ["no_weights", "no_config", "shape_mismatch"])
def test_script_rejects_bad_hf_dir_with_one_line(tmp_path, case):
    hf_dir = tmp_path / "hf"
    _make_tiny_hf_dir(hf_dir)
    if case == "no_weights":
        os.remove(hf_dir / "model.safetensors")
        expected = f"--hf_dir: '{hf_dir / 'model.safetensors'}' does not exist"
    elif case == "no_config":
        os.remove(hf_dir / "config.json")
        expected = f"--hf_dir: '{hf_dir / 'config.json'}' does not exist"
    else:
        config = json.load(open(hf_dir / "config.json"))
        (hf_dir / "config.json").write_text(json.dumps(dict(config, intermediate_size=40)))
        expected = ("'encoder.layer.0.intermediate.dense.weight' has shape [37, 32] but the "
                    "config implies [40, 32]")
    result = _run_script("--direction=hf_to_tf", f"--hf_dir={hf_dir}",
                         f"--output_dir={tmp_path / 'tf'}")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and expected in error_lines[0], result.stderr
    assert result.stderr.rstrip().endswith(error_lines[0])
    assert not (tmp_path / "tf").exists()


def _bert_with_heads_outputs(tf_dir, ref):
    """bert_tf's BertModel + pre-training heads on a converted checkpoint: returns
    (sequence output, masked-LM log-probs [B*P, V], next-sentence log-probs [B, 2])."""
    config = modeling.BertConfig.from_json_file(os.path.join(tf_dir, "bert_config.json"))
    positions = ref["masked_lm_positions"]
    with tf.Graph().as_default():
        model = modeling.BertModel(config, False, tf.constant(ref["input_ids"]),
                                   tf.constant(ref["input_mask"]),
                                   tf.constant(ref["segment_ids"]))
        _, _, mlm_log_probs = pretraining.masked_lm_output(
            config, model.get_sequence_output(), model.get_embedding_table(),
            tf.constant(positions), tf.zeros_like(positions), tf.ones(positions.shape))
        _, _, nsp_log_probs = pretraining.next_sentence_output(
            config, model.get_pooled_output(), tf.zeros([positions.shape[0]], tf.int32))
        _, not_initialized = modeling.init_from_checkpoint(
            os.path.join(tf_dir, "bert_model.ckpt"), log=False)
        assert not_initialized == []
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return sess.run([model.get_sequence_output(), mlm_log_probs, nsp_log_probs])


def test_tf_to_hf_output_is_what_transformers_loads(tmp_path):
    """README: `tf_to_hf` writes a directory BertForPreTraining.from_pretrained loads.

    Without torch: the fixture is a BertForPreTraining saved by transformers and its
    outputs. Ours, converted to a Google checkpoint and back, must be that file
    (keys, shapes, dtypes, values), with a config.json from which transformers
    builds the same BertConfig; and bert_tf on the Google checkpoint must give
    transformers' outputs. So transformers on tf_to_hf(checkpoint) computes what
    bert_tf computes on the checkpoint.
    """
    ref = dict(np.load(os.path.join(PRETRAINING_TINY, "reference.npz")))
    conversion.convert_hf_to_tf(PRETRAINING_TINY, str(tmp_path / "tf"))
    conversion.convert_tf_to_hf(str(tmp_path / "tf" / "bert_config.json"),
                                str(tmp_path / "tf" / "bert_model.ckpt"), str(tmp_path / "hf"))

    saved = safetensors.numpy.load_file(os.path.join(PRETRAINING_TINY, "model.safetensors"))
    ours = safetensors.numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert sorted(saved) == HF_KEYS["saved_keys"]  # The two fixtures agree.
    assert sorted(ours) == sorted(saved)
    for key, value in saved.items():
        assert (ours[key].dtype, ours[key].shape) == (value.dtype, value.shape), key
        assert np.array_equal(ours[key], value), key

    hf_config = json.load(open(tmp_path / "hf" / "config.json"))
    transformers_config = json.load(open(os.path.join(PRETRAINING_TINY, "config.json")))
    assert hf_config["architectures"] == transformers_config["architectures"] == [
        "BertForPreTraining"]
    for key, value in transformers_config.items():
        if key in ("architectures", "dtype", "transformers_version"):
            continue  # Bookkeeping, not the model.
        # Written, or left out where transformers' default is the value needed.
        assert hf_config.get(key, HF_FACTS["config_defaults"][key]) == value, key
    # Fields BertConfig defaults differently must really be written (a check of the check).
    assert all(key in hf_config for key in ("vocab_size", "hidden_size", "num_hidden_layers",
                                            "num_attention_heads", "intermediate_size",
                                            "max_position_embeddings"))

    sequence_output, mlm_log_probs, nsp_log_probs = _bert_with_heads_outputs(
        str(tmp_path / "tf"), ref)
    diffs = {key: float(np.abs(ours - ref[key]).max()) for key, ours in (
        ("sequence_output", sequence_output), ("masked_lm_log_probs", mlm_log_probs),
        ("next_sentence_log_probs", nsp_log_probs))}
    print("max abs diff against transformers:", diffs)
    # Measured 1.9e-6, 7.6e-6, 4.8e-7. The MLM log-probs reach -20.3, where a float32
    # ulp is 1.9e-6: their bound is 2e-5 (about 10 ulp), the others' 1e-5.
    bounds = {"sequence_output": 1e-5, "masked_lm_log_probs": 2e-5,
              "next_sentence_log_probs": 1e-5}
    for key, value in diffs.items():
        assert value <= bounds[key], (key, value)
    # Not trivially close: the MLM distributions are far from uniform.
    assert np.ptp(ref["masked_lm_log_probs"], axis=-1).min() > 1.0


def test_tf_to_hf_without_heads_has_bert_model_keys(tmp_path):
    """A checkpoint without pre-training heads converts to BertModel's keys (under the
    `bert.` prefix transformers strips when loading a base model) and architecture."""
    conversion.convert_hf_to_tf(PRETRAINING_TINY, str(tmp_path / "tf"))
    prefix = str(tmp_path / "tf" / "bert_model.ckpt")
    reader = tf.train.load_checkpoint(prefix)
    headless = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
                if not name.startswith("cls/")}
    checkpoints.write_tf_checkpoint(headless, str(tmp_path / "headless" / "bert_model.ckpt"))
    conversion.convert_tf_to_hf(str(tmp_path / "tf" / "bert_config.json"),
                                str(tmp_path / "headless" / "bert_model.ckpt"),
                                str(tmp_path / "hf"))
    ours = safetensors.numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert {key: list(value.shape) for key, value in ours.items()} == {
        "bert." + key: shape for key, shape in HF_FACTS["bert_model_saved_shapes"].items()}
    assert all(value.dtype == np.float32 for value in ours.values())
    hf_config = json.load(open(tmp_path / "hf" / "config.json"))
    assert hf_config["architectures"] == ["BertModel"]
