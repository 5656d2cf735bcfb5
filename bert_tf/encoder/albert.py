"""ALBERT's encoder layers: factorized embeddings and layers that share their weights.

With `LayerVariant.sharing` set (a config with `embedding_size`), the [B*S, E] embeddings are
mapped to H by `embedding_hidden_mapping_in` (when E != H), and layer i runs the weights of
group g = int(i / L * G) in Google ALBERT's layout, in the encoder's scope:

    embedding_hidden_mapping_in/{kernel [E, H], bias [H]}
    transformer/group_{g}/inner_group_{j}/attention_1/self/{query,key,value}/{kernel,bias}
    transformer/group_{g}/inner_group_{j}/attention_1/output/dense/{kernel,bias}
    transformer/group_{g}/inner_group_{j}/LayerNorm/{gamma,beta}
    transformer/group_{g}/inner_group_{j}/ffn_1/intermediate/dense/{kernel [H, I],bias}
    transformer/group_{g}/inner_group_{j}/ffn_1/intermediate/output/dense/{kernel [I, H],bias}
    transformer/group_{g}/inner_group_{j}/LayerNorm_1/{gamma,beta}

Each block is BERT's post-LN layer: LayerNorm(x + Dropout(Dense(Attn(x)))), then
LayerNorm_1(h + Dropout(Dense(act(Dense(h))))); a layer runs its `inner_group_num` blocks one
after the other.
"""

import contextlib
import re

import tensorflow as tf

from bert_tf.encoder import attention, dropout, ops
from bert_tf.errors import BertTfError

tf1 = tf.compat.v1

# A variable of ALBERT's shared layers, and one of BERT's per-layer weights.
_ALBERT_LAYER = re.compile(r"(^|/)encoder/transformer/group_\d+/")
_BERT_LAYER = re.compile(r"(^|/)encoder/layer_\d+/")


def map_embeddings(hidden, layer):
    """`embedding_hidden_mapping_in` in the current scope: [M, E] -> [M, H]; the identity
    when E == H (Google ALBERT then has no such variable)."""
    if hidden.shape[-1] == layer.hidden_size:
        return hidden
    return ops.dense_layer(hidden, layer.hidden_size, None,
                           ops.create_initializer(layer.initializer_range),
                           name="embedding_hidden_mapping_in")


@contextlib.contextmanager
def layer_scope(index, num_hidden_layers, sharing):
    """The variable scope of layer `index`: its group's `transformer/group_{g}` (variables
    shared, created by the group's first layer), ops under the name scope `layer_{index}`."""
    group = sharing.group_of(index, num_hidden_layers)
    with tf1.variable_scope("transformer", reuse=tf1.AUTO_REUSE), \
            tf1.variable_scope(f"group_{group}"), tf1.name_scope(f"layer_{index}"):
        yield


def albert_layer(layer_input, dropout_key, layer, graph, head_mask, last):
    """One ALBERT layer, its `inner_group_num` blocks, in the group's scope:
    [B*S, H] -> ([B*S, H], the last block's probabilities [B, N, S, S]); the last layer with
    query rows: its last block computes them only -> ([B*F, H], [B, N, F, S]).

    `graph` is the `transformer.EncoderGraph`; rows are [K, H] on the real tokens only with
    `token_index`, except in the last layer with query rows (padded layout then)."""
    inner_group_num = layer.variant.sharing.inner_group_num
    index = None if last and graph.query_rows is not None else graph.token_index
    keys = (contextlib.nullcontext() if dropout_key is None
            else dropout.dropout_key_scope(dropout_key))
    hidden, probs = layer_input, None
    with keys:
        for inner in range(inner_group_num):
            rows = graph.query_rows if last and inner == inner_group_num - 1 else None
            with tf1.variable_scope(f"inner_group_{inner}"):
                hidden, probs = _attention_ffn_block(hidden, layer, graph, head_mask, rows,
                                                     index)
    return hidden, probs


def _attention_ffn_block(hidden, layer, graph, head_mask, rows, index):
    """Attention (`attention_1`) + `LayerNorm`, FFN (`ffn_1`) + `LayerNorm_1`:
    [M, H] -> ([M, H] or with `rows` [B*F, H], probabilities)."""
    from_seq_length, mask, residual = graph.seq_length, graph.attention_mask, hidden
    queries = hidden
    if rows is not None:
        queries = residual = tf.gather(hidden, rows.flat)
        from_seq_length, mask, index = rows.count, rows.mask, None
    initializer = ops.create_initializer(layer.initializer_range)
    eps = layer.variant.layer_norm_eps
    with tf1.variable_scope("attention_1"):
        with tf1.variable_scope("self"):
            context, probs = attention.attention(
                queries, hidden, mask, layer.attention(), graph.batch_size, from_seq_length,
                graph.seq_length, head_mask, index)
        with tf1.variable_scope("output"):
            projected = dropout.dropout(
                ops.dense_layer(context, layer.hidden_size, None, initializer),
                layer.hidden_dropout_prob)
    attention_output = ops.layer_norm(projected + residual, "LayerNorm", eps)
    with tf1.variable_scope("ffn_1"):
        with tf1.variable_scope("intermediate"):
            intermediate = ops.dense_layer(attention_output, layer.intermediate_size,
                                           layer.intermediate_act_fn, initializer)
            with tf1.variable_scope("output"):
                ffn_output = dropout.dropout(
                    ops.dense_layer(intermediate, layer.hidden_size, None, initializer),
                    layer.hidden_dropout_prob)
    return ops.layer_norm(ffn_output + attention_output, "LayerNorm_1", eps), probs


def check_layout(model_names, checkpoint_names, checkpoint):
    """Stops when the checkpoint's encoder layers are ALBERT's and the model's BERT's, or
    the other way round (the config's `embedding_size` decides the model's).

    Args:
      model_names: the model's variable names.
      checkpoint_names: the checkpoint's variable names.
      checkpoint: its path, for the message.

    Raises:
      BertTfError: in one line naming the checkpoint and the fix.
    """
    def has(pattern, names):
        return any(pattern.search(name) for name in names)

    if has(_ALBERT_LAYER, checkpoint_names) and not has(_ALBERT_LAYER, model_names) and \
            has(_BERT_LAYER, model_names):
        raise BertTfError(
            f"checkpoint '{checkpoint}' is an ALBERT checkpoint (encoder/transformer/group_0/"
            "...) but the BERT config has no 'embedding_size'; pass the checkpoint's "
            "albert_config.json (embedding_size, num_hidden_groups, inner_group_num) as "
            "--bert_config_file.")
    if has(_BERT_LAYER, checkpoint_names) and not has(_BERT_LAYER, model_names) and \
            has(_ALBERT_LAYER, model_names):
        raise BertTfError(
            f"checkpoint '{checkpoint}' is a BERT checkpoint (encoder/layer_0/...) but the "
            "BERT config has ALBERT's 'embedding_size'; pass the bert_config.json that came "
            "with the checkpoint.")
