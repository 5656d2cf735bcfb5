"""bert_tf.tf2: the encoder in TensorFlow 2 code, against graph-mode BertModel on the real MiniLM
weights (outputs, gradients, bf16), its names and checkpoints both ways (run_classifier.py's in,
its --init_checkpoint out), the config variants, tf.function / XLA / strategies / SavedModel,
dropout, and its errors."""

import os

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import TOPICS, assert_ok, run_script, tiny_config

from bert_tf import modeling, tf2
from bert_tf.errors import BertTfError

tf1 = tf.compat.v1
REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                         "minilm_reference.npz")
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def inputs():
    """Real word pieces with padding and sentence pairs: [10, 21] ids, mask, segment ids."""
    reference = np.load(REFERENCE)
    return reference["input_ids"], reference["input_mask"], reference["segment_ids"]


def _projection(width):
    """A fixed [H] vector: the loss is pooled_output . it, summed over the batch."""
    return np.random.RandomState(0).normal(size=[width]).astype(np.float32)


def graph_mode(config, prefix, inputs, compute_dtype=tf.float32, gradients=False):
    """Graph-mode BertModel restored from `prefix`: its variable names, sequence and pooled
    outputs (float32 numpy) and, with `gradients`, tf.gradients of the projection loss by name."""
    with tf.Graph().as_default():
        ids, mask, segments = (tf.constant(x) for x in inputs)
        model = modeling.BertModel(config, is_training=False, input_ids=ids, input_mask=mask,
                                   token_type_ids=segments, compute_dtype=compute_dtype)
        variables = tf1.trainable_variables()
        _, missing = modeling.init_from_checkpoint(prefix, log=False)
        assert missing == []
        fetches = [tf.cast(model.get_sequence_output(), tf.float32),
                   tf.cast(model.get_pooled_output(), tf.float32)]
        if gradients:
            loss = tf.reduce_sum(fetches[1] * _projection(config.hidden_size))
            # Dense: the embedding tables' gradients are IndexedSlices (a gather).
            fetches.append([tf.convert_to_tensor(g) for g in tf.gradients(loss, variables)])
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            values = sess.run(fetches)
    names = [v.name for v in variables]
    grads = dict(zip(names, values[2], strict=True)) if gradients else None
    return names, values[0], values[1], grads


@pytest.fixture(scope="module")
def minilm(minilm_converted):
    config = modeling.BertConfig.from_json_file(os.path.join(minilm_converted,
                                                             "bert_config.json"))
    return config, os.path.join(minilm_converted, "bert_model.ckpt")


@pytest.fixture(scope="module")
def graph_reference(minilm, inputs):
    return graph_mode(*minilm, inputs, gradients=True)


@pytest.fixture(scope="module")
def encoder(minilm):
    config, prefix = minilm
    encoder = tf2.BertEncoder(config)
    assert encoder.load_checkpoint(prefix) == []
    return encoder


def _max_difference(a, b, mask=None):
    """max |a - b|; with `mask` [B, S] only over real tokens of [B, S, ...] arrays (a padded
    position's output is meaningless and float32-fragile: see test_minilm_parity.py)."""
    difference = np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))
    if mask is not None:
        difference = difference[np.asarray(mask).astype(bool)]
    return float(np.max(difference))


def test_variable_names_are_graph_modes_one_for_one(encoder, graph_reference):
    names = graph_reference[0]
    assert [v.name for v in encoder.trainable_variables] == names
    assert len(names) == 5 + 16 * 6 + 2  # embeddings, 6 layers, pooler


