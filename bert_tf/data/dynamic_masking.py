"""Masked-LM masks drawn in the input pipeline: dynamic masking (RoBERTa), vectorised in TF.

`create_pretraining_data.py --masking=dynamic` writes records without masks
(`record_writing.DYNAMIC_FEATURES`); `run_pretraining.py` maps `mask_batch` over each parsed batch,
so every epoch sees new masks. The rules are those of the static masks
(`pretraining_data.ChunkProcessor._create_masked_lm_predictions`):

* `min(max_predictions_per_seq, max(1, round(num_tokens * masked_lm_prob)))` positions per
  sequence, num_tokens counting [CLS] and [SEP] (rounding half to even, in float64, as
  Python's `round`);
* never [CLS], [SEP] or padding (word id 0);
* the words (`word_ids`: the pieces of a whole word under whole-word masking, else single
  tokens) are visited in a uniformly random order and each is taken whole if it still fits,
  until enough positions are chosen;
* a chosen token becomes [MASK] 80% of the time, a random id in [0, vocab_size) 10% and stays
  unchanged 10%; in records with `whole_word_replacement` = 1 (written with `--word_segmenter`)
  that choice is made once per word: all its tokens [MASK], all random ids or all unchanged.

The random draws are stateless (`tf.random.stateless_*`), seeded by (seed, batch index,
input pipeline), so a run is repeatable and batch k of the second epoch gets other masks than
batch k of the first.
"""

import tensorflow as tf


def batch_seed(seed, batch_index, pipeline_id=0):
    """The [2] int64 seed of one batch's stateless draws."""
    return tf.stack([tf.cast(seed, tf.int64),
                     tf.cast(batch_index, tf.int64) * 1024 + tf.cast(pipeline_id, tf.int64)])


def _select_words(word_ids, num_to_predict, seed):
    """Greedy whole-word selection in a random order.

    Args:
      word_ids: int32 [B, S], 0 = never masked.
      num_to_predict: int32 [B], positions wanted per row.
      seed: [2] stateless seed.

    Returns:
      bool [B, S + 1]: whether word w (column w; column 0 unused) is chosen.
    """
    batch_size = tf.shape(word_ids)[0]
    num_slots = word_ids.shape[1] + 1  # word ids are at most S
    offsets = tf.range(batch_size)[:, None] * num_slots
    lengths = tf.math.unsorted_segment_sum(
        tf.cast(word_ids > 0, tf.int32), word_ids + offsets, batch_size * num_slots)
    lengths = tf.reshape(lengths, [batch_size, num_slots])  # column 0: 0 (never chosen)
    lengths = tf.concat([tf.zeros_like(lengths[:, :1]), lengths[:, 1:]], axis=1)
    keys = tf.random.stateless_uniform([batch_size, num_slots], seed)
    keys = tf.where(lengths > 0, keys, 2.0)  # absent words last
    order = tf.argsort(keys, axis=1, stable=True)
    sorted_lengths = tf.transpose(tf.gather(lengths, order, batch_dims=1))  # [S + 1, B]
    num_words = tf.reduce_max(tf.reduce_sum(tf.cast(lengths > 0, tf.int32), axis=1))

    def body(k, total, taken):
        length = sorted_lengths[k]
        take = (total < num_to_predict) & (total + length <= num_to_predict) & (length > 0)
        return k + 1, total + tf.where(take, length, 0), taken.write(k, take)

    _, _, taken = tf.while_loop(
        lambda k, total, _: (k < num_words) & tf.reduce_any(total < num_to_predict),
        body, (tf.constant(0), tf.zeros([batch_size], tf.int32),
               tf.TensorArray(tf.bool, size=0, dynamic_size=True, element_shape=[None])))
    taken = tf.transpose(taken.stack())  # [B, k done]
    taken = tf.pad(taken, [[0, 0], [0, num_slots - tf.shape(taken)[1]]])
    # Back from random order to word order.
    return tf.gather(taken, tf.argsort(order, axis=1), batch_dims=1)


