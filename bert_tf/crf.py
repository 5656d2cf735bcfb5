"""A linear-chain conditional random field in core TensorFlow ops (no TensorFlow Addons).

The score of a tag sequence y_0 .. y_{n-1} over emission scores e (a tagger's logits) is

    start[y_0] + sum_t e[t, y_t] + sum_{t>0} transitions[y_{t-1}, y_t] + end[y_{n-1}]

(`transitions[i, j]` scores tag i followed by tag j; pytorch-crf's `CRF` has the same three
parameters and meaning). `log_likelihood` is the score of the given tags minus the log of the
sum over all tag sequences (the forward algorithm, a logsumexp recursion); `viterbi_decode` is
the best-scoring sequence. Both loop over positions (`tf.foldl`; Viterbi a `tf.while_loop` of
plain tensors, which SavedModels, ONNX and TFLite carry) and work in the dtype of the emissions
(float64 where a test needs it).

Masks: a position whose mask is 0 is not part of the sequence at all. The positions that are on
are first moved to the front of each row (`compact`, in order), so the chain runs over them
alone, from one on position straight to the next: a NER sentence's first word pieces, with the
[CLS], [SEP], continuation pieces and padding between them skipped rather than scored as "O".
A row with no position on has log-likelihood 0. The variables of `crf_variables` are the head's
checkpoint variables: `transitions` [L, L], `start_transitions` [L] and `end_transitions` [L]
under the caller's variable scope (NER: `cls/ner/crf/`), zeros at first, so an untrained CRF
scores each position independently as the plain tagger does.
"""

import tensorflow as tf

tf1 = tf.compat.v1

# The variables of a CRF over L tags, under its scope, and their shapes.
TRANSITIONS = "transitions"
START_TRANSITIONS = "start_transitions"
END_TRANSITIONS = "end_transitions"
VARIABLE_NAMES = (TRANSITIONS, START_TRANSITIONS, END_TRANSITIONS)


def variable_shapes(num_tags):
    """{variable name: shape} of a CRF over `num_tags` tags."""
    return {TRANSITIONS: [num_tags, num_tags], START_TRANSITIONS: [num_tags],
            END_TRANSITIONS: [num_tags]}


def crf_variables(num_tags):
    """(transitions [L, L], start_transitions [L], end_transitions [L]): float32 variables in
    the current variable scope, initialized to zeros."""
    return tuple(tf1.get_variable(name, shape, initializer=tf1.zeros_initializer())
                 for name, shape in variable_shapes(num_tags).items())


def _one_hot(indices, depth, dtype):
    """`tf.one_hot(indices, depth, dtype=dtype)` (last axis) by comparison: converters (ONNX)
    take any rank of it."""
    depths = tf.range(depth, dtype=indices.dtype)
    return tf.cast(tf.equal(tf.expand_dims(indices, -1), depths), dtype)


def compact(mask):
    """Where each row's on positions go when moved to the front.

    Args:
      mask: int or bool Tensor [B, S].

    Returns:
      (placement: int32 [B, S, S], placement[b, j, t] = 1 when position t is row b's j-th on
      position; lengths: int32 [B], the on positions of each row). `take` and `put_back` use
      the placement: sums of one term each, so values move exactly.
    """
    mask = tf.cast(tf.cast(mask, tf.bool), tf.int32)
    seq_length = tf.shape(mask)[1]
    rank = tf.cumsum(mask, axis=1) - 1  # [B, S]: the on position's index among them
    slots = tf.reshape(tf.range(seq_length), [1, -1, 1])  # j
    placement = tf.cast(tf.equal(tf.expand_dims(rank, 1), slots), tf.int32) * tf.expand_dims(
        mask, 1)
    return placement, tf.reduce_sum(mask, axis=1)


def take(values, placement):
    """`values` [B, S] or [B, S, L] at the placement's on positions, moved to the front (the
    rest zeros)."""
    if values.dtype.is_floating:
        placement = tf.cast(placement, values.dtype)
        if values.shape.rank == 3:
            return tf.matmul(placement, values)
        return tf.reduce_sum(placement * tf.expand_dims(values, 1), axis=2)
    return tf.reduce_sum(placement * tf.expand_dims(tf.cast(values, tf.int32), 1), axis=2)


def put_back(compact_values, placement):
    """The inverse of `take` for int [B, S] values: each back at its position (0 where the
    mask is off)."""
    return tf.reduce_sum(placement * tf.expand_dims(tf.cast(compact_values, tf.int32), 2), axis=1)


def _time_major(values):
    return tf.transpose(values, [1, 0, 2] if values.shape.rank == 3 else [1, 0])


def _sequence_score(emissions, tags, lengths, transitions, start, end):
    """The score of `tags` [B, S] (a prefix of `lengths` [B] on) under the emissions [B, S, L]."""
    num_tags = tf.shape(emissions)[2]
    on = tf.sequence_mask(lengths, tf.shape(tags)[1], dtype=emissions.dtype)  # [B, S]
    one_hot = _one_hot(tags, num_tags, emissions.dtype)  # [B, S, L]
    unary = tf.reduce_sum(tf.reduce_sum(emissions * one_hot, axis=2) * on, axis=1)
    # transitions[y_{t-1}, y_t] for the steps inside the sequence.
    following = tf.matmul(one_hot[:, :-1], tf.expand_dims(transitions, 0))  # [B, S - 1, L]
    steps = tf.reduce_sum(following * one_hot[:, 1:], axis=2)
    binary = tf.reduce_sum(steps * on[:, 1:], axis=1)
    first = tf.reduce_sum(one_hot[:, 0] * start, axis=1)
    last = tf.reduce_sum(tf.expand_dims(_one_hot(tf.maximum(lengths - 1, 0), tf.shape(tags)[1],
                                                 emissions.dtype), 2) * one_hot, axis=1)
    return unary + binary + first + tf.reduce_sum(last * end, axis=1)