def test_eager_and_xla_outputs_equal_graph_mode(encoder, graph_reference, inputs):
    _, sequence, pooled, _ = graph_reference
    eager = encoder(*inputs)
    assert _max_difference(eager["sequence_output"], sequence, inputs[1]) < TOLERANCE
    assert _max_difference(eager["pooled_output"], pooled) < TOLERANCE
    assert len(eager["encoder_outputs"]) == 6
    assert _max_difference(eager["encoder_outputs"][-1], eager["sequence_output"]) == 0.0

    run = tf.function(lambda *x: encoder(*x), jit_compile=True)
    compiled = run(*inputs)
    assert _max_difference(compiled["sequence_output"], sequence, inputs[1]) < TOLERANCE
    assert _max_difference(compiled["pooled_output"], pooled) < TOLERANCE
    # A retrace (another shape) reuses the same variables: the first rows agree.
    shorter = run(*(x[:4, :12] for x in inputs))
    assert _max_difference(shorter["pooled_output"][:4],
                           encoder(*(x[:4, :12] for x in inputs))["pooled_output"]) < TOLERANCE
    assert len(encoder.trainable_variables) == len(graph_reference[0])


def _tape_gradients(encoder, inputs):
    """Gradients of the projection loss by variable, as a TF2 training step takes them."""
    projection = _projection(encoder.config.hidden_size)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(encoder(*inputs)["pooled_output"] * projection)
    return tape.gradient(loss, encoder.trainable_variables)


def test_gradients_equal_graph_mode_for_every_variable(encoder, graph_reference, inputs):
    names, _, _, graph_gradients = graph_reference
    # A tf.function step runs the same graph optimizations as the Session: within 1e-5 outright
    # (the same kernels: measured 0.0).
    in_function = tf.function(lambda *x: _tape_gradients(encoder, x))(*inputs)
    eager = _tape_gradients(encoder, inputs)
    assert len(in_function) == len(eager) == len(names)
    for name, compiled, gradient in zip(names, in_function, eager, strict=True):
        assert compiled is not None and gradient is not None, name
        expected = graph_gradients[name]
        assert _max_difference(tf.convert_to_tensor(compiled), expected) < TOLERANCE, name
        # Eagerly every op runs unfused (no MatMul + BiasAdd fusion), so float32 rounds
        # differently along the way: within 1e-5 of the gradient's size where it exceeds 1
        # (the pooler's reach ~5 and differ by ~1.5e-5, 3e-6 of their size).
        scale = max(1.0, float(np.max(np.abs(expected))))
        assert _max_difference(tf.convert_to_tensor(gradient), expected) < TOLERANCE * scale, \
            name


def test_bf16_forward_stays_within_graph_modes(minilm, encoder, inputs):
    config, prefix = minilm
    _, sequence, pooled, _ = graph_mode(config, prefix, inputs, compute_dtype=tf.bfloat16)
    bf16 = tf2.BertEncoder(config, compute_dtype=tf.bfloat16)
    bf16.load_checkpoint(prefix)
    outputs = bf16(*inputs)
    assert outputs["pooled_output"].dtype == tf.bfloat16
    assert all(v.dtype == tf.float32 for v in bf16.trainable_variables)
    # Inside tf.function the graph is optimized as the Session's: the same bf16 result
    # (measured 0.0 apart).
    in_function = tf.function(lambda *x: bf16(*x))(*inputs)
    assert _max_difference(in_function["pooled_output"], pooled) < TOLERANCE
    assert _max_difference(in_function["sequence_output"], sequence, inputs[1]) < TOLERANCE
    fp32 = encoder(*inputs)
    # Eagerly (unfused kernels) bf16 moves the outputs away from float32 no further than in
    # graph mode (measured: pooled 2.0e-3 graph, 2.4e-3 eager: bf16 rounding differs).
    for key, graph_bf16, mask in (("pooled_output", pooled, None),
                                  ("sequence_output", sequence, inputs[1])):
        graph_error = _max_difference(graph_bf16, fp32[key], mask)
        eager_error = _max_difference(outputs[key], fp32[key], mask)
        assert 0 < graph_error < 0.1
        assert eager_error <= 2 * graph_error, key


