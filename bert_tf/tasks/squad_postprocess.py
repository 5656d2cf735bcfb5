"""SQuAD postprocessing: start/end logits -> answer text, n-best lists and null odds.

The semantics are those of the original Google BERT `run_squad.py` `write_predictions`: for
every example, the `n_best_size` best start and end positions of each window are combined into
candidate spans (inside the document part, end >= start, at most `max_answer_length` word
pieces, start token scored in its max-context window), ranked by start + end logit, and each
span is turned back into text of the original context by `get_final_text`. For SQuAD v2.0 the
null answer (both logits at [CLS]) competes too: the answer is "" when the lowest null score
over the windows beats the best non-null span by more than `null_score_diff_threshold`.
"""

import collections
import json
import math

from absl import logging

from bert_tf import fileio, tokenization

# The model outputs for one feature: logits over its max_seq_length positions.
RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])

_PrelimPrediction = collections.namedtuple(
    "PrelimPrediction", ["feature_index", "start_index", "end_index", "start_logit", "end_logit"])

# `span`: where `text` lies in the example's doc tokens, an `AnswerSpan` (None for "").
_NbestPrediction = collections.namedtuple(
    "NbestPrediction", ["text", "start_logit", "end_logit", "span"], defaults=[None])

# An answer's place in the context: doc tokens first..last (inclusive) and the answer's
# characters [start, end) in `example.doc_text(first, last)` (those doc tokens joined as the
# context has them: " ".join for whitespace-separated ones).
AnswerSpan = collections.namedtuple("AnswerSpan", ["first_token", "last_token", "start", "end"])

# The lowest null score (start + end logit at [CLS]) over an example's windows, and its window.
_NullScore = collections.namedtuple(
    "NullScore", ["score", "feature_index", "start_logit", "end_logit"])


def _strip_spaces(text):
    """Removes the spaces from `text`, remembering where each remaining character came from.

    Args:
      text: any string.

    Returns:
      (text without " " characters, OrderedDict {index in that text: index in `text`}).
    """
    ns_chars = []
    ns_to_s_map = collections.OrderedDict()
    for i, c in enumerate(text):
        if c == " ":
            continue
        ns_to_s_map[len(ns_chars)] = i
        ns_chars.append(c)
    return "".join(ns_chars), ns_to_s_map


def _project_position(tok_position, tok_s_to_ns_map, orig_ns_to_s_map):
    """Maps a character index of the tokenized text to the same character of the original.

    Args:
      tok_position: a character index into the tokenized text (with spaces).
      tok_s_to_ns_map: {index in the tokenized text: index in it without spaces}.
      orig_ns_to_s_map: {index in the original text without spaces: index in the original}.

    Returns:
      The character index into the original text (int), or None when it cannot be mapped.
    """
    if tok_position not in tok_s_to_ns_map:
        return None
    return orig_ns_to_s_map.get(tok_s_to_ns_map[tok_position])


def get_final_text(pred_text, orig_text, do_lower_case, verbose_logging=False):
    """The original's `get_final_text`: `orig_text[slice]` of `final_text_range` (below)."""
    start, end = final_text_range(pred_text, orig_text, do_lower_case, verbose_logging)
    return orig_text[start:end]


def final_text_range(pred_text, orig_text, do_lower_case, verbose_logging=False):
    """Projects the de-tokenized prediction back onto the original text.

    `pred_text` is word pieces joined back together (lower-cased, accents stripped, punctuation
    split off), `orig_text` the whole doc tokens it came from, e.g. pred "steve smith" and orig
    "Steve Smith's". `orig_text` is run through the same `BasicTokenizer`, both are stripped of
    spaces, and if they then have equal length their characters correspond one to one, so the
    span of `pred_text` in the tokenized text maps to a span of `orig_text`: "Steve Smith".
    When the heuristic fails (text not found, lengths differ) `orig_text` is returned.

    Args:
      pred_text: the predicted text, from word pieces (str).
      orig_text: the original doc tokens as the context has them, one space for a run of
        whitespace (str; `SquadExample.doc_text`).
      do_lower_case: the tokenizer's casing.
      verbose_logging: log why a mapping failed.

    Returns:
      (start, end): the answer is `orig_text[start:end]`; (0, len(orig_text)) when the
      mapping fails.
    """
    whole = (0, len(orig_text))
    tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    tok_text = " ".join(tokenizer.tokenize(orig_text))

    start_position = tok_text.find(pred_text)
    if start_position == -1:
        if verbose_logging:
            logging.info("Unable to find text: '%s' in '%s'", pred_text, orig_text)
        return whole
    end_position = start_position + len(pred_text) - 1

    orig_ns_text, orig_ns_to_s_map = _strip_spaces(orig_text)
    tok_ns_text, tok_ns_to_s_map = _strip_spaces(tok_text)
    if len(orig_ns_text) != len(tok_ns_text):
        if verbose_logging:
            logging.info("Length not equal after stripping spaces: '%s' vs '%s'",
                         orig_ns_text, tok_ns_text)
        return whole

    # Project the characters of `pred_text` back to `orig_text` through the alignment.
    tok_s_to_ns_map = {tok_index: i for i, tok_index in tok_ns_to_s_map.items()}

    orig_start_position = _project_position(start_position, tok_s_to_ns_map, orig_ns_to_s_map)
    if orig_start_position is None:
        if verbose_logging:
            logging.info("Couldn't map start position")
        return whole

    orig_end_position = _project_position(end_position, tok_s_to_ns_map, orig_ns_to_s_map)
    if orig_end_position is None:
        if verbose_logging:
            logging.info("Couldn't map end position")
        return whole

    return orig_start_position, orig_end_position + 1


