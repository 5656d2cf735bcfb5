"""Distributed training: tf.distribute strategies through the Estimator and run_pretraining.

The slow tests compare weights after a few optimizer updates of a tiny BERT (dropout off, the
same global batch, inputs in file order, the same --init_checkpoint) with a single-process run:
  (a) MirroredStrategy over 2 logical CPU devices (configured before TF starts, in a child);
  (b) MultiWorkerMirroredStrategy: two scripts/run_pretraining.py processes on 127.0.0.1 with
      TF_CONFIG; only the chief writes to --output_dir;
  (c) killing one worker stops the other within a bounded time with a one-line message, and
      running both again resumes from the chief's last checkpoint;
  (d) two scripts/run_squad.py workers fine-tune like one process; the chief alone
      predicts and writes to --output_dir;
  (e) scripts/benchmark.py times the step over 2 mirrored CPU devices and over 2 workers,
      with the FLOPs of the global batch and MFU against both devices' peak.
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import types

import numpy as np
import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import CLUSTER_BATCH as GLOBAL_BATCH
from finetune_helpers import CLUSTER_STEPS as STEPS
from finetune_helpers import (
    FINETUNE_DATA,
    cluster_flags,
    kill_all,
    max_difference,
    run_script,
    start_workers,
    wait_workers,
    weights_at,
    write_records,
    write_tiny_config,
)
from finetune_helpers import PRETRAINING_TINY as TINY
from script_runner import run_python_code

from bert_tf import modeling
from bert_tf import options as bert_options
from bert_tf.cli import flags as bert_flags
from bert_tf.data import input_pipeline
from bert_tf.errors import BertTfError
from bert_tf.tools import benchmark
from bert_tf.training import distribute
from bert_tf.training import estimator as estimator_lib

tf1 = tf.compat.v1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "run_pretraining.py")
# After a worker dies the others stop within --step_timeout_secs plus this: the failed step's
# error, one line and os._exit. Measured 0.1, 0.3 and 1.0 s (the lost connection fails the step
# at once) on 2 shared cores; 10 s leaves room for a loaded machine.
EXIT_ALLOWANCE_SECS = 10


# ------------------------------------------------------------------------------ fast: helpers


def _context(count, index):
    return tf.distribute.InputContext(num_input_pipelines=count, input_pipeline_id=index,
                                      num_replicas_in_sync=count)


def test_shards_by_file_when_every_worker_gets_one_else_by_record():
    files = ["a", "b", "c", "d", "e"]
    assert input_pipeline.shard_input_files(files) == (files, 1, 0)
    assert input_pipeline.shard_input_files(files, _context(2, 0)) == (["a", "c", "e"], 1, 0)
    assert input_pipeline.shard_input_files(files, _context(2, 1)) == (["b", "d"], 1, 0)
    assert input_pipeline.shard_input_files(files[:2], _context(3, 2)) == (files[:2], 3, 2)


def _records(dataset, count):
    with tf.Graph().as_default():
        next_record = tf1.data.make_one_shot_iterator(dataset()).get_next()
        with tf1.Session() as sess:
            return [sess.run(next_record) for _ in range(count)]


def test_record_shards_partition_the_single_pipeline_stream(tmp_path):
    # 2 files, 3 workers: by record. Repeated, so the shards must partition every epoch too.
    files = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    for i, path in enumerate(files):
        with tf.io.TFRecordWriter(path) as writer:
            for j in range(5):
                writer.write(f"{i}-{j}".encode())
    single = _records(lambda: input_pipeline.record_dataset(files, True, shuffle=False), 30)
    shards = [_records(lambda i=i: input_pipeline.record_dataset(files, True, _context(3, i),
                                                                 shuffle=False), 10)
              for i in range(3)]
    assert single[:10] == [f"{i}-{j}".encode() for i in range(2) for j in range(5)]
    for i in range(3):
        assert shards[i] == single[i::3]
    # Shuffled, each worker still reads only its own records.
    shuffled = [set(_records(lambda i=i: input_pipeline.record_dataset(files, True, _context(3, i)),
                             10)) for i in range(3)]
    for i in range(3):
        assert shuffled[i] <= set(single[i::3])


def test_per_replica_batch_and_its_error():
    assert distribute.per_replica_batch_size(32, None) == 32
    with tf.Graph().as_default():
        strategy = tf1.distribute.MirroredStrategy(["/cpu:0"])
    assert distribute.per_replica_batch_size(32, strategy, num_accumulation_steps=4) == 8
    fake = types.SimpleNamespace(num_replicas_in_sync=3)
    with pytest.raises(BertTfError, match=r"--train_batch_size=32 is not divisible by the 3 "
                                          r"replicas.*multiple of 3"):
        distribute.per_replica_batch_size(32, fake)
    with pytest.raises(BertTfError, match=r"3 replicas x --num_accumulation_steps=2.*of 6"):
        distribute.per_replica_batch_size(32, fake, num_accumulation_steps=2)


@pytest.mark.parametrize("tf_config, message", [
    (None, "needs the TF_CONFIG environment variable"),
    ("{not json", "TF_CONFIG is not valid JSON"),
    ('{"task": {"type": "worker", "index": 0}}', "no \"cluster\""),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "ps", "index": 0}}', "not a job"),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 1}}', "use 0 to 0"),
])
def test_bad_tf_config_is_a_clear_error(monkeypatch, tf_config, message):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(BertTfError, match=message):
        distribute.make_strategy("multi_worker")


def _distribution(**values):
    """`DistributionOptions` parsed from the distribution flags, `values` set."""
    return bert_options.DistributionOptions.from_flags(
        bert_flags.parse(lambda fv: bert_flags.define_distribution_flags(fv), **values))


def test_the_chief_waits_for_a_missing_input_state_no_longer_than_it_is_told(tmp_path, caplog):
    """Before a checkpoint the chief waits for the other workers' input states; a worker that
    died writes none, so the wait is bounded (the Estimator bounds it by the step deadline),
    then the chief warns once and saves without it."""
    from bert_tf.training import resume

    with tf.Graph().as_default():
        iterator = tf.compat.v1.data.make_initializable_iterator(tf.data.Dataset.range(10))
        hooks, listeners = resume.resumable_input(
            [resume.InitIteratorHook(iterator, pipeline=0, num_pipelines=2)], None,
            str(tmp_path), is_chief=True, save_steps=5, other_workers_wait_secs=0.5)
        for hook in hooks:
            hook.begin()
        with tf.compat.v1.Session() as session:
            for hook in hooks:
                hook.after_create_session(session, None)
            started = time.time()
            listeners[0].before_save(session, 5)
            waited = time.time() - started
            listeners[0].before_save(session, 10)  # Not waited for again.
            again = time.time() - started - waited
    assert 0.5 <= waited < resume.OTHER_WORKERS_WAIT_SECS / 2, waited
    assert again < 0.5, again
    assert "model.ckpt-5.input-1-of-2" in caplog.text
    assert os.path.exists(tmp_path / "input_state" / "model.ckpt-5.input-0-of-2.index")


def test_flag_combinations():
    assert distribute.strategy_from_options(_distribution()) is None
    with pytest.raises(BertTfError, match="--use_tpu contradicts --distribution_strategy"):
        distribute.strategy_from_options(_distribution(distribution_strategy="mirrored",
                                                       use_tpu=True))
    with pytest.raises(BertTfError, match="--use_tpu: no TPU given; pass --tpu_name"):
        distribute.strategy_from_options(_distribution(use_tpu=True))
    with pytest.raises(BertTfError, match="unknown value 'horovod'"):
        distribute.make_strategy("horovod")
    with pytest.raises(BertTfError, match="--num_gpus=4 but this host has 0 GPU"):
        distribute.make_strategy("mirrored", num_gpus=4)


def test_estimator_rejects_a_non_strategy(tmp_path):
    config = estimator_lib.RunConfig(train_distribute=object())
    estimator = estimator_lib.Estimator(lambda features, labels, mode: None, str(tmp_path),
                                        config=config, train_batch_size=2)
    with pytest.raises(TypeError, match="train_distribute must be a tf.distribute strategy"):
        estimator.train(lambda params: tf.data.Dataset.range(4), max_steps=1)


# ------------------------------------------------------------------- slow: real distribution


def _on_two_cpu_devices(script, code):
    """Python for a child that splits the CPU into 2 logical devices (possible only before
    TensorFlow starts), parses `script`'s flags from its argv, then runs `code`."""
    return textwrap.dedent(f"""
        import runpy, sys
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from absl import flags, logging
        logging.use_absl_handler()
        logging.set_verbosity(logging.INFO)
        runpy.run_path({script!r}, run_name="main")  # Defines the script's flags.
        flags.FLAGS([{os.path.basename(script)!r}, *sys.argv[1:]])
    """) + textwrap.dedent(code)


