"""`bert_tf.encoder.checkpoint_init` on its own: the assignment map of a tiny saved checkpoint
(matched, missing, a shape mismatch), what `init_from_checkpoint` initializes, and its summary."""

import re

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.encoder import checkpoint_init
from bert_tf.errors import BertTfError

tf1 = tf.compat.v1
SAVED = {"bert/encoder/w": np.arange(6, dtype=np.float32).reshape(2, 3),
         "bert/pooler/b": np.array([1.0, -2.0], np.float32),
         "cls/unused": np.zeros([4], np.float32)}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("ckpt") / "model.ckpt")
    with tf.Graph().as_default():
        variables = [tf1.get_variable(name, initializer=value) for name, value in SAVED.items()]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            tf1.train.Saver(variables).save(sess, prefix)
    return prefix


def test_assignment_map_holds_the_shared_names_only(checkpoint):
    with tf.Graph().as_default():
        tvars = [tf1.get_variable("bert/encoder/w", [2, 3]),
                 tf1.get_variable("bert/pooler/b", [2]),
                 tf1.get_variable("output_weights", [3])]
        assignment_map, initialized = checkpoint_init.get_assignment_map_from_checkpoint(
            tvars, checkpoint)
    assert dict(assignment_map) == {"bert/encoder/w": "bert/encoder/w",
                                    "bert/pooler/b": "bert/pooler/b"}
    assert set(initialized) == {"bert/encoder/w", "bert/encoder/w:0",
                                "bert/pooler/b", "bert/pooler/b:0"}


def test_a_shape_mismatch_names_the_variable_and_both_shapes(checkpoint):
    with tf.Graph().as_default():
        tvars = [tf1.get_variable("bert/encoder/w", [3, 3])]
        with pytest.raises(BertTfError, match=r"variable 'bert/encoder/w' has shape \[2, 3\] "
                                              r"but the model .* has shape \[3, 3\]"):
            checkpoint_init.get_assignment_map_from_checkpoint(tvars, checkpoint)


def test_an_unreadable_checkpoint_names_the_path(tmp_path):
    missing = str(tmp_path / "nothing.ckpt")
    with pytest.raises(BertTfError, match=f"cannot read checkpoint '{re.escape(missing)}'"):
        checkpoint_init.get_assignment_map_from_checkpoint([], missing)


def test_init_from_checkpoint_returns_what_it_initialized_and_loads_the_values(checkpoint,
                                                                               caplog):
    caplog.set_level("INFO")
    with tf.Graph().as_default():
        w = tf1.get_variable("bert/encoder/w", [2, 3])
        head = tf1.get_variable("output_weights", [3], initializer=tf1.ones_initializer())
        done, missing = checkpoint_init.init_from_checkpoint(checkpoint)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            w_value, head_value = sess.run([w, head])
    assert (done, missing) == (["bert/encoder/w:0"], ["output_weights:0"])
    np.testing.assert_array_equal(w_value, SAVED["bert/encoder/w"])
    np.testing.assert_array_equal(head_value, np.ones(3))
    assert "Initialized 1 of 2 variables" in caplog.text
    assert "the task head: output_weights" in caplog.text


def test_restore_summary_says_which_encoder_variables_are_missing():
    line = checkpoint_init.restore_summary(
        "ck", ["bert/a:0"], [f"bert/layer_{i}/w:0" for i in range(12)])
    assert line.startswith("Initialized 1 of 13 variables from ck; not in the checkpoint")
    assert "bert/layer_9/w and 2 more." in line
    assert checkpoint_init.restore_summary("ck", ["bert/a:0"], []) == (
        "Initialized 1 of 1 variables from ck.")