def _get_best_indexes(logits, n_best_size):
    """Returns the indexes of the `n_best_size` largest logits, best first (ties: lower index)."""
    index_and_score = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)
    return [index for index, _ in index_and_score[:n_best_size]]


def _compute_softmax(scores):
    """Returns the softmax of a list of floats (a list of floats; [] for [])."""
    if not scores:
        return []
    max_score = max(scores)
    exp_scores = [math.exp(score - max_score) for score in scores]
    total_sum = sum(exp_scores)
    return [score / total_sum for score in exp_scores]


def _to_json(obj):
    # The original's layout: indented JSON and a final newline.
    return json.dumps(obj, indent=4) + "\n"


def _min_null_score(results):
    """Finds the window whose null answer (both logits at [CLS]) scores lowest.

    Args:
      results: the `RawResult`s of one example's features, in feature order.

    Returns:
      A `_NullScore` (score, feature_index, start_logit, end_logit) of the first window with the
      lowest start + end logit at position 0; (1000000, 0, 0, 0) if there is none.
    """
    null = _NullScore(score=1000000, feature_index=0, start_logit=0, end_logit=0)
    for feature_index, result in enumerate(results):
        feature_null_score = result.start_logits[0] + result.end_logits[0]
        if feature_null_score < null.score:
            null = _NullScore(score=feature_null_score, feature_index=feature_index,
                              start_logit=result.start_logits[0],
                              end_logit=result.end_logits[0])
    return null


def _is_valid_span(feature, start_index, end_index, max_answer_length):
    """Whether a window's span can be an answer.

    Args:
      feature: the window (`InputFeatures`).
      start_index: the span's first position in the window.
      end_index: the span's last position in the window.
      max_answer_length: longest answer, in word pieces.

    Returns:
      True iff both ends lie in the document part, the window is the start token's max context,
      end >= start and the span has at most `max_answer_length` word pieces.
    """
    if start_index >= len(feature.tokens) or end_index >= len(feature.tokens):
        return False
    if (start_index not in feature.token_to_orig_map
            or end_index not in feature.token_to_orig_map):
        return False
    if not feature.token_is_max_context.get(start_index, False):
        return False
    if end_index < start_index:
        return False
    return end_index - start_index + 1 <= max_answer_length


def _window_candidates(feature_index, feature, result, n_best_size, max_answer_length):
    """Combines a window's best start and end positions into candidate spans.

    Args:
      feature_index: the window's index among its example's features.
      feature: the window (`InputFeatures`).
      result: its `RawResult`.
      n_best_size: best start and best end positions considered.
      max_answer_length: longest answer, in word pieces.

    Returns:
      The valid spans as `_PrelimPrediction`s, ordered by start rank, then end rank.
    """
    # Only the window's own tokens compete: padding positions (how many depends on the
    # batch the window ran in) would otherwise push real spans out of the n best.
    num_tokens = len(feature.tokens)
    start_indexes = _get_best_indexes(result.start_logits[:num_tokens], n_best_size)
    end_indexes = _get_best_indexes(result.end_logits[:num_tokens], n_best_size)
    candidates = []
    for start_index in start_indexes:
        for end_index in end_indexes:
            if not _is_valid_span(feature, start_index, end_index, max_answer_length):
                continue
            candidates.append(_PrelimPrediction(
                feature_index=feature_index,
                start_index=start_index,
                end_index=end_index,
                start_logit=result.start_logits[start_index],
                end_logit=result.end_logits[end_index]))
    return candidates


