"""Per-token BERT activations as JSON lines, a drop-in for Google's `extract_features.py`.

Input: one example a line, `text_a` or `text_a ||| text_b`. Output: one JSON object a line,

    {"linex_index": 0, "features": [{"token": "[CLS]", "layers": [{"index": -1,
     "values": [0.123456, ...]}, ...]}, ...]}

with an entry for every real token ([CLS] and [SEP] included) and, for each requested layer
index (Python indexing into the encoder layers: -1 is the last), the hidden state rounded to 6
decimals. The key "linex_index" (sic) is the original's. With `output_attentions`, each
object also has `"attentions": [{"index": -1, "values": [[[p, ...], ...], ...]}, ...]`: for
each requested layer, the self-attention probabilities [heads, tokens, tokens] between the
real tokens (rounded the same way; rows sum to 1 up to rounding and any head mask).

Pipeline: `read_examples` -> `convert_examples_to_features` (as the original) -> a `tf.data`
pipeline that pads each batch to its longest sequence (or to `max_seq_length`) -> `BertModel`
(is_training=False) in a `tf.compat.v1.Session` -> `extract_features` (one JSON-ready dict per
example) -> `write_jsonl` (a temp file renamed at the end, so no half output has the final name).
"""

import dataclasses
import json
import re
import time

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio, modeling, tokenization
from bert_tf.data import bert_inputs
from bert_tf.errors import BertTfError
from bert_tf.training import checkpoints
from bert_tf.training import session as session_lib

tf1 = tf.compat.v1

PADDING_MODES = ("longest", "max_seq_length")

# Seconds between progress log lines.
_LOG_EVERY_SECS = 10.0

# The tokens `convert_examples_to_features` looks up in the vocab.
_NEEDED_SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]")


# eq=False: instances compare and hash by identity, as plain classes do.
@dataclasses.dataclass(eq=False)
class InputExample:
    """One line of the input file: a text, or a pair of texts (`text_b` None for one text)."""

    unique_id: int
    text_a: str
    text_b: str | None


@dataclasses.dataclass(eq=False)
class InputFeatures:
    """One example as model inputs.

    Attributes:
      unique_id: the example's id (its line number).
      tokens: the packed word pieces [num_tokens], unpadded.
      input_ids, input_mask, input_type_ids: int lists [seq_length], zero-padded.
    """

    unique_id: int
    tokens: list
    input_ids: list
    input_mask: list
    input_type_ids: list


def read_examples(input_file):
    """Reads `input_file` into a list of `InputExample`, one a line.

    As in the original: each line is stripped; `a ||| b` (with the spaces) makes a pair, split
    at the last ` ||| `; the `unique_id` is the 0-based line number, so a blank line is an
    example with empty text and line numbers stay aligned with "linex_index".

    Raises:
      BertTfError: if the file is missing, not UTF-8, or has no text at all.
    """
    _require_path(input_file, flag="input_file", what="input file")
    with tf.io.gfile.GFile(input_file, "rb") as reader:
        content = reader.read()
    # Split on "\n" only, as the original's readline() loop does.
    raw_lines = content.split(b"\n")
    if raw_lines[-1] == b"":
        raw_lines.pop()
    examples = []
    for line_number, raw_line in enumerate(raw_lines):
        try:
            line = raw_line.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise BertTfError(f"--input_file: line {line_number + 1} of '{input_file}' is not "
                              "UTF-8 text; save the file as UTF-8.") from None
        match = re.match(r"^(.*) \|\|\| (.*)$", line)
        if match is None:
            text_a, text_b = line, None
        else:
            text_a, text_b = match.group(1), match.group(2)
        examples.append(InputExample(unique_id=line_number, text_a=text_a, text_b=text_b))
    if not any(example.text_a or example.text_b for example in examples):
        raise BertTfError(f"--input_file: '{input_file}' has no text; write one example a line, "
                          "'text' or 'text_a ||| text_b'.")
    return examples