@pytest.mark.parametrize("variant", [
    dict(position_embedding_type="relative_key_query", layer_norm_type="pre"),
    dict(position_embedding_type="relative_key", hidden_act="gelu_new", layer_norm_eps=1e-6),
])
def test_config_variants_match_graph_mode(tmp_path, variant, inputs):
    config = modeling.BertConfig.from_dict(tiny_config(max_position_embeddings=32))
    for key, value in variant.items():
        setattr(config, key, value)
    encoder = tf2.BertEncoder(config)
    prefix = encoder.save_checkpoint(str(tmp_path / "bert_model.ckpt"))
    names, sequence, pooled, _ = graph_mode(config, prefix, inputs)
    assert [v.name for v in encoder.trainable_variables] == names
    assert any("distance_embedding" in name for name in names)
    outputs = encoder(*inputs)
    assert _max_difference(outputs["sequence_output"], sequence) < TOLERANCE
    assert _max_difference(outputs["pooled_output"], pooled) < TOLERANCE


def test_dropout_only_when_training(inputs):
    encoder = tf2.BertEncoder(modeling.BertConfig(**tiny_config()))
    quiet = [encoder(*inputs)["pooled_output"].numpy() for _ in range(2)]
    assert _max_difference(*quiet) == 0.0
    noisy = [encoder(*inputs, training=True)["pooled_output"].numpy() for _ in range(2)]
    assert _max_difference(*noisy) > 1e-3
    assert _max_difference(noisy[0], quiet[0]) > 1e-3
    with pytest.raises(BertTfError, match="training must be True or False"):
        encoder(*inputs, training=tf.constant(True))


def test_transformer_encoder_matches_transformer_model():
    settings = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64)
    module = tf2.TransformerEncoder(encoder_width=16, layer_norm_type="pre", **settings)
    x = np.random.RandomState(1).normal(size=[2, 5, 32]).astype(np.float32)
    memory = np.random.RandomState(2).normal(size=[2, 3, 16]).astype(np.float32)
    mask = np.ones([2, 5, 5], np.float32)
    mask[1, :, 3:] = 0
    outputs = module(x, mask, encoder_output=memory)
    values = [v.numpy() for v in module.trainable_variables]
    with tf.Graph().as_default():
        expected = modeling.transformer_model(
            tf.constant(x), tf.constant(mask), hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, do_return_all_layers=True,
            variant=modeling.LayerVariant(layer_norm_type="pre"),
            computation=modeling.Computation(encoder_output=tf.constant(memory)), **settings)
        variables = tf1.trainable_variables()
        assert [v.name for v in variables] == [v.name for v in module.trainable_variables]
        assign = [v.assign(value) for v, value in zip(variables, values, strict=True)]
        with tf1.Session() as sess:
            sess.run(assign)
            expected = sess.run(expected)
    assert len(outputs) == 2
    for got, want in zip(outputs, expected, strict=True):
        assert _max_difference(got, want) < TOLERANCE
    with pytest.raises(BertTfError, match="encoder_width"):
        module(x, mask)


def test_strategy_checkpoint_and_saved_model(tmp_path, inputs):
    config = modeling.BertConfig(**tiny_config())
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        encoder = tf2.BertEncoder(config)
        optimizer = tf.keras.optimizers.SGD(0.1)
    before = encoder(*inputs)["pooled_output"].numpy()

    @tf.function
    def step(ids, mask, segments):
        def replica_step(ids, mask, segments):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(encoder(ids, mask, segments,
                                             training=True)["pooled_output"] ** 2)
            optimizer.apply_gradients(zip(tape.gradient(loss, encoder.trainable_variables),
                                          encoder.trainable_variables, strict=True))
            return loss
        return strategy.run(replica_step, (ids, mask, segments))

    step(*inputs)
    after = encoder(*inputs)["pooled_output"].numpy()
    assert _max_difference(before, after) > 1e-4

    saved = tf.train.Checkpoint(encoder=encoder).save(str(tmp_path / "tf2" / "ckpt"))
    other = tf2.BertEncoder(config)
    tf.train.Checkpoint(encoder=other).restore(saved).assert_existing_objects_matched()
    assert _max_difference(other(*inputs)["pooled_output"], after) == 0.0

    other.serve = tf.function(
        lambda ids, mask, segments: other(ids, mask, segments)["pooled_output"],
        input_signature=[tf.TensorSpec([None, None], tf.int32)] * 3)
    tf.saved_model.save(other, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    assert _max_difference(loaded.serve(*inputs), after) < TOLERANCE


def test_run_classifier_checkpoint_loads_with_nothing_missing(minilm, minilm_topics_classifier):
    encoder = tf2.BertEncoder(minilm[0])
    assert encoder.load_checkpoint(minilm_topics_classifier.output_dir) == []
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(
        minilm_topics_classifier.output_dir))
    name = "bert/encoder/layer_5/output/dense/kernel"
    assert _max_difference(encoder.variables_by_name[name], reader.get_tensor(name)) == 0.0


