"""Entity-level precision / recall / F1 with the semantics of the CoNLL `conlleval` script.

Chunks are found exactly as conlleval finds them, so IOB1, IOB2 (BIO) and IOBES tags all
work and odd sequences count the same way: an `I-X` after `O` (or after a chunk of another
type) starts a chunk, a change of type ends one, `B-X` always starts one. A predicted chunk
is correct only when its start, end and type all match a gold chunk.

Scores are fractions in [0, 1] (conlleval prints the same numbers times 100; see
`format_report`, which prints them as conlleval does).
"""

import collections
import dataclasses

from bert_tf import errors, fileio

# conlleval uses this token as the sentence boundary; it behaves like an "O" tag.
_BOUNDARY_TAG = "O"


@dataclasses.dataclass
class ChunkScores:
    """Counts and scores of one entity type (or of all types together).

    Attributes:
      precision: correct_chunks / predicted_chunks (0.0 when nothing was predicted).
      recall: correct_chunks / gold_chunks (0.0 when there is no gold chunk).
      f1: 2 * precision * recall / (precision + recall) (0.0 when both are 0).
      gold_chunks: chunks in the gold tags.
      predicted_chunks: chunks in the predicted tags.
      correct_chunks: predicted chunks with the same start, end and type as a gold chunk.
    """
    precision: float
    recall: float
    f1: float
    gold_chunks: int
    predicted_chunks: int
    correct_chunks: int


@dataclasses.dataclass
class NerEvaluation:
    """conlleval's result.

    Attributes:
      overall: scores over all entity types.
      per_type: scores per entity type (e.g. "PER"), types sorted by name.
      accuracy: fraction of tokens whose predicted tag equals the gold tag.
      num_tokens: tokens scored.
    """
    overall: ChunkScores
    per_type: dict
    accuracy: float
    num_tokens: int

    def to_dict(self):
        """Flat dict for `eval_results.txt`: precision, recall, f1, accuracy, f1_PER, ..."""
        result = {"precision": self.overall.precision, "recall": self.overall.recall,
                  "f1": self.overall.f1, "accuracy": self.accuracy}
        for chunk_type, scores in self.per_type.items():
            result[f"precision_{chunk_type}"] = scores.precision
            result[f"recall_{chunk_type}"] = scores.recall
            result[f"f1_{chunk_type}"] = scores.f1
        return result


def split_tag(tag):
    """Splits "B-PER" into ("B", "PER"); a tag without "-" (like "O") has type ""."""
    prefix, dash, chunk_type = tag.partition("-")
    return (prefix, chunk_type) if dash else (tag, "")


def end_of_chunk(previous_prefix, prefix, previous_type, chunk_type):
    """True if a chunk ended between the previous token and this one (conlleval's rules)."""
    if previous_prefix in ("E", "S"):
        return True
    if previous_prefix in ("B", "I") and prefix in ("B", "S", "O"):
        return True
    if previous_prefix not in ("O", ".") and previous_type != chunk_type:
        return True
    return False


def start_of_chunk(previous_prefix, prefix, previous_type, chunk_type):
    """True if a chunk starts at this token (conlleval's rules; I- after O starts one)."""
    if prefix in ("B", "S"):
        return True
    if previous_prefix in ("E", "S", "O") and prefix in ("E", "I"):
        return True
    if prefix not in ("O", ".") and previous_type != chunk_type:
        return True
    return False


def _scores(correct, predicted, gold):
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2.0 * precision * recall / (precision + recall) if precision + recall else 0.0
    return ChunkScores(precision=precision, recall=recall, f1=f1, gold_chunks=gold,
                       predicted_chunks=predicted, correct_chunks=correct)


