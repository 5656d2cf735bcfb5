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

_NbestPrediction = collections.namedtuple(
    "NbestPrediction", ["text", "start_logit", "end_logit"])


def get_final_text(pred_text, orig_text, do_lower_case, verbose_logging=False):
    """Projects the de-tokenized prediction back onto the original text.

    `pred_text` is word pieces joined back together (lower-cased, accents stripped, punctuation
    split off), `orig_text` the whole doc tokens it came from, e.g. pred "steve smith" and orig
    "Steve Smith's". `orig_text` is run through the same `BasicTokenizer`, both are stripped of
    spaces, and if they then have equal length their characters correspond one to one, so the
    span of `pred_text` in the tokenized text maps to a span of `orig_text`: "Steve Smith".
    When the heuristic fails (text not found, lengths differ) `orig_text` is returned.

    Args:
      pred_text: the predicted text, from word pieces (str).
      orig_text: the original doc tokens joined by single spaces (str).
      do_lower_case: the tokenizer's casing.
      verbose_logging: log why a mapping failed.

    Returns:
      A substring of `orig_text` (str).
    """

    def _strip_spaces(text):
        ns_chars = []
        ns_to_s_map = collections.OrderedDict()
        for i, c in enumerate(text):
            if c == " ":
                continue
            ns_to_s_map[len(ns_chars)] = i
            ns_chars.append(c)
        return "".join(ns_chars), ns_to_s_map

    tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    tok_text = " ".join(tokenizer.tokenize(orig_text))

    start_position = tok_text.find(pred_text)
    if start_position == -1:
        if verbose_logging:
            logging.info("Unable to find text: '%s' in '%s'", pred_text, orig_text)
        return orig_text
    end_position = start_position + len(pred_text) - 1

    orig_ns_text, orig_ns_to_s_map = _strip_spaces(orig_text)
    tok_ns_text, tok_ns_to_s_map = _strip_spaces(tok_text)
    if len(orig_ns_text) != len(tok_ns_text):
        if verbose_logging:
            logging.info("Length not equal after stripping spaces: '%s' vs '%s'",
                         orig_ns_text, tok_ns_text)
        return orig_text

    # Project the characters of `pred_text` back to `orig_text` through the alignment.
    tok_s_to_ns_map = {tok_index: i for i, tok_index in tok_ns_to_s_map.items()}

    orig_start_position = None
    if start_position in tok_s_to_ns_map:
        ns_start_position = tok_s_to_ns_map[start_position]
        if ns_start_position in orig_ns_to_s_map:
            orig_start_position = orig_ns_to_s_map[ns_start_position]
    if orig_start_position is None:
        if verbose_logging:
            logging.info("Couldn't map start position")
        return orig_text

    orig_end_position = None
    if end_position in tok_s_to_ns_map:
        ns_end_position = tok_s_to_ns_map[end_position]
        if ns_end_position in orig_ns_to_s_map:
            orig_end_position = orig_ns_to_s_map[ns_end_position]
    if orig_end_position is None:
        if verbose_logging:
            logging.info("Couldn't map end position")
        return orig_text

    return orig_text[orig_start_position:(orig_end_position + 1)]


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


def compute_predictions(all_examples, all_features, all_results, n_best_size, max_answer_length,
                        do_lower_case, version_2_with_negative=False,
                        null_score_diff_threshold=0.0, verbose_logging=False):
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

        prelim_predictions = []
        # The lowest null score (start + end logit at [CLS]) over the windows, and its window.
        score_null = 1000000  # large and positive
        min_null_feature_index = 0
        null_start_logit = 0
        null_end_logit = 0
        for feature_index, feature in enumerate(features):
            result = unique_id_to_result[feature.unique_id]
            start_indexes = _get_best_indexes(result.start_logits, n_best_size)
            end_indexes = _get_best_indexes(result.end_logits, n_best_size)
            if version_2_with_negative:
                feature_null_score = result.start_logits[0] + result.end_logits[0]
                if feature_null_score < score_null:
                    score_null = feature_null_score
                    min_null_feature_index = feature_index
                    null_start_logit = result.start_logits[0]
                    null_end_logit = result.end_logits[0]
            for start_index in start_indexes:
                for end_index in end_indexes:
                    # Drop spans outside the document part or otherwise invalid.
                    if start_index >= len(feature.tokens) or end_index >= len(feature.tokens):
                        continue
                    if (start_index not in feature.token_to_orig_map
                            or end_index not in feature.token_to_orig_map):
                        continue
                    if not feature.token_is_max_context.get(start_index, False):
                        continue
                    if end_index < start_index:
                        continue
                    if end_index - start_index + 1 > max_answer_length:
                        continue
                    prelim_predictions.append(_PrelimPrediction(
                        feature_index=feature_index,
                        start_index=start_index,
                        end_index=end_index,
                        start_logit=result.start_logits[start_index],
                        end_logit=result.end_logits[end_index]))

        if version_2_with_negative:
            prelim_predictions.append(_PrelimPrediction(
                feature_index=min_null_feature_index,
                start_index=0,
                end_index=0,
                start_logit=null_start_logit,
                end_logit=null_end_logit))
        prelim_predictions = sorted(
            prelim_predictions, key=lambda x: (x.start_logit + x.end_logit), reverse=True)

        seen_predictions = {}
        nbest = []
        for pred in prelim_predictions:
            if len(nbest) >= n_best_size:
                break
            if pred.start_index > 0:  # a non-null prediction
                feature = features[pred.feature_index]
                tok_tokens = feature.tokens[pred.start_index:(pred.end_index + 1)]
                orig_doc_start = feature.token_to_orig_map[pred.start_index]
                orig_doc_end = feature.token_to_orig_map[pred.end_index]
                orig_tokens = example.doc_tokens[orig_doc_start:(orig_doc_end + 1)]
                # De-tokenize WordPieces that have been split off, and clean whitespace.
                tok_text = " ".join(tok_tokens)
                tok_text = tok_text.replace(" ##", "").replace("##", "")
                tok_text = " ".join(tok_text.strip().split())
                orig_text = " ".join(orig_tokens)

                final_text = get_final_text(tok_text, orig_text, do_lower_case, verbose_logging)
                if final_text in seen_predictions:
                    continue
                seen_predictions[final_text] = True
            else:
                final_text = ""
                seen_predictions[final_text] = True
            nbest.append(_NbestPrediction(
                text=final_text, start_logit=pred.start_logit, end_logit=pred.end_logit))

        # If the empty answer did not make the n-best, add it.
        if version_2_with_negative and "" not in seen_predictions:
            nbest.append(_NbestPrediction(
                text="", start_logit=null_start_logit, end_logit=null_end_logit))
        # In rare cases there is no valid span (v2.0: only the null answer); add a nonce
        # non-null prediction so there is something to report.
        if not any(entry.text for entry in nbest):
            nbest.append(_NbestPrediction(text="empty", start_logit=0.0, end_logit=0.0))

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

        if not version_2_with_negative:
            all_predictions[example.qas_id] = nbest_json[0]["text"]
        else:
            # Predict "" iff the null score - the score of the best non-null > threshold.
            score_diff = float(score_null - best_non_null_entry.start_logit
                               - best_non_null_entry.end_logit)
            scores_diff_json[example.qas_id] = score_diff
            if score_diff > null_score_diff_threshold:
                all_predictions[example.qas_id] = ""
            else:
                all_predictions[example.qas_id] = best_non_null_entry.text
        all_nbest_json[example.qas_id] = nbest_json

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