_TWO_DEVICE_RUNS = _on_two_cpu_devices(SCRIPT, """
    from bert_tf import options
    from bert_tf.runs.pretraining import run_pretraining
    for strategy, output_dir in (("none", {one!r}), ("mirrored", {two!r})):
        flags.FLAGS.distribution_strategy = strategy
        flags.FLAGS.output_dir = output_dir
        run_pretraining(options.PretrainOptions.from_flags(flags.FLAGS))
    # Before exit: AutoGraph deletes the sources it generated only then.
    import glob, tempfile
    print("generated sources:", glob.glob(tempfile.gettempdir() + "/__autograph_generated_*"),
          file=sys.stderr)
""")


@pytest.fixture(scope="module")
def single_and_mirrored(cluster_data):
    """(single-device checkpoint, 2-device MirroredStrategy checkpoint, the child's log)."""
    one, two = cluster_data.root / "one_device", cluster_data.root / "mirrored"
    code = _TWO_DEVICE_RUNS.format(one=str(one), two=str(two))
    temp_dir = cluster_data.root / "tmp"
    temp_dir.mkdir()
    completed = subprocess.run([sys.executable, "-c", code, *cluster_flags(cluster_data, one)],
                               capture_output=True, text=True,
                               env=child_env(TMPDIR=str(temp_dir)), cwd=ROOT, timeout=400)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return (tf.train.latest_checkpoint(str(one)), tf.train.latest_checkpoint(str(two)),
            completed.stderr)


