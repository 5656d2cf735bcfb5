"""The last encoder layer at the positions a head reads only (`modeling.BertModel(pooled_only=True)`
or `sequence_positions=...`, `transformer_model`'s `output_positions`): what classification
and multiple choice train and evaluate with ([CLS]), and pre-training ([CLS] and the masked
positions). The outputs match the float64 numpy reference, every gradient equals the whole
encoder's, packed rows pool the same examples, and the tasks' TRAIN and EVAL graphs run the
last layer's feed-forward block on those rows only while PREDICT (exports) keeps the whole
layer for the classifiers."""

import numpy as np
import numpy_bert
import pytest
import tensorflow as tf
from finetune_helpers import tiny_config

from bert_tf import modeling
from bert_tf.tasks import classification, model_fn_parts, multiple_choice, pretraining
from bert_tf.training import estimator as estimator_lib

tf1 = tf.compat.v1

NUM_HEADS = 4
# Rows of 9, 4 and 6 real tokens and one of 1 ([CLS] alone).
LENGTHS = (9, 4, 6, 1)


def _config(**overrides):
    return modeling.BertConfig(**tiny_config(
        vocab_size=90, num_attention_heads=NUM_HEADS, intermediate_size=37,
        initializer_range=0.2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        **overrides))


def _batch(seq_length=9, seed=0):
    rng = np.random.RandomState(seed)
    mask = (np.arange(seq_length)[None, :] < np.array(LENGTHS)[:, None]).astype(np.int32)
    ids = rng.randint(1, 90, size=mask.shape).astype(np.int32) * mask
    types = (np.arange(seq_length)[None, :] >= 3).astype(np.int32) * mask
    return ids, mask, types


def _pooled_and_gradients(config, ids, mask, types, is_training=False, sequence_positions=None,
                          **model_args):
    """{shortened: (pooled [B, H], sequence output, gradients of a loss on the pooled
    output (and on the sequence output at `sequence_positions`) by variable name)} from one
    graph whose two models (the whole last layer, and the one at the positions read:
    `pooled_only`, or `sequence_positions` when given) share their variables, and the
    variables' values."""
    built = {}
    with tf.Graph().as_default():
        tf1.set_random_seed(1)
        for shortened in (False, True):
            reads = ({"pooled_only": shortened} if sequence_positions is None else
                     {"sequence_positions": sequence_positions if shortened else None})
            with tf1.variable_scope("m", reuse=tf1.AUTO_REUSE):
                model = modeling.BertModel(config, is_training, tf.constant(ids),
                                           tf.constant(mask), tf.constant(types), scope="bert",
                                           **reads, **model_args)
            pooled = model.get_pooled_output()
            sequence = model.get_sequence_output()
            if sequence_positions is not None and not shortened:
                sequence = tf.gather(sequence, sequence_positions, batch_dims=1)
            loss = tf.reduce_sum(pooled * tf.linspace(-1.0, 1.0, config.hidden_size))
            if sequence_positions is not None:
                loss += tf.reduce_sum(sequence * tf.linspace(1.0, -2.0, config.hidden_size))
            variables = tf1.trainable_variables()
            grads = tf.gradients(loss, variables)
            built[shortened] = (pooled, sequence, {
                v.name[len("m/"):-2]: tf.convert_to_tensor(g)
                for v, g in zip(variables, grads, strict=True) if g is not None})
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            weights = {v.name[len("m/"):-2]: session.run(v) for v in tf1.global_variables()}
            return session.run(built), weights


