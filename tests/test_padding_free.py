"""Padding-free encoder layers (`--padding_free`, `modeling.BertModel(padding_free=True)`): the
layers run on the real tokens only. Real tokens get the outputs and gradients of the padded
encoder, padding gets zeros, a fine-tuning run trains and evaluates as it does on the padded
graph, and the runs that need fixed shapes (XLA, TPUs) or read padding (SQuAD) keep it."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import TOPICS, options, tiny_config

from bert_tf import modeling, optimization
from bert_tf import options as bert_options
from bert_tf.runs import driver
from bert_tf.tasks import model_fn_parts, squad
from bert_tf.training import estimator as estimator_lib

tf1 = tf.compat.v1

# Rows of 10, 4 and 7 real tokens and one of 1 ([CLS] alone): padding inside the batch and
# at its end, in every row but the first.
LENGTHS = (10, 4, 7, 1)


def _batch(vocab_size, seq_length=10):
    rng = np.random.RandomState(0)
    mask = (np.arange(seq_length)[None, :] < np.array(LENGTHS)[:, None]).astype(np.int32)
    ids = rng.randint(1, vocab_size, size=mask.shape).astype(np.int32) * mask
    types = (np.arange(seq_length)[None, :] >= 3).astype(np.int32) * mask
    return ids, mask, types


def _outputs_both_ways(config, ids, mask, types, init_checkpoint=None, **model_args):
    """(padded, padding-free) values of the sequence output, the pooled output and the
    gradients of a loss over real tokens, one graph, the same variables."""
    with tf.Graph().as_default():
        tf1.set_random_seed(1)
        built = {}
        for padding_free in (False, True):
            with tf1.variable_scope("m", reuse=tf1.AUTO_REUSE):
                model = modeling.BertModel(config, False, tf.constant(ids), tf.constant(mask),
                                           tf.constant(types), padding_free=padding_free,
                                           scope="bert", **model_args)
            sequence = model.get_sequence_output()
            weights = tf.cast(mask, tf.float32)[:, :, None] * tf.linspace(
                -1.0, 1.0, config.hidden_size)
            loss = tf.reduce_sum(sequence * weights) + tf.reduce_sum(model.get_pooled_output())
            variables = tf1.trainable_variables()
            grads = [tf.convert_to_tensor(g) for g in tf.gradients(loss, variables)]
            built[padding_free] = (sequence, model.get_pooled_output(), grads)
        if init_checkpoint:
            tf1.train.init_from_checkpoint(init_checkpoint, {"bert/": "m/bert/"})
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            return session.run(built[False]), session.run(built[True])


@pytest.mark.parametrize("variant", ["post_ln", "pre_ln_relative", "recompute"])
def test_real_tokens_get_the_padded_encoders_outputs_and_gradients(variant):
    overrides = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model_args = {}
    if variant == "pre_ln_relative":
        overrides = dict(overrides, max_position_embeddings=16)
    config = modeling.BertConfig(**tiny_config(vocab_size=100, **overrides))
    if variant == "pre_ln_relative":
        config.layer_norm_type = "pre"
        config.position_embedding_type = "relative_key_query"
    if variant == "recompute":
        model_args["recompute_grad"] = True
    ids, mask, types = _batch(100)
    padded, padding_free = _outputs_both_ways(config, ids, mask, types, **model_args)
    real = mask.astype(bool)
    np.testing.assert_allclose(padding_free[0][real], padded[0][real], rtol=1e-5, atol=1e-5)
    assert not padding_free[0][~real].any()  # Padding positions are zeros.
    assert padded[0][~real].any()
    np.testing.assert_allclose(padding_free[1], padded[1], rtol=1e-5, atol=1e-5)
    for free_grad, padded_grad in zip(padding_free[2], padded[2], strict=True):
        scale = max(np.abs(padded_grad).max(), 1e-3)
        np.testing.assert_allclose(free_grad / scale, padded_grad / scale, atol=2e-5)


def test_minilm_real_weights_give_the_same_real_token_states(minilm_converted):
    with open(os.path.join(minilm_converted, "bert_config.json"), encoding="utf-8") as f:
        config = modeling.BertConfig.from_dict(json.load(f))
    ids, mask, types = _batch(config.vocab_size, seq_length=24)
    padded, padding_free = _outputs_both_ways(
        config, ids, mask, types, os.path.join(minilm_converted, "bert_model.ckpt"))
    real = mask.astype(bool)
    np.testing.assert_allclose(padding_free[0][real], padded[0][real], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(padding_free[1], padded[1], rtol=1e-4, atol=1e-4)


def test_a_run_trains_and_evaluates_as_on_the_padded_graph(tmp_path, vocab_file):
    """Two runs from one starting checkpoint (dropout off): the same weights after 6 steps and
    the same eval metrics, with --padding_free on and off."""
    config_file = tmp_path / "bert_config.json"
    config_file.write_text(json.dumps(tiny_config(hidden_dropout_prob=0.0,
                                                  attention_probs_dropout_prob=0.0)))
    common = dict(task_name="tsv", text_a_column="sentence", data_dir=TOPICS,
                  bert_config_file=str(config_file), vocab_file=vocab_file)
    start = tmp_path / "start"
    driver.run_task(options("classifier", **common, output_dir=str(start),
                            do_train=True, num_train_steps=1))
    results, weights = {}, {}
    for padding_free in (False, True):
        out = tmp_path / f"padding_free_{padding_free}"
        results[padding_free] = driver.run_task(options(
            "classifier", **common, output_dir=str(out), do_train=True, do_eval=True,
            num_train_steps=6, init_checkpoint=str(start / "model.ckpt-0"),
            padding_free=padding_free))
        # The flag reached the training graph: its encoder scatters real tokens into
        # attention's padded layout only when padding-free.
        graph = (out / "graph.pbtxt").read_text()
        assert ('op: "ScatterNd"' in graph) == padding_free
        reader = tf.train.load_checkpoint(str(out / "model.ckpt-6"))
        weights[padding_free] = {name: reader.get_tensor(name)
                                 for name in reader.get_variable_to_shape_map()
                                 if not optimization.is_optimizer_state(name)}
    assert results[True]["global_step"] == results[False]["global_step"] == 6
    for key in ("eval_accuracy", "eval_loss"):
        assert results[True][key] == pytest.approx(results[False][key], rel=1e-4, abs=1e-5)
    assert weights[True].keys() == weights[False].keys()
    for name, value in weights[False].items():
        np.testing.assert_allclose(weights[True][name], value, rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    # The starting point was trained from: the runs moved the weights the same way.
    start_reader = tf.train.load_checkpoint(str(start / "model.ckpt-0"))
    moved = "bert/encoder/layer_0/attention/self/query/kernel"
    assert not np.allclose(start_reader.get_tensor(moved), weights[True][moved])


def test_fixed_shape_runs_keep_the_padded_encoder():
    def run(use_xla=False, **distribution):
        return bert_options.RunOptions(
            use_xla=use_xla, distribution=bert_options.DistributionOptions(**distribution))

    assert model_fn_parts.run_padding_free(True, run())
    assert not model_fn_parts.run_padding_free(False, run())
    assert not model_fn_parts.run_padding_free(None, run())  # SQuAD has no flag.
    assert not model_fn_parts.run_padding_free(True, run(use_xla=True))
    assert not model_fn_parts.run_padding_free(True, run(use_tpu=True))
    assert not model_fn_parts.run_padding_free(True, run(distribution_strategy="tpu"))


def test_squad_reads_the_padding_positions_states_whatever_the_encoder_says():
    """Google's span loss takes its softmax over every position, padding included: SQuAD's
    model_fn keeps the padded encoder, whose padding states differ position to position
    (padding-free ones would be zeros, so every padding logit would be the bias)."""
    config = modeling.BertConfig(**tiny_config(vocab_size=100))
    ids, mask, types = _batch(100)
    encoder = model_fn_parts.Encoder(config, padding_free=True)
    with tf.Graph().as_default():
        features = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
                    "segment_ids": tf.constant(types),
                    "unique_ids": tf.constant([[1], [2], [3], [4]], tf.int64)}
        spec = squad.model_fn_builder(encoder)(features, None, estimator_lib.ModeKeys.EVAL, {})
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            start_logits = session.run(spec.predictions["start_logits"])
    padding = start_logits[~mask.astype(bool)]
    assert np.ptp(padding) > 1e-6, padding