def convert_examples_to_features(examples, seq_length, tokenizer):
    """Tokenizes examples into `InputFeatures` of `seq_length`, as the original does.

    The layout is `[CLS] a [SEP]` (token type 0), then `b [SEP]` (token type 1) for a pair.
    Pairs are truncated by `bert_inputs.truncate_seq_pair` to seq_length - 3 tokens, single
    texts to seq_length - 2. Ids, mask and token types are zero-padded to `seq_length`.

    Args:
      examples: list of `InputExample`.
      seq_length: the maximum sequence length, in word pieces, [CLS] and [SEP] included.
      tokenizer: a `tokenization.FullTokenizer`.

    Returns:
      A list of `InputFeatures`, one per example, in order.
    """
    features = []
    for example in examples:
        tokens_a = tokenizer.tokenize(example.text_a)
        tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
        packed = bert_inputs.pack_and_pad(tokens_a, tokens_b, tokenizer, seq_length)
        features.append(InputFeatures(
            unique_id=example.unique_id,
            tokens=packed.tokens,
            input_ids=packed.input_ids,
            input_mask=packed.input_mask,
            input_type_ids=packed.segment_ids))
    return features


def parse_layer_indexes(layers, num_hidden_layers):
    """Parses the `--layers` flag, e.g. "-1,-2,-3,-4", into a list of ints.

    An index is Python indexing into the encoder layers (not the embeddings): -1 is the last
    layer, 0 the first.

    Raises:
      BertTfError: naming the flag and the valid range, for a non-integer or out-of-range index.
    """
    valid = (f"use comma-separated integers from {-num_hidden_layers} to {num_hidden_layers - 1} "
             f"for this {num_hidden_layers}-layer model (-1 is the last layer)")
    parts = [part.strip() for part in str(layers).split(",")]
    if not any(parts):
        raise BertTfError(f"--layers: no layer index given; {valid}.")
    layer_indexes = []
    for part in parts:
        try:
            index = int(part)
        except ValueError:
            raise BertTfError(f"--layers: '{part}' is not an integer; {valid}.") from None
        if not -num_hidden_layers <= index < num_hidden_layers:
            raise BertTfError(f"--layers: layer index {index} is out of range; {valid}.")
        layer_indexes.append(index)
    return layer_indexes


def make_dataset(features, batch_size, padding="longest"):
    """A `tf.data` pipeline over `features`: batched, padded, prefetched.

    Args:
      features: list of `InputFeatures` (ids padded to a common seq_length, as made by
        `convert_examples_to_features`).
      batch_size: examples a batch; the last batch may be smaller.
      padding: "longest" pads each batch to its longest example (less compute on short
        text); "max_seq_length" pads every batch to the features' seq_length.

    Returns:
      A `tf.data.Dataset` of dicts: "unique_ids" int64 [B], "input_ids", "input_mask",
      "input_type_ids" int32 [B, S], where S is the batch's longest length or seq_length.
    """
    if padding not in PADDING_MODES:
        raise BertTfError(f"--padding: unknown value '{padding}'; use one of "
                          f"{', '.join(PADDING_MODES)}.")
    seq_length = max(len(feature.input_ids) for feature in features)

    def generate():
        # Real tokens only: padded_batch adds the padding the chosen mode needs.
        for feature in features:
            length = len(feature.tokens)
            yield {"unique_ids": feature.unique_id,
                   "input_ids": feature.input_ids[:length],
                   "input_mask": feature.input_mask[:length],
                   "input_type_ids": feature.input_type_ids[:length]}

    sequence_spec = tf.TensorSpec([None], tf.int32)
    dataset = tf.data.Dataset.from_generator(generate, output_signature={
        "unique_ids": tf.TensorSpec([], tf.int64),
        "input_ids": sequence_spec,
        "input_mask": sequence_spec,
        "input_type_ids": sequence_spec})
    padded_length = None if padding == "longest" else seq_length
    dataset = dataset.padded_batch(batch_size, padded_shapes={
        "unique_ids": [],
        "input_ids": [padded_length],
        "input_mask": [padded_length],
        "input_type_ids": [padded_length]})
    return dataset.prefetch(tf.data.AUTOTUNE)