def _assert_same_gradients(ours, whole):
    """Each gradient to 1e-5 of its scale. A key bias's is 0 up to rounding (a bias added to
    every key shifts a query's scores by one constant, which softmax ignores), so it is
    checked against the largest gradient instead."""
    assert ours.keys() == whole.keys()
    largest = max(np.abs(grad).max() for grad in whole.values())
    for name, grad in whole.items():
        if name.endswith("/key/bias"):
            assert np.abs(grad).max() < 1e-4 * largest and np.abs(ours[name]).max() < 1e-4 * largest
            continue
        scale = max(np.abs(grad).max(), 1e-3)
        np.testing.assert_allclose(ours[name] / scale, grad / scale, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("variant", ["post_ln", "pre_ln", "padding_free"])
def test_the_pooled_output_matches_the_numpy_reference(variant):
    config = _config()
    model_args = {}
    if variant == "pre_ln":
        config.layer_norm_type = "pre"
    if variant == "padding_free":
        model_args["padding_free"] = True
    ids, mask, types = _batch()
    outputs, weights = _pooled_and_gradients(config, ids, mask, types, **model_args)
    reference_layers, reference_pooled = numpy_bert.bert_forward(
        weights, ids, mask, types, NUM_HEADS, layer_norm_type=config.layer_norm_type)
    pooled, sequence, _ = outputs[True]
    np.testing.assert_allclose(pooled, reference_pooled, atol=2e-5)
    # The last layer's output exists at [CLS] only, and is the reference's there.
    assert sequence.shape == (len(LENGTHS), 1, config.hidden_size)
    np.testing.assert_allclose(sequence[:, 0], reference_layers[-1][:, 0], atol=2e-5)
    assert outputs[False][1].shape == (len(LENGTHS), ids.shape[1], config.hidden_size)


@pytest.mark.parametrize("variant", ["post_ln", "padding_free", "recompute", "training"])
def test_every_gradient_equals_the_whole_encoders(variant):
    """The last layer's other rows reach no loss that reads the pooled output: dropping them
    changes no gradient (and no variable goes missing from the update)."""
    model_args = {"padding_free": variant == "padding_free",
                  "recompute_grad": variant == "recompute",
                  "is_training": variant == "training"}
    outputs, _ = _pooled_and_gradients(_config(), *_batch(), **model_args)
    assert any("layer_1/intermediate" in name for name in outputs[False][2])
    _assert_same_gradients(outputs[True][2], outputs[False][2])


def test_packed_rows_pool_each_example_as_the_whole_encoder_does():
    """Several examples a row (`position_ids`, `pooled_positions`): the last layer computes
    the K [CLS] positions of each row, and the pooled output [B * K, H] is the same."""
    ids, mask, types = _batch(seq_length=12)
    # Two rows of three and two examples (starting at 0, 4, 7 and 0, 5), padding after.
    starts = [[0, 4, 7], [0, 5, 5]]
    position_ids = np.zeros((2, 12), np.int32)
    for row, row_starts in enumerate(starts):
        bounds = sorted(set(row_starts)) + [12]
        for begin, end in zip(bounds, bounds[1:], strict=False):
            position_ids[row, begin:end] = np.arange(end - begin)
    mask = np.ones((2, 12), np.int32)
    mask[1, 10:] = 0
    model_args = dict(position_ids=position_ids, pooled_positions=np.array(starts, np.int32))
    outputs, _ = _pooled_and_gradients(_config(), ids[:2], mask, types[:2], **model_args)
    assert outputs[True][0].shape == (6, 32)
    np.testing.assert_allclose(outputs[True][0], outputs[False][0], atol=1e-5)
    _assert_same_gradients(outputs[True][2], outputs[False][2])


def test_relative_positions_keep_the_whole_last_layer():
    config = _config(max_position_embeddings=16)
    config.position_embedding_type = "relative_key"
    outputs, _ = _pooled_and_gradients(config, *_batch())
    assert outputs[True][1].shape == outputs[False][1].shape == (4, 9, 32)
    np.testing.assert_allclose(outputs[True][0], outputs[False][0], atol=1e-6)


@pytest.mark.parametrize("arguments", ["relative", "cross_attention"])
def test_output_positions_refuses_what_it_cannot_compute(arguments):
    with tf.Graph().as_default():
        hidden = tf.zeros([2, 5, 32])
        variant = modeling.LayerVariant(position_embedding_type="relative_key"
                                        if arguments == "relative" else "absolute")
        encoder_output = None if arguments == "relative" else tf.zeros([2, 3, 32])
        with pytest.raises(ValueError, match="output_positions works with self-attention"):
            modeling.transformer_model(
                hidden, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                intermediate_size=37, variant=variant, computation=modeling.Computation(
                    output_positions=tf.zeros([2, 1], tf.int32), encoder_output=encoder_output))


@pytest.mark.parametrize("variant", ["post_ln", "padding_free", "training"])
def test_masked_positions_get_the_whole_encoders_states_and_gradients(variant):
    """`sequence_positions` (pre-training's masked positions, a repeated 0 for padding
    predictions as in the records): the final states there and at [CLS], and every gradient,
    are the whole encoder's; the states match the numpy reference."""
    positions = np.array([[3, 1, 0], [2, 0, 0], [5, 4, 1], [0, 0, 0]], np.int32)
    model_args = {"padding_free": variant == "padding_free",
                  "is_training": variant == "training"}
    ids, mask, types = _batch()
    outputs, weights = _pooled_and_gradients(_config(), ids, mask, types,
                                             sequence_positions=positions, **model_args)
    assert outputs[True][1].shape == (4, 3, 32)
    np.testing.assert_allclose(outputs[True][0], outputs[False][0], atol=1e-5)
    np.testing.assert_allclose(outputs[True][1], outputs[False][1], atol=1e-5)
    _assert_same_gradients(outputs[True][2], outputs[False][2])
    reference_layers, reference_pooled = numpy_bert.bert_forward(weights, ids, mask, types,
                                                                 NUM_HEADS)
    np.testing.assert_allclose(outputs[True][1], np.take_along_axis(
        reference_layers[-1], positions[:, :, None], axis=1), atol=2e-5)
    np.testing.assert_allclose(outputs[True][0], reference_pooled, atol=2e-5)


def _last_feed_forward_rows(graph):
    """The row count (a scalar Tensor) of the last layer's feed-forward block in `graph` (the
    2-layer config's)."""
    (op,) = [op for op in graph.get_operations()
             if op.name.endswith("layer_1/intermediate/dense/BiasAdd")]
    return tf.shape(op.outputs[0])[0]


def _feed_forward_rows(model_fn, features, mode):
    """How many rows the last layer's feed-forward block computes in `model_fn`'s graph."""
    with tf.Graph().as_default() as graph:
        tf1.train.get_or_create_global_step()
        model_fn({key: tf.constant(value) for key, value in features.items()}, None, mode, {})
        rows = _last_feed_forward_rows(graph)
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            return session.run(rows)


@pytest.mark.parametrize("mode", [estimator_lib.ModeKeys.TRAIN, estimator_lib.ModeKeys.EVAL,
                                  estimator_lib.ModeKeys.PREDICT])
@pytest.mark.parametrize("task", ["classification", "multiple_choice"])
def test_tasks_that_read_the_pooled_output_train_and_evaluate_on_cls_only(task, mode):
    ids, mask, types = _batch()
    encoder = model_fn_parts.Encoder(_config())
    if task == "classification":
        model_fn = classification.model_fn_builder(encoder, num_labels=3)
        features = {"input_ids": ids, "input_mask": mask, "segment_ids": types}
        sequences = len(LENGTHS)
    else:
        model_fn = multiple_choice.model_fn_builder(encoder, num_choices=2)
        # Two questions of two choices: each row holds both choices' 9 tokens.
        features = {key: value.reshape(2, 18) for key, value in
                    (("input_ids", ids), ("input_mask", mask), ("segment_ids", types))}
        sequences = 4
    features.update(label_ids=np.zeros((features["input_ids"].shape[0], 1), np.int32),
                    is_real_example=np.ones((features["input_ids"].shape[0], 1), np.int32))
    rows = _feed_forward_rows(model_fn, features, mode)
    # PREDICT outside Estimator.predict builds the exports' graph: the whole last layer, as
    # serving runtimes fuse it.
    assert rows == (sequences * ids.shape[1] if mode == estimator_lib.ModeKeys.PREDICT
                    else sequences)


def test_the_estimators_prediction_runs_the_last_layer_on_cls_only(tmp_path):
    """`Estimator.predict` builds a graph only it runs: the classifier's last layer computes
    [CLS] alone there, and its probabilities are the export graph's (the whole layer, above)
    from the same weights."""
    ids, mask, types = _batch()
    features = {"input_ids": ids, "input_mask": mask, "segment_ids": types,
                "label_ids": np.zeros((len(LENGTHS), 1), np.int32),
                "is_real_example": np.ones((len(LENGTHS), 1), np.int32)}
    encoder = model_fn_parts.Encoder(_config())
    model_fn = classification.model_fn_builder(encoder, num_labels=3)

    def model_fn_with_rows(features, labels, mode, params, purpose):
        spec = model_fn(features, labels, mode, params, purpose)
        rows = tf.fill([tf.shape(features["input_ids"])[0]],
                       _last_feed_forward_rows(tf1.get_default_graph()))
        return spec._replace(predictions={**spec.predictions, "rows": rows})

    def input_fn(params):
        return tf.data.Dataset.from_tensor_slices(features).batch(params["batch_size"])

    # The weights of a checkpoint, which the export graph then reads too.
    with tf.Graph().as_default():
        tf1.train.get_or_create_global_step()
        model_fn({key: tf.constant(value) for key, value in features.items()}, None,
                 estimator_lib.ModeKeys.PREDICT, {})
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            checkpoint = tf1.train.Saver().save(session, str(tmp_path / "model.ckpt"))
            (probabilities_op,) = [op for op in session.graph.get_operations()
                                   if op.type == "Softmax" and "layer" not in op.name]
            whole_layer = session.run(probabilities_op.outputs[0])
    estimator = estimator_lib.Estimator(model_fn_with_rows, str(tmp_path / "predict"),
                                        predict_batch_size=len(LENGTHS))
    predictions = list(estimator.predict(input_fn, checkpoint_path=checkpoint))
    assert [p["rows"] for p in predictions] == [len(LENGTHS)] * len(LENGTHS)
    np.testing.assert_allclose([p["probabilities"] for p in predictions], whole_layer,
                               atol=1e-6)


@pytest.mark.parametrize("mode", [estimator_lib.ModeKeys.TRAIN, estimator_lib.ModeKeys.EVAL])
def test_pretraining_computes_the_last_layer_at_cls_and_the_masked_positions(mode):
    ids, mask, types = _batch()
    positions = np.array([[3, 1, 0], [2, 0, 0], [5, 4, 1], [0, 0, 0]], np.int32)
    features = {"input_ids": ids, "input_mask": mask, "segment_ids": types,
                "masked_lm_positions": positions, "masked_lm_ids": ids[:, :3],
                "masked_lm_weights": np.ones((4, 3), np.float32),
                "next_sentence_labels": np.zeros((4, 1), np.int32)}
    model_fn = pretraining.model_fn_builder(model_fn_parts.Encoder(_config()))
    assert _feed_forward_rows(model_fn, features, mode) == 4 * (1 + 3)
