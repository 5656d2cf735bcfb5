"""The helpers the test modules share (fixtures are in tests/conftest.py): the tiny BERT
configs, fine-tuning and pre-training option namespaces with the scripts' flag defaults,
hand-built pre-training records, running a script, reading its outputs, the checkpoints of a
run, the 2-worker cluster runs, and the linear-regression Estimator.

Light to import: TensorFlow and the bert_tf modules that load it are imported inside the
functions that need them, so pure-Python test modules do not pay for TensorFlow.
(benchmarks/predict_throughput.py imports it too: hence its name.)"""

import json
import os
import random
import socket
import types

import numpy as np
import pytest
from envs import child_env
from script_runner import run_python_script, start_python_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
DATA = os.path.join(ROOT, "tests", "data")
FINETUNE_DATA = os.path.join(DATA, "finetune")
# The README's walk-through data: sports vs food sentences (data/topics/README.md).
TOPICS = os.path.join(ROOT, "data", "topics")
# The shipped pre-training text (data/corpus).
TRAIN_TXT = os.path.join(ROOT, "data", "corpus", "train.txt")

# ------------------------------------------------------------------------ the tiny BERT configs

# A 2-layer, 32-wide BERT over the real 30522-token uncased vocab (MiniLM's vocab.txt).
TINY_CONFIG = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=128, type_vocab_size=2,
                   hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                   initializer_range=0.02)


def tiny_config(**overrides):
    """TINY_CONFIG with `overrides`, a new dict (for modeling.BertConfig(**...) or a JSON file)."""
    unknown = set(overrides) - set(TINY_CONFIG)
    assert not unknown, f"not a TINY_CONFIG key: {sorted(unknown)}"
    return {**TINY_CONFIG, **overrides}


