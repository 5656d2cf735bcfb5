"""A float64 numpy BERT forward pass, written from the paper's equations.

An independent reference for `bert_tf.modeling`: it shares no code with the
library, only the Google checkpoint variable names (docs/compatibility.md §2), and runs in
float64 so differences measure the TensorFlow implementation's error.

The encoder variants follow their published definitions: relative positions
as in Hugging Face's BertSelfAttention (scores q.k + q.d(i-j) [+ k.d(i-j)],
then / sqrt(D)), pre-LN blocks (x + f(LN(x)), final LN), head masks multiplying
the attention probabilities, and cross-attention as in BertLayer.crossattention.
"""

import math

import numpy as np


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


ACTIVATIONS = {
    "gelu": gelu,
    "gelu_new": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                                   * (x + 0.044715 * x ** 3))),
    "relu": lambda x: np.maximum(x, 0.0),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
}
ACTIVATIONS["gelu_tanh"] = ACTIVATIONS["gelu_new"]
ACTIVATIONS["swish"] = ACTIVATIONS["silu"]


def layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def attention(w, scope, x_from, x_to, mask_add, num_heads, position_embedding_type="absolute",
              head_mask=None):
    """Multi-head attention with variables under `scope` (".../self").

    Args:
      x_from: [B, F, H]; x_to: [B, T, H_to]; mask_add: additive mask
        broadcastable to [B, N, F, T]; head_mask: None or [N].

    Returns:
      (context [B, F, N*D], probs [B, N, F, T]).
    """
    batch, from_len, _ = x_from.shape
    to_len = x_to.shape[1]

    def project(t, name, length):
        t = t @ w[f"{scope}/{name}/kernel"] + w[f"{scope}/{name}/bias"]
        return t.reshape(batch, length, num_heads, -1).transpose(0, 2, 1, 3)

    q = project(x_from, "query", from_len)
    k = project(x_to, "key", to_len)
    v = project(x_to, "value", to_len)
    d = q.shape[-1]
    scores = np.einsum("bnfd,bntd->bnft", q, k)
    if position_embedding_type != "absolute":
        table = w[f"{scope}/distance_embedding"]
        max_positions = (table.shape[0] + 1) // 2
        distance = np.arange(from_len)[:, None] - np.arange(to_len)[None, :]
        dist = table[distance + max_positions - 1]  # [F, T, D]
        scores = scores + np.einsum("bnfd,ftd->bnft", q, dist)
        if position_embedding_type == "relative_key_query":
            scores = scores + np.einsum("bntd,ftd->bnft", k, dist)
    probs = softmax(scores / math.sqrt(d) + mask_add)
    if head_mask is not None:
        probs = probs * np.asarray(head_mask, np.float64)[None, :, None, None]
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, from_len, -1)
    return ctx, probs


def encoder_forward(w, x, mask_add, num_heads, prefix="bert/encoder/", hidden_act="gelu",
                    layer_norm_eps=1e-12, layer_norm_type="post",
                    position_embedding_type="absolute", head_mask=None, encoder_output=None,
                    encoder_mask_add=0.0):
    """Runs the layers `{prefix}layer_{i}/...` on x [B, S, H].

    Args:
      head_mask: None, [N] for every layer, or [L, N].
      encoder_output: None or [B, T, H_enc]: adds cross-attention per layer
        (`crossattention/...`), with additive mask `encoder_mask_add`.

    Returns:
      (all_layer_outputs [L] of [B, S, H], self-attention probs [L] of [B, N, S, S]).
    """
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    x = np.asarray(x, np.float64)
    act = ACTIVATIONS[hidden_act]
    pre = layer_norm_type == "pre"

    def ln(t, scope):
        return layer_norm(t, w[scope + "/gamma"], w[scope + "/beta"], layer_norm_eps)

    def sublayer(t, scope, to, mask, position_type, layer_head_mask):
        """Post-LN: LN(t + Dense(Attn(t))); pre-LN: t + Dense(Attn(LN(t)))."""
        inp = ln(t, scope + "/output/LayerNorm") if pre else t
        ctx, probs = attention(w, scope + "/self", inp, inp if to is None else to, mask,
                               num_heads, position_type, layer_head_mask)
        out = ctx @ w[scope + "/output/dense/kernel"] + w[scope + "/output/dense/bias"] + t
        return (out if pre else ln(out, scope + "/output/LayerNorm")), probs

    outputs, all_probs = [], []
    i = 0
    while f"{prefix}layer_{i}/attention/self/query/kernel" in w:
        lp = f"{prefix}layer_{i}/"
        layer_head_mask = None
        if head_mask is not None:
            head_mask = np.asarray(head_mask, np.float64)
            layer_head_mask = head_mask if head_mask.ndim == 1 else head_mask[i]
        a, probs = sublayer(x, lp + "attention", None, mask_add, position_embedding_type,
                            layer_head_mask)
        all_probs.append(probs)
        if encoder_output is not None:
            a, _ = sublayer(a, lp + "crossattention", encoder_output, encoder_mask_add,
                            "absolute", layer_head_mask)
        h = ln(a, lp + "output/LayerNorm") if pre else a
        h = act(h @ w[lp + "intermediate/dense/kernel"] + w[lp + "intermediate/dense/bias"])
        x = h @ w[lp + "output/dense/kernel"] + w[lp + "output/dense/bias"] + a
        if not pre:
            x = ln(x, lp + "output/LayerNorm")
        outputs.append(x)
        i += 1
    if pre:
        outputs[-1] = ln(outputs[-1], prefix + "LayerNorm")
    return outputs, all_probs


def bert_forward(w, input_ids, input_mask, segment_ids, num_heads, prefix="bert/",
                 return_attention_probs=False, **variant):
    """Returns (all_layer_outputs [L] of [B, S, H], pooled [B, H]) in float64.

    Args:
      w: dict Google variable name (without ":0") -> numpy array.
      input_ids, input_mask, segment_ids: int arrays [B, S].
      num_heads: attention heads N.
      return_attention_probs: also return the list of [B, N, S, S] probabilities.
      **variant: `encoder_forward` keywords (hidden_act, layer_norm_eps,
        layer_norm_type, position_embedding_type, head_mask).
    """
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    p = prefix
    seq = input_ids.shape[1]
    x = (w[p + "embeddings/word_embeddings"][input_ids]
         + w[p + "embeddings/token_type_embeddings"][segment_ids])
    if variant.get("position_embedding_type", "absolute") == "absolute":
        x = x + w[p + "embeddings/position_embeddings"][:seq][None]
    x = layer_norm(x, w[p + "embeddings/LayerNorm/gamma"], w[p + "embeddings/LayerNorm/beta"],
                   variant.get("layer_norm_eps", 1e-12))
    # Additive mask over keys: 0 where attended, a large negative where padded.
    mask_add = (1.0 - input_mask[:, None, None, :].astype(np.float64)) * -10000.0
    outputs, probs = encoder_forward(w, x, mask_add, num_heads, p + "encoder/", **variant)
    pooled = np.tanh(outputs[-1][:, 0] @ w[p + "pooler/dense/kernel"] + w[p + "pooler/dense/bias"])
    if return_attention_probs:
        return outputs, pooled, probs
    return outputs, pooled