def extract_layer_outputs(bert_config, init_checkpoint, features, layer_indexes, batch_size=32,
                          padding="longest", use_one_hot_embeddings=False,
                          output_attentions=False, session_config=None):
    """Runs BERT over `features` and yields each example's hidden states.

    Builds its own graph and session; the default graph is left alone.

    Args:
      bert_config: `modeling.BertConfig`.
      init_checkpoint: checkpoint prefix with the BERT variables (Google layout).
      features: list of `InputFeatures`.
      layer_indexes: encoder layer indexes (Python indexing; -1 is the last layer).
      batch_size: examples a session run.
      padding: "longest" or "max_seq_length" (see `make_dataset`); results agree to float
        rounding, since padding is masked out of attention.
      use_one_hot_embeddings: look embeddings up with a one-hot matmul instead of a gather.
      output_attentions: also fetch the attention probabilities of those layers.
      session_config: ConfigProto of the session (`session_lib.session_config`, e.g. XLA).

    Yields:
      (feature, outputs) in the order of `features`, where `outputs` is a list with one float32
      array [len(feature.tokens), H] per entry of `layer_indexes`; with `output_attentions`,
      (feature, outputs, attentions) where `attentions` has one array [N, len, len] per entry.

    Raises:
      BertTfError: if the checkpoint is unreadable, lacks encoder variables, or has shapes
        that differ from the config's.
    """
    if not features:
        return
    unique_id_to_feature = {feature.unique_id: feature for feature in features}
    graph = tf.Graph()
    with graph.as_default():
        batch = tf1.data.make_one_shot_iterator(session_lib.session_dataset(
            make_dataset(features, batch_size, padding))).get_next()
        model = modeling.BertModel(
            config=bert_config,
            is_training=False,
            input_ids=batch["input_ids"],
            input_mask=batch["input_mask"],
            token_type_ids=batch["input_type_ids"],
            use_one_hot_embeddings=use_one_hot_embeddings)
        _init_from_checkpoint(init_checkpoint)
        all_layers = model.get_all_encoder_layers()
        fetches = {"unique_ids": batch["unique_ids"],
                   "layers": [all_layers[index] for index in layer_indexes]}
        if output_attentions:
            all_probs = model.get_all_attention_probs()  # [B, N, S, S] per layer
            fetches["attentions"] = [all_probs[index] for index in layer_indexes]
        init_op = tf1.global_variables_initializer()
    graph.finalize()

    with tf1.Session(graph=graph, config=session_config) as session:
        session.run(init_op)
        start = last_log = time.time()
        done = 0
        while True:
            try:
                result = session.run(fetches)
            except tf.errors.OutOfRangeError:
                break
            for row, unique_id in enumerate(result["unique_ids"]):
                feature = unique_id_to_feature[int(unique_id)]
                length = len(feature.tokens)
                outputs = [layer[row, :length] for layer in result["layers"]]
                if output_attentions:
                    yield feature, outputs, [probs[row, :, :length, :length]
                                             for probs in result["attentions"]]
                else:
                    yield feature, outputs
            done += len(result["unique_ids"])
            now = time.time()
            if now - last_log >= _LOG_EVERY_SECS:
                last_log = now
                logging.info("Extracted %d of %d examples (%.1f examples/sec)", done,
                             len(features), done / (now - start))
        elapsed = max(time.time() - start, 1e-9)
        logging.info("Extracted %d examples in %.1f s (%.1f examples/sec)", done, elapsed,
                     done / elapsed)


