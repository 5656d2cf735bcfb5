"""The shared run set-up (bert_tf/training/runner.py): pre-training and every fine-tuning task stop
on the same bad input with the same one-line error, before any graph is built and before
anything is written to --output_dir."""

import json
import os

import pytest
import tensorflow as tf
from finetune_helpers import (
    DATA,
    FINETUNE_DATA,
    TINY_CONFIG,
    assert_ok,
    options,
    pretrain_options,
    run_script,
    write_records,
)
from finetune_helpers import PRETRAINING_TINY as TINY

from bert_tf import options as bert_options
from bert_tf.errors import BertTfError
from bert_tf.runs import driver
from bert_tf.runs.pretraining import run_pretraining

tf1 = tf.compat.v1


@pytest.fixture(scope="module")
def files(tmp_path_factory, minilm_dir):
    """A config both runs accept, pre-training records, and a checkpoint whose index is junk."""
    d = tmp_path_factory.mktemp("runner")
    (d / "bert_config.json").write_text(json.dumps(TINY_CONFIG))
    write_records(str(d / "train.tfrecord"), num=16)
    (d / "junk.ckpt.index").write_bytes(b"not a checkpoint index" * 8)
    (d / "junk.ckpt.data-00000-of-00001").write_bytes(b"\0" * 64)
    return {"dir": d, "vocab": os.path.join(minilm_dir, "vocab.txt")}


# name -> (flag values of the bad run, fragments its one error line must name).
BAD_INPUTS = {
    "missing config": (dict(bert_config_file="{d}/nope.json"),
                       ["--bert_config_file", "nope.json"]),
    "missing init checkpoint": (dict(init_checkpoint="{d}/nowhere/model.ckpt"),
                                ["--init_checkpoint", "nowhere/model.ckpt"]),
    "unreadable init checkpoint": (dict(init_checkpoint="{d}/junk.ckpt"),
                                   ["--init_checkpoint", "junk.ckpt", "cannot be read"]),
    "sequence over max_position_embeddings": (dict(max_seq_length=256),
                                              ["--max_seq_length=256",
                                               "max_position_embeddings"]),
    "batch not divisible": (dict(train_batch_size=6, num_accumulation_steps=4),
                            ["--train_batch_size=6", "--num_accumulation_steps=4"]),
}


def _run(kind, values, files, output_dir):
    """Runs `kind` in-process with the bad `values`; returns the BertTfError message."""
    d = files["dir"]
    values = {key: value.format(d=d) if isinstance(value, str) else value
              for key, value in values.items()}
    common = {**dict(bert_config_file=str(d / "bert_config.json"), output_dir=output_dir,
                     max_seq_length=32, do_train=True, train_batch_size=8), **values}
    if kind == "pretraining":
        run_options = pretrain_options(d, input_file=str(d / "train.tfrecord"),
                                       max_predictions_per_seq=4, **common)
        assert isinstance(run_options, bert_options.PretrainOptions)
        call = lambda: run_pretraining(run_options)  # noqa: E731
    else:
        data = {"classifier": dict(task_name="mrpc", data_dir=os.path.join(DATA, "glue", "MRPC")),
                "ner": dict(data_dir=os.path.join(DATA, "ner")),
                "squad": dict(train_file=os.path.join(FINETUNE_DATA, "squad_small.json"),
                              max_query_length=8)}[kind]
        task = options(kind, vocab_file=files["vocab"], **common, **data)
        call = lambda: driver.run_task(task)  # noqa: E731
    with pytest.raises(BertTfError) as error:
        call()
    return str(error.value)


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_same_early_error_for_pretraining_and_every_finetuning_task(name, files, tmp_path):
    values, fragments = BAD_INPUTS[name]
    messages = {}
    for kind in ("pretraining", "classifier", "ner", "squad"):
        output_dir = tmp_path / f"out_{kind}"
        tf1.reset_default_graph()
        messages[kind] = _run(kind, values, files, str(output_dir))
        assert "\n" not in messages[kind]
        for fragment in fragments:
            assert fragment in messages[kind], (kind, messages[kind])
        # Stopped before any graph was built and before --output_dir was created.
        assert not tf1.get_default_graph().get_operations(), kind
        assert not output_dir.exists(), kind
    assert len(set(messages.values())) == 1, messages


def test_each_log_message_is_printed_once(files, tmp_path):
    """TensorFlow's own Python log records (the Saver's "Saving checkpoints for N") and
    bert_tf's go through one handler: each appears once, in absl's format, never also as
    "INFO:tensorflow:..."."""
    d = files["dir"]
    (tmp_path / "pretrain_config.json").write_text(json.dumps(TINY))
    result = run_script(
        "run_pretraining.py", f"--bert_config_file={tmp_path / 'pretrain_config.json'}",
        f"--input_file={d / 'train.tfrecord'}", f"--output_dir={tmp_path / 'out'}",
        "--max_seq_length=16", "--max_predictions_per_seq=4", "--do_train",
        "--train_batch_size=8", "--num_train_steps=4", "--save_checkpoints_steps=2",
        "--log_every_n_steps=1")
    assert_ok(result)
    lines = result.stderr.splitlines()
    assert not [line for line in lines if ":tensorflow:" in line]
    for step in (0, 2, 4):
        saving = [line for line in lines if f"Saving checkpoints for {step} into" in line]
        assert len(saving) == 1, saving
    # bert_tf's own progress line: one per logged step.
    progress = [line for line in lines if "step 3/4 loss=" in line]
    assert len(progress) == 1, progress


@pytest.mark.parametrize("num_tokens", [28996, 30522])
def test_a_vocab_with_fewer_tokens_than_the_config_is_one_warning(num_tokens, minilm_dir,
                                                                  tmp_path, caplog):
    # 28996 is the size of BERT's cased vocab: the typical wrong vocab for an uncased model.
    from absl import logging as absl_logging

    from bert_tf import modeling
    from bert_tf.training import runner

    lines = open(os.path.join(minilm_dir, "vocab.txt"), encoding="utf-8").readlines()
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(lines[:num_tokens]), encoding="utf-8")
    config = modeling.BertConfig.from_dict(TINY_CONFIG)  # vocab_size 30522
    caplog.set_level(absl_logging.WARNING)
    tokenizer = runner.make_tokenizer(
        bert_options.TokenizerOptions(str(vocab)), config,
        bert_options.ModelOptions(bert_config_file="bert_config.json"))
    assert len(tokenizer.vocab) == num_tokens
    warnings = [r.getMessage() for r in caplog.records if "never used" in r.getMessage()]
    if num_tokens == 30522:
        assert not warnings
    else:
        assert warnings == [
            f"--vocab_file {vocab} has 28996 tokens but vocab_size in bert_config.json is 30522: "
            "embedding rows 28996..30521 are never used. If this vocab did not come with the "
            "checkpoint, pass the one that did; a table padded on purpose needs no change."]