def _largest_update(reference, init):
    """The largest change of any weight of `init` in the `reference` checkpoint."""
    return max(np.max(np.abs(tf.train.load_variable(reference, name) -
                             tf.train.load_variable(init, name)))
               for name, _ in tf.train.list_variables(init))


def _assert_same_weights(checkpoint, reference, init):
    """Every weight of `checkpoint` equals `reference`'s to 1e-3 of the largest update.

    The original AdamW divides each update by sqrt(v) + 1e-6 without bias correction: for a
    weight whose gradient is near 1e-6, another summation order of the same examples (2 x 4
    instead of 8, ~1e-8 in the gradient) shifts the update by up to ~lr / 1e-6 x 1e-8 = 1e-5
    (seen: 1.4e-5 of a 0.05 update). An unsharded input or a missing all-reduce is off by the
    size of the update itself (see the note on issue 5).
    """
    names = sorted(name for name, _ in tf.train.list_variables(reference))
    assert sorted(name for name, _ in tf.train.list_variables(checkpoint)) == names
    assert int(tf.train.load_variable(checkpoint, "global_step")) == STEPS
    largest_update = _largest_update(reference, init)
    for name in names:
        np.testing.assert_allclose(tf.train.load_variable(checkpoint, name),
                                   tf.train.load_variable(reference, name),
                                   atol=1e-3 * largest_update, err_msg=name)
    # The runs trained (else equal weights would prove nothing).
    assert largest_update > 1e-3


@pytest.mark.slow
def test_a_mirrored_two_cpu_devices_equal_one_device(cluster_data, single_and_mirrored):
    one, two, log = single_and_mirrored
    assert one.endswith(f"model.ckpt-{STEPS}") and two.endswith(f"model.ckpt-{STEPS}")
    assert "MirroredStrategy over 2 devices" in log
    assert "Global batch 8 over 2 replicas: 4 examples per replica" in log
    _assert_same_weights(two, one, cluster_data.init)


def test_a_mirrored_run_builds_the_model_as_written(single_and_mirrored):
    """MirroredStrategy would AutoGraph-convert the replica function and all it calls (the
    whole model_fn: a tiny mirrored run took 21.6 s instead of 17.7 s) and leave each
    converted function's source in the temp dir until exit (for good after a kill);
    bert_tf's graph code needs no conversion."""
    assert "generated sources: []" in single_and_mirrored[2]