def _init_from_checkpoint(init_checkpoint):
    """Initializes the graph's BERT variables from `init_checkpoint`.

    Raises:
      BertTfError: if an embedding or encoder variable is missing from the checkpoint (its
        output would be random); the pooler, unused here, may be missing.
    """
    _, missing = modeling.init_from_checkpoint(init_checkpoint, log=False)
    missing = [name for name in missing if "/pooler/" not in name]
    if missing:
        raise BertTfError(
            f"--init_checkpoint: checkpoint '{init_checkpoint}' has no variable "
            f"'{missing[0].split(':')[0]}' ({len(missing)} of the model's variables are "
            "missing); pass a BERT checkpoint with Google's variable names (bert/embeddings/..., "
            "bert/encoder/layer_N/...).")
    logging.info("Initialized the BERT variables from %s", init_checkpoint)


def feature_to_json(feature, layer_outputs, layer_indexes, attentions=None):
    """The original's JSON object for one example.

    Args:
      feature: the example's `InputFeatures`.
      layer_outputs: one array [len(feature.tokens), H] per entry of `layer_indexes`.
      layer_indexes: the layer indexes the outputs belong to.
      attentions: optional, one array [N, len(feature.tokens), len(feature.tokens)] per entry
        of `layer_indexes`; adds the "attentions" key.

    Returns:
      {"linex_index": unique_id, "features": [{"token": t, "layers": [{"index": i,
      "values": [...]}, ...]}, ...]}, values rounded to 6 decimals as `round(float(x), 6)`.
    """
    per_layer_rows = [_round6(output).tolist() for output in layer_outputs]
    all_features = []
    for position, token in enumerate(feature.tokens):
        all_layers = [{"index": layer_index, "values": rows[position]}
                      for layer_index, rows in zip(layer_indexes, per_layer_rows, strict=True)]
        all_features.append({"token": token, "layers": all_layers})
    record = {"linex_index": feature.unique_id, "features": all_features}
    if attentions is not None:
        record["attentions"] = [{"index": layer_index, "values": _round6(probs).tolist()}
                                for layer_index, probs in zip(layer_indexes, attentions,
                                                              strict=True)]
    return record


def _round6(values):
    """`round(float(x), 6)` for every x of a float32 array, vectorized: a float64 array.

    Bit-identical to Python's `round` for float32 input: x * 1e6 is exact in float64 (24 + 14
    significant bits < 53), `rint` rounds that exact value half-to-even as `round` does, and the
    correctly rounded division by 1e6 gives the double nearest the decimal, as `round` returns.
    """
    scaled = np.asarray(values, dtype=np.float32).astype(np.float64) * 1e6
    return np.rint(scaled) / 1e6


def extract_features(bert_config, init_checkpoint, features, layer_indexes, batch_size=32,
                     padding="longest", use_one_hot_embeddings=False, output_attentions=False,
                     session_config=None):
    """Yields the original's JSON object (see `feature_to_json`) for each feature, in order.

    Arguments as `extract_layer_outputs`.
    """
    for feature, outputs, *attentions in extract_layer_outputs(
            bert_config, init_checkpoint, features, layer_indexes, batch_size=batch_size,
            padding=padding, use_one_hot_embeddings=use_one_hot_embeddings,
            output_attentions=output_attentions, session_config=session_config):
        yield feature_to_json(feature, outputs, layer_indexes,
                              attentions[0] if attentions else None)


def write_jsonl(records, output_file):
    """Writes `records` (JSON-serializable objects) to `output_file`, one a line.

    The lines go to a temp file next to `output_file`, renamed over it only when every record
    is written: an interrupted run leaves any earlier `output_file` as it was.

    Returns:
      The number of records written.
    """
    count = 0
    with fileio.replaced_on_success(output_file) as temp_file, \
            tf.io.gfile.GFile(temp_file, "w") as writer:
        for record in records:
            writer.write(json.dumps(record) + "\n")
            count += 1
    return count


