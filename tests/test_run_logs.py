"""What a fine-tuning run from a pre-trained checkpoint logs: its own progress, not one line per
restored variable, the example features or TensorFlow deprecation notices."""

import os
import re
import shutil

import pytest
import tensorflow as tf
from finetune_helpers import TINY_CONFIG, TOPICS, assert_ok, run_script, write_tiny_config

from bert_tf import modeling


def _save_pretrained_checkpoint(prefix):
    """A TINY_CONFIG encoder (no task head) saved at `prefix`, as --init_checkpoint reads it."""
    with tf.Graph().as_default():
        ids = tf.zeros([1, 8], tf.int32)
        modeling.BertModel(config=modeling.BertConfig.from_dict(TINY_CONFIG), is_training=False,
                           input_ids=ids, input_mask=ids + 1, token_type_ids=ids)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(sess, prefix)
    return prefix


@pytest.fixture(scope="module")
def run_log(tmp_path_factory, minilm_dir):
    """The stderr of run_classifier.py from --init_checkpoint: one step of training, then a
    second run that resumes it and trains (evaluating every step and keeping the best
    checkpoint), evaluates, predicts and exports."""
    root = tmp_path_factory.mktemp("run_logs")
    data_dir = root / "data"
    data_dir.mkdir()
    topics = TOPICS
    shutil.copy(os.path.join(topics, "train.tsv"), data_dir / "train.tsv")
    shutil.copy(os.path.join(topics, "dev.tsv"), data_dir / "dev.tsv")
    shutil.copy(os.path.join(topics, "dev.tsv"), data_dir / "test.tsv")
    init = _save_pretrained_checkpoint(str(root / "pretrained" / "bert_model.ckpt"))
    args = ["--task_name=tsv", "--text_a_column=sentence", f"--data_dir={data_dir}",
            f"--vocab_file={os.path.join(minilm_dir, 'vocab.txt')}",
            f"--bert_config_file={write_tiny_config(root)}", f"--init_checkpoint={init}",
            f"--output_dir={root / 'out'}", "--max_seq_length=16", "--train_batch_size=8",
            "--eval_batch_size=40", "--predict_batch_size=40", "--do_train"]
    first = run_script("run_classifier.py", *args, "--num_train_steps=1")
    assert_ok(first)
    second = run_script("run_classifier.py", *args, "--num_train_steps=2", "--do_eval",
                        "--do_predict", f"--export_dir={root / 'export'}",
                        "--eval_every_n_steps=1", "--best_checkpoint_metric=eval_accuracy")
    assert_ok(second)
    assert os.listdir(root / "export")  # Every stage ran.
    assert (root / "out" / "best" / "checkpoint").is_file()
    return init, first.stderr.splitlines(), second.stderr.splitlines()


def test_each_training_graph_logs_one_restore_line(run_log):
    init, first, second = run_log
    for lines in (first, second):
        assert not [line for line in lines if "INIT_FROM_CKPT" in line]
        restores = [line for line in lines if "Initialized " in line]
        # The training graph only: eval, predict and export restore the run's own checkpoint.
        assert len(restores) == 1, restores
        assert f"Initialized 39 of 41 variables from {init}" in restores[0]
        assert "output_weights, output_bias" in restores[0]


def test_no_random_init_line_when_the_trained_checkpoint_is_restored(run_log):
    _, first, second = run_log
    assert not [line for line in first + second if "random init" in line]


def test_example_features_are_not_logged_at_default_verbosity(run_log):
    _, first, second = run_log
    assert not [line for line in first + second
                if "tokens: " in line or "input_ids: " in line or "*** Example ***" in line]


def test_no_deprecation_notices(run_log):
    _, first, second = run_log
    notices = [line for line in first + second if "deprecat" in line.lower()]
    assert not notices, notices


def test_restore_summary_names_at_most_ten_missing_encoder_variables():
    missing = [f"bert/encoder/layer_{i}/output/dense/kernel:0" for i in range(15)]
    line = modeling.restore_summary("/ckpt/model.ckpt", ["bert/pooler/dense/kernel:0"], missing)
    assert line.startswith("Initialized 1 of 16 variables from /ckpt/model.ckpt; not in the "
                           "checkpoint")
    assert "bert/encoder/layer_9/output/dense/kernel and 5 more" in line
    assert "layer_10/" not in line


def test_each_training_run_logs_where_its_start_up_time_went(run_log):
    _, first, second = run_log
    pattern = re.compile(r"Started the training loop in ([\d.]+) s: graph ([\d.]+) s, session "
                         r"([\d.]+) s, graph files and checkpoint ([\d.]+) s, first step "
                         r"([\d.]+) s\.$")
    for lines in (first, second):
        found = [pattern.search(line) for line in lines if "Started the training loop" in line]
        assert len(found) == 1 and found[0], found
        total, *phases = (float(value) for value in found[0].groups())
        assert total > 0 and all(secs >= 0 for secs in phases), phases
        assert abs(sum(phases) - total) <= 0.25, (phases, total)  # Each rounded to 0.1 s.
        started = lines.index(found[0].string)
        # Logged once the first step ran: after the session's restore line, before step 1's end.
        assert started > [i for i, line in enumerate(lines) if "Initialized " in line][0]
