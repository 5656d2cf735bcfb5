"""Loading the MiniLM checkpoint into a model with more positions or more WordPiece ids
(`bert_tf.table_growth` through `modeling.init_from_checkpoint`)."""

import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import tiny_config

from bert_tf import modeling, table_growth
from bert_tf.errors import BertTfError

tf1 = tf.compat.v1

POSITIONS = "bert/embeddings/position_embeddings"
WORDS = "bert/embeddings/word_embeddings"


def _config(minilm_converted, **changes):
    config = json.load(open(os.path.join(minilm_converted, "bert_config.json")))
    return modeling.BertConfig(**{**config, **changes})


def _load(config, checkpoint, growth, ids, compute=()):
    """(table values by name, sequence output) of a BertModel on `ids` initialized from
    `checkpoint` with `growth`."""
    with tf.Graph().as_default():
        model = modeling.BertModel(config, False, tf.constant(ids))
        modeling.init_from_checkpoint(checkpoint, growth=growth)
        tables = {v.op.name: v for v in tf1.trainable_variables() if v.op.name in compute}
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            return sess.run(tables), sess.run(model.get_sequence_output())


def test_copy_repeats_the_learnt_positions_and_keeps_rows_0_to_511(minilm_converted, caplog):
    checkpoint = os.path.join(minilm_converted, "bert_model.ckpt")
    learnt = tf.train.load_variable(checkpoint, POSITIONS)
    ids = np.array([[101, 7592, 2088, 102]], np.int32)
    caplog.set_level(logging.INFO)
    tables, output = _load(_config(minilm_converted, max_position_embeddings=1300), checkpoint,
                           table_growth.GrowthOptions("copy"), ids, {POSITIONS})
    table = tables[POSITIONS]
    assert table.shape == (1300, 384)
    np.testing.assert_array_equal(table[:512], learnt)
    np.testing.assert_array_equal(table[512:1024], learnt)
    np.testing.assert_array_equal(table[1024:], learnt[:276])
    extended = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Extended")]
    assert extended == [f"Extended tables of {checkpoint}, learnt rows kept: {POSITIONS} 512 -> "
                        "1300 rows (copy: the learnt rows repeated)."]
    # Short inputs see rows 0..3 only: the same outputs as the 512-position model.
    _, original = _load(_config(minilm_converted), checkpoint, None, ids)
    np.testing.assert_allclose(output, original, atol=1e-5)


def test_interpolate_resamples_the_learnt_positions(minilm_converted):
    checkpoint = os.path.join(minilm_converted, "bert_model.ckpt")
    learnt = tf.train.load_variable(checkpoint, POSITIONS).astype(np.float64)
    tables, _ = _load(_config(minilm_converted, max_position_embeddings=1024), checkpoint,
                      table_growth.GrowthOptions("interpolate"), np.array([[101, 102]]),
                      {POSITIONS})
    table = tables[POSITIONS]
    np.testing.assert_array_equal(table[:512], learnt.astype(np.float32))
    # Row i >= 512 is the learnt table at i * 511 / 1023, linear between neighbours.
    for row in (512, 700, 1023):
        where = row * 511 / 1023
        below = int(np.floor(where))
        above = min(below + 1, 511)
        expected = learnt[below] * (1 - (where - below)) + learnt[above] * (where - below)
        np.testing.assert_allclose(table[row], expected, atol=1e-6)
    np.testing.assert_array_equal(table[1023], learnt[511].astype(np.float32))


def test_a_table_smaller_than_the_checkpoints_or_growth_not_asked_for_is_one_error(
        minilm_converted):
    checkpoint = os.path.join(minilm_converted, "bert_model.ckpt")
    with pytest.raises(BertTfError, match=(
            rf"checkpoint '{checkpoint}': table '{POSITIONS}' has 512 rows but the BERT config "
            r"gives it 256; a table cannot shrink: use a max_position_embeddings "
            r"\(--max_position_embeddings\) of at least 512 rows.")):
        _load(_config(minilm_converted, max_position_embeddings=256), checkpoint,
              table_growth.GrowthOptions(), np.array([[101, 102]]))
    # Without growth (the original's behaviour, extract_features): any other shape is wrong.
    with pytest.raises(BertTfError, match=(
            rf"variable '{POSITIONS}' has shape \[512, 384\] but the model built from the BERT "
            r"config has shape \[1024, 384\]")):
        _load(_config(minilm_converted, max_position_embeddings=1024), checkpoint, None,
              np.array([[101, 102]]))
    with pytest.raises(BertTfError, match="--position_embedding_init=stretch: use one of copy"):
        table_growth.GrowthOptions("stretch")


def test_relative_positions_need_no_table_their_distances_clip(tmp_path, caplog):
    config = modeling.BertConfig(**tiny_config(vocab_size=30, max_position_embeddings=8),
                                 position_embedding_type="relative_key")
    ids = np.array([[1, 2, 3, 4, 5, 6, 7, 8]], np.int32)
    with tf.Graph().as_default():
        modeling.BertModel(config, False, tf.constant(ids))
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            tf1.train.Saver().save(sess, str(tmp_path / "model.ckpt"))
    name = "bert/encoder/layer_0/attention/self/distance_embedding"
    learnt = tf.train.load_variable(str(tmp_path / "model.ckpt"), name)  # [15, D]
    caplog.set_level(logging.INFO)
    longer = modeling.BertConfig(**{**config.to_dict(), "max_position_embeddings": 12})
    tables, _ = _load(longer, str(tmp_path / "model.ckpt"), table_growth.GrowthOptions(), ids,
                      {name})
    table = tables[name]  # [23, D]: distances -11..11; the learnt ones are -7..7.
    np.testing.assert_array_equal(table[4:19], learnt)
    np.testing.assert_array_equal(table[:4], np.repeat(learnt[:1], 4, axis=0))
    np.testing.assert_array_equal(table[19:], np.repeat(learnt[-1:], 4, axis=0))
    assert "relative positions need no position table" in caplog.text
