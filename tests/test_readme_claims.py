"""README claims, each exercised the way a user hits it: through the scripts, as subprocesses.

One test per claim, named after it; each docstring quotes the README. The runs are tiny (a
2-layer, 32-wide BERT, 8 updates) and shared through module fixtures where a claim only needs
to read what another run wrote:

  reference run   run_pretraining.py on 32 hand-made records in file order, --eval_input_file
                  (24 other records), --report_majority_baseline, a summary every step. Its
                  step-0 checkpoint is the --init_checkpoint of the other pre-training runs, so
                  they all start from the same weights and can be compared with it.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import (
    DATA,
    TOPICS,
    assert_clean_error,
    assert_ok,
    only_export,
    read_key_values,
    run_script,
    start_workers,
    wait_workers,
    write_tiny_config,
)
from finetune_helpers import PRETRAINING_TINY as TINY
from google.protobuf import text_format

tf1 = tf.compat.v1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
NER_DATA = os.path.join(DATA, "ner")

SEQ, PREDS = 16, 4  # Pre-training records: max_seq_length, max_predictions_per_seq.
BATCH = 8  # Global batch of every pre-training run.
STEPS = 8  # Optimizer updates of every pre-training run: 2 epochs of the 32 records.
LEARNING_RATE = 5e-3
MASK_ID = 4  # TINY's vocab: 0 pad, 2 [CLS], 3 [SEP], 4 [MASK].


# ---------------------------------------------------------------------------- child processes


def _run_two_workers(name, worker_args, log_dir, timeout=400):
    """Runs scripts/<name> as the 2 workers of a TF_CONFIG cluster on 127.0.0.1, worker i
    with the flags `worker_args(i)`; returns [(exit status, log)] (worker 0, the chief, first)."""
    return wait_workers(start_workers(worker_args, str(log_dir),
                                      script=os.path.join(SCRIPTS, name)), timeout=timeout)


# ------------------------------------------------------------------------------ reading outputs


def _scalars(directory, tag):
    """{global step: value} of the summary `tag` in the events files of `directory`."""
    values = {}
    for path in tf.io.gfile.glob(os.path.join(str(directory), "events.out.tfevents.*")):
        for event in tf1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = value.simple_value
    return values


def _graph(output_dir):
    """The training graph the run wrote (graph.pbtxt), as a GraphDef."""
    with open(os.path.join(str(output_dir), "graph.pbtxt")) as f:
        return text_format.Parse(f.read(), tf1.GraphDef())


def _matmul_dtypes(graph_def, scope):
    """{node name: input dtype} of the MatMul / BatchMatMul nodes under `scope`."""
    dtypes = {}
    for node in graph_def.node:
        if node.op in ("MatMul", "BatchMatMulV2", "BatchMatMulV3") and node.name.startswith(scope):
            attr = node.attr["T"] if "T" in node.attr else node.attr["Ta"]
            dtypes[node.name] = tf.dtypes.as_dtype(attr.type)
    return dtypes


def _input_batch_sizes(graph_def):
    """The static batch dimension of every feature the training input pipeline yields."""
    sizes = set()
    for node in graph_def.node:
        if node.op == "IteratorGetNext":
            for shape in node.attr["output_shapes"].list.shape:
                sizes.add(shape.dim[0].size)
    return sizes


def _model_variables(checkpoint):
    """Names of the model's weights (not optimizer slots or counters) in `checkpoint`."""
    return sorted(name for name, _ in tf.train.list_variables(checkpoint)
                  if name.startswith(("bert/", "cls/", "output_")) and "adam_" not in name)


def _largest_update(checkpoint, init):
    return max(np.max(np.abs(tf.train.load_variable(checkpoint, name)
                             - tf.train.load_variable(init, name)))
               for name in _model_variables(init))


def _assert_same_weights(checkpoint, reference, init):
    """`checkpoint` holds `reference`'s weights up to 1e-3 of the largest update: AdamW divides
    each update by sqrt(v) + 1e-6 without bias correction, so another summation order of the
    same examples moves a weight whose gradient is near 1e-6 by up to ~1e-5 of an update; a
    different batch moves weights by the size of the updates themselves."""
    largest = _largest_update(reference, init)
    assert largest > 1e-3  # The runs trained, else equal weights would prove nothing.
    assert _model_variables(checkpoint) == _model_variables(reference)
    for name in _model_variables(reference):
        np.testing.assert_allclose(tf.train.load_variable(checkpoint, name),
                                   tf.train.load_variable(reference, name),
                                   atol=1e-3 * largest, err_msg=name)


