"""TF_CONFIG and --distribution_strategy (issue 18): one process unless multi_worker; no hang.

- Without --distribution_strategy=multi_worker a run is one process and the chief whatever
  TF_CONFIG says: the Estimator and every script (run_pretraining, run_classifier, run_squad,
  run_ner, benchmark) finish with TF_CONFIG naming them worker 1 of 2, logging one line that
  TF_CONFIG is ignored. (Before, a non-chief single process waited forever for a chief.)
- A multi-worker run whose peer never starts stops after --startup_timeout_secs with one
  `error:` line naming the peer's TF_CONFIG address, for training and for the benchmark.
Every test sets TF_CONFIG itself (in its environment or a child's), whatever the shell has.
"""

import json
import logging
import os
import shutil
import socket
import time

import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import (
    DATA,
    TOPICS,
    X,
    Y,
    make_estimator,
    make_input_fn,
    run_script,
    write_records,
    write_tiny_config,
)
from finetune_helpers import PRETRAINING_TINY as TINY

from bert_tf import options as bert_options
from bert_tf.cli import flags as bert_flags
from bert_tf.errors import BertTfError
from bert_tf.training import distribute, multi_worker
from bert_tf.training import estimator as estimator_lib

IGNORED = "TF_CONFIG is set but ignored"
# What TF's SessionManager logs while a non-chief waits for a chief: never again.
WAITING_FOR_CHIEF = "Waiting for model to be ready"
STARTUP_TIMEOUT = 10


def _tf_config(addresses, index):
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker",
                                                                  "index": index}})


def _free_port():
    """A 127.0.0.1 port free now (for a worker's own gRPC server)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def closed_port():
    """A 127.0.0.1 port held bound but not listening: connecting to it is refused."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    yield held.getsockname()[1]
    held.close()


def _distribution(**values):
    """`DistributionOptions` parsed from the distribution flags, `values` set."""
    return bert_options.DistributionOptions.from_flags(
        bert_flags.parse(lambda fv: bert_flags.define_distribution_flags(fv), **values))


