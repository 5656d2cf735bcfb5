"""Checkpoints of other libraries as `--init_checkpoint` (bert_tf/training/checkpoint_sources.py
and `runner.with_checkpoint_source`): a Hugging Face model directory and a KerasHub preset,
their config and vocabulary taken along or checked against the flags, and a classifier
fine-tuned from a KerasHub preset of MiniLM as well as from MiniLM's Google-layout checkpoint.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import TOPICS, assert_clean_error, option_pair, options, run_script

from bert_tf import tf2
from bert_tf.errors import BertTfError
from bert_tf.runs import driver
from bert_tf.training import checkpoint_sources, checkpoints, runner


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(checkpoint_sources.CACHE_ENV, str(tmp_path / "cache"))


def _assert_ok(result):
    assert result.returncode == 0, result.stderr[-3000:]


def test_hugging_face_dir_loads_as_its_conversion_bit_for_bit(minilm_dir, minilm_converted):
    encoder = tf2.BertEncoder(os.path.join(minilm_converted, "bert_config.json"))
    assert encoder.load_checkpoint(minilm_dir) == []
    reference = checkpoints.read_tf_checkpoint(os.path.join(minilm_converted, "bert_model.ckpt"))
    for name, variable in encoder.variables_by_name.items():
        assert np.array_equal(variable.numpy(), reference[name]), name
    converted = checkpoint_sources.resolve(minilm_dir)
    assert converted.source_name == "Hugging Face model"
    with open(converted.bert_config_file) as f:
        assert json.load(f)["hidden_act"] == "gelu"  # MiniLM's exact GELU, carried across.


def _preset(tmp_path, minilm_converted):
    """MiniLM as a KerasHub preset, written by scripts/convert_checkpoint.py."""
    preset = str(tmp_path / "minilm_preset")
    _assert_ok(run_script(
        "convert_checkpoint.py", "--direction=tf_to_keras_hub",
        f"--bert_config_file={minilm_converted}/bert_config.json",
        f"--init_checkpoint={minilm_converted}/bert_model.ckpt", f"--output_dir={preset}",
        timeout=240))
    return preset


@pytest.fixture(scope="module")
def minilm_preset(tmp_path_factory, minilm_converted):
    return _preset(tmp_path_factory.mktemp("preset"), minilm_converted)


def _run_options(preset, **values):
    values = {"init_checkpoint": preset, "bert_config_file": None, "vocab_file": None,
              **values}
    return option_pair("classifier", task_name="tsv", text_a_column="sentence",
                       data_dir=TOPICS, output_dir="unused", do_train=True, **values)[1]


def test_init_checkpoint_preset_brings_its_config_and_vocab(minilm_preset, minilm_converted):
    run = runner.with_checkpoint_source(_run_options(minilm_preset))
    converted = checkpoint_sources.resolve(minilm_preset)
    assert run.model.init_checkpoint == converted.prefix
    assert run.model.bert_config_file == converted.bert_config_file
    with open(run.tokenizer.vocab_file) as f, \
            open(os.path.join(minilm_converted, "vocab.txt")) as g:
        assert f.read() == g.read()
    # Given and agreeing: kept.
    vocab = os.path.join(minilm_converted, "vocab.txt")
    assert runner.with_checkpoint_source(
        _run_options(minilm_preset, vocab_file=vocab)).tokenizer.vocab_file == vocab


def test_init_checkpoint_preset_disagreeing_flags_are_one_line(tmp_path, minilm_preset,
                                                               minilm_converted):
    # MiniLM's own config says exact GELU; the preset computes tanh GELU.
    config = os.path.join(minilm_converted, "bert_config.json")
    cases = [
        (dict(bert_config_file=config), "hidden_act is 'gelu' but the KerasHub preset"),
        (dict(do_lower_case=False), "--do_lower_case=False but the KerasHub preset"),
    ]
    other_vocab = tmp_path / "vocab.txt"
    other_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    cases.append((dict(vocab_file=str(other_vocab)), "differs from the vocabulary of the"))
    no_vocab = str(tmp_path / "no_vocab")
    shutil.copytree(minilm_preset, no_vocab)
    os.remove(os.path.join(no_vocab, "assets", "tokenizer", "vocabulary.txt"))
    cases.append((dict(init_checkpoint=no_vocab), "has no vocabulary; pass --vocab_file"))
    for values, expected in cases:
        with pytest.raises(BertTfError) as raised:
            runner.with_checkpoint_source(_run_options(minilm_preset, **values))
        message = str(raised.value)
        assert "\n" not in message and expected in message, message


def test_plain_wrong_paths_keep_their_messages(tmp_path):
    with pytest.raises(BertTfError, match="has no checkpoint; pass a prefix"):
        checkpoints.resolve_checkpoint(str(tmp_path))
    with pytest.raises(BertTfError, match=r"\.index' is missing"):
        checkpoints.resolve_checkpoint(str(tmp_path / "bert_model.ckpt"))


@pytest.mark.slow
def test_classifier_from_keras_hub_preset_learns_as_from_google_checkpoint(
        tmp_path, minilm_preset, minilm_topics_classifier):
    # The same run as conftest.minilm_topics_classifier (12 steps on data/topics), started
    # from the KerasHub preset with neither --bert_config_file nor --vocab_file.
    results = driver.run_task(options(
        "classifier", task_name="tsv", text_a_column="sentence", data_dir=TOPICS,
        output_dir=str(tmp_path / "out"), do_train=True, do_eval=True, max_seq_length=20,
        train_batch_size=8, num_train_steps=12, learning_rate=1e-4, eval_batch_size=40,
        keep_checkpoint_max=1, init_checkpoint=minilm_preset, bert_config_file=None,
        vocab_file=None))
    google = minilm_topics_classifier.results["eval_accuracy"]
    preset = results["eval_accuracy"]
    print(f"dev accuracy after 12 steps: from MiniLM's Google checkpoint {google:.3f}, from its "
          f"KerasHub preset {preset:.3f}")
    assert google >= 0.85
    assert abs(preset - google) <= 0.02
    assert tf.train.latest_checkpoint(str(tmp_path / "out"))


def test_run_without_config_and_a_google_checkpoint_is_one_line(tmp_path, minilm_converted):
    # The scripts no longer require --bert_config_file / --vocab_file (a foreign
    # --init_checkpoint brings them); without either, the run names the flag.
    result = run_script("run_classifier.py", "--task_name=tsv", "--text_a_column=sentence",
                        f"--data_dir={TOPICS}",
                        "--do_train", f"--output_dir={tmp_path / 'out'}",
                        f"--init_checkpoint={minilm_converted}/bert_model.ckpt")
    line = assert_clean_error(result)
    assert line.startswith("error: --bert_config_file: no BERT config file given"), line
    assert not (tmp_path / "out").exists()