# The pre-training tests' config: 64 ids (write_records' vocabulary), 64 positions, no dropout.
PRETRAINING_TINY = tiny_config(vocab_size=64, max_position_embeddings=64,
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def write_tiny_config(directory, **overrides):
    """Writes TINY_CONFIG (with overrides) as bert_config.json in `directory`; returns it."""
    path = os.path.join(str(directory), "bert_config.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tiny_config(**overrides), f)
    return path


# --------------------------------------------------------------------------------- fine-tuning

# Small sizes for tests; every other option keeps its flag default (bert_tf.cli.flags).
_TEST_VALUES = dict(max_seq_length=32, train_batch_size=8, eval_batch_size=8,
                    predict_batch_size=8, learning_rate=1e-3, num_train_epochs=1.0,
                    keep_checkpoint_max=2, save_summary_steps=0, random_seed=1)


def _tasks():
    """kind -> (the script's task flag group, its options class, its task, whether it has
    --do_eval)."""
    from bert_tf import options as bert_options
    from bert_tf.cli import flags as bert_flags
    from bert_tf.tasks import classification, multiple_choice, ner, squad

    return {
        "classifier": (bert_flags.define_classifier_flags, bert_options.ClassifierOptions,
                       classification.ClassificationTask, True),
        "squad": (bert_flags.define_squad_flags, bert_options.SquadOptions, squad.SquadTask,
                  False),
        "ner": (bert_flags.define_ner_flags, bert_options.NerOptions, ner.NerTask, True),
        "multiple_choice": (bert_flags.define_multiple_choice_flags,
                            bert_options.MultipleChoiceOptions,
                            multiple_choice.MultipleChoiceTask, True),
    }


def options(kind, **values):
    """The task for `driver.run_task` (its `options`: the FinetuneOptions), as
    run_classifier / run_squad / run_ner / run_multiple_choice ("classifier", "squad", "ner",
    "multiple_choice") build it from the script's own flag groups: the flag defaults, then
    `_TEST_VALUES`, then `values`."""
    task_options, run_options = option_pair(kind, **values)
    return _tasks()[kind][2](task_options, run_options)


def option_pair(kind, **values):
    """(the task's options, FinetuneOptions) that `options` makes its task with."""
    from bert_tf import options as bert_options
    from bert_tf.cli import flags as bert_flags

    define_task, options_class, task_class, has_eval = _tasks()[kind]

    def define(flag_values):
        define_task(flag_values)
        bert_flags.define_finetuning_flags(has_eval=has_eval,
                                           length_buckets=task_class.length_buckets,
                                           flag_values=flag_values)

    flag_values = bert_flags.parse(define)
    for name, value in {**_TEST_VALUES, **values}.items():
        if name in flag_values:
            setattr(flag_values, name, value)
        else:
            assert name not in values, f"not a {kind} flag: {name}"
    return (options_class.from_flags(flag_values),
            bert_options.FinetuneOptions.from_flags(flag_values))


def run_script(name, *args, timeout=300, cwd=ROOT, env=None, ran_ops_file=None):
    """Runs scripts/<name> (or the script at the path `name`) with `args` as `python
    scripts/<name>` does (through tests/script_runner.py), from `cwd` (the checkout unless
    told), with `env` (default envs.child_env()). With `ran_ops_file`, runs it under
    tests/ran_ops.py, which writes there the op types of the kernels its sessions ran.

    Returns:
      the CompletedProcess (stdout and stderr as str).
    """
    script = os.path.join(SCRIPTS, name)
    if ran_ops_file is not None:
        script, args = os.path.join(ROOT, "tests", "ran_ops.py"), (str(ran_ops_file), script,
                                                                   *args)
    return run_python_script(script, args, env=child_env() if env is None else env, cwd=cwd,
                             timeout=timeout)


# What a run_*.py run that does not train logs (bert_tf.runs.driver.run_task_process).
PACKED_WEIGHTS_LINE = "Not training: oneDNN keeps each matmul's weights packed"


def assert_ok(result):
    assert result.returncode == 0, result.stderr[-3000:]


def assert_clean_error(result, *fragments):
    """Exit status 2 and one `error: ...` line naming `fragments`, no traceback."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1, result.stderr[-3000:]
    for fragment in fragments:
        assert fragment in error_lines[0], error_lines[0]
    return error_lines[0]


def read_key_values(path):
    """eval_results.txt as a dict of floats (`key = value` lines; `# header` lines skipped)."""
    results = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                continue
            key, value = line.rstrip("\n").split(" = ")
            results[key] = float(value)
    return results


def only_export(export_dir):
    """The single timestamped SavedModel directory under `export_dir`."""
    entries = os.listdir(export_dir)
    assert len(entries) == 1 and entries[0].isdigit(), entries
    return os.path.join(export_dir, entries[0])


def minilm_files(minilm_converted):
    """The fine-tuning options naming the converted MiniLM (conftest `minilm_converted`):
    init_checkpoint, vocab_file and bert_config_file."""
    return {"init_checkpoint": os.path.join(minilm_converted, "bert_model.ckpt"),
            "vocab_file": os.path.join(minilm_converted, "vocab.txt"),
            "bert_config_file": os.path.join(minilm_converted, "bert_config.json")}


def fine_tune_minilm(directory, minilm_converted, kind, **values):
    """Fine-tunes the converted MiniLM (conftest `minilm_converted`) for `kind` ("classifier",
    "squad", ...) with --export_dir under `directory`: a namespace of the output_dir, the
    export path and the run's results."""
    from bert_tf.runs import driver

    output_dir, export_dir = os.path.join(directory, "out"), os.path.join(directory, "export")
    results = driver.run_task(options(
        kind, **minilm_files(minilm_converted), output_dir=output_dir, export_dir=export_dir,
        do_train=True, keep_checkpoint_max=1, **values))
    return types.SimpleNamespace(output_dir=output_dir, export=only_export(export_dir),
                                 results=results)


def squad_questions(path):
    """[(question id, context, gold answer texts)] in file order."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    return [(qa["id"], paragraph["context"], [a["text"] for a in qa.get("answers", [])])
            for article in data for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]]


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_prediction_files(output_dir, squad_file, n_best_size, max_answer_words,
                           version_2=False, null_score_diff_threshold=0.0):
    """Checks predictions.json, nbest_predictions.json (and null_odds.json) against the
    questions of `squad_file`: every question answered, with text of its own context."""
    questions = squad_questions(squad_file)
    predictions = load_json(os.path.join(output_dir, "predictions.json"))
    nbest = load_json(os.path.join(output_dir, "nbest_predictions.json"))
    assert list(predictions) == [qid for qid, _, _ in questions]
    assert list(nbest) == list(predictions)
    # A context has single spaces here, so an answer mapped back to it is a substring.
    for qid, context, _ in questions:
        answer = predictions[qid]
        assert isinstance(answer, str) and answer in context
        entries = nbest[qid]
        assert 1 <= len(entries) <= n_best_size + (1 if version_2 else 0)
        assert sum(entry["probability"] for entry in entries) == pytest.approx(1.0, abs=1e-5)
        scores = [entry["start_logit"] + entry["end_logit"] for entry in entries if entry["text"]]
        assert scores == sorted(scores, reverse=True)
        for entry in entries:
            assert set(entry) == {"text", "probability", "start_logit", "end_logit"}
            assert entry["text"] in context or entry["text"] == "empty"
            assert len(entry["text"].split()) <= max_answer_words
    null_odds_path = os.path.join(output_dir, "null_odds.json")
    if not version_2:
        assert not os.path.exists(null_odds_path)
        return predictions
    null_odds = load_json(null_odds_path)
    assert list(null_odds) == list(predictions)
    for qid, answer in predictions.items():
        # The v2.0 rule: null answer iff null score - best non-null score > threshold.
        assert (answer == "") == (null_odds[qid] > null_score_diff_threshold)
        assert "" in [entry["text"] for entry in nbest[qid]]
    return predictions


# --------------------------------------------------------------------------------- pre-training

PRETRAINING_SCRIPT = os.path.join(SCRIPTS, "run_pretraining.py")


def write_records(path, num, seq=16, preds=4, seed=0):
    """Writes `num` pre-training examples with the docs/compatibility.md §3 keys, built by hand
    (ids below PRETRAINING_TINY's vocab_size)."""
    import tensorflow as tf

    def int_feature(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    rng = np.random.RandomState(seed)
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(num):
            length = rng.randint(8, seq + 1)
            ids = [2] + list(rng.randint(5, PRETRAINING_TINY["vocab_size"], size=length - 2)) + [3]
            positions = sorted(rng.choice(np.arange(1, length - 1), size=preds, replace=False))
            masked_ids = [ids[p] for p in positions]
            for p in positions:
                ids[p] = 4  # [MASK]
            pad = seq - length
            feature = {
                "input_ids": int_feature(ids + [0] * pad),
                "input_mask": int_feature([1] * length + [0] * pad),
                "segment_ids": int_feature([0] * (length // 2) + [1] * (length - length // 2)
                                           + [0] * pad),
                "masked_lm_positions": int_feature(positions),
                "masked_lm_ids": int_feature(masked_ids),
                "masked_lm_weights": tf.train.Feature(
                    float_list=tf.train.FloatList(value=[1.0] * preds)),
                "next_sentence_labels": int_feature([rng.randint(2)]),
            }
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())
    return path


def pretrain_options(tmp_path, **overrides):
    """`PretrainOptions` parsed from run_pretraining.py's flag groups: the flag defaults, small
    test sizes over tmp_path (PRETRAINING_TINY as its bert_config.json), then `overrides`."""
    from bert_tf import options as bert_options
    from bert_tf.cli import flags as bert_flags

    config = tmp_path / "bert_config.json"
    if not config.exists():
        config.write_text(json.dumps(PRETRAINING_TINY))
    values = dict(
        bert_config_file=str(config), input_file=str(tmp_path / "train.tfrecord"),
        output_dir=str(tmp_path / "out"), max_seq_length=16, max_predictions_per_seq=4,
        do_train=True, do_eval=True, train_batch_size=8, eval_batch_size=8,
        learning_rate=3e-3, num_train_steps=60, num_warmup_steps=5, save_checkpoints_steps=30,
        max_eval_steps=10, keep_checkpoint_max=3, log_every_n_steps=20, save_summary_steps=20,
        random_seed=1)
    values.update(overrides)
    flag_values = bert_flags.parse(lambda fv: bert_flags.define_pretraining_flags(fv), **values)
    return bert_options.PretrainOptions.from_flags(flag_values)


# -------------------------------------------------------- create_pretraining_data and its records


def create_records(input_file, output_file, vocab_file, num_workers=1, chunk_size_mb=1.0,
                   **config):
    """pretraining_data.create_pretraining_data with `config`; returns (summary, log lines)."""
    from bert_tf import options as bert_options
    from bert_tf.data import pretraining_data

    lines = []
    summary = pretraining_data.create_pretraining_data(
        input_file, output_file, bert_options.PretrainingDataConfig(vocab_file, **config),
        num_workers=num_workers, chunk_size_mb=chunk_size_mb,
        log_fn=lambda fmt, *args: lines.append(fmt % args))
    return summary, lines


def read_records(paths, max_seq_length=128, max_predictions_per_seq=20):
    """All records of `paths` (in file order), parsed with exactly the keys of
    docs/compatibility.md §3."""
    import tensorflow as tf

    from bert_tf.data import record_writing

    spec = record_writing.pretraining_feature_spec(max_seq_length, max_predictions_per_seq)
    batches = [b for b in tf.data.TFRecordDataset(paths).batch(100_000)
               .map(lambda s: tf.io.parse_example(s, spec)).as_numpy_iterator()]
    return {key: np.concatenate([b[key] for b in batches]) for key in spec}


def unmasked_ids(records):
    """input_ids with the original token put back at every masked position."""
    ids = records["input_ids"].copy()
    rows = np.arange(len(ids))[:, None]
    weights = records["masked_lm_weights"] > 0
    ids[np.broadcast_to(rows, weights.shape)[weights], records["masked_lm_positions"][weights]] \
        = records["masked_lm_ids"][weights]
    return ids


def numbered_corpus(path, vocab, num_documents=20, seed=0):
    """Documents of sentences whose words are distinct single-token numbers; returns
    {token id: (document, word index in corpus)}."""
    rng = random.Random(seed)
    words = [str(i) for i in range(3000) if str(i) in vocab]
    where, documents, k = {}, [], 0
    for d in range(num_documents):
        sentences = []
        for _ in range(rng.randint(4, 9)):
            n = rng.randint(2, 7)
            sentences.append(" ".join(words[k:k + n]))
            for word in words[k:k + n]:
                where[vocab[word]] = (d, len(where))
            k += n
        documents.append("\n".join(sentences))
    assert k <= len(words)
    with open(path, "w") as f:
        f.write("\n\n".join(documents) + "\n")
    return where


# ------------------------------------------------------------------------ a run's checkpoints


def assert_checkpoint_state_is_whole(model_dir):
    """Every checkpoint the `checkpoint` state file names exists and reads back."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(model_dir)
    assert state is not None and state.model_checkpoint_path
    assert state.model_checkpoint_path in state.all_model_checkpoint_paths
    for prefix in state.all_model_checkpoint_paths:
        prefix = os.path.join(model_dir, prefix)
        assert os.path.exists(prefix + ".index"), prefix
        step = int(prefix.rsplit("-", 1)[1])
        assert int(tf.train.load_variable(prefix, "global_step")) == step
        for name, _ in tf.train.list_variables(prefix):
            assert np.all(np.isfinite(tf.train.load_variable(prefix, name))), (prefix, name)
    return int(state.model_checkpoint_path.rsplit("-", 1)[1])


def weights_at(model_dir, step):
    """The model weights (no Adam slots) of `model_dir`'s latest checkpoint, which must be
    the one of `step`."""
    import tensorflow as tf

    prefix = tf.train.latest_checkpoint(str(model_dir))
    assert prefix.endswith(f"model.ckpt-{step}"), prefix
    return {name: tf.train.load_variable(prefix, name)
            for name, _ in tf.train.list_variables(prefix) if "adam" not in name.lower()}


def max_difference(a, b):
    """The largest absolute difference between two `weights_at` results."""
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) for k in a)


def graph_matmul_flops(graph, fetch):
    """2*M*N*K summed over the MatMul / BatchMatMul ops the fetch actually runs."""
    import tensorflow as tf

    fetches = list(fetch.values()) if isinstance(fetch, dict) else [fetch]
    names = [f.op.name if isinstance(f, tf.Tensor) else f.name for f in fetches]
    subgraph = tf.compat.v1.graph_util.extract_sub_graph(graph.as_graph_def(), names)
    total = 0
    for node in subgraph.node:
        op = graph.get_operation_by_name(node.name)
        if op.type == "MatMul":
            a = op.inputs[0].shape.as_list()
            k = a[0] if op.get_attr("transpose_a") else a[1]
            m, n = op.outputs[0].shape.as_list()
            total += 2 * m * n * k
        elif op.type in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
            x = op.inputs[0].shape.as_list()
            k = x[-2] if op.get_attr("adj_x") else x[-1]
            out = op.outputs[0].shape.as_list()
            total += 2 * int(np.prod(out)) * k
        else:
            assert "MatMul" not in op.type and op.type != "Einsum", op.type
    return total


# ------------------------------------------------------- run_pretraining.py on 2-worker clusters

CLUSTER_BATCH = 8  # The global batch of cluster_flags.
CLUSTER_STEPS = 3  # cluster_flags' num_train_steps unless told.


def _write_init_checkpoint(prefix):
    """Random initial weights of the PRETRAINING_TINY pre-training model, as --init_checkpoint
    reads them."""
    import tensorflow as tf

    from bert_tf import modeling
    from bert_tf.tasks import model_fn_parts, pretraining
    from bert_tf.training import estimator as estimator_lib

    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        ints = lambda width: tf.zeros([2, width], tf.int32)  # noqa: E731
        features = {"input_ids": ints(16), "input_mask": ints(16) + 1, "segment_ids": ints(16),
                    "masked_lm_positions": ints(4), "masked_lm_ids": ints(4),
                    "masked_lm_weights": tf.ones([2, 4]), "next_sentence_labels": ints(1)}
        model_fn = pretraining.model_fn_builder(
            model_fn_parts.Encoder(modeling.BertConfig.from_dict(PRETRAINING_TINY)))
        model_fn(features, None, estimator_lib.ModeKeys.EVAL, {})
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            return tf1.train.Saver().save(sess, prefix)


def make_cluster_data(root):
    """In `root` (a pathlib.Path): a config, 64 records (all masked_lm_weights 1: per-replica
    and global means agree) and an init checkpoint. Returns their namespace (conftest
    `cluster_data`)."""
    write_records(str(root / "train.tfrecord"), num=64)
    (root / "bert_config.json").write_text(json.dumps(PRETRAINING_TINY))
    init = _write_init_checkpoint(str(root / "init" / "model.ckpt"))
    return types.SimpleNamespace(root=root, init=init, config=str(root / "bert_config.json"),
                                 records=str(root / "train.tfrecord"))


def cluster_flags(data, output_dir, steps=CLUSTER_STEPS, **extra):
    """run_pretraining.py's flags for `data` (make_cluster_data), `extra` last."""
    values = dict(bert_config_file=data.config, input_file=data.records,
                  output_dir=str(output_dir), init_checkpoint=data.init, max_seq_length=16,
                  max_predictions_per_seq=4, do_train=True, train_batch_size=CLUSTER_BATCH,
                  num_train_steps=steps, num_warmup_steps=1, learning_rate=1e-3,
                  save_checkpoints_steps=2, log_every_n_steps=1, shuffle_train_input=False)
    values.update(extra)
    return [f"--{key}={value}" for key, value in values.items()]


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_workers(args, log_dir, script=PRETRAINING_SCRIPT):
    """Starts one `script` per TF_CONFIG task of a 2-worker cluster on 127.0.0.1, with the
    flags `args` (or `args(index)` for worker `index`); returns [(process, log path)], the
    chief first."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(2)]}
    workers = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        log_path = os.path.join(log_dir, f"worker{index}.log")
        process = start_python_script(script, args(index) if callable(args) else args,
                                      env=child_env(TF_CONFIG=tf_config), cwd=ROOT,
                                      output=log_path)
        workers.append((process, log_path))
    return workers


def kill_all(workers):
    for process, _ in workers:
        if process.poll() is None:
            process.kill()
            process.wait()


def wait_workers(workers, timeout):
    """Waits for every worker; returns [(exit status, log)]."""
    try:
        for process, _ in workers:
            process.wait(timeout=timeout)
    finally:
        kill_all(workers)
    return [(process.returncode, open(path).read()) for process, path in workers]


# --------------------------------------------- the linear-regression Estimator (no BERT needed)

X = np.array([[-1.0], [-0.5], [0.0], [0.5], [1.0], [1.5], [2.0], [3.0]], np.float32)
Y = 2.0 * X + 1.0
LEARNING_RATE = 0.05


def linear_model_fn(features, labels, mode, params):
    """pred = x @ w + b; MSE loss; GD. Optional params: init_checkpoint, poison_step, histogram."""
    import tensorflow as tf

    from bert_tf.training import estimator as est

    w = tf.compat.v1.get_variable("w", [1, 1], initializer=tf.compat.v1.zeros_initializer())
    b = tf.compat.v1.get_variable("b", [1], initializer=tf.compat.v1.zeros_initializer())
    if params.get("init_checkpoint"):
        tf.compat.v1.train.init_from_checkpoint(params["init_checkpoint"], {"w": "w", "b": "b"})
    pred = tf.matmul(features["x"], w) + b
    if mode == est.ModeKeys.PREDICT:
        return est.EstimatorSpec(mode, predictions={"y": pred[:, 0], "x": features["x"][:, 0]})
    loss = tf.reduce_mean(tf.square(pred - labels))
    if mode == est.ModeKeys.EVAL:
        mae = tf.compat.v1.metrics.mean_absolute_error(labels, pred)
        return est.EstimatorSpec(mode, loss=loss, eval_metric_ops={"mae": mae})
    global_step = tf.compat.v1.train.get_global_step()
    tf.compat.v1.summary.scalar("learning_rate", LEARNING_RATE)  # As bert_tf.optimization does.
    if params.get("histogram"):
        tf.compat.v1.summary.histogram("w", w)
    train_op = tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE).minimize(
        loss, global_step=global_step)
    if params.get("poison_step"):  # A weight that turns NaN without the loss noticing.
        aux = tf.compat.v1.get_variable("aux", [], initializer=tf.compat.v1.zeros_initializer())
        poisoned = tf.where(global_step >= params["poison_step"], np.nan, aux)
        train_op = tf.group(train_op, tf.compat.v1.assign(aux, poisoned))
    return est.EstimatorSpec(mode, loss=loss, train_op=train_op)


def make_input_fn(x, y=None, repeat=True):
    import tensorflow as tf

    def input_fn(params):
        features = {"x": x}
        data = tf.data.Dataset.from_tensor_slices((features, y) if y is not None else features)
        if repeat:
            data = data.repeat()
        return data.batch(params["batch_size"], drop_remainder=repeat)

    return input_fn


def make_estimator(model_dir, params=None, batch_size=8, **config):
    from bert_tf.training import estimator as est

    config.setdefault("save_checkpoints_steps", 5)
    config.setdefault("log_step_count_steps", 2)
    config.setdefault("save_summary_steps", 2)
    return est.Estimator(linear_model_fn, model_dir, config=est.RunConfig(**config),
                         params=params, train_batch_size=batch_size, eval_batch_size=4,
                         predict_batch_size=4)


# ------------------------------------------------------------------------------------ serving


def encoder_export_options(**values):
    """`options.EncoderExportOptions` as scripts/export_encoder.py builds them from its flag
    group (the flag defaults, then `values`)."""
    from bert_tf import options as bert_options
    from bert_tf.cli import flags as bert_flags
    from bert_tf.cli import tool_flags

    return bert_options.EncoderExportOptions.from_flags(
        bert_flags.parse(tool_flags.define_encoder_export_flags, **values))


def random_bert_inputs(seed, batch_size=3, seq_length=20):
    """int32 input_ids / input_mask / segment_ids [batch_size, seq_length] of random ids
    after [CLS], padded rows and a second segment, the first row full length."""
    rng = np.random.RandomState(seed)
    lengths = rng.randint(4, seq_length + 1, size=batch_size)
    lengths[0] = seq_length
    mask = (np.arange(seq_length)[None] < lengths[:, None]).astype(np.int32)
    ids = rng.randint(1000, 20000, size=(batch_size, seq_length)).astype(np.int32) * mask
    ids[:, 0] = 101
    segments = ((np.arange(seq_length)[None] >= lengths[:, None] // 2) * mask).astype(np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def check_warmup_requests(export_path, loaded=None):
    """warmup_requests.answer_warmup_requests on the export (loaded here unless `loaded`, its
    `tf.saved_model.load`, is given); skips the test without tensorflow-serving-api."""
    pytest.importorskip("tensorflow_serving.apis.prediction_log_pb2",
                        reason="tensorflow-serving-api (a test dependency) is not installed")
    import tensorflow as tf
    from warmup_requests import answer_warmup_requests

    if loaded is None:
        loaded = tf.saved_model.load(export_path)
    return answer_warmup_requests(export_path, loaded)