def _per_word_draws(per_word, word_ids, masked_positions, seed, draws):
    """The 80-10-10 draws of the rows with `per_word` (int [B, 1]) != 0 made once per word.

    Args:
      per_word: int [B, 1].
      word_ids: int32 [B, S].
      masked_positions: int32 [B, P].
      seed: [2] stateless seed.
      draws: per-position uniform draws, each float32 [B, P].

    Returns:
      The draws, each [B, P]: those of rows with per_word taken from the token's word.
    """
    batch_size, num_slots = tf.shape(word_ids)[0], word_ids.shape[1] + 1
    words = tf.gather(word_ids, masked_positions, batch_dims=1)  # [B, P]
    seeds = tf.random.experimental.stateless_split(seed, num=len(draws) + 1)
    use_word = tf.broadcast_to(tf.not_equal(per_word, 0), tf.shape(masked_positions))
    out = []
    for k, draw in enumerate(draws):
        word_draw = tf.random.stateless_uniform([batch_size, num_slots], seeds[k + 1])
        out.append(tf.where(use_word, tf.gather(word_draw, words, batch_dims=1), draw))
    return tuple(out)


def mask_batch(features, seed, max_predictions_per_seq, vocab_size, masked_lm_prob=0.15):
    """Draws the masks of one batch of dynamic-masking records.

    Args:
      features: dict of int32 Tensors: input_ids, input_mask, segment_ids, word_ids [B, S],
        next_sentence_labels [B, 1], mask_token_id [B, 1] (as parsed from
        `record_writing.DYNAMIC_FEATURES`), optionally whole_word_replacement [B, 1]
        (`record_writing.OPTIONAL_DYNAMIC_FEATURES`; absent = 0).
      seed: [2] int seed of this batch (`batch_seed`).
      max_predictions_per_seq: P, the length of the masked_lm_* features.
      vocab_size: random replacements are drawn from [0, vocab_size).
      masked_lm_prob: fraction of the tokens to mask.

    Returns:
      The features of static records: input_ids (masked), input_mask, segment_ids
      [B, S]; masked_lm_positions, masked_lm_ids (int32), masked_lm_weights (float32) [B, P],
      ascending positions then zero padding; next_sentence_labels [B, 1].
    """
    input_ids, word_ids = features["input_ids"], features["word_ids"]
    seq_length = input_ids.shape[1]
    seeds = tf.random.experimental.stateless_split(seed, num=4)
    num_tokens = tf.reduce_sum(features["input_mask"], axis=1)
    num_to_predict = tf.cast(tf.round(tf.cast(num_tokens, tf.float64) * masked_lm_prob),
                             tf.int32)
    num_to_predict = tf.minimum(max_predictions_per_seq, tf.maximum(1, num_to_predict))
    chosen_words = _select_words(word_ids, num_to_predict, seeds[0])
    chosen = tf.gather(chosen_words, word_ids, batch_dims=1) & (word_ids > 0)  # [B, S]

    # The chosen positions in ascending order (the first P), then zero padding.
    positions = tf.range(seq_length)[None, :]
    order_keys = tf.where(chosen, positions, positions + seq_length)
    k = min(max_predictions_per_seq, seq_length)
    first = tf.math.top_k(-order_keys, k=k, sorted=True).indices
    weights = tf.gather(chosen, first, batch_dims=1)
    pad = [[0, 0], [0, max_predictions_per_seq - k]]
    masked_positions = tf.pad(tf.where(weights, first, 0), pad)
    weights = tf.pad(weights, pad)
    original = tf.gather(input_ids, masked_positions, batch_dims=1)
    masked_ids = tf.where(weights, original, 0)

    shape = tf.shape(masked_positions)
    draw = tf.random.stateless_uniform(shape, seeds[1])
    keep_or_random = tf.random.stateless_uniform(shape, seeds[2])
    if "whole_word_replacement" in features:
        draw, keep_or_random = _per_word_draws(
            features["whole_word_replacement"], word_ids, masked_positions, seeds[1],
            (draw, keep_or_random))
    random_ids = tf.random.stateless_uniform(shape, seeds[3], maxval=vocab_size,
                                             dtype=tf.int32)
    mask_id = tf.broadcast_to(features["mask_token_id"], shape)
    replacement = tf.where(draw < 0.8, mask_id,
                           tf.where(keep_or_random >= 0.5, random_ids, original))
    # Padding slots write position 0's own id back ([CLS] stays).
    replacement = tf.where(weights, replacement, original)
    rows = tf.broadcast_to(tf.range(shape[0])[:, None], shape)
    masked_input_ids = tf.tensor_scatter_nd_update(
        input_ids, tf.stack([rows, masked_positions], axis=-1), replacement)
    return {
        "input_ids": masked_input_ids,
        "input_mask": features["input_mask"],
        "segment_ids": features["segment_ids"],
        "masked_lm_positions": masked_positions,
        "masked_lm_ids": masked_ids,
        "masked_lm_weights": tf.cast(weights, tf.float32),
        "next_sentence_labels": features["next_sentence_labels"],
    }
