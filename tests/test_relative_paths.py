"""Runs typed the way people type them: from a working directory, with every path flag
relative to it (`data/...`, `model/...`, `--output_dir=out`, `--export_dir=export`), or
under `~`.

Every training script (run_pretraining.py and the four fine-tuning scripts) is stopped by
SIGTERM mid-training; the same command resumes from the checkpoint it wrote, trains to the
end, evaluates, predicts and exports; run once more, it trains nothing and writes no
checkpoint, and evaluates, predicts and exports again. `--init_checkpoint` as a relative directory
and as a relative prefix, and re-exporting (and evaluating) a trained output directory from
a new one without training, are run with run_classifier.py; `--output_dir=~/out`, then
`--init_checkpoint=~/out`, with run_pretraining.py. About 3 minutes on 2 cores.
"""

import json
import os
import re
import signal
import time

import numpy as np
import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import (
    DATA,
    FINETUNE_DATA,
    ROOT,
    TOPICS,
    read_key_values,
    run_script,
    write_records,
    write_tiny_config,
)
from finetune_helpers import PRETRAINING_TINY as TINY
from script_runner import start_python_script

STEPS = 4
# What each script reads, relative to the working directory (see `workspace`).
_FINETUNE_MODEL = ["--vocab_file=model/vocab.txt", "--bert_config_file=model/bert_config.json",
                   "--max_seq_length=24", "--train_batch_size=4", "--learning_rate=1e-3"]
ARGS = {
    "run_pretraining.py": [
        "--bert_config_file=model/pretrain_config.json", "--input_file=data/train.tfrecord",
        "--eval_input_file=data/train.tfrecord", "--do_train", "--do_eval",
        "--max_seq_length=16", "--max_predictions_per_seq=4", "--train_batch_size=4",
        "--eval_batch_size=4", "--max_eval_steps=2", "--num_warmup_steps=1"],
    "run_classifier.py": [
        *_FINETUNE_MODEL, "--task_name=tsv", "--text_a_column=sentence", "--data_dir=data/topics",
        "--do_train", "--do_eval", "--do_predict", "--eval_batch_size=40"],
    "run_ner.py": [*_FINETUNE_MODEL, "--data_dir=data/ner", "--do_train", "--do_eval",
                   "--do_predict"],
    "run_squad.py": [
        *_FINETUNE_MODEL, "--train_file=data/squad_small.json",
        "--predict_file=data/squad_small.json", "--do_train", "--do_predict",
        "--doc_stride=8", "--max_query_length=8"],
    "run_multiple_choice.py": [*_FINETUNE_MODEL, "--task_name=swag", "--data_dir=data/swag",
                               "--do_train", "--do_eval", "--do_predict"],
}
# The files the README says a run writes to --output_dir besides its checkpoints.
RESULT_FILES = {
    "run_pretraining.py": ["eval_results.txt"],
    "run_classifier.py": ["eval_results.txt", "test_results.tsv"],
    "run_ner.py": ["eval_results.txt", "eval_predictions.txt", "test_predictions.txt"],
    "run_squad.py": ["predictions.json", "nbest_predictions.json", "eval_results.json"],
    "run_multiple_choice.py": ["eval_results.txt", "test_results.tsv"],
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, minilm_dir):
    """The data, configs and vocab every run reads, laid out once: `data/`, `model/`."""
    root = tmp_path_factory.mktemp("relative_data")
    (root / "data").mkdir()
    for name, source in (("topics", TOPICS),
                         ("swag", os.path.join(FINETUNE_DATA, "swag")),
                         ("ner", os.path.join(DATA, "ner")),
                         ("squad_small.json", os.path.join(FINETUNE_DATA, "squad_small.json"))):
        os.symlink(source, root / "data" / name)
    write_records(str(root / "data" / "train.tfrecord"), num=32)
    (root / "model").mkdir()
    write_tiny_config(root / "model")
    (root / "model" / "pretrain_config.json").write_text(json.dumps(TINY))
    os.symlink(os.path.join(minilm_dir, "vocab.txt"), root / "model" / "vocab.txt")
    return root


@pytest.fixture
def workspace(tmp_path, data_dir):
    """A fresh working directory with `data/` and `model/` in it."""
    for name in ("data", "model"):
        os.symlink(data_dir / name, tmp_path / name)
    return tmp_path