def test_saved_checkpoint_starts_run_classifier(tmp_path, minilm_converted, encoder):
    prefix = encoder.save_checkpoint(str(tmp_path / "saved" / "bert_model.ckpt"))
    original = tf.train.load_checkpoint(os.path.join(minilm_converted, "bert_model.ckpt"))
    saved = tf.train.load_checkpoint(prefix)
    assert sorted(saved.get_variable_to_shape_map()) == sorted(
        original.get_variable_to_shape_map())
    name = "bert/encoder/layer_3/attention/self/key/kernel"
    assert _max_difference(saved.get_tensor(name), original.get_tensor(name)) == 0.0
    result = run_script(
        "run_classifier.py", "--task_name=tsv", "--text_a_column=sentence",
        f"--data_dir={TOPICS}", f"--bert_config_file={minilm_converted}/bert_config.json",
        f"--vocab_file={minilm_converted}/vocab.txt", f"--init_checkpoint={prefix}",
        f"--output_dir={tmp_path / 'out'}", "--do_train", "--num_train_steps=1",
        "--max_seq_length=16", "--train_batch_size=8")
    assert_ok(result)
    restores = [line for line in result.stderr.splitlines() if "Initialized " in line]
    assert len(restores) == 1, restores
    # Every encoder variable; only the classifier's head starts random.
    assert f"Initialized 103 of 105 variables from {prefix}" in restores[0]
    assert "the task head: output_weights, output_bias" in restores[0]


def test_checkpoint_for_another_config_names_file_and_variable(minilm):
    _, prefix = minilm
    encoder = tf2.BertEncoder(modeling.BertConfig(**tiny_config()))
    with pytest.raises(BertTfError) as error:
        encoder.load_checkpoint(prefix)
    message = str(error.value)
    assert prefix in message and "bert/embeddings/word_embeddings" in message
    assert "[30522, 384]" in message and "[30522, 32]" in message

    relative = minilm[0].to_dict()
    relative["position_embedding_type"] = "relative_key"
    encoder = tf2.BertEncoder(relative)
    with pytest.raises(BertTfError) as error:
        encoder.load_checkpoint(prefix)
    assert prefix in str(error.value)
    assert "bert/encoder/layer_0/attention/self/distance_embedding" in str(error.value)
    missing = encoder.load_checkpoint(prefix, allow_missing=True)
    assert len(missing) == 6 and all(name.endswith("distance_embedding") for name in missing)


def test_missing_checkpoint_and_bad_config_files(tmp_path):
    with pytest.raises(BertTfError, match="nowhere/bert_model.ckpt"):
        tf2.BertEncoder(modeling.BertConfig(**tiny_config())).load_checkpoint(
            str(tmp_path / "nowhere" / "bert_model.ckpt"))
    with pytest.raises(BertTfError, match="missing.json"):
        tf2.BertEncoder(str(tmp_path / "missing.json"))


def test_builders_in_eager_code_name_bert_tf_tf2(inputs):
    config = modeling.BertConfig(**tiny_config())
    with pytest.raises(BertTfError, match="bert_tf.tf2"):
        modeling.BertModel(config, is_training=False, input_ids=tf.constant(inputs[0]))
    # In a tf.function autograph re-raises it as its StagingError, with the same message.
    with pytest.raises(Exception, match="bert_tf.tf2"):
        tf.function(lambda x: modeling.transformer_model(
            x, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=8))(tf.zeros([1, 2, 32]))
    with tf.Graph().as_default():  # Graph mode is unchanged.
        modeling.BertModel(config, is_training=False, input_ids=tf.constant(inputs[0]))
        assert len(tf1.trainable_variables()) == 5 + 16 * 2 + 2
