"""Cross-attention (`transformer_model(encoder_output=...)`) against transformers.

tests/fixtures/cross_attention_reference.npz holds a tiny transformers 4.57
`BertModel` decoder (`is_decoder=True`, `add_cross_attention=True`) with random
weights, its inputs and its float64 outputs, made by
tests/fixtures/make_cross_attention_reference.py. Unlike tests/numpy_bert.py
(written alongside the implementation), it checks our assumptions against
transformers': the per-layer head mask applied to the cross-attention too, the
encoder padding mask, the sub-layer order and the variable layout.

transformers builds the decoder's self-attention mask itself (causal times
padding); `transformer_model` takes the [B, S, S] mask explicitly, so the test
passes the same causal-times-padding mask. bert_tf has no decoder `BertModel`:
the graph here is our `embedding_lookup` + `embedding_postprocessor` +
`transformer_model`, as a user would build it, under transformers' `BertModel`
weight layout (no pooler).
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import modeling

tf1 = tf.compat.v1
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                       "cross_attention_reference.npz")
TOLERANCE = 1e-5  # float32 graph against a float64 reference; measured max 1.4e-6.
NUM_HEADS = 4

# transformers name -> (bert_tf variable name, transpose). Linear weights are
# [out, in] in PyTorch, kernels [in, out] here.
EMBEDDING_NAMES = {
    "embeddings.word_embeddings.weight": ("bert/embeddings/word_embeddings", False),
    "embeddings.position_embeddings.weight": ("bert/embeddings/position_embeddings", False),
    "embeddings.token_type_embeddings.weight": ("bert/embeddings/token_type_embeddings", False),
    "embeddings.LayerNorm.weight": ("bert/embeddings/LayerNorm/gamma", False),
    "embeddings.LayerNorm.bias": ("bert/embeddings/LayerNorm/beta", False),
}
# Per layer: transformers suffix -> bert_tf suffix (under `encoder.layer.{i}.` and
# `bert/encoder/layer_{i}/`).
LAYER_NAMES = {}
for _hf, _ours in (("attention", "attention"), ("crossattention", "crossattention")):
    for _dense in ("self.query", "self.key", "self.value", "output.dense"):
        LAYER_NAMES[f"{_hf}.{_dense}.weight"] = (f"{_ours}/{_dense.replace('.', '/')}/kernel",
                                                 True)
        LAYER_NAMES[f"{_hf}.{_dense}.bias"] = (f"{_ours}/{_dense.replace('.', '/')}/bias", False)
    LAYER_NAMES[f"{_hf}.output.LayerNorm.weight"] = (f"{_ours}/output/LayerNorm/gamma", False)
    LAYER_NAMES[f"{_hf}.output.LayerNorm.bias"] = (f"{_ours}/output/LayerNorm/beta", False)
LAYER_NAMES.update({
    "intermediate.dense.weight": ("intermediate/dense/kernel", True),
    "intermediate.dense.bias": ("intermediate/dense/bias", False),
    "output.dense.weight": ("output/dense/kernel", True),
    "output.dense.bias": ("output/dense/bias", False),
    "output.LayerNorm.weight": ("output/LayerNorm/gamma", False),
    "output.LayerNorm.bias": ("output/LayerNorm/beta", False),
})


def _ours_name(hf_name):
    if hf_name in EMBEDDING_NAMES:
        return EMBEDDING_NAMES[hf_name]
    _, _, layer, suffix = hf_name.split(".", 3)  # encoder.layer.{i}.{suffix}
    name, transpose = LAYER_NAMES[suffix]
    return f"bert/encoder/layer_{layer}/{name}", transpose


@pytest.fixture(scope="module")
def ref():
    return dict(np.load(FIXTURE))


def _weights(ref):
    """bert_tf variable name -> value, from the fixture's transformers weights."""
    weights = {}
    for key, value in ref.items():
        if key.startswith("weight/"):
            name, transpose = _ours_name(key[len("weight/"):])
            weights[name] = value.T if transpose else value
    return weights