def _run(workspace, script, *args, env=None):
    result = run_script(script, *args, env=env or child_env(), cwd=str(workspace))
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _args(script, steps=STEPS, *extra):
    return [*ARGS[script], f"--num_train_steps={steps}", "--output_dir=out",
            "--export_release_dir=release",
            *(["--export_dir=export"] if script != "run_pretraining.py" else []), *extra]


def _checkpoint_steps(output_dir):
    """The steps of the model.ckpt-N files in `output_dir`, sorted."""
    return sorted(int(m.group(1)) for name in os.listdir(output_dir)
                  if (m := re.fullmatch(r"model\.ckpt-(\d+)\.index", name)))


def _checkpoint_mtimes(output_dir):
    """{file name: modification time in ns} of the model.ckpt-* files in `output_dir`."""
    return {name: os.stat(output_dir / name).st_mtime_ns for name in os.listdir(output_dir)
            if name.startswith("model.ckpt")}


def _exports(workspace):
    return sorted(os.listdir(workspace / "export"))


def _assert_trained(workspace, script, steps=STEPS, output_dir="out"):
    out = workspace / output_dir
    assert _checkpoint_steps(out)[-1] == steps
    assert tf.train.latest_checkpoint(str(out)) == str(out / f"model.ckpt-{steps}")
    for name in RESULT_FILES[script]:
        assert (out / name).stat().st_size > 0, name
    assert (workspace / "release" / "bert_model.ckpt.index").is_file()
    if script != "run_pretraining.py":
        for export in _exports(workspace):
            assert (workspace / "export" / export / "saved_model.pb").is_file()


def _stop_with_sigterm(workspace, script, steps, at_step):
    """Starts `script` for `steps` steps, sends SIGTERM once it logged step `at_step`;
    returns the step it stopped at."""
    log_path = workspace / "run.log"
    process = start_python_script(
        os.path.join(ROOT, "scripts", script),
        _args(script, steps, "--log_every_n_steps=1", "--save_checkpoints_steps=100000"),
        env=child_env(), cwd=str(workspace), output=str(log_path))
    try:
        deadline = time.time() + 300
        while f"step {at_step}/{steps}" not in log_path.read_text():
            assert process.poll() is None and time.time() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    text = log_path.read_text()
    assert process.returncode == 143, text[-3000:]
    stopped = re.findall(r"^preempted at step (\d+): checkpoint saved", text, re.MULTILINE)
    assert len(stopped) == 1, text[-3000:]
    return int(stopped[0])


@pytest.mark.parametrize("script", list(ARGS))
def test_sigterm_then_the_same_command_resumes_then_has_nothing_to_train(workspace, script):
    steps = 400
    step = _stop_with_sigterm(workspace, script, steps, at_step=3)
    assert 3 <= step < steps
    assert _checkpoint_steps(workspace / "out") == [0, step]
    assert not (workspace / "export").exists()

    args = _args(script, steps, "--save_checkpoints_steps=100000")
    result = _run(workspace, script, *args)
    assert f"from step {step} to {steps}" in result.stderr
    assert _checkpoint_steps(workspace / "out") == [0, step, steps]
    _assert_trained(workspace, script, steps)
    if script != "run_pretraining.py":
        assert len(_exports(workspace)) == 1
    checkpoint_files = _checkpoint_mtimes(workspace / "out")

    # Once more: the checkpoint is at max_steps, so nothing trains and nothing is rewritten;
    # it evaluates, predicts and exports again.
    result = _run(workspace, script, *args)
    assert f"at step {steps} >= max_steps={steps}; nothing to train" in result.stderr
    assert _checkpoint_mtimes(workspace / "out") == checkpoint_files
    _assert_trained(workspace, script, steps)
    if script != "run_pretraining.py":
        assert len(_exports(workspace)) == 2  # The same checkpoint exported again.


