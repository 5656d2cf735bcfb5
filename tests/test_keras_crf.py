"""bert_tf.keras.CRF: against pytorch-crf, after BertEncoderLayer in a Keras model trained with a
GradientTape, model.save / load_model, and run_ner.py's checkpoint names."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import tiny_config

from bert_tf import keras as bert_keras
from bert_tf.errors import BertTfError

torch = pytest.importorskip("torch")
torchcrf = pytest.importorskip("torchcrf")

NUM_TAGS, SEQ = 5, 8


def _random(seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(4, SEQ, NUM_TAGS)).astype(np.float32)
    tags = rng.integers(0, NUM_TAGS, (4, SEQ))
    mask = (rng.random((4, SEQ)) < 0.7).astype(np.int32)
    mask[:, 0] = 1
    params = {name: rng.normal(size=shape).astype(np.float32) for name, shape in (
        ("transitions", (NUM_TAGS, NUM_TAGS)), ("start_transitions", (NUM_TAGS,)),
        ("end_transitions", (NUM_TAGS,)))}
    return logits, tags, mask, params


def test_layer_equals_pytorch_crf():
    logits, tags, mask, params = _random(0)
    layer = bert_keras.CRF(NUM_TAGS)
    reference = torchcrf.CRF(NUM_TAGS, batch_first=True)
    with torch.no_grad():
        for name, value in params.items():
            getattr(layer, name).assign(value)
            getattr(reference, name).copy_(torch.tensor(value))
    likelihood = layer.log_likelihood(logits, tags, mask).numpy()
    loss = float(layer.loss(logits, tags, mask))
    predicted = layer(logits, mask).numpy()
    for row in range(len(logits)):
        on = np.nonzero(mask[row])[0]
        expected = reference(torch.tensor(logits[row, on])[None],
                             torch.tensor(tags[row, on])[None], reduction="sum").item()
        assert likelihood[row] == pytest.approx(expected, abs=1e-4)
        assert list(predicted[row, on]) == reference.decode(
            torch.tensor(logits[row, on])[None])[0]
    assert loss == pytest.approx(-likelihood.sum() / mask.sum(), rel=1e-5)


def _tagger(bert_config):
    """BertEncoderLayer, a Dense tag layer and the CRF, as run_ner.py --use_crf's model."""
    inputs = {key: keras.Input([SEQ], dtype="int32", name=key)
              for key in bert_keras.INPUT_KEYS}
    label_mask = keras.Input([SEQ], dtype="int32", name="label_mask")
    encoder = bert_keras.BertEncoderLayer(bert_config, name="bert_encoder")
    dense = keras.layers.Dense(NUM_TAGS, name="tags")
    crf = bert_keras.CRF(NUM_TAGS, name="crf")
    logits = dense(encoder(inputs)["sequence_output"])
    return keras.Model({**inputs, "label_mask": label_mask},
                       {"logits": logits, "tags": crf(logits, label_mask)}), crf


def test_after_bert_encoder_trains_saves_and_loads(tmp_path):
    keras.utils.set_random_seed(1)
    model, crf = _tagger(tiny_config(vocab_size=40, max_position_embeddings=16,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    rng = np.random.default_rng(1)
    ids = rng.integers(5, 40, (6, SEQ)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[:, 0] = mask[:, -1] = 0  # [CLS] and [SEP] are not in the chain.
    inputs = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
              "input_type_ids": np.zeros_like(ids), "label_mask": mask}
    gold = (ids % NUM_TAGS).astype(np.int32)  # A tag each id decides.
    optimizer = keras.optimizers.Adam(1e-2)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = crf.loss(model(inputs)["logits"], gold, mask)
        weights = model.trainable_weights
        optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights, strict=True))
        return loss

    losses = [float(train_step()) for _ in range(30)]
    assert losses[-1] < losses[0] / 2
    assert np.abs(crf.transitions.numpy()).max() > 1e-3
    tags = model(inputs)["tags"].numpy()
    assert tags.dtype == np.int32 and not np.any(tags[mask == 0])
    assert np.mean(tags[mask == 1] == gold[mask == 1]) > 0.9

    path = str(tmp_path / "tagger.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(loaded(inputs)["tags"].numpy(), tags)

    prefix = crf.save_checkpoint(str(tmp_path / "crf" / "model.ckpt"))
    assert {name for name, _ in tf.train.list_variables(prefix)} == {
        "cls/ner/crf/transitions", "cls/ner/crf/start_transitions",
        "cls/ner/crf/end_transitions"}
    fresh = bert_keras.CRF(NUM_TAGS)
    fresh.load_checkpoint(prefix)
    np.testing.assert_array_equal(fresh.transitions.numpy(), crf.transitions.numpy())
    with pytest.raises(BertTfError, match="cls/ner/crf/transitions"):
        bert_keras.CRF(NUM_TAGS + 1).load_checkpoint(prefix)
