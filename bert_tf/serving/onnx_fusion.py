"""Fuses a tf2onnx-converted bert_tf graph into ONNX Runtime's BERT operators.

    model, stats = fuse(model, num_heads=12, hidden_size=768)

ONNX Runtime reaches its BERT speed (and, after `quantize_dynamic`, its INT8 speed through
QAttention) with fused `com.microsoft` operators: Attention, SkipLayerNormalization, Gelu /
BiasGelu. Its transformer optimizer (`onnxruntime.transformers.optimizer.optimize_model`) finds
them by pattern, and on bert_tf's graph it only finds SkipLayerNormalization, because:
  - attention: bert_tf scales the query before the Q.K^T MatMul (ORT's patterns want the scale
    after it), builds the additive mask as (1 - ones[b, s, 1] * mask[b, 1, s]) * -10000 (a 3-D
    mask no pattern knows), and runs the encoder on a [batch * seq, hidden] matrix (ORT's
    Attention takes [batch, seq, hidden]);
  - gelu: grappler folds x / sqrt(2) into x * 0.70710677 ahead of Erf with the 0.5 * x on a side
    branch, a mix of ORT's "Div" and "Mul" gelu patterns that neither matches.
So this module rewrites those two places itself before running the optimizer:
  - each layer's self-attention (query / key / value MatMul + BiasAdd ... context Reshape_3 of
    one `.../attention/self/Softmax`) becomes one Attention node with the packed [hidden,
    3 * hidden] weights and `input_mask` [batch, seq] int32 as its raw 2-D mask (1 keeps,
    0 adds -10000: the same numbers as the graph's mask), and the encoder's flattening Reshape
    is bypassed so every layer sees [batch, seq, hidden];
  - x * 0.70710677 -> Erf becomes x / 1.4142135 -> Erf, ORT's gelu pattern.
Both are all-or-nothing: if any layer's attention does not look as expected the graph is left
as converted (and the stats say so). Inputs, outputs and their dynamic axes do not change.
"""

import numpy as np
from absl import logging

_SOFTMAX_SUFFIX = "/attention/self/Softmax"
_MASK_INPUT = "input_mask"


def _initializer_arrays(graph):
    from onnx import numpy_helper

    return {init.name: numpy_helper.to_array(init) for init in graph.initializer}


def _constant_input(node, arrays):
    """(index, value) of `node`'s one initializer input, or (None, None)."""
    found = [(i, arrays[name]) for i, name in enumerate(node.input) if name in arrays]
    return found[0] if len(found) == 1 else (None, None)


def _rewrite_gelu(graph, arrays):
    """x * 0.70710677 -> Erf  becomes  x / sqrt(2) -> Erf. Returns how many."""
    from onnx import numpy_helper

    producer = {out: node for node in graph.node for out in node.output}
    sqrt2 = "bert_tf_fusion/sqrt2"
    count = 0
    for erf in [node for node in graph.node if node.op_type == "Erf"]:
        mul = producer.get(erf.input[0])
        if mul is None or mul.op_type != "Mul":
            continue
        index, value = _constant_input(mul, arrays)
        if index is None or value.size != 1 or abs(float(value) - 2 ** -0.5) > 1e-3:
            continue
        mul.op_type = "Div"
        mul.input[:] = [mul.input[1 - index], sqrt2]
        count += 1
    if count:
        graph.initializer.append(numpy_helper.from_array(np.array(np.sqrt(2.0), np.float32),
                                                         sqrt2))
    return count


def _attention_parts(prefix, by_name, arrays):
    """The nodes and weights of one layer's self-attention, or None if it looks different."""
    parts = {}
    for branch in ("query", "key", "value"):
        matmul, bias_add = by_name.get(f"{prefix}/{branch}/MatMul"), by_name.get(
            f"{prefix}/{branch}/BiasAdd")
        if matmul is None or bias_add is None or bias_add.input[0] != matmul.output[0]:
            return None
        if matmul.input[1] not in arrays or bias_add.input[1] not in arrays:
            return None
        parts[branch] = (matmul.input[0], arrays[matmul.input[1]], arrays[bias_add.input[1]])
    context = by_name.get(f"{prefix}/Reshape_3")
    roots = {root for root, _, _ in parts.values()}
    if context is None or len(roots) != 1:
        return None
    return roots.pop(), parts, context


