"""The two objects an encoder layer's settings travel in (`bert_tf.encoder.settings`): built
from a config, refusing what the layers cannot be, and the layers they build equal to Google's
keyword form."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import modeling

tf1 = tf.compat.v1
TINY = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=24, max_position_embeddings=32)


def test_layer_config_of_a_bert_config_turns_dropout_off_unless_training():
    config = modeling.BertConfig(**TINY, hidden_act="relu", layer_norm_type="pre",
                                 layer_norm_eps=1e-6, position_embedding_type="relative_key")
    training = modeling.LayerConfig.of(config, is_training=True)
    assert (training.hidden_dropout_prob, training.attention_probs_dropout_prob) == (0.1, 0.1)
    assert training.intermediate_act_fn is tf.nn.relu
    assert training.variant == modeling.LayerVariant("pre", 1e-6, "relative_key", 32)
    assert training.attention().size_per_head == 4
    assert training.attention(cross=True).position_embedding_type == "absolute"
    evaluating = modeling.LayerConfig.of(config, is_training=False)
    assert (evaluating.hidden_dropout_prob, evaluating.attention_probs_dropout_prob) == (0, 0)
    assert not evaluating.uses_dropout


def test_bert_config_takes_its_variant_defaults_from_layer_variant():
    config, variant = modeling.BertConfig(vocab_size=10), modeling.LayerVariant()
    assert (config.layer_norm_type, config.layer_norm_eps, config.position_embedding_type) == (
        variant.layer_norm_type, variant.layer_norm_eps, variant.position_embedding_type)
    assert config.max_position_embeddings == variant.max_position_embeddings


@pytest.mark.parametrize("make, message", [
    (lambda: modeling.LayerVariant(layer_norm_type="sandwich"),
     "Unknown layer_norm_type 'sandwich'; use one of post, pre"),
    (lambda: modeling.LayerVariant(position_embedding_type="rotary"),
     "Unknown position_embedding_type 'rotary'"),
    (lambda: modeling.LayerConfig(30, 4, 8, None, 0.0, 0.0, 0.02),
     r"hidden size \(30\) is not a multiple of the number of attention heads \(4\)"),
])
def test_settings_refuse_what_the_layers_cannot_be(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_transformer_model_with_settings_objects_equals_the_layers_they_describe():
    """`transformer_model(variant=, computation=)` and `transformer_layers` with the same
    `LayerConfig` build the same variables and give the same outputs."""
    from bert_tf.encoder import transformer

    x = np.random.RandomState(0).normal(size=[2, 5, 16]).astype(np.float32)
    head_mask = np.array([[1, 0, 1, 1], [1, 1, 1, 0]], np.float32)
    variant = modeling.LayerVariant(layer_norm_type="pre")
    results = []
    for build in ("wrapper", "layers"):
        with tf.Graph().as_default():
            tf1.set_random_seed(3)
            if build == "wrapper":
                outputs = modeling.transformer_model(
                    tf.constant(x), hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=24, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, do_return_all_layers=True,
                    variant=variant, computation=modeling.Computation(head_mask=head_mask))
            else:
                layer = modeling.LayerConfig(16, 4, 24, modeling.gelu, 0.0, 0.0, 0.02, variant)
                outputs, _ = transformer.transformer_layers(
                    tf.constant(x), None, layer, 2, modeling.Computation(head_mask=head_mask))
            names = [v.op.name for v in tf1.global_variables()]
            with tf1.Session() as session:
                session.run(tf1.global_variables_initializer())
                results.append((names, session.run(outputs)))
    assert results[0][0] == results[1][0] and "LayerNorm/gamma" in results[0][0]
    for ours, theirs in zip(results[0][1], results[1][1], strict=True):
        np.testing.assert_array_equal(ours, theirs)