def _run_two_workers(args, log_dir, script=SCRIPT):
    """Runs `script` as the two workers of a TF_CONFIG cluster; both must exit 0.

    Returns:
      (chief's log, the other worker's log).
    """
    (chief_rc, chief_log), (worker_rc, worker_log) = wait_workers(
        start_workers(args, log_dir, script=script), timeout=400)
    assert chief_rc == 0, chief_log[-3000:]
    assert worker_rc == 0, worker_log[-3000:]
    return chief_log, worker_log


@pytest.mark.slow
def test_b_two_workers_equal_one_process_and_only_the_chief_writes(cluster_data,
                                                                   single_and_mirrored,
                                                                   tmp_path):
    out = tmp_path / "out"
    args = cluster_flags(cluster_data, out, distribution_strategy="multi_worker",
                         step_timeout_secs=120)
    chief_log, worker_log = _run_two_workers(args, str(tmp_path))
    for log in (chief_log, worker_log):
        assert "Global batch 8 over 2 replicas: 4 examples per replica" in log
    final = tf.train.latest_checkpoint(str(out))
    assert final.endswith(f"model.ckpt-{STEPS}")
    _assert_same_weights(final, single_and_mirrored[0], cluster_data.init)
    # What the chief alone writes: checkpoints (every 2 steps, at the start and the end), one
    # events file, the graph; the other worker would add an events file or more.
    files = sorted(os.listdir(out))
    events = [name for name in files if name.startswith("events.out.tfevents.")]
    assert len(events) == 1, files
    expected = {"checkpoint", "graph.pbtxt", "input_state", *events}
    input_states = set()
    for step in (0, 2, 3):
        expected |= {f"model.ckpt-{step}.{ext}" for ext in ("index", "meta")}
        expected.add(f"model.ckpt-{step}.data-00000-of-00001")
        # --exact_resume: each worker's input position at each of the chief's checkpoints.
        for worker in (0, 1):
            input_states |= {f"model.ckpt-{step}.input-{worker}-of-2.{ext}"
                             for ext in ("index", "data-00000-of-00001")}
    assert set(files) == expected
    assert set(os.listdir(out / "input_state")) == input_states
    assert "Saving checkpoints" not in worker_log


