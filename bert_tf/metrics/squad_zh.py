"""The CMRC 2018 evaluation (also used for DRCD): exact match and F1 on Chinese answers.

Follows the rules of the official `cmrc2018_evaluate.py` (ymcui/cmrc2018, "v5"):

- Both texts are lower-cased and stripped of surrounding whitespace.
- Segmentation (`mixed_segmentation`): each CJK ideograph of U+4E00..U+9FA5 is a segment of
  its own; so is each mark of `PUNCTUATION` (when punctuation is kept); the text between them
  is split into words. For F1 the marks of `PUNCTUATION` are removed first.
- F1: the longest common substring (contiguous run of segments) of the prediction and a gold
  answer gives precision = its length / prediction segments and recall = its length / gold
  segments; F1 is 0 when nothing is shared; the question scores its best gold answer.
- EM: 1 when, after removing the marks of `PUNCTUATION` (nothing else: spaces inside stay),
  the prediction equals a gold answer.
- Totals are percentages over all questions; a question without a prediction scores 0 (and
  is reported on stderr and counted in "skip").

The official script splits the text between ideographs and marks with NLTK's
`word_tokenize`; this module, which must not depend on NLTK, splits it on whitespace into runs
of letters, digits and combining marks (a number keeps its inner "." and ",": "3.5",
"1,000"), every other character being a word of its own. That is what `word_tokenize` gives on
Latin words, numbers and punctuation; it differs on English contractions and abbreviations
("don't", "U.S."), which NLTK keeps together or splits differently, and on the few symbols
NLTK leaves attached to a word (a full-width "％").

Note the official mark list: Chinese marks and some ASCII ones (`- : _ * ^ / \\ ~ ` + =`), but
not `, . ! ? ( ) " '` and the like, which stay (as words for F1, as characters for EM); and
its "……" is a two-character string, so a single "…" is never removed.
"""

import sys
import unicodedata

from bert_tf import errors
from bert_tf.data import squad as squad_data

# The official script's `sp_char`, the "……" entry (two characters) included as it is.
PUNCTUATION = frozenset([
    "-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=",
    "\uff0c", "\u3002", "\uff1a", "\uff1f", "\uff01", "\u201c", "\u201d", "\uff1b", "\u2019",
    "\u300a", "\u300b", "\u2026\u2026", "\u00b7", "\u3001", "\u300c", "\u300d", "\uff08",
    "\uff09", "\uff0d", "\uff5e", "\u300e", "\u300f"])

# The official script's range of ideographs that are segments of their own.
_FIRST_IDEOGRAPH, _LAST_IDEOGRAPH = 0x4E00, 0x9FA5


def _is_ideograph(char):
    return _FIRST_IDEOGRAPH <= ord(char) <= _LAST_IDEOGRAPH


def _is_word_char(char):
    return unicodedata.category(char)[0] in "LNM"


def _split_words(text):
    """The words of text between ideographs and marks (see the module docstring)."""
    words = []
    for chunk in text.split():
        word = ""
        for i, char in enumerate(chunk):
            inside_number = (char in ".," and word[-1:].isdigit()
                             and chunk[i + 1:i + 2].isdigit())
            if _is_word_char(char) or inside_number:
                word += char
                continue
            if word:
                words.append(word)
            words.append(char)
            word = ""
        if word:
            words.append(word)
    return words


def mixed_segmentation(text, remove_punctuation=False):
    """Cuts `text` into the official script's segments.

    Args:
      text: an answer or a prediction (str).
      remove_punctuation: drop the marks of `PUNCTUATION` first (as F1 does).

    Returns:
      The segments (list of str): single ideographs, single marks, and the words between them.
    """
    segments = []
    pending = ""
    for char in text.lower().strip():
        if remove_punctuation and char in PUNCTUATION:
            continue
        if _is_ideograph(char) or char in PUNCTUATION:
            segments.extend(_split_words(pending))
            pending = ""
            segments.append(char)
        else:
            pending += char
    segments.extend(_split_words(pending))
    return segments


def strip_punctuation(text):
    """`text` lower-cased and stripped, without the marks of `PUNCTUATION` (for EM)."""
    return "".join(char for char in text.lower().strip() if char not in PUNCTUATION)


def longest_common_substring_length(a, b):
    """The length of the longest contiguous run shared by sequences `a` and `b` (an int)."""
    best = 0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                current[j + 1] = previous[j] + 1
                best = max(best, current[j + 1])
        previous = current
    return best


def f1_score(prediction, ground_truth):
    """The official F1 of one prediction against one gold answer (a float in [0, 1])."""
    gold_segments = mixed_segmentation(ground_truth, remove_punctuation=True)
    pred_segments = mixed_segmentation(prediction, remove_punctuation=True)
    common = longest_common_substring_length(gold_segments, pred_segments)
    if common == 0:
        return 0.0
    precision = common / len(pred_segments)
    recall = common / len(gold_segments)
    return 2 * precision * recall / (precision + recall)


def exact_match_score(prediction, ground_truth):
    """1 if the texts are equal without the marks of `PUNCTUATION` (lower-cased), else 0."""
    return int(strip_punctuation(prediction) == strip_punctuation(ground_truth))


def evaluate(dataset, predictions, source="SQuAD data"):
    """The official CMRC 2018 evaluation.

    Args:
      dataset: the list under "data" of a SQuAD-format JSON file (CMRC 2018, DRCD).
      predictions: {question id: answer text}.
      source: names the data in error messages.

    Returns:
      {"exact_match": percent, "f1": percent, "average": (EM + F1) / 2, "total": questions,
      "skip": questions without a prediction}: the official script's EM, F1, AVERAGE, TOTAL
      and SKIP, as numbers rather than "%.3f" strings.
    """
    f1 = exact_match = total = skip = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                golds = _gold_texts(qa, source)
                total += 1
                if qa["id"] not in predictions:
                    print(f"Unanswered question: {qa['id']}", file=sys.stderr)
                    skip += 1
                    continue
                prediction = predictions[qa["id"]]
                f1 += max(f1_score(prediction, gold) for gold in golds)
                exact_match += max(exact_match_score(prediction, gold) for gold in golds)
    if total == 0:
        raise errors.BertTfError(f"{source} has no questions to evaluate.")
    f1, exact_match = 100.0 * f1 / total, 100.0 * exact_match / total
    return {"exact_match": exact_match, "f1": f1, "average": (exact_match + f1) / 2,
            "total": total, "skip": skip}


def _gold_texts(qa, source):
    answers = qa.get("answers")
    if (not isinstance(answers, list) or not answers
            or not all(isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers)):
        raise errors.BertTfError(
            f"{source}: question {qa['id']!r} has no \"answers\" list of {{\"text\": ...}}; "
            "the CMRC 2018 metric needs at least one gold answer per question.")
    return [a["text"] for a in answers]


def dataset_is_chinese(dataset):
    """Whether the contexts of `dataset` read as Chinese (`squad.is_mostly_cjk`, the rule that
    also gives a context's CJK ideographs doc tokens of their own), and the share of CJK
    ideographs among their characters: (bool, float). The contexts rather than the gold
    answers decide: CMRC 2018 and DRCD answers are often numbers, dates and Latin names."""
    share = squad_data.cjk_share(paragraph["context"] for article in dataset
                                 for paragraph in article["paragraphs"])
    return share >= squad_data.CJK_SHARE, share