def evaluate(gold_sentences, predicted_sentences):
    """Scores predicted tag sequences against gold ones as conlleval does.

    Args:
      gold_sentences: list of sentences, each a list of gold tags ("B-PER", "I-LOC", "O", ...).
      predicted_sentences: the predicted tags, same shape.

    Returns:
      A `NerEvaluation`.
    """
    if len(gold_sentences) != len(predicted_sentences):
        raise errors.BertTfError(
            f"NER evaluation: {len(predicted_sentences)} predicted sentences for "
            f"{len(gold_sentences)} gold sentences; predict every sentence.")
    # One stream of (gold, predicted) tags with a boundary "O" between sentences, as
    # conlleval reads its input file; boundaries end chunks but are not counted as tokens.
    stream = []
    sentence_pairs = zip(gold_sentences, predicted_sentences, strict=True)
    for index, (gold, predicted) in enumerate(sentence_pairs):
        if len(gold) != len(predicted):
            raise errors.BertTfError(
                f"NER evaluation: sentence {index} has {len(gold)} gold tags but "
                f"{len(predicted)} predicted tags; predict one tag per word.")
        stream.extend((g, p, True) for g, p in zip(gold, predicted, strict=True))
        stream.append((_BOUNDARY_TAG, _BOUNDARY_TAG, False))

    correct_chunks = collections.Counter()
    gold_chunks = collections.Counter()
    predicted_chunks = collections.Counter()
    correct_tags = 0
    num_tokens = 0
    in_correct = False  # inside a chunk that so far matches in gold and prediction
    last_gold, last_gold_type = "O", ""
    last_guess, last_guess_type = "O", ""
    for gold_tag, guess_tag, is_token in stream:
        gold, gold_type = split_tag(gold_tag)
        guess, guess_type = split_tag(guess_tag)
        end_gold = end_of_chunk(last_gold, gold, last_gold_type, gold_type)
        end_guess = end_of_chunk(last_guess, guess, last_guess_type, guess_type)
        start_gold = start_of_chunk(last_gold, gold, last_gold_type, gold_type)
        start_guess = start_of_chunk(last_guess, guess, last_guess_type, guess_type)

        if in_correct:
            if end_gold and end_guess and last_guess_type == last_gold_type:
                in_correct = False
                correct_chunks[last_gold_type] += 1
            elif end_gold != end_guess or guess_type != gold_type:
                in_correct = False
        if start_gold and start_guess and guess_type == gold_type:
            in_correct = True
        if start_gold:
            gold_chunks[gold_type] += 1
        if start_guess:
            predicted_chunks[guess_type] += 1
        if is_token:
            if gold == guess and gold_type == guess_type:
                correct_tags += 1
            num_tokens += 1
        last_gold, last_gold_type = gold, gold_type
        last_guess, last_guess_type = guess, guess_type
    # The stream always ends with a boundary, which closes any open chunk, so in_correct
    # is False here (conlleval's final check is kept for inputs without a last boundary).
    if in_correct:
        correct_chunks[last_gold_type] += 1

    chunk_types = sorted(set(gold_chunks) | set(predicted_chunks))
    per_type = {t: _scores(correct_chunks[t], predicted_chunks[t], gold_chunks[t])
                for t in chunk_types}
    overall = _scores(sum(correct_chunks.values()), sum(predicted_chunks.values()),
                      sum(gold_chunks.values()))
    return NerEvaluation(overall=overall, per_type=per_type,
                         accuracy=correct_tags / num_tokens if num_tokens else 0.0,
                         num_tokens=num_tokens)


def evaluate_conll_file(path):
    """Runs `evaluate` on a conlleval input file: last two columns gold, predicted tags.

    Blank lines separate sentences; `-DOCSTART-` lines are skipped.
    """
    fileio.require_file(path, what="CoNLL predictions file")
    gold_sentences, predicted_sentences = [], []
    gold, predicted = [], []
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if gold:
                    gold_sentences.append(gold)
                    predicted_sentences.append(predicted)
                gold, predicted = [], []
                continue
            if len(fields) < 3:
                raise errors.BertTfError(
                    f"{path}:{line_number}: expected 'token gold predicted', found "
                    f"{len(fields)} field(s); write one token, its gold and predicted tag a line.")
            gold.append(fields[-2])
            predicted.append(fields[-1])
    if gold:
        gold_sentences.append(gold)
        predicted_sentences.append(predicted)
    return evaluate(gold_sentences, predicted_sentences)


def format_report(evaluation):
    """The evaluation as conlleval prints it (percentages, two decimals)."""
    overall = evaluation.overall
    lines = [
        f"processed {evaluation.num_tokens} tokens with {overall.gold_chunks} phrases; "
        f"found: {overall.predicted_chunks} phrases; correct: {overall.correct_chunks}.",
        f"accuracy: {100 * evaluation.accuracy:6.2f}%; precision: {100 * overall.precision:6.2f}%; "
        f"recall: {100 * overall.recall:6.2f}%; FB1: {100 * overall.f1:6.2f}",
    ]
    for chunk_type, scores in evaluation.per_type.items():
        lines.append(
            f"{chunk_type:>17}: precision: {100 * scores.precision:6.2f}%; "
            f"recall: {100 * scores.recall:6.2f}%; FB1: {100 * scores.f1:6.2f}  "
            f"{scores.predicted_chunks}")
    return "\n".join(lines) + "\n"