@pytest.mark.slow
def test_c_a_dead_worker_stops_the_other_then_both_resume(cluster_data, tmp_path):
    out = tmp_path / "out"
    timeout = 15
    args = cluster_flags(cluster_data, out, steps=100000, distribution_strategy="multi_worker",
                         step_timeout_secs=timeout, save_checkpoints_steps=5, log_every_n_steps=5)
    workers = start_workers(args, str(tmp_path))
    (chief, chief_log_path), (worker, _) = workers
    checkpoint_5 = out / "model.ckpt-5.index"
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not checkpoint_5.exists():
            assert chief.poll() is None and worker.poll() is None, open(chief_log_path).read()
            time.sleep(0.2)
        assert checkpoint_5.exists(), open(chief_log_path).read()[-3000:]
        worker.send_signal(signal.SIGKILL)
        killed_at = time.time()
        chief.wait(timeout=timeout + EXIT_ALLOWANCE_SECS)
        stopped_after = time.time() - killed_at
        print(f"the chief stopped {stopped_after:.1f} s after the other worker was killed")
    finally:
        kill_all(workers)
    chief_log = open(chief_log_path).read()
    assert chief.returncode == 2, chief_log[-3000:]
    # README: the others stop after at most --step_timeout_secs (plus writing one line and
    # exiting).
    assert stopped_after < timeout + EXIT_ALLOWANCE_SECS
    errors = [line for line in chief_log.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "multi-worker training stopped" in errors[0], chief_log[-3000:]
    assert "restart every worker with the same command" in errors[0]
    assert "Traceback" not in chief_log
    last = tf.train.latest_checkpoint(str(out))
    last_step = int(last.rsplit("-", 1)[1])
    assert last_step >= 5

    # The same command on both (with a near end): they resume from the chief's checkpoint.
    args = cluster_flags(cluster_data, out, steps=last_step + 3,
                         distribution_strategy="multi_worker", step_timeout_secs=120,
                         save_checkpoints_steps=5, log_every_n_steps=5)
    results = wait_workers(start_workers(args, str(tmp_path)), timeout=400)
    for returncode, log in results:
        assert returncode == 0, log[-3000:]
        assert f"from step {last_step} to {last_step + 3}" in log
    final = tf.train.latest_checkpoint(str(out))
    assert int(tf.train.load_variable(final, "global_step")) == last_step + 3


@pytest.mark.slow
def test_c_two_workers_killed_resume_exactly_where_their_inputs_were(cluster_data, tmp_path):
    """--exact_resume on two workers: both killed (SIGKILL) after a checkpoint, then restarted
    with the same command, they end with the weights of an uninterrupted two-worker run: each
    worker's input continues from the position saved with the checkpoint."""
    shards = [write_records(str(tmp_path / f"shard-{i}.tfrecord"), num=24, seed=i)
              for i in range(4)]
    steps = 12

    def args(out):  # Shuffled input: two files per worker, interleaved.
        return cluster_flags(cluster_data, out, steps=steps,
                             distribution_strategy="multi_worker", step_timeout_secs=120,
                             save_checkpoints_steps=3, keep_checkpoint_max=10,
                             input_file=",".join(shards), shuffle_train_input=True,
                             random_seed=3)

    straight, killed = tmp_path / "straight", tmp_path / "killed"
    _run_two_workers(args(straight), str(tmp_path))
    workers = start_workers(args(killed), str(tmp_path))
    states = [killed / "input_state" / f"model.ckpt-6.input-{w}-of-2.index" for w in (0, 1)]
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not (killed / "model.ckpt-6.index").exists():
            assert all(process.poll() is None for process, _ in workers)
            time.sleep(0.02)
    finally:
        kill_all(workers)
    # The chief writes checkpoint 6 only once both workers' input states of step 6 exist.
    assert all(state.exists() for state in states)
    last = tf.train.latest_checkpoint(str(killed))
    assert last is not None and int(last.rsplit("-", 1)[1]) < steps, last
    chief_log, _ = _run_two_workers(args(killed), str(tmp_path))  # The same command.
    assert "Resuming the input where" in chief_log
    assert max_difference(weights_at(killed, steps), weights_at(straight, steps)) <= 1e-6


@pytest.mark.slow
def test_d_two_workers_fine_tune_squad_like_one_process(tmp_path, minilm_dir):
    # SQuAD: its head has no dropout (the classifier and NER heads keep the original's fixed
    # 0.1), so with the config's dropout off both runs are deterministic.
    squad_file = os.path.join(FINETUNE_DATA, "squad_small.json")
    config = write_tiny_config(tmp_path, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)

    def flags(output_dir, *extra):
        return [f"--vocab_file={os.path.join(minilm_dir, 'vocab.txt')}",
                f"--bert_config_file={config}", f"--output_dir={output_dir}", "--do_train",
                f"--train_file={squad_file}", "--max_seq_length=64", "--doc_stride=32",
                "--max_query_length=16", f"--train_batch_size={GLOBAL_BATCH}",
                f"--num_train_steps={STEPS}", "--learning_rate=1e-3", "--random_seed=7",
                "--shuffle_train_input=false", *extra]

    # One process, from random weights: its step-0 checkpoint is where both runs start.
    one = tmp_path / "one"
    reference = run_script("run_squad.py", *flags(one))
    assert reference.returncode == 0, reference.stderr[-3000:]
    init = str(one / "model.ckpt-0")

    out = tmp_path / "out"
    args = flags(out, "--distribution_strategy=multi_worker", "--step_timeout_secs=120",
                 f"--init_checkpoint={init}", "--do_predict", f"--predict_file={squad_file}")
    chief_log, worker_log = _run_two_workers(args, str(tmp_path),
                                             script=os.path.join(ROOT, "scripts", "run_squad.py"))
    for log in (chief_log, worker_log):
        assert "Global batch 8 over 2 replicas: 4 examples per replica" in log
    final = tf.train.latest_checkpoint(str(out))
    assert final.endswith(f"model.ckpt-{STEPS}")
    _assert_same_weights(final, tf.train.latest_checkpoint(str(one)), init)

    # The chief predicted and scored; the other worker stopped after training, its features
    # cached outside --output_dir and removed when it exited.
    questions = sum(len(paragraph["qas"]) for article in json.load(open(squad_file))["data"]
                    for paragraph in article["paragraphs"])
    assert len(json.loads((out / "predictions.json").read_text())) == questions
    assert set(json.loads((out / "eval_results.json").read_text())) == {"exact_match", "f1"}
    assert "Not the chief: done after training" in worker_log
    assert "Not the chief" not in chief_log
    worker_cache = re.search(r"Not the chief: caching features in (\S+)", worker_log).group(1)
    assert not worker_cache.startswith(str(out)) and not os.path.exists(worker_cache)
    assert "Saving checkpoints" not in worker_log
    events = [name for name in os.listdir(out) if name.startswith("events.out.tfevents.")]
    assert len(events) == 1


BENCHMARK = os.path.join(ROOT, "scripts", "benchmark.py")

# Runs scripts/benchmark.py's flags through bert_tf.tools.benchmark.run with 2 logical CPU devices,
# then prints the FLOPs of the MatMuls that the mirrored step's graph runs.
_BENCHMARK_ON_TWO_DEVICES = _on_two_cpu_devices(BENCHMARK, """
    from bert_tf import modeling, options
    from bert_tf.tools import benchmark
    from bert_tf.training import distribute
    sys.path.insert(0, {tests!r})
    from finetune_helpers import graph_matmul_flops
    benchmark_options = options.BenchmarkOptions.from_flags(flags.FLAGS)
    benchmark.run(benchmark_options)
    spec = benchmark.BenchmarkSpec(
        modeling.BertConfig.from_json_file(flags.FLAGS.bert_config_file), task="squad",
        mode="train", batch_size=flags.FLAGS.batch_size, max_seq_length=flags.FLAGS.max_seq_length)
    graph, fetch, _ = benchmark.build_step(
        spec, distribute.strategy_from_options(benchmark_options.distribution))
    print("GRAPH_FLOPS", graph_matmul_flops(graph, fetch))
""")


def _benchmark_flags(tmp_path, output_json, *extra):
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY))
    return [f"--bert_config_file={config}", "--task=squad", "--mode=train", "--batch_size=4",
            "--max_seq_length=16", "--num_warmup_steps=1", "--num_steps=3",
            "--peak_matmul_size=128", "--check_onednn=false", f"--output_json={output_json}",
            *extra]