def _assert_float32_checkpoint(checkpoint):
    dtypes = tf.train.load_checkpoint(checkpoint).get_variable_to_dtype_map()
    weights = _model_variables(checkpoint)
    assert weights
    for name in weights:
        assert dtypes[name] == tf.float32, (name, dtypes[name])
    floats = [name for name, dtype in dtypes.items() if dtype.is_floating]
    assert all(dtypes[name] == tf.float32 for name in floats), dtypes


def _read_records(path):
    """[tf.train.Example] of a TFRecord file."""
    return [tf.train.Example.FromString(record)
            for record in tf.data.TFRecordDataset(path).as_numpy_iterator()]


# ------------------------------------------------------------------------ pre-training records


def _example(rng, masked_ids, weights):
    """A pre-training record (docs/compatibility.md §3 keys) whose masked-LM slots hold
    `masked_ids` where `weights` is 1; the other slots are padding (position 0, id 0, weight 0) as
    create_pretraining_data.py writes them."""
    real = int(sum(weights))
    length = rng.randint(real + 3, SEQ + 1)
    ids = [2] + list(rng.randint(10, TINY["vocab_size"], size=length - 2)) + [3]
    positions = sorted(rng.choice(np.arange(1, length - 1), size=real, replace=False))
    for position in positions:
        ids[position] = MASK_ID
    lm_positions = list(positions) + [0] * (PREDS - real)
    lm_ids = list(masked_ids[:real]) + [0] * (PREDS - real)
    lm_weights = [1.0] * real + [0.0] * (PREDS - real)
    pad = SEQ - length

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))

    feature = {
        "input_ids": ints(ids + [0] * pad),
        "input_mask": ints([1] * length + [0] * pad),
        "segment_ids": ints([0] * (length // 2) + [1] * (length - length // 2) + [0] * pad),
        "masked_lm_positions": ints(lm_positions),
        "masked_lm_ids": ints(lm_ids),
        "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=lm_weights)),
        "next_sentence_labels": ints([rng.randint(2)]),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature))


def _examples(seed, num, frequent):
    """`num` records with 3 real masked-LM predictions and 1 padding slot each; `frequent`
    {token id: count} places those tokens among the real predictions, the rest are random
    ids >= 10 (each far rarer than the `frequent` ones)."""
    rng = np.random.RandomState(seed)
    real = num * (PREDS - 1)
    tokens = [token for token, count in frequent.items() for _ in range(count)]
    tokens += list(rng.randint(10, TINY["vocab_size"], size=real - len(tokens)))
    tokens = np.array(tokens)[rng.permutation(real)].reshape(num, PREDS - 1)
    return [_example(rng, list(row), [1.0] * (PREDS - 1) + [0.0]) for row in tokens]


def _write(path, examples):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for example in examples:
            writer.write(example.SerializeToString())
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """train.tfrecord: 32 records; the same records as two files, shard-0 holding blocks
    0, 2, 4, 6 of 4 records and shard-1 blocks 1, 3, 5, 7 (so that a global batch of 8 in
    file order is 4 records of each shard); eval.tfrecord: 24 other records.

    Masked-LM ids: in train, token 7 is the most frequent real prediction (24 of 96) and 9
    the second (12), while the 32 padding slots hold id 0; in eval, 9 is the most frequent
    (20 of 72) and 7 appears 6 times."""
    root = tmp_path_factory.mktemp("readme_claims")
    train = _examples(seed=1, num=32, frequent={7: 24, 9: 12})
    blocks = [train[i:i + 4] for i in range(0, 32, 4)]
    config = root / "bert_config.json"
    config.write_text(json.dumps(TINY))
    return types.SimpleNamespace(
        root=root, config=str(config),
        train=_write(root / "train.tfrecord", train),
        eval=_write(root / "eval.tfrecord", _examples(seed=2, num=24, frequent={9: 20, 7: 6})),
        shards=[_write(root / f"shard-{i}.tfrecord", sum(blocks[i::2], [])) for i in (0, 1)])


def _pretraining_flags(corpus, output_dir, *extra):
    """run_pretraining.py flags shared by every pre-training run here; `extra` flags come last
    (absl: the last value of a flag wins)."""
    return [f"--bert_config_file={corpus.config}", f"--input_file={corpus.train}",
            f"--output_dir={output_dir}", f"--max_seq_length={SEQ}",
            f"--max_predictions_per_seq={PREDS}", "--do_train", f"--train_batch_size={BATCH}",
            f"--num_train_steps={STEPS}", "--num_warmup_steps=2",
            f"--learning_rate={LEARNING_RATE}", "--shuffle_train_input=false",
            "--save_summary_steps=1", "--log_every_n_steps=4", "--random_seed=1", *extra]


@pytest.fixture(scope="module")
def reference(corpus):
    """The fp32 AdamW run from random weights: trains STEPS updates on train.tfrecord, then
    evaluates on eval.tfrecord and reports the majority baseline."""
    out = corpus.root / "reference"
    result = run_script("run_pretraining.py", *_pretraining_flags(
        corpus, out, "--do_eval", f"--eval_input_file={corpus.eval}", "--eval_batch_size=8",
        "--report_majority_baseline"))
    assert_ok(result)
    return types.SimpleNamespace(out=out, log=result.stderr,
                                 init=str(out / "model.ckpt-0"),
                                 final=tf.train.latest_checkpoint(str(out)),
                                 results=read_key_values(out / "eval_results.txt"))


def _pretrain_from_reference_init(corpus, reference, name, *extra):
    """A run with the shared flags from the reference's step-0 weights; its output_dir."""
    out = corpus.root / name
    assert_ok(run_script("run_pretraining.py", *_pretraining_flags(
        corpus, out, f"--init_checkpoint={reference.init}", *extra)))
    return out


# ---------------------------------------------------------------------------- 1. eval_input_file


def test_eval_input_file_is_what_do_eval_evaluates(corpus, reference, tmp_path):
    """README: "`--eval_input_file` (held-out data for `--do_eval`)".

    The reference run trained on train.tfrecord with --eval_input_file=eval.tfrecord. Its
    eval results must be those of evaluating its final checkpoint on eval.tfrecord alone (an
    eval-only run, in a copy of its output directory, with --input_file=eval.tfrecord); on the
    training records every metric comes out different (seen by evaluating on them instead).
    """
    out = tmp_path / "eval_only"
    shutil.copytree(reference.out, out)
    os.remove(out / "eval_results.txt")
    assert_ok(run_script(
        "run_pretraining.py", f"--bert_config_file={corpus.config}",
        f"--input_file={corpus.eval}", f"--output_dir={out}", f"--max_seq_length={SEQ}",
        f"--max_predictions_per_seq={PREDS}", "--do_eval", "--eval_batch_size=8"))
    assert reference.results["global_step"] == STEPS
    assert reference.results == pytest.approx(read_key_values(out / "eval_results.txt"),
                                              rel=1e-5, abs=1e-6)


# ---------------------------------------------------------------------- 2. majority baseline


def _masked_lm_ids_and_weights(path):
    examples = _read_records(path)
    ids = np.array([e.features.feature["masked_lm_ids"].int64_list.value for e in examples])
    weights = np.array([e.features.feature["masked_lm_weights"].float_list.value
                        for e in examples])
    return ids.reshape(-1), weights.reshape(-1)


def test_report_majority_baseline_matches_a_numpy_count(corpus, reference):
    """README (`make demo`): "printing the masked-LM accuracy next to the accuracy of always
    predicting the most frequent masked token".

    --report_majority_baseline: the token is the most frequent real (weight > 0) masked-LM id
    of --input_file and the accuracy is measured on --eval_input_file; both recounted here
    with numpy from the TFRecords."""
    train_ids, train_weights = _masked_lm_ids_and_weights(corpus.train)
    eval_ids, eval_weights = _masked_lm_ids_and_weights(corpus.eval)
    real_train = train_ids[train_weights > 0]
    values, counts = np.unique(real_train, return_counts=True)
    assert np.sum(counts == counts.max()) == 1  # One most frequent token.
    token = int(values[np.argmax(counts)])
    real_eval = eval_ids[eval_weights > 0]
    accuracy = np.mean(real_eval == token)
    # The data tells apart the baseline's likely mistakes: counting padding slots (id 0),
    # taking the token from the eval file, or measuring on the training file.
    all_values, all_counts = np.unique(train_ids, return_counts=True)
    eval_values, eval_counts = np.unique(real_eval, return_counts=True)
    assert int(all_values[np.argmax(all_counts)]) != token
    assert int(eval_values[np.argmax(eval_counts)]) != token
    assert abs(np.mean(real_train == token) - accuracy) > 0.05

    # One report (logged through both TF's and absl's handlers: the same line twice).
    lines = set(re.findall(r"majority baseline: always predicting token id (\d+) gives "
                           r"masked_lm_accuracy = ([0-9.]+) \(model: ([0-9.]+)\)",
                           reference.log))
    assert len(lines) == 1, reference.log[-3000:]
    reported_token, reported_accuracy, model_accuracy = lines.pop()
    assert int(reported_token) == token
    assert float(reported_accuracy) == pytest.approx(accuracy, abs=5e-5)
    assert float(model_accuracy) == pytest.approx(reference.results["masked_lm_accuracy"],
                                                  abs=5e-5)


# ------------------------------------------------------------------------------------ 3. --debug


def test_debug_shows_the_traceback_instead_of_one_error_line(corpus, tmp_path, minilm_dir):
    """README: "Bad input stops early with one line naming the file or flag and the fix, and
    exit status 2 ... Pass `--debug` to any script to see the Python traceback instead."
    """
    bad_config = tmp_path / "bad_config.json"
    bad_config.write_text(json.dumps({**TINY, "hidden_size": 30, "num_attention_heads": 4}))
    message = "hidden_size (30) is not a multiple of num_attention_heads (4)"
    pretraining = [f"--bert_config_file={bad_config}", f"--input_file={corpus.train}",
                   f"--output_dir={tmp_path / 'out'}", "--do_train"]
    assert_clean_error(run_script("run_pretraining.py", *pretraining), message)

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    shutil.copy(os.path.join(TOPICS, "train.tsv"), data_dir / "train.tsv")
    classifier = ["--task_name=tsv", "--text_a_column=sentence", f"--data_dir={data_dir}",
                  f"--vocab_file={os.path.join(minilm_dir, 'vocab.txt')}",
                  f"--bert_config_file={bad_config}", f"--output_dir={tmp_path / 'out2'}",
                  "--do_train"]
    for name, args in (("run_pretraining.py", pretraining), ("run_classifier.py", classifier)):
        result = run_script(name, *args, "--debug")
        assert result.returncode not in (0, 2), result.stderr[-3000:]
        assert "Traceback (most recent call last)" in result.stderr, result.stderr[-3000:]
        last_line = result.stderr.strip().splitlines()[-1]
        assert last_line.startswith("bert_tf.errors.BertTfError: "), result.stderr[-3000:]
        assert message in last_line
        assert not any(line.startswith("error: ") for line in result.stderr.splitlines())


# ------------------------------------------------------------------------------------ 4. oneDNN


# Imports like a script (runpy.run_path without running main) or TensorFlow first, then prints
# TF_ENABLE_ONEDNN_OPTS and whether TensorFlow's oneDNN kernels are on (IsMklEnabled reads
# TF_ENABLE_ONEDNN_OPTS, with TF's own default for this CPU when it is not set).
_ONEDNN_PROBE = """
import json, os, runpy, sys
if sys.argv[1] == "tensorflow_first":
    import tensorflow
    import bert_tf
else:
    runpy.run_path(sys.argv[1], run_name="imports_only")
from tensorflow.python.util import _pywrap_util_port
print(json.dumps({"env": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
                  "onednn": bool(_pywrap_util_port.IsMklEnabled())}))
"""


def _onednn_probe(how, **env):
    result = subprocess.run([sys.executable, "-c", _ONEDNN_PROBE, how], capture_output=True,
                            text=True, timeout=120, cwd=ROOT, env=child_env(**env))
    assert_ok(result)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_onednn_is_on_by_default_and_off_with_tf_enable_onednn_opts_0():
    """README: "Importing `bert_tf` before TensorFlow (as every script does) turns on oneDNN's
    fused CPU kernels, which TensorFlow leaves off on CPUs without AVX-512 ...;
    `TF_ENABLE_ONEDNN_OPTS=0` turns them off."
    """
    script = os.path.join(SCRIPTS, "run_pretraining.py")
    assert _onednn_probe(script, TF_ENABLE_ONEDNN_OPTS=None) == {"env": "1", "onednn": True}
    assert _onednn_probe(script, TF_ENABLE_ONEDNN_OPTS="0") == {"env": "0", "onednn": False}
    # Imported after TensorFlow, bert_tf leaves TensorFlow's default alone.
    assert _onednn_probe("tensorflow_first", TF_ENABLE_ONEDNN_OPTS=None)["env"] is None


# ---------------------------------------------------------- 5. precision and accumulation


def test_num_accumulation_steps_equals_one_big_batch_in_run_pretraining(corpus, reference):
    """README: "`--num_accumulation_steps` (the micro-batch is `train_batch_size /
    num_accumulation_steps`; `num_train_steps` counts optimizer updates)".

    Batch 8 as 2 micro-batches of 4 for STEPS updates ends at the weights of the reference
    run's STEPS updates of 8 (same start, same records in the same order)."""
    out = _pretrain_from_reference_init(corpus, reference, "accumulation",
                                        "--num_accumulation_steps=2")
    final = tf.train.latest_checkpoint(str(out))
    assert int(tf.train.load_variable(final, "global_step")) == STEPS
    assert _input_batch_sizes(_graph(out)) == {BATCH // 2}
    _assert_same_weights(final, reference.final, reference.init)


_DTYPES = {"bf16": tf.bfloat16, "fp16": tf.float16}


def _assert_trained_in(precision, output_dir, steps, encoder_scope="bert/encoder/"):
    """Checks a finished --precision run: the encoder's matmuls ran in the compute dtype, the
    checkpoint holds only float32 weights, and fp16 kept its dynamic loss scale there."""
    matmuls = _matmul_dtypes(_graph(output_dir), encoder_scope)
    assert len(matmuls) >= 12, matmuls  # 2 layers: q, k, v, 2 attention, out, 2 FFN each.
    assert set(matmuls.values()) == {_DTYPES[precision]}, matmuls
    final = tf.train.latest_checkpoint(str(output_dir))
    assert int(tf.train.load_variable(final, "global_step")) == steps
    _assert_float32_checkpoint(final)
    names = {name for name, _ in tf.train.list_variables(final)}
    if precision == "fp16":
        scale = float(tf.train.load_variable(final, "loss_scale"))
        assert scale in [2.0**k for k in range(16)], scale  # 2**15, halved on overflows.
        assert 1 <= int(tf.train.load_variable(final, "loss_scale_good_steps")) <= steps
    else:
        assert "loss_scale" not in names


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_precision_through_run_pretraining(corpus, reference, precision):
    """README: "Every training and inference script takes `--precision=fp32|bf16|fp16`
    (variables, optimizer slots, softmax, layer-norm statistics and losses stay fp32; fp16 adds
    dynamic loss scaling; checkpoints are fp32 whatever the precision)".

    From the reference run's start on the same batches, the training loss of every update
    stays finite and within rounding of the fp32 run's."""
    out = _pretrain_from_reference_init(corpus, reference, f"precision_{precision}",
                                        f"--precision={precision}")
    _assert_trained_in(precision, out, STEPS)
    losses, fp32_losses = _scalars(out, "loss"), _scalars(reference.out, "loss")
    assert sorted(losses) == sorted(fp32_losses) == list(range(1, STEPS + 1))
    assert all(np.isfinite(value) for value in losses.values()), losses
    for step, fp32_loss in fp32_losses.items():
        assert losses[step] == pytest.approx(fp32_loss, abs=0.02), (step, losses, fp32_losses)


def _topics_dir(path, num_train=None):
    """A tsv task directory: the topics train.tsv (its first `num_train` examples) and dev.tsv."""
    path.mkdir()
    with open(os.path.join(TOPICS, "train.tsv"), encoding="utf-8") as f:
        lines = f.readlines()
    if num_train is not None:
        lines = lines[:1 + num_train]
    (path / "train.tsv").write_text("".join(lines), encoding="utf-8")
    shutil.copy(os.path.join(TOPICS, "dev.tsv"), path / "dev.tsv")
    return path


def _classifier_flags(tmp_path, data_dir, vocab_file, output_dir, *extra):
    return ["--task_name=tsv", "--text_a_column=sentence", f"--data_dir={data_dir}",
            f"--vocab_file={vocab_file}", f"--bert_config_file={write_tiny_config(tmp_path)}",
            f"--output_dir={output_dir}", "--max_seq_length=24", "--train_batch_size=8",
            "--learning_rate=1e-3", "--random_seed=1", *extra]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_precision_and_accumulation_through_run_classifier(tmp_path, vocab_file, precision):
    """README: "Every training and inference script takes `--precision=fp32|bf16|fp16` ..." and
    the fine-tuning scripts take `--num_accumulation_steps` (run_classifier.py's docstring)."""
    out = tmp_path / "out"
    assert_ok(run_script("run_classifier.py", *_classifier_flags(
        tmp_path, _topics_dir(tmp_path / "data"), vocab_file, out, "--do_train",
        f"--precision={precision}", "--num_accumulation_steps=2", "--num_train_steps=3",
        "--save_summary_steps=1")))
    _assert_trained_in(precision, out, 3)
    # Batch 8 in micro-batches of 4; global_step counts the 3 updates (checked above).
    assert _input_batch_sizes(_graph(out)) == {4}
    losses = _scalars(out, "loss")
    assert losses and all(np.isfinite(value) for value in losses.values()), losses


# ----------------------------------------------------------------------------------- 6. LAMB


def test_optimizer_lamb_through_run_pretraining(corpus, reference):
    """README: "New ones: `--optimizer=adamw|lamb`"; bert_tf/optimization.py: LAMB, with the
    Adam moments as `<var>/adam_m`, `<var>/adam_v` and its update count `lamb_step`.

    From the reference run's start, LAMB writes its own state to the checkpoint, lowers the
    loss, and ends elsewhere than AdamW on the same batches."""
    out = _pretrain_from_reference_init(corpus, reference, "lamb", "--optimizer=lamb")
    final = tf.train.latest_checkpoint(str(out))
    names = {name for name, _ in tf.train.list_variables(final)}
    assert float(tf.train.load_variable(final, "lamb_step")) == STEPS
    assert "lamb_step" not in {name for name, _ in tf.train.list_variables(reference.final)}
    for name in _model_variables(final):
        assert {f"{name}/adam_m", f"{name}/adam_v"} <= names, name

    # Batches repeat every 4 updates (32 records, batch 8): the second pass over the same
    # batches has the lower loss. Summaries are tagged with the step after the update.
    losses = _scalars(out, "loss")
    first, second = ([losses[step] for step in range(start, start + 4)] for start in (1, 5))
    assert np.mean(second) < np.mean(first) - 0.01, losses

    lamb_update = _largest_update(final, reference.init)
    adamw_update = _largest_update(reference.final, reference.init)
    difference = max(np.max(np.abs(tf.train.load_variable(final, name)
                                   - tf.train.load_variable(reference.final, name)))
                     for name in _model_variables(final))
    assert lamb_update > 1e-3
    assert difference > 0.1 * max(lamb_update, adamw_update)


# ------------------------------------------------------------- 7. multi-worker fine-tuning


def _ner_dir(path):
    path.mkdir()
    for name in ("train.txt", "dev.txt", "test.txt"):
        shutil.copy(os.path.join(NER_DATA, name), path / name)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("script", ["run_classifier.py", "run_ner.py"])
def test_multi_worker_fine_tuning_only_the_chief_evaluates_and_exports(tmp_path, vocab_file,
                                                                       script):
    """README: "The fine-tuning scripts run the same way (same command, `TF_CONFIG`,
    `--distribution_strategy=multi_worker`) ...; only the chief writes to `--output_dir` (the
    others cache their features in a temporary directory removed at exit, and write only their
    input positions, `input_state/*.input-W-of-P.*` ...) and, once training
    ends, the chief alone evaluates, predicts and exports while the others exit".

    Two workers on 127.0.0.1 train from scratch. To see who writes what, the other worker gets
    its own --output_dir and --export_dir (a fresh run resumes from no checkpoint, so it needs
    nothing of the chief's): they must stay empty."""
    config = write_tiny_config(tmp_path)
    if script == "run_classifier.py":
        data_dir = _topics_dir(tmp_path / "data")
        task = ["--task_name=tsv", "--text_a_column=sentence", "--max_seq_length=24",
                "--train_batch_size=8", "--eval_batch_size=16"]
        chief_files = {"eval_results.txt", "train.tf_record", "eval.tf_record"}
    else:
        data_dir = _ner_dir(tmp_path / "data")
        task = ["--max_seq_length=48", "--train_batch_size=4", "--eval_batch_size=4"]
        chief_files = {"eval_results.txt", "eval_predictions.txt", "label_list.txt",
                       "train.tf_record", "eval.tf_record"}

    def worker_args(index):
        return [f"--data_dir={data_dir}", f"--vocab_file={vocab_file}",
                f"--bert_config_file={config}", f"--output_dir={tmp_path / f'out{index}'}",
                f"--export_dir={tmp_path / f'export{index}'}", "--do_train", "--do_eval",
                "--num_train_steps=3", "--learning_rate=1e-3", "--random_seed=1",
                "--distribution_strategy=multi_worker", "--step_timeout_secs=120", *task]

    (chief_rc, chief_log), (worker_rc, worker_log) = _run_two_workers(script, worker_args,
                                                                      tmp_path)
    assert chief_rc == 0, chief_log[-3000:]
    assert worker_rc == 0, worker_log[-3000:]

    chief_out = tmp_path / "out0"
    assert chief_files <= set(os.listdir(chief_out)), os.listdir(chief_out)
    assert tf.train.latest_checkpoint(str(chief_out)).endswith("model.ckpt-3")
    results = read_key_values(chief_out / "eval_results.txt")
    assert results["global_step"] == 3
    exported = only_export(tmp_path / "export0")
    assert os.path.isfile(os.path.join(exported, "saved_model.pb"))
    assert os.path.isfile(os.path.join(exported, "assets.extra", "label_list.txt"))
    if script == "run_ner.py":
        with open(chief_out / "label_list.txt") as f, \
                open(os.path.join(exported, "assets.extra", "label_list.txt")) as g:
            assert f.read() == g.read()

    # The other worker wrote nothing where it was told to write but its input positions
    # (--exact_resume), and removed its feature cache.
    worker_out = tmp_path / "out1"
    assert os.listdir(worker_out) == ["input_state"]
    assert all(".input-1-of-2." in name for name in os.listdir(worker_out / "input_state"))
    assert "checkpoints no longer wait for these workers" in chief_log
    assert not os.path.exists(tmp_path / "export1")
    assert "Not the chief: done after training" in worker_log
    assert "Not the chief" not in chief_log
    cache = re.search(r"Not the chief: caching features in (\S+)", worker_log).group(1)
    assert not os.path.exists(cache)


# ------------------------------------------------------------------ 8. file-level input sharding


@pytest.mark.slow
def test_multi_worker_pretraining_reads_whole_files_per_worker(corpus, reference, tmp_path):
    """README: "Each worker reads its own input: whole files when there are at least as many
    files as workers (so shard the data into many files), else every n-th record."

    The reference run read train.tfrecord in file order: its global batch s is records
    8s..8s+7, i.e. 4 records of shard-0 and the same-place 4 of shard-1. Two workers on the
    two shard files (4 examples each per update) reproduce its weights only if worker i reads
    shard-i alone: reading both files, each would train on shard-0's records."""
    out = tmp_path / "out"
    args = _pretraining_flags(corpus, out, f"--input_file={','.join(corpus.shards)}",
                              f"--init_checkpoint={reference.init}",
                              "--distribution_strategy=multi_worker", "--step_timeout_secs=120")
    results = _run_two_workers("run_pretraining.py", lambda index: args, tmp_path)
    for returncode, log in results:
        assert returncode == 0, log[-3000:]
    final = tf.train.latest_checkpoint(str(out))
    assert int(tf.train.load_variable(final, "global_step")) == STEPS
    _assert_same_weights(final, reference.final, reference.init)


# ----------------------------------------------------------------- 9. epochs and warmup proportion


def test_num_train_epochs_and_warmup_proportion_set_the_step_counts(tmp_path, vocab_file):
    """README: "The original flags work unchanged": --num_train_epochs and --warmup_proportion
    of the fine-tuning scripts make int(examples / train_batch_size * epochs) optimizer updates,
    the first int(updates * proportion) of them warming the learning rate up linearly, then
    decaying it linearly to 0 (the original BERT schedule), as TensorBoard's learning_rate shows.

    30 examples, batch 8, 2.6 epochs: 9.75 -> 9 updates (rounding would give 10); warmup
    0.3 * 9 = 2.7 -> 2 updates (rounding would give 3)."""
    num_examples, batch, epochs, proportion, learning_rate = 30, 8, 2.6, 0.3, 1e-3
    out = tmp_path / "out"
    assert_ok(run_script("run_classifier.py", *_classifier_flags(
        tmp_path, _topics_dir(tmp_path / "data", num_train=num_examples), vocab_file, out,
        "--do_train", f"--num_train_epochs={epochs}", f"--warmup_proportion={proportion}",
        f"--learning_rate={learning_rate}", "--save_summary_steps=1")))
    steps = int(num_examples / batch * epochs)
    warmup = int(steps * proportion)
    assert (steps, warmup) == (9, 2)
    final = tf.train.latest_checkpoint(str(out))
    assert int(tf.train.load_variable(final, "global_step")) == steps

    # The rate of update s (0-based) is summarized with the step after it, s + 1.
    rates = _scalars(out, "learning_rate")
    assert sorted(rates) == list(range(1, steps + 1))
    expected = [learning_rate * s / warmup if s < warmup else learning_rate * (1 - s / steps)
                for s in range(steps)]
    np.testing.assert_allclose([rates[s + 1] for s in range(steps)], expected, rtol=1e-5)


# --------------------------------------------------------------------- 10. gradient-norm summary


def _gradient_norm(config_path, checkpoint, records_path, batch):
    """The global L2 norm of the gradient of the pre-training loss at `checkpoint`'s weights on
    the first `batch` records of `records_path`, by autodiff and numpy."""
    from bert_tf import modeling
    from bert_tf.tasks import model_fn_parts, pretraining
    from bert_tf.training import estimator as estimator_lib

    serialized = list(tf.data.TFRecordDataset(records_path).take(batch).as_numpy_iterator())
    spec = {"input_ids": SEQ, "input_mask": SEQ, "segment_ids": SEQ,
            "masked_lm_positions": PREDS, "masked_lm_ids": PREDS, "next_sentence_labels": 1}
    with tf.Graph().as_default():
        features = tf.io.parse_example(
            serialized, {**{key: tf.io.FixedLenFeature([n], tf.int64) for key, n in spec.items()},
                         "masked_lm_weights": tf.io.FixedLenFeature([PREDS], tf.float32)})
        features = {key: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
                    for key, value in features.items()}
        model_fn = pretraining.model_fn_builder(
            model_fn_parts.Encoder(modeling.BertConfig.from_json_file(config_path)))
        loss = model_fn(features, None, estimator_lib.ModeKeys.EVAL, {}).loss
        variables = tf1.trainable_variables()
        gradients = [tf.convert_to_tensor(g) for g in tf.gradients(loss, variables)]
        with tf1.Session() as sess:
            tf1.train.Saver(variables).restore(sess, checkpoint)
            values = sess.run(gradients)
    return float(np.sqrt(sum(np.sum(np.square(v.astype(np.float64))) for v in values)))


def test_global_gradient_norm_summary_is_the_norm_of_the_gradient(corpus, reference):
    """README: "TensorBoard summaries (loss, learning rate, gradient norm, examples/sec) go to
    `--output_dir`"; bert_tf/optimization.py: "global_gradient_norm" is the norm before
    clipping of the gradient being applied.

    Read back from the reference run's events file: one finite, positive value per update, the
    first equal to the norm of the gradient at its step-0 weights on its first batch."""
    norms = _scalars(reference.out, "global_gradient_norm")
    assert sorted(norms) == list(range(1, STEPS + 1))
    assert all(np.isfinite(value) and value > 0 for value in norms.values()), norms
    expected = _gradient_norm(corpus.config, reference.init, corpus.train, BATCH)
    assert expected > 1.0  # Above the clip norm: a clipped value would show.
    assert norms[1] == pytest.approx(expected, rel=1e-4)
