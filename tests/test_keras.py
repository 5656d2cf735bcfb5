"""bert_tf.keras.BertEncoderLayer: a Keras 3 functional classifier fine-tuned with model.fit from
the real MiniLM weights on data/topics against run_classifier.py's dev accuracy on the same data,
model.save / load_model, its names against graph mode's, checkpoints, and a missing input key."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import TOPICS

from bert_tf import keras as bert_keras
from bert_tf import tf2, tokenization
from bert_tf.data import classification_features, processors
from bert_tf.errors import BertTfError

# conftest's minilm_topics_classifier (run_classifier.py): the same sizes and steps.
MAX_SEQ_LENGTH, BATCH_SIZE, STEPS, LEARNING_RATE = 20, 8, 12, 1e-4


def _features(examples, labels, tokenizer):
    features = classification_features.convert_examples_to_features(examples, labels,
                                                                    MAX_SEQ_LENGTH, tokenizer)
    inputs = {"input_word_ids": np.array([f.input_ids for f in features], np.int32),
              "input_mask": np.array([f.input_mask for f in features], np.int32),
              "input_type_ids": np.array([f.segment_ids for f in features], np.int32)}
    return inputs, np.array([f.label_id for f in features], np.int32)


@pytest.fixture(scope="module")
def topics(minilm_converted):
    processor = processors.TsvProcessor(text_a_column="sentence", data_dir=TOPICS)
    tokenizer = tokenization.FullTokenizer(os.path.join(minilm_converted, "vocab.txt"))
    labels = processor.get_labels()
    return (_features(processor.get_train_examples(TOPICS), labels, tokenizer),
            _features(processor.get_dev_examples(TOPICS), labels, tokenizer), len(labels))


def classifier(bert_config, num_labels):
    """BertEncoderLayer + dropout + Dense on the pooled output, as run_classifier.py's head."""
    encoder = bert_keras.BertEncoderLayer(bert_config, name="bert_encoder")
    inputs = {key: keras.Input([MAX_SEQ_LENGTH], dtype="int32", name=key)
              for key in bert_keras.INPUT_KEYS}
    pooled = keras.layers.Dropout(0.1)(encoder(inputs)["pooled_output"])
    logits = keras.layers.Dense(
        num_labels, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02))(pooled)
    return keras.Model(inputs, logits), encoder


@pytest.fixture(scope="module")
def trained(minilm_converted, topics):
    (train_x, train_y), _, num_labels = topics
    keras.utils.set_random_seed(1)
    model, encoder = classifier(os.path.join(minilm_converted, "bert_config.json"), num_labels)
    assert encoder.load_checkpoint(os.path.join(minilm_converted, "bert_model.ckpt")) == []
    start = {name: w.numpy().copy() for name, w in encoder.variables_by_name.items()}
    model.compile(
        optimizer=keras.optimizers.AdamW(
            keras.optimizers.schedules.PolynomialDecay(LEARNING_RATE, STEPS, 0.0),
            weight_decay=0.01, epsilon=1e-6),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"])
    history = model.fit(train_x, train_y, batch_size=BATCH_SIZE, steps_per_epoch=STEPS,
                        epochs=1, shuffle=True, verbose=0)
    return model, encoder, start, history


def test_fit_reaches_run_classifiers_dev_accuracy(trained, topics, minilm_topics_classifier):
    model, encoder, start, history = trained
    _, (dev_x, dev_y), _ = topics
    logits = model.predict(dev_x, batch_size=40, verbose=0)
    accuracy = float(np.mean(np.argmax(logits, axis=-1) == dev_y))
    expected = minilm_topics_classifier.results["eval_accuracy"]
    assert len(dev_y) == 80
    assert accuracy >= expected - 0.05, (accuracy, expected)
    name = "bert/encoder/layer_5/output/dense/kernel"
    assert np.abs(encoder.variables_by_name[name].numpy() - start[name]).max() > 0
    assert len(history.history["loss"]) == 1


def test_save_and_load_model_give_identical_outputs(trained, topics, tmp_path):
    model, _, _, _ = trained
    _, (dev_x, _), _ = topics
    path = str(tmp_path / "classifier.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    for saved, restored in zip(model.weights, loaded.weights, strict=True):
        assert saved.path == restored.path
        assert np.array_equal(saved.numpy(), restored.numpy()), saved.path
    # Identical outputs, bit for bit, called the same way. (A predict function that was traced
    # at another batch size first runs a graph with a dynamic batch dimension, whose kernels
    # round differently: up to 2e-7 apart, with or without a save; hence the fresh trace.)
    np.testing.assert_array_equal(loaded(dev_x, training=False), model(dev_x, training=False))
    model.make_predict_function(force=True)
    np.testing.assert_array_equal(loaded.predict(dev_x, verbose=0),
                                  model.predict(dev_x, verbose=0))
    assert isinstance(loaded.get_layer("bert_encoder"), bert_keras.BertEncoderLayer)


def test_names_map_to_graph_modes_and_checkpoints_round_trip(trained, minilm_converted,
                                                             tmp_path):
    _, encoder, _, _ = trained
    module = tf2.BertEncoder(os.path.join(minilm_converted, "bert_config.json"))
    google = [v.name[:-len(":0")] for v in module.trainable_variables]
    assert list(encoder.variables_by_name) == google
    assert [w.name for w in encoder.trainable_weights] == [bert_keras.keras_name(n)
                                                           for n in google]
    assert all("/" not in w.name for w in encoder.trainable_weights)
    prefix = encoder.save_checkpoint(str(tmp_path / "bert_model.ckpt"))
    assert module.load_checkpoint(prefix) == []
    ids = np.array([[101, 7592, 2088, 102]], np.int32)
    inputs = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
              "input_type_ids": np.zeros_like(ids)}
    np.testing.assert_allclose(encoder(inputs)["pooled_output"],
                               module(ids, inputs["input_mask"])["pooled_output"], atol=1e-6)


def test_missing_input_key_is_named(trained):
    _, encoder, _, _ = trained
    ids = tf.constant([[101, 102]])
    with pytest.raises(BertTfError, match="'input_type_ids'"):
        encoder({"input_word_ids": ids, "input_mask": tf.ones_like(ids)})
