"""A float64 numpy BERT forward pass, written from the paper's equations.

An independent reference for `bert_tf.modeling`: it shares no code with the
library, only the Google checkpoint variable names (SPEC §5), and runs in
float64 so differences measure the TensorFlow implementation's error.
"""

import math

import numpy as np


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def bert_forward(w, input_ids, input_mask, segment_ids, num_heads, prefix="bert/"):
    """Returns (all_layer_outputs [L] of [B, S, H], pooled [B, H]) in float64.

    Args:
      w: dict Google variable name (without ":0") -> numpy array.
      input_ids, input_mask, segment_ids: int arrays [B, S].
      num_heads: attention heads N.
    """
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    p = prefix
    seq = input_ids.shape[1]
    x = (w[p + "embeddings/word_embeddings"][input_ids]
         + w[p + "embeddings/token_type_embeddings"][segment_ids]
         + w[p + "embeddings/position_embeddings"][:seq][None])
    x = layer_norm(x, w[p + "embeddings/LayerNorm/gamma"], w[p + "embeddings/LayerNorm/beta"])
    batch, _, hidden = x.shape
    d = hidden // num_heads
    # Additive mask over keys: 0 where attended, a large negative where padded.
    mask_add = (1.0 - input_mask[:, None, None, :].astype(np.float64)) * -10000.0
    outputs = []
    i = 0
    while p + f"encoder/layer_{i}/attention/self/query/kernel" in w:
        lp = p + f"encoder/layer_{i}/"

        def dense(t, name, lp=lp):
            return t @ w[lp + name + "/kernel"] + w[lp + name + "/bias"]

        def heads(t):
            return t.reshape(batch, seq, num_heads, d).transpose(0, 2, 1, 3)

        q = heads(dense(x, "attention/self/query"))
        k = heads(dense(x, "attention/self/key"))
        v = heads(dense(x, "attention/self/value"))
        probs = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + mask_add)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        a = layer_norm(dense(ctx, "attention/output/dense") + x,
                       w[lp + "attention/output/LayerNorm/gamma"],
                       w[lp + "attention/output/LayerNorm/beta"])
        h = gelu(dense(a, "intermediate/dense"))
        x = layer_norm(dense(h, "output/dense") + a, w[lp + "output/LayerNorm/gamma"],
                       w[lp + "output/LayerNorm/beta"])
        outputs.append(x)
        i += 1
    pooled = np.tanh(x[:, 0] @ w[p + "pooler/dense/kernel"] + w[p + "pooler/dense/bias"])
    return outputs, pooled