def _log_partition(emissions, lengths, transitions, start, end):
    """log sum over all tag sequences of exp(score): the forward algorithm. [B]."""
    on = tf.sequence_mask(lengths, tf.shape(emissions)[1])

    def step(alpha, inputs):
        emission, is_on = inputs  # [B, L], [B]
        next_alpha = tf.reduce_logsumexp(tf.expand_dims(alpha, 2) + transitions, axis=1) + emission
        return tf.where(tf.expand_dims(is_on, 1), next_alpha, alpha)

    alpha = tf.foldl(step, (_time_major(emissions[:, 1:]), _time_major(on[:, 1:])),
                     initializer=start + emissions[:, 0])
    return tf.reduce_logsumexp(alpha + end, axis=1)


def _parameters(transitions, start_transitions, end_transitions, dtype):
    return tuple(tf.cast(value, dtype) for value in
                 (transitions, start_transitions, end_transitions))


def log_likelihood(emissions, tags, mask, transitions, start_transitions, end_transitions):
    """The log-likelihood of each row's tags at its on positions.

    Args:
      emissions: float Tensor [B, S, L], e.g. a tagger's logits.
      tags: int Tensor [B, S], the gold tags (read where `mask` is on).
      mask: int or bool Tensor [B, S]: the positions in the sequence (any pattern; see the
        module docstring).
      transitions, start_transitions, end_transitions: [L, L], [L], [L] (cast to the
        emissions' dtype).

    Returns:
      Tensor [B] in the emissions' dtype: log p(tags | emissions); 0 for a row with no
      position on.
    """
    emissions, tags = tf.convert_to_tensor(emissions), tf.convert_to_tensor(tags)
    params = _parameters(transitions, start_transitions, end_transitions, emissions.dtype)
    placement, lengths = compact(mask)
    emissions, tags = take(emissions, placement), take(tags, placement)
    likelihood = (_sequence_score(emissions, tags, lengths, *params)
                  - _log_partition(emissions, lengths, *params))
    return tf.where(lengths > 0, likelihood, tf.zeros_like(likelihood))


def viterbi_decode(emissions, mask, transitions, start_transitions, end_transitions):
    """The best-scoring tag sequence over each row's on positions.

    One loop over positions that carries, for each tag, the best path ending in it (so no
    backtracking loop and no TensorArray, which TFLite's built-in ops lack): paths [B, L, S]
    are moved to their new tags by a one-hot matmul, exact for tag ids.

    Args: as `log_likelihood`, without tags.

    Returns:
      (tags: int32 [B, S], the best sequence's tag at each on position, 0 where the mask is
      off; scores: [B] in the emissions' dtype, its score (0 for a row with no position on)).
    """
    emissions = tf.convert_to_tensor(emissions)
    dtype = emissions.dtype
    transitions, start, end = _parameters(transitions, start_transitions, end_transitions,
                                          dtype)
    placement, lengths = compact(mask)
    emissions = take(emissions, placement)
    seq_length, num_tags = tf.shape(emissions)[1], tf.shape(emissions)[2]
    on = tf.sequence_mask(lengths, seq_length)
    tag_values = tf.reshape(tf.cast(tf.range(num_tags), dtype), [1, -1, 1])  # [1, L, 1]

    def at(t):  # [1, 1, S]: 1.0 at position t
        return tf.reshape(tf.cast(tf.equal(tf.range(seq_length), t), dtype), [1, 1, -1])

    def step(t, score, paths):
        is_on = tf.expand_dims(tf.gather(on, t, axis=1), 1)  # [B, 1]
        candidates = tf.expand_dims(score, 2) + transitions  # [B, L (previous), L (next)]
        best_previous = tf.argmax(candidates, axis=1, output_type=tf.int32)  # [B, L]
        moved = tf.matmul(_one_hot(best_previous, num_tags, dtype), paths) + tag_values * at(t)
        next_score = tf.reduce_max(candidates, axis=1) + tf.gather(emissions, t, axis=1)
        return (t + 1, tf.where(is_on, next_score, score),
                tf.where(tf.expand_dims(is_on, 2), moved, paths))

    first = start + emissions[:, 0]
    paths = tag_values * at(0) + tf.expand_dims(tf.zeros_like(first), 2)  # [B, L, S]
    _, score, paths = tf.while_loop(lambda t, score, paths: t < seq_length, step,
                                    (tf.constant(1), first, paths))
    final = score + end
    best_last = _one_hot(tf.argmax(final, axis=1, output_type=tf.int32), num_tags, dtype)
    compact_tags = tf.cast(tf.round(tf.reduce_sum(paths * tf.expand_dims(best_last, 2), axis=1)),
                           tf.int32) * tf.cast(on, tf.int32)
    best = tf.reduce_max(final, axis=1)
    return put_back(compact_tags, placement), tf.where(lengths > 0, best, tf.zeros_like(best))