def _run_decoder(ref, encoder_attention_mask, head_mask=None):
    """Builds our decoder graph, loads the fixture weights by name; returns
    (embedding output, layer outputs, self-attention probs, cross-attention softmax)."""
    ids, mask = ref["input_ids"], ref["attention_mask"]
    batch, seq = ids.shape
    enc_seq = ref["encoder_hidden_states"].shape[1]
    hidden = ref["embedding_output"].shape[-1]
    weights = _weights(ref)
    causal = np.tril(np.ones((seq, seq), np.float32))
    self_mask = causal[None] * mask[:, None, :].astype(np.float32)  # [B, S, S]
    cross_mask = np.broadcast_to(encoder_attention_mask[:, None, :].astype(np.float32),
                                 (batch, seq, enc_seq))  # [B, S, T]
    with tf.Graph().as_default() as graph:
        with tf1.variable_scope("bert"):
            with tf1.variable_scope("embeddings"):
                vocab_size = weights["bert/embeddings/word_embeddings"].shape[0]
                embedded, _ = modeling.embedding_lookup(tf.constant(ids), vocab_size=vocab_size,
                                                        embedding_size=hidden)
                embedded = modeling.embedding_postprocessor(
                    embedded, use_token_type=True,
                    token_type_ids=tf.constant(ref["token_type_ids"]), token_type_vocab_size=2,
                    max_position_embeddings=16, dropout_prob=0.0)
            with tf1.variable_scope("encoder"):
                layers, probs = modeling.transformer_model(
                    embedded, tf.constant(self_mask), hidden_size=hidden, num_hidden_layers=2,
                    num_attention_heads=NUM_HEADS, intermediate_size=24,
                    intermediate_act_fn=modeling.gelu, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, do_return_all_layers=True,
                    computation=modeling.Computation(
                        head_mask=head_mask,
                        encoder_output=tf.constant(ref["encoder_hidden_states"]),
                        encoder_attention_mask=tf.constant(cross_mask)),
                    do_return_attention_probs=True)
        cross_softmax = [op.outputs[0] for op in graph.get_operations()
                         if op.type == "Softmax" and "/crossattention/" in op.name]
        variables = {var.name[:-2]: var for var in tf1.global_variables()}
        assert sorted(variables) == sorted(weights)  # Every weight mapped, none left over.
        with tf1.Session() as sess:
            for name, value in weights.items():
                assert variables[name].shape.as_list() == list(value.shape), name
                variables[name].load(value, sess)
            return sess.run([embedded, layers, probs, cross_softmax])


def _max_diff(ours, ref):
    return float(np.abs(np.asarray(ours, np.float64) - ref).max())


def test_fixture_is_a_meaningful_decoder(ref):
    """The padding, head mask and causality in the fixture really change its outputs."""
    enc_mask = ref["encoder_attention_mask"]
    assert enc_mask.min(axis=1).tolist() == [0, 0] and len(set(enc_mask.sum(axis=1))) == 2
    assert ref["attention_mask"].min() == 0  # A padded decoder row.
    cross = ref["cross_attentions"]  # [L, B, N, S, T]
    for b in range(2):
        assert np.all(cross[:, b, :, :, enc_mask[b] == 0] == 0)  # Padded encoder positions.
    assert np.all(np.triu(ref["attentions"], k=1) == 0)  # Causal self-attention.
    assert _max_diff(ref["unpadded_hidden_states"], ref["hidden_states"]) > 0.05
    assert _max_diff(ref["masked_hidden_states"], ref["hidden_states"]) > 0.05
    # transformers applies layer i's head mask to its cross-attention too: the
    # masked heads' cross-attention probabilities are all zero.
    masked = ref["masked_cross_attentions"]
    for layer, layer_mask in enumerate(ref["head_mask"]):
        assert (masked[layer].max(axis=(0, 2, 3)) == 0).tolist() == (layer_mask == 0).tolist()


@pytest.mark.parametrize("run", ["plain", "head_mask", "unpadded_encoder"])
def test_cross_attention_matches_transformers(ref, run):
    prefix, head_mask = {"plain": ("", None), "head_mask": ("masked_", ref["head_mask"]),
                         "unpadded_encoder": ("unpadded_", None)}[run]
    enc_mask = ref["encoder_attention_mask"]
    if run == "unpadded_encoder":
        enc_mask = np.ones_like(enc_mask)
    embedded, layers, probs, cross_softmax = _run_decoder(ref, enc_mask, head_mask)
    diffs = {"embedding_output": _max_diff(embedded, ref["embedding_output"]),
             "hidden_states": _max_diff(layers, ref[prefix + "hidden_states"]),
             "attentions": _max_diff(probs, ref[prefix + "attentions"])}
    cross_ref = ref[prefix + "cross_attentions"]
    if head_mask is not None:
        # Our graph's softmax is before the head mask; transformers returns them after.
        cross_softmax = [p * m[None, :, None, None] for p, m in zip(cross_softmax, head_mask,
                                                                    strict=True)]
    diffs["cross_attentions"] = _max_diff(cross_softmax, cross_ref)
    print(run, {key: f"{value:.2g}" for key, value in diffs.items()})
    assert len(cross_softmax) == 2 and cross_softmax[0].shape == (2, NUM_HEADS, 7, 6)
    for key, value in diffs.items():
        assert value <= TOLERANCE, (key, value)