@pytest.fixture
def open_port():
    """A 127.0.0.1 port that accepts connections (a stand-in for a started worker)."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(8)
    yield listening.getsockname()[1]
    listening.close()


# ------------------------------------------------------------------------- fast: the rule


@pytest.mark.parametrize("name", ["none", "mirrored"])
def test_one_process_strategies_ignore_tf_config_with_one_line(monkeypatch, caplog, name):
    monkeypatch.setenv("TF_CONFIG", _tf_config(["127.0.0.1:1", "127.0.0.1:2"], 1))
    caplog.set_level(logging.INFO)
    strategy = distribute.strategy_from_options(_distribution(distribution_strategy=name))
    lines = [record.getMessage() for record in caplog.records if IGNORED in record.getMessage()]
    assert len(lines) == 1, lines
    assert f"--distribution_strategy={name}" in lines[0]
    assert "--distribution_strategy=multi_worker would use TF_CONFIG" in lines[0]
    assert distribute.is_chief(strategy)
    assert estimator_lib.RunConfig(train_distribute=strategy).is_chief


def test_no_line_without_tf_config(monkeypatch, caplog):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    caplog.set_level(logging.INFO)
    distribute.strategy_from_options(_distribution(distribution_strategy="none"))
    assert IGNORED not in caplog.text


@pytest.mark.timeout(120)  # The bug this guards against waited forever.
def test_estimator_trains_as_the_chief_when_tf_config_names_a_non_chief(monkeypatch, tmp_path,
                                                                        caplog):
    monkeypatch.setenv("TF_CONFIG", _tf_config(["127.0.0.1:1", "127.0.0.1:2"], 1))
    caplog.set_level(logging.INFO)
    estimator = make_estimator(str(tmp_path))
    assert estimator.config.is_chief
    estimator.train(make_input_fn(X, Y), max_steps=3)
    assert estimator.latest_checkpoint().endswith("model.ckpt-3")
    assert WAITING_FOR_CHIEF not in caplog.text


# ------------------------------------------------------------ fast: waiting for the workers


def test_wait_for_workers_returns_once_every_peer_listens(monkeypatch, open_port):
    monkeypatch.setenv("TF_CONFIG", _tf_config(["127.0.0.1:1", f"127.0.0.1:{open_port}"], 0))
    monkeypatch.setattr(distribute, "session_target", lambda strategy: "grpc://here")
    assert multi_worker.peer_addresses() == [("worker 1", f"127.0.0.1:{open_port}")]
    assert multi_worker.wait_for_workers(None, timeout_secs=30) == "grpc://here"


def test_wait_for_workers_stops_at_the_deadline_naming_the_missing_peer(monkeypatch, caplog,
                                                                        closed_port):
    monkeypatch.setenv("TF_CONFIG", _tf_config([f"127.0.0.1:{closed_port}", "127.0.0.1:1"], 1))
    monkeypatch.setattr(distribute, "session_target", lambda strategy: "grpc://here")
    monkeypatch.setattr(multi_worker, "PROGRESS_INTERVAL_SECS", 0.5)
    caplog.set_level(logging.INFO)
    timeout = 2.0
    start = time.monotonic()
    with pytest.raises(BertTfError) as raised:
        multi_worker.wait_for_workers(None, timeout_secs=timeout, what="benchmark")
    assert time.monotonic() - start < timeout + 10
    message = str(raised.value)
    assert "\n" not in message
    for fragment in ("multi-worker benchmark did not start", f"waited {timeout:g} s",
                     f"worker 0 at 127.0.0.1:{closed_port}", "--startup_timeout_secs"):
        assert fragment in message, message
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Still")]
    # At most one line per interval (the first at 0.5 s), each short and naming the peer.
    assert 1 <= len(progress) <= timeout / 0.5, progress
    for line in progress:
        assert f"worker 0 at 127.0.0.1:{closed_port}" in line and len(line) < 120


def test_waiting_log_logs_at_most_once_per_interval_until_stopped(caplog):
    caplog.set_level(logging.INFO)
    with multi_worker.WaitingLog("the others", 60, interval_secs=0.2):
        time.sleep(1.1)
    count = len([r for r in caplog.records if "Still waiting for the others" in r.getMessage()])
    assert 1 <= count <= 5
    time.sleep(0.5)
    assert count == len([r for r in caplog.records if "Still waiting" in r.getMessage()])


def test_startup_failure_names_the_peers_that_are_gone(monkeypatch, closed_port, open_port):
    monkeypatch.setenv("TF_CONFIG", _tf_config(
        ["127.0.0.1:1", f"127.0.0.1:{closed_port}", f"127.0.0.1:{open_port}"], 0))
    deadline = tf.errors.DeadlineExceededError(None, None, "deadline")
    message = multi_worker.startup_failure_message(15, deadline)
    assert "not every worker joined within 15 s" in message
    assert f"worker 1 at 127.0.0.1:{closed_port}" in message
    assert str(open_port) not in message
    # Every peer listening: they started but did not join, so the message says what may differ.
    monkeypatch.setenv("TF_CONFIG", _tf_config(["127.0.0.1:1", f"127.0.0.1:{open_port}"], 0))
    message = multi_worker.startup_failure_message(15, deadline, what="benchmark")
    assert f"worker 1 at 127.0.0.1:{open_port} (from TF_CONFIG) accepts connections" in message
    assert "multi-worker benchmark did not start" in message


# ------------------------------------------------------------------- slow: the scripts


def _run(script, args, tf_config, timeout=300):
    return run_script(script, *args, env=child_env(TF_CONFIG=tf_config), timeout=timeout)


def _pretraining_args(tmp_path, output_dir):
    records = tmp_path / "train.tfrecord"
    if not records.exists():
        write_records(str(records), num=16)
        (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    return [f"--bert_config_file={tmp_path / 'tiny.json'}", f"--input_file={records}",
            f"--output_dir={output_dir}", "--max_seq_length=16", "--max_predictions_per_seq=4",
            "--do_train", "--train_batch_size=4", "--num_train_steps=5", "--num_warmup_steps=1"]


def _finetuning_args(script, tmp_path, output_dir, vocab_file):
    common = [f"--vocab_file={vocab_file}", f"--bert_config_file={write_tiny_config(tmp_path)}",
              f"--output_dir={output_dir}", "--do_train", "--train_batch_size=4",
              "--num_train_steps=5", "--learning_rate=1e-3"]
    if script == "run_classifier.py":
        data_dir = tmp_path / "topics"
        shutil.copytree(TOPICS, data_dir)
        return [*common, "--task_name=tsv", "--text_a_column=sentence",
                f"--data_dir={data_dir}", "--max_seq_length=24"]
    if script == "run_squad.py":
        return [*common, f"--train_file={os.path.join(DATA, 'squad', 'windows_v2.json')}",
                "--version_2_with_negative", "--max_seq_length=32", "--doc_stride=8",
                "--max_query_length=6"]
    data_dir = tmp_path / "ner"
    shutil.copytree(os.path.join(DATA, "ner"), data_dir)
    return [*common, f"--data_dir={data_dir}", "--max_seq_length=48"]


def _benchmark_args(tmp_path, output_json):
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    return [f"--bert_config_file={tmp_path / 'tiny.json'}", "--task=squad", "--mode=train",
            "--batch_size=2", "--max_seq_length=16", "--num_warmup_steps=1", "--num_steps=2",
            "--peak_matmul_size=64", "--nocheck_onednn", f"--output_json={output_json}"]


def _assert_ran_alone_as_the_chief(result):
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    lines = [line for line in log.splitlines() if IGNORED in line]
    assert len(lines) == 1, lines
    assert "--distribution_strategy=none runs this process alone, as the chief" in lines[0]
    assert "--distribution_strategy=multi_worker would use TF_CONFIG" in lines[0]
    assert WAITING_FOR_CHIEF not in log and "Variables not initialized" not in log
    assert "Not the chief" not in log


@pytest.mark.slow
@pytest.mark.parametrize("script", ["run_pretraining.py", "run_classifier.py", "run_squad.py",
                                    "run_ner.py"])
def test_training_scripts_run_alone_when_tf_config_names_worker_1(tmp_path, minilm_dir,
                                                                  closed_port, script):
    out = tmp_path / "out"
    if script == "run_pretraining.py":
        args = _pretraining_args(tmp_path, out)
    else:
        args = _finetuning_args(script, tmp_path, out, os.path.join(minilm_dir, "vocab.txt"))
    tf_config = _tf_config(["127.0.0.1:1", f"127.0.0.1:{closed_port}"], 1)
    result = _run(script, args, tf_config)
    _assert_ran_alone_as_the_chief(result)
    # As the chief it wrote the final checkpoint to --output_dir.
    assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-5")


@pytest.mark.slow
def test_benchmark_runs_alone_when_tf_config_names_worker_1(tmp_path, closed_port):
    output = tmp_path / "bench.json"
    tf_config = _tf_config(["127.0.0.1:1", f"127.0.0.1:{closed_port}"], 1)
    result = _run("benchmark.py", _benchmark_args(tmp_path, output), tf_config)
    _assert_ran_alone_as_the_chief(result)
    assert json.loads(output.read_text())["num_replicas"] == 1


def _assert_stopped_naming(result, elapsed, missing):
    log = result.stdout + result.stderr
    assert result.returncode == 2, log[-3000:]
    assert "Traceback" not in log
    errors = [line for line in log.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, log[-3000:]
    assert f"waited {STARTUP_TIMEOUT} s for {missing} (from TF_CONFIG)" in errors[0], errors[0]
    assert "--startup_timeout_secs" in errors[0]
    assert f"Waiting up to {STARTUP_TIMEOUT} s for {missing} (TF_CONFIG) to start." in log
    # Start-up (TF import, graph build) plus the deadline; before, it never ended.
    assert elapsed < STARTUP_TIMEOUT + 150


@pytest.mark.slow
def test_training_stops_at_the_startup_deadline_when_the_other_worker_never_starts(
        tmp_path, closed_port):
    # This is the chief (worker 0); worker 1 never starts.
    args = [*_pretraining_args(tmp_path, tmp_path / "out"), "--distribution_strategy=multi_worker",
            f"--startup_timeout_secs={STARTUP_TIMEOUT}"]
    tf_config = _tf_config([f"127.0.0.1:{_free_port()}", f"127.0.0.1:{closed_port}"], 0)
    start = time.monotonic()
    result = _run("run_pretraining.py", args, tf_config)
    _assert_stopped_naming(result, time.monotonic() - start,
                           f"worker 1 at 127.0.0.1:{closed_port}")


@pytest.mark.slow
def test_benchmark_stops_at_the_startup_deadline_when_the_chief_never_starts(
        tmp_path, closed_port):
    # This is worker 1; the chief (worker 0) never starts.
    args = [*_benchmark_args(tmp_path, tmp_path / "bench.json"),
            "--distribution_strategy=multi_worker", f"--startup_timeout_secs={STARTUP_TIMEOUT}"]
    tf_config = _tf_config([f"127.0.0.1:{closed_port}", f"127.0.0.1:{_free_port()}"], 1)
    start = time.monotonic()
    result = _run("benchmark.py", args, tf_config)
    _assert_stopped_naming(result, time.monotonic() - start,
                           f"worker 0 at 127.0.0.1:{closed_port}")
    assert not (tmp_path / "bench.json").exists()