def test_home_paths_land_in_home_and_init_checkpoint_reads_a_directory(workspace):
    script, env = "run_pretraining.py", child_env(HOME=str(workspace))
    args = [arg for arg in _args(script) if arg != "--output_dir=out"]
    _run(workspace, script, *args, "--output_dir=~/out", env=env)
    assert not (workspace / "~").exists()
    _assert_trained(workspace, script)

    # The README's phase 2: --init_checkpoint is phase 1's output directory.
    args = [arg for arg in _args(script, 1) if not arg.startswith("--output_dir")]
    _run(workspace, script, *args, "--output_dir=phase2", "--init_checkpoint=~/out", env=env)
    phase1 = _variables(str(workspace / "out" / f"model.ckpt-{STEPS}"))
    phase2 = _variables(str(workspace / "phase2" / "model.ckpt-0"))
    for name, value in phase1.items():
        if name != "global_step" and not name.endswith(("/adam_m", "/adam_v")):
            np.testing.assert_array_equal(phase2[name], value, err_msg=name)


def _variables(checkpoint):
    return {name: tf.train.load_variable(checkpoint, name)
            for name, _ in tf.train.list_variables(checkpoint)}


@pytest.fixture
def trained_classifier(workspace):
    """The working directory after run_classifier.py trained `out` (and exported it)."""
    _run(workspace, "run_classifier.py", *_args("run_classifier.py"))
    return workspace


@pytest.mark.parametrize("init_checkpoint", ["out", f"out/model.ckpt-{STEPS}",
                                             "release/bert_model.ckpt"])
def test_init_checkpoint_relative_trains_and_re_exports(trained_classifier, init_checkpoint):
    workspace, script = trained_classifier, "run_classifier.py"
    trained = _variables(str(workspace / "out" / f"model.ckpt-{STEPS}"))

    # Training from it: the new run starts from its weights (its step-0 checkpoint).
    args = [arg for arg in _args(script, 1) if not arg.startswith(("--output_dir", "--export"))]
    _run(workspace, script, *args, "--output_dir=tuned", f"--init_checkpoint={init_checkpoint}",
         "--do_eval=false", "--do_predict=false")
    tuned = _variables(str(workspace / "tuned" / "model.ckpt-0"))
    tuned_last = _variables(str(workspace / "tuned" / "model.ckpt-1"))
    for name, value in trained.items():
        if name != "global_step" and not name.endswith(("/adam_m", "/adam_v")):
            np.testing.assert_array_equal(tuned[name], value, err_msg=name)

    # The README's re-export: no training, a new output dir; the export (and the evaluation,
    # with a prefix) are those of the trained checkpoint. The released layout has no
    # label_list.txt and no global_step (exported and evaluated at step 0).
    evaluate = init_checkpoint.startswith(("out/", "release"))
    release = init_checkpoint.startswith("release")
    rerun = [arg for arg in ARGS[script] if arg not in ("--do_train", "--do_predict")]
    _run(workspace, script, *rerun, "--output_dir=again", f"--init_checkpoint={init_checkpoint}",
         "--export_dir=again/export", f"--do_eval={evaluate}",
         *(["--labels=food,sports"] if release else []))
    (export,) = os.listdir(workspace / "again" / "export")
    exported = _variables(str(workspace / "again" / "export" / export / "variables" /
                              "variables"))
    assert exported.keys() == {name for name in trained if not name.endswith(("/adam_m",
                                                                              "/adam_v"))}
    for name, value in exported.items():
        expected = 0 if release and name == "global_step" else trained[name]
        np.testing.assert_array_equal(value, expected, err_msg=name)
    assert not _checkpoint_steps(workspace / "again")
    if evaluate:
        expected = read_key_values(workspace / "out" / "eval_results.txt")
        if release:
            expected["global_step"] = 0
        # The same checkpoint's metrics; "loss" (a mean of batch losses) may round its last bit
        # differently in another process's graph, so floats within 1e-6, the step exactly.
        again = read_key_values(workspace / "again" / "eval_results.txt")
        assert again.keys() == expected.keys()
        assert again["global_step"] == expected["global_step"]
        assert again == pytest.approx(expected, rel=1e-6, abs=0)
    if evaluate or release:
        return
    # An output dir with a checkpoint of its own exports that one, whatever --init_checkpoint.
    _run(workspace, script, *rerun, "--output_dir=tuned", f"--init_checkpoint={init_checkpoint}",
         "--export_dir=tuned/export", "--do_eval=false")
    (export,) = os.listdir(workspace / "tuned" / "export")
    exported = _variables(str(workspace / "tuned" / "export" / export / "variables" /
                              "variables"))
    assert exported["output_weights"].tolist() == tuned_last["output_weights"].tolist()
    assert exported["output_weights"].tolist() != trained["output_weights"].tolist()