def run_extract_features(input_file, output_file, vocab_file, bert_config_file, init_checkpoint,
                         layers="-1,-2,-3,-4", do_lower_case=True, max_seq_length=128,
                         batch_size=32, padding="longest", use_one_hot_embeddings=False,
                         output_attentions=False, use_xla=False, use_tpu=False):
    """The `extract_features.py` script: checks every input, then writes the JSON lines.

    Everything is checked before the model is built, so bad input stops early with one
    `BertTfError` naming the flag; `output_file` is written whole or not at all.

    Returns:
      The number of examples written.
    """
    if use_tpu:
        raise BertTfError("--use_tpu: TPU execution is not available for extract_features; "
                          "run without --use_tpu (CPU/GPU).")
    _require_path(input_file, flag="input_file", what="input file")
    if not output_file:
        raise BertTfError("--output_file: no output file given; pass the path of the JSON "
                          "lines file to write.")
    _require_path(vocab_file, flag="vocab_file", what="vocab file")
    _require_path(bert_config_file, flag="bert_config_file", what="BERT config file")
    init_checkpoint = checkpoints.resolve_checkpoint(init_checkpoint)
    if padding not in PADDING_MODES:
        raise BertTfError(f"--padding: unknown value '{padding}'; use one of "
                          f"{', '.join(PADDING_MODES)}.")
    if batch_size < 1:
        raise BertTfError(f"--batch_size must be at least 1, got {batch_size}.")

    bert_config = modeling.BertConfig.from_json_file(bert_config_file)
    if max_seq_length > bert_config.max_position_embeddings:
        raise BertTfError(
            f"--max_seq_length={max_seq_length} is longer than max_position_embeddings "
            f"({bert_config.max_position_embeddings}) of '{bert_config_file}'; use "
            f"--max_seq_length of at most {bert_config.max_position_embeddings}.")
    if max_seq_length < 3:
        raise BertTfError(f"--max_seq_length={max_seq_length} leaves no room for text after "
                          "[CLS] and [SEP]; use at least 3.")
    layer_indexes = parse_layer_indexes(layers, bert_config.num_hidden_layers)
    tokenization.validate_case_matches_checkpoint(do_lower_case, init_checkpoint)

    tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)
    tokenization.check_vocab_has_special_tokens(tokenizer.vocab, vocab_file,
                                                tokens=_NEEDED_SPECIAL_TOKENS)
    examples = read_examples(input_file)
    features = convert_examples_to_features(examples, max_seq_length, tokenizer)
    _check_features_fit_config(features, bert_config, vocab_file, bert_config_file)

    logging.info("Extracting layers %s of %d examples (batch_size=%d, padding=%s)",
                 layer_indexes, len(features), batch_size, padding)
    records = extract_features(bert_config, init_checkpoint, features, layer_indexes,
                               batch_size=batch_size, padding=padding,
                               use_one_hot_embeddings=use_one_hot_embeddings,
                               output_attentions=output_attentions,
                               session_config=session_lib.session_config(use_xla))
    count = write_jsonl(records, output_file)
    logging.info("Wrote %d examples to %s", count, output_file)
    return count


def _check_features_fit_config(features, bert_config, vocab_file, bert_config_file):
    """Raises `BertTfError` if token ids or token types exceed the config's embedding tables."""
    max_id = max(max(feature.input_ids) for feature in features)
    if max_id >= bert_config.vocab_size:
        raise BertTfError(
            f"vocab file '{vocab_file}' has token id {max_id} but vocab_size of "
            f"'{bert_config_file}' is {bert_config.vocab_size}; pass the vocab.txt that came "
            "with the checkpoint.")
    has_pairs = any(1 in feature.input_type_ids for feature in features)
    if has_pairs and bert_config.type_vocab_size < 2:
        raise BertTfError(
            f"--input_file has 'text_a ||| text_b' pairs but type_vocab_size of "
            f"'{bert_config_file}' is {bert_config.type_vocab_size}; use single texts.")


def _require_path(path, flag, what):
    """`fileio.require_file` for local paths; an existence check for remote (gs://...) ones."""
    if path and "://" in path:
        if not tf.io.gfile.exists(path):
            raise BertTfError(f"--{flag}: {what} '{path}' does not exist; check the path.")
        return path
    return fileio.require_file(path, flag=flag, what=what)