def _assert_two_replica_result(result):
    assert result["num_replicas"] == 2
    # The global batch (4) in FLOPs and throughput; MFU against the peak of both devices.
    assert result["flops_per_step"] == benchmark.count_flops(
        modeling.BertConfig(**TINY), "squad", "train", 4, 16)
    assert result["sequences_per_second"] == pytest.approx(4 / result["step_time_median_s"])
    assert result["mfu"] == pytest.approx(result["achieved_tflops"] /
                                          (2 * result["peak_matmul_tflops"]))
    assert np.isfinite(result["loss"])


@pytest.mark.slow
def test_e_benchmark_on_two_mirrored_devices(tmp_path):
    output = tmp_path / "bench.json"
    code = _BENCHMARK_ON_TWO_DEVICES.format(tests=os.path.join(ROOT, "tests"))
    completed = run_python_code(
        code, _benchmark_flags(tmp_path, output, "--distribution_strategy=mirrored"),
        env=child_env(), cwd=ROOT, timeout=400)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "MirroredStrategy over 2 devices" in completed.stderr
    result = json.loads(output.read_text())
    _assert_two_replica_result(result)
    # Each replica builds the step on 2 of the 4 sequences: together, the global batch's work.
    graph_flops = int(completed.stdout.split("GRAPH_FLOPS")[1].split()[0])
    assert graph_flops == result["flops_per_step"]


@pytest.mark.slow
def test_e_benchmark_on_two_workers_only_the_chief_writes(tmp_path):
    output = tmp_path / "bench.json"
    args = _benchmark_flags(tmp_path, output, "--distribution_strategy=multi_worker",
                            "--step_timeout_secs=120")
    chief_log, worker_log = _run_two_workers(args, str(tmp_path), script=BENCHMARK)
    _assert_two_replica_result(json.loads(output.read_text()))
    assert "Not the chief: the chief writes --output_json" in worker_log
    assert "Not the chief" not in chief_log
