"""The BERT encoder's graph-mode builders, one concept a file; `bert_tf.modeling` is their
public face (Google's `modeling.py` API).

    settings         what every layer is (`LayerConfig`, `LayerVariant`, `LayerSharing`,
                     `AttentionConfig`) and how this graph computes the layers (`Computation`)
    config           `BertConfig`, the `bert_config.json` of a checkpoint
    ops              variables, dense layers, layer norm, activations, shapes
    dropout          dropout from stateless draws and the keys that make them reproducible
    recompute        a layer rebuilt in the backward pass instead of kept
    checkpoint_init  variables initialized from a checkpoint by name
    embeddings       word, token-type and position embeddings
    attention        multi-headed attention and its masks
    transformer      the encoder's layers
    albert           ALBERT's shared layers and embedding mapping, in Google ALBERT's names
    pooler           what `BertModel` reads off the last layer
    sentence_pooling sentence vectors pooled from the layers (cls, mean, max, pooler)
"""