def _prelim_predictions(features, results, n_best_size, max_answer_length, null):
    """Collects and ranks the candidate spans of all of an example's windows.

    Args:
      features: the example's windows (`InputFeatures`), in order.
      results: their `RawResult`s, in the same order.
      n_best_size: best start and best end positions considered per window.
      max_answer_length: longest answer, in word pieces.
      null: the example's `_NullScore` (v2.0), added as a [CLS]-[CLS] candidate; None for v1.1.

    Returns:
      The `_PrelimPrediction`s sorted by start + end logit, best first (stable on ties).
    """
    prelim_predictions = []
    for feature_index, (feature, result) in enumerate(zip(features, results, strict=True)):
        prelim_predictions.extend(_window_candidates(
            feature_index, feature, result, n_best_size, max_answer_length))
    if null is not None:
        prelim_predictions.append(_PrelimPrediction(
            feature_index=null.feature_index,
            start_index=0,
            end_index=0,
            start_logit=null.start_logit,
            end_logit=null.end_logit))
    return sorted(
        prelim_predictions, key=lambda x: (x.start_logit + x.end_logit), reverse=True)


def _span_text(example, feature, pred, do_lower_case, verbose_logging):
    """Turns a non-null candidate span back into text of the original context.

    Args:
      example: the `SquadExample`.
      feature: the window (`InputFeatures`) the span lies in.
      pred: the `_PrelimPrediction` (start_index > 0).
      do_lower_case: the tokenizer's casing.
      verbose_logging: log failed mappings back to the original text.

    Returns:
      (answer text, `AnswerSpan`), from `final_text_range`.
    """
    tok_tokens = feature.tokens[pred.start_index:(pred.end_index + 1)]
    orig_doc_start = feature.token_to_orig_map[pred.start_index]
    orig_doc_end = feature.token_to_orig_map[pred.end_index]
    # De-tokenize WordPieces that have been split off, and clean whitespace.
    tok_text = " ".join(tok_tokens)
    tok_text = tok_text.replace(" ##", "").replace("##", "")
    tok_text = " ".join(tok_text.strip().split())
    orig_text = example.doc_text(orig_doc_start, orig_doc_end)
    start, end = final_text_range(tok_text, orig_text, do_lower_case, verbose_logging)
    return orig_text[start:end], AnswerSpan(orig_doc_start, orig_doc_end, start, end)


def _nbest_predictions(example, features, prelim_predictions, n_best_size, do_lower_case, null,
                       verbose_logging):
    """Picks the n-best distinct answer texts of an example.

    Args:
      example: the `SquadExample`.
      features: its windows (`InputFeatures`), in order.
      prelim_predictions: its ranked `_PrelimPrediction`s (from `_prelim_predictions`).
      n_best_size: most entries taken from `prelim_predictions`.
      do_lower_case: the tokenizer's casing.
      null: the example's `_NullScore` (v2.0), or None (v1.1).
      verbose_logging: log failed mappings back to the original text.

    Returns:
      A list of `_NbestPrediction`, best first, the first of each distinct text; for v2.0 the
      null answer "" is appended if missing, and a nonce "empty" (logits 0.0) if no entry has
      text.
    """
    seen_predictions = set()
    nbest = []
    for pred in prelim_predictions:
        if len(nbest) >= n_best_size:
            break
        span = None
        if pred.start_index > 0:  # a non-null prediction
            final_text, span = _span_text(example, features[pred.feature_index], pred,
                                          do_lower_case, verbose_logging)
            if final_text in seen_predictions:
                continue
        else:
            final_text = ""
        seen_predictions.add(final_text)
        nbest.append(_NbestPrediction(text=final_text, start_logit=pred.start_logit,
                                      end_logit=pred.end_logit, span=span))

    # If the empty answer did not make the n-best, add it.
    if null is not None and "" not in seen_predictions:
        nbest.append(_NbestPrediction(
            text="", start_logit=null.start_logit, end_logit=null.end_logit))
    # In rare cases there is no valid span (v2.0: only the null answer); add a nonce
    # non-null prediction so there is something to report.
    if not any(entry.text for entry in nbest):
        nbest.append(_NbestPrediction(text="empty", start_logit=0.0, end_logit=0.0))
    return nbest


def _nbest_to_json(nbest):
    """Turns an n-best list into its JSON form, with probabilities.

    Args:
      nbest: a non-empty list of `_NbestPrediction`, best first.

    Returns:
      (nbest_json, best_non_null_entry): a list of OrderedDicts {"text", "probability" (softmax
      of start + end logit over the list), "start_logit", "end_logit"}, all floats but the text;
      and the first `_NbestPrediction` with non-empty text (None if there is none).
    """
    total_scores = []
    best_non_null_entry = None
    for entry in nbest:
        total_scores.append(entry.start_logit + entry.end_logit)
        if best_non_null_entry is None and entry.text:
            best_non_null_entry = entry
    probs = _compute_softmax(total_scores)

    nbest_json = []
    for i, entry in enumerate(nbest):
        output = collections.OrderedDict()
        output["text"] = entry.text
        output["probability"] = float(probs[i])
        output["start_logit"] = float(entry.start_logit)
        output["end_logit"] = float(entry.end_logit)
        nbest_json.append(output)
    return nbest_json, best_non_null_entry