def _fuse_attention(graph, arrays, num_heads):
    """Replaces every layer's self-attention with one Attention node; all or none.

    Returns:
      The number of Attention nodes made (0: the graph is unchanged).
    """
    from onnx import helper, numpy_helper

    if _MASK_INPUT not in {value.name for value in graph.input}:
        return 0
    by_name = {node.name: node for node in graph.node}
    softmaxes = [node.name[:-len("/Softmax")] for node in graph.node
                 if node.op_type == "Softmax" and node.name.endswith(_SOFTMAX_SUFFIX)]
    layers = [_attention_parts(prefix, by_name, arrays) for prefix in softmaxes]
    if not layers or any(layer is None for layer in layers):
        return 0
    producer = {out: node for node in graph.node for out in node.output}
    # The encoder flattens [batch, seq, hidden] to [batch * seq, hidden] once before layer 0;
    # every op up to the final Reshape back is per token, so feed them the 3-D tensor.
    flatten = producer.get(layers[0][0])
    if flatten is None or flatten.op_type != "Reshape":
        return 0
    replaced = {flatten.output[0]: flatten.input[0]}
    for node in graph.node:
        node.input[:] = [replaced.get(name, name) for name in node.input]
    for index, (root, parts, context) in enumerate(layers):
        root = replaced.get(root, root)
        weights = np.concatenate([parts[b][1] for b in ("query", "key", "value")], axis=1)
        bias = np.concatenate([parts[b][2] for b in ("query", "key", "value")])
        names = f"bert_tf_fusion/attention_{index}/qkv_weight", \
            f"bert_tf_fusion/attention_{index}/qkv_bias"
        graph.initializer.extend([numpy_helper.from_array(weights.astype(np.float32), names[0]),
                                  numpy_helper.from_array(bias.astype(np.float32), names[1])])
        attention = helper.make_node(
            "Attention", [root, names[0], names[1], _MASK_INPUT], list(context.output),
            name=f"bert_tf_fusion/Attention_{index}", domain="com.microsoft",
            num_heads=num_heads)
        position = list(graph.node).index(context)
        graph.node.remove(context)
        graph.node.insert(position, attention)
    _prune(graph)
    return len(layers)


def _prune(graph):
    """Drops nodes and initializers nothing on the way to the graph outputs uses."""
    producer = {out: node for node in graph.node for out in node.output}
    needed, stack, keep = set(), [value.name for value in graph.output], set()
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        node = producer.get(name)
        if node is not None and id(node) not in keep:
            keep.add(id(node))
            stack.extend(node.input)
    nodes = [node for node in graph.node if id(node) in keep]
    del graph.node[:]
    graph.node.extend(nodes)
    initializers = [init for init in graph.initializer if init.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)


def fuse(model, num_heads, hidden_size):
    """Rewrites `model` (an ONNX ModelProto of a bert_tf export) to ORT's fused operators.

    Args:
      model: the tf2onnx ModelProto (changed in place and returned in its new form).
      num_heads: attention heads (bert_config num_attention_heads).
      hidden_size: bert_config hidden_size.

    Returns:
      (model, {fused operator: count}): the optimizer's `get_fused_operator_statistics()`,
      with "Attention" the count made here.
    """
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    arrays = _initializer_arrays(model.graph)
    gelus = _rewrite_gelu(model.graph, arrays)
    attentions = _fuse_attention(model.graph, arrays, num_heads)
    options = FusionOptions("bert")
    # Symbolic shape inference needs sympy, which the [onnx] extra does not bring; the fusions
    # used here do not need it.
    options.enable_shape_inference = False
    # ORT's embedding fusion wants a 1-D mask index from its own pattern; ours is the raw mask.
    options.enable_embed_layer_norm = False
    fused = optimizer.optimize_model(model, model_type="bert", num_heads=num_heads,
                                     hidden_size=hidden_size, opt_level=0,
                                     optimization_options=options)
    model = fused.model
    if "com.microsoft" not in {opset.domain for opset in model.opset_import}:
        # The fused operators' domain; onnx's shape inference (quantize_dynamic) needs it.
        model.opset_import.add(domain="com.microsoft", version=1)
    stats = dict(fused.get_fused_operator_statistics())
    stats["Attention"] = attentions
    logging.info("ONNX fusion: %d gelu rewritten; fused operators %s", gelus,
                 {op: n for op, n in stats.items() if n})
    return model, stats