def compute_predictions(all_examples, all_features, all_results, n_best_size, max_answer_length,
                        do_lower_case, version_2_with_negative=False,
                        null_score_diff_threshold=0.0, verbose_logging=False, spans=None):
    """Turns model logits into answers, n-best lists and null odds (see module docstring).

    Args:
      all_examples: list of `bert_tf.data.squad.SquadExample`.
      all_features: their `InputFeatures` (from `convert_examples_to_features`).
      all_results: one `RawResult` per feature (matched by `unique_id`).
      n_best_size: candidates kept per position and in the n-best list.
      max_answer_length: longest answer, in word pieces.
      do_lower_case: the tokenizer's casing (for `get_final_text`).
      version_2_with_negative: whether the null answer competes (SQuAD v2.0).
      null_score_diff_threshold: predict "" when null score - best non-null score exceeds it.
      verbose_logging: log failed mappings back to the original text.
      spans: a dict to fill with {question id: the `AnswerSpan` of the predicted answer, None
        for ""}, or None.

    Returns:
      (predictions, nbest, null_odds): OrderedDicts keyed by question id, in example order, of
      the answer text; of lists of {"text", "probability", "start_logit", "end_logit"}; and
      (v2.0 only, else empty) of the null score minus the best non-null score.
    """
    example_index_to_features = collections.defaultdict(list)
    for feature in all_features:
        example_index_to_features[feature.example_index].append(feature)
    unique_id_to_result = {result.unique_id: result for result in all_results}

    all_predictions = collections.OrderedDict()
    all_nbest_json = collections.OrderedDict()
    scores_diff_json = collections.OrderedDict()

    for example_index, example in enumerate(all_examples):
        features = example_index_to_features[example_index]
        results = [unique_id_to_result[feature.unique_id] for feature in features]
        null = _min_null_score(results) if version_2_with_negative else None
        prelim_predictions = _prelim_predictions(
            features, results, n_best_size, max_answer_length, null)
        nbest = _nbest_predictions(example, features, prelim_predictions, n_best_size,
                                   do_lower_case, null, verbose_logging)
        nbest_json, best_non_null_entry = _nbest_to_json(nbest)

        if not version_2_with_negative:
            all_predictions[example.qas_id] = nbest_json[0]["text"]
            best = nbest[0]
        else:
            # Predict "" iff the null score - the score of the best non-null > threshold.
            score_diff = float(null.score - best_non_null_entry.start_logit
                               - best_non_null_entry.end_logit)
            scores_diff_json[example.qas_id] = score_diff
            best = None if score_diff > null_score_diff_threshold else best_non_null_entry
            all_predictions[example.qas_id] = best.text if best else ""
        all_nbest_json[example.qas_id] = nbest_json
        if spans is not None:
            spans[example.qas_id] = best.span if best else None

    return all_predictions, all_nbest_json, scores_diff_json


def write_predictions(all_examples, all_features, all_results, n_best_size, max_answer_length,
                      do_lower_case, output_prediction_file, output_nbest_file,
                      output_null_log_odds_file, version_2_with_negative=False,
                      null_score_diff_threshold=0.0, verbose_logging=False):
    """Computes answers (see `compute_predictions`) and writes them as JSON.

    Writes `output_prediction_file` ({qas_id: answer}), `output_nbest_file`
    ({qas_id: [n-best entries]}) and, for v2.0, `output_null_log_odds_file`
    ({qas_id: null score - best non-null score}), each whole or not at all.

    Returns:
      The predictions ({qas_id: answer text}, an OrderedDict).
    """
    all_predictions, all_nbest_json, scores_diff_json = compute_predictions(
        all_examples, all_features, all_results, n_best_size, max_answer_length,
        do_lower_case, version_2_with_negative=version_2_with_negative,
        null_score_diff_threshold=null_score_diff_threshold, verbose_logging=verbose_logging)
    logging.info("Writing predictions to: %s", output_prediction_file)
    fileio.atomic_write_text(output_prediction_file, _to_json(all_predictions))
    logging.info("Writing nbest to: %s", output_nbest_file)
    fileio.atomic_write_text(output_nbest_file, _to_json(all_nbest_json))
    if version_2_with_negative:
        fileio.atomic_write_text(output_null_log_odds_file, _to_json(scores_diff_json))
    return all_predictions
