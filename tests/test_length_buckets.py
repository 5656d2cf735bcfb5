"""--bucket_by_length: fine-tuning batches from length buckets (`input_pipeline.record_input_fn`).

Input level: records of known ids and lengths (mostly short, as GLUE sentences against a 64
limit) go through the training input_fn; every batch must have the requested size, be cut to
the smallest bucket length that holds its longest example, keep every real token, and one
epoch's worth of batches must hold every record once. Loss level: the classifier's, NER's and
multiple choice's model_fn give the same loss on a batch cut to its bucket as on the same batch
at max_seq_length. Driver level: a short classifier run on the real MiniLM weights learns the
topics set as tests/test_real_weights_finetune.py expects.
"""

import json
import os
import textwrap
import types

import numpy as np
import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import TINY_CONFIG, TOPICS, minilm_files, option_pair, options
from script_runner import run_python_code

from bert_tf import modeling
from bert_tf import options as bert_options
from bert_tf.cli import flags as bert_flags
from bert_tf.data import input_pipeline, record_integrity
from bert_tf.runs import driver
from bert_tf.tasks import classification, model_fn_parts, multiple_choice, ner
from bert_tf.training import estimator as estimator_lib

tf1 = tf.compat.v1
SEQ = 64
BATCH = 4
BOUNDARIES = input_pipeline.length_bucket_boundaries(SEQ)
# One sorting window of batches; as many records make it exactly one epoch.
NUM_RECORDS = input_pipeline.BUCKET_WINDOW_BATCHES * BATCH


def _lengths(num, seed):
    """Real tokens per example: 80 % short (5-24), the rest up to SEQ."""
    rng = np.random.default_rng(seed)
    short, long = rng.integers(5, 25, size=num), rng.integers(25, SEQ + 1, size=num)
    return np.where(rng.random(num) < 0.8, short, long)


def _row(index, length, seq=SEQ):
    """(input_ids, input_mask) of record `index`: [CLS], then its own token id, then padding."""
    ids = np.zeros(seq, np.int64)
    ids[0], ids[1:length] = 101, 1000 + index
    return ids, (np.arange(seq) < length).astype(np.int64)


def _choice_lengths(index, length, num_choices):
    """Per choice, its real tokens: choice index % num_choices is the longest (`length`)."""
    return [length if c == index % num_choices else max(2, length // (c + 2))
            for c in range(num_choices)]


def _write_records(path, lengths, num_choices=1):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for index, length in enumerate(lengths):
            rows = [_row(index, n) for n in _choice_lengths(index, length, num_choices)]
            ids = np.concatenate([r[0] for r in rows])
            mask = np.concatenate([r[1] for r in rows])

            def ints(values):
                return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

            feature = {"input_ids": ints(ids), "input_mask": ints(mask),
                       "segment_ids": ints(np.zeros_like(mask)), "label_ids": ints([index % 2]),
                       "is_real_example": ints([1]), "example_index": ints([index])}
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("length_buckets")
    lengths = _lengths(NUM_RECORDS, seed=0)
    return types.SimpleNamespace(root=root, lengths=lengths,
                                 path=_write_records(root / "train.tf_record", lengths))


def _batches(path, count, bucketed=True, shuffle=False, batch_size=BATCH, num_choices=1,
             input_context=None, **kwargs):
    """The first `count` training batches as numpy dicts."""
    input_fn = input_pipeline.record_input_fn(
        [path], classification.feature_spec(SEQ * num_choices, windowed=True),
        is_training=True, shuffle=shuffle, trim_keys=input_pipeline.SEQUENCE_FEATURES,
        bucket_boundaries=BOUNDARIES if bucketed else None,
        sequences_per_example=num_choices, **kwargs)
    dataset = input_fn({"batch_size": batch_size}, input_context)
    return [{key: value.numpy() for key, value in batch.items()}
            for batch in dataset.take(count)]


def _check_batch(batch, lengths, batch_size=BATCH, num_choices=1):
    """The batch has `batch_size` rows, is cut to the smallest boundary that holds its longest
    example, and every row holds exactly its record's tokens; returns its record ids."""
    width = batch["input_ids"].shape[1] // num_choices
    assert batch["input_ids"].shape == (batch_size, num_choices * width)
    indices = batch["example_index"][:, 0]
    longest = max(max(_choice_lengths(i, lengths[i], num_choices)) for i in indices)
    assert width == min(b for b in BOUNDARIES if b >= longest), (width, longest)
    for row, index in enumerate(indices):
        for c, n in enumerate(_choice_lengths(index, lengths[index], num_choices)):
            ids, mask = _row(index, n)
            np.testing.assert_array_equal(
                batch["input_ids"][row].reshape(num_choices, width)[c], ids[:width])
            np.testing.assert_array_equal(
                batch["input_mask"][row].reshape(num_choices, width)[c], mask[:width])
    return list(indices)


def test_boundaries_are_a_bounded_set_of_multiples_of_eight():
    assert input_pipeline.length_bucket_boundaries(128) == tuple(range(8, 129, 8))
    assert input_pipeline.length_bucket_boundaries(384) == tuple(range(24, 385, 24))
    assert input_pipeline.length_bucket_boundaries(512) == tuple(range(32, 513, 32))
    assert input_pipeline.length_bucket_boundaries(100) == (*range(8, 97, 8), 100)
    assert input_pipeline.length_bucket_boundaries(20) == (8, 16, 20)
    assert BOUNDARIES == (8, 16, 24, 32, 40, 48, 56, 64)
    for max_seq_length in range(1, 1025):
        boundaries = input_pipeline.length_bucket_boundaries(max_seq_length)
        assert len(boundaries) <= 16 and boundaries[-1] == max_seq_length
        assert all(b % 8 == 0 for b in boundaries[:-1]), boundaries
        assert list(boundaries) == sorted(set(boundaries))
        # Less than one step of padding: the gap between buckets is the step, at most
        # max_seq_length / 16 rounded up to a multiple of 8.
        gaps = [b - a for a, b in zip((0, *boundaries[:-1]), boundaries, strict=True)]
        assert max(gaps) <= max(8, -(-max_seq_length // 16) + 7), boundaries


def test_one_epoch_of_bucketed_batches_holds_every_record_once(data):
    batches = _batches(data.path, NUM_RECORDS // BATCH)
    seen = [index for batch in batches for index in _check_batch(batch, data.lengths)]
    assert sorted(seen) == list(range(NUM_RECORDS))
    widths = [batch["input_ids"].shape[1] for batch in batches]
    assert len(set(widths)) >= 4
    # Mostly short texts: well under half the positions of fixed max_seq_length batches.
    assert sum(widths) * BATCH < 0.5 * NUM_RECORDS * SEQ


def test_shuffled_bucketed_batches_are_cut_alike_and_come_in_mixed_lengths(data):
    batches = _batches(data.path, 2 * NUM_RECORDS // BATCH, shuffle=True)
    for batch in batches:
        _check_batch(batch, data.lengths)
    widths = [batch["input_ids"].shape[1] for batch in batches[:NUM_RECORDS // BATCH]]
    assert widths != sorted(widths)  # The window's batches are shuffled, not shortest first.


def test_a_batch_is_a_random_draw_from_its_bucket_not_copies_of_one_record(tmp_path):
    # Six records of six lengths, all in bucket 16, repeated: a window holds ~33 copies of
    # each. Sorting by exact length would batch copies of one record together.
    lengths = [9, 10, 11, 12, 13, 14]
    path = _write_records(tmp_path / "small.tf_record", lengths)
    batches = _batches(path, 50, shuffle=True)
    distinct = [len(set(_check_batch(batch, lengths))) for batch in batches]
    # 4 draws from 6 equally frequent records: 3.1 distinct on average.
    assert sum(distinct) / len(distinct) >= 2.5, distinct


def test_without_buckets_training_batches_keep_max_seq_length(data):
    for batch in _batches(data.path, 10, bucketed=False, shuffle=True):
        assert batch["input_ids"].shape == (BATCH, SEQ)
        assert batch["segment_ids"].shape == (BATCH, SEQ)


def test_multiple_choice_cuts_every_choice_to_the_longest_choice_bucket(tmp_path, data):
    num_choices = 3
    path = _write_records(tmp_path / "mc.tf_record", data.lengths, num_choices)
    batches = _batches(path, NUM_RECORDS // BATCH, num_choices=num_choices)
    seen = [index for batch in batches
            for index in _check_batch(batch, data.lengths, num_choices=num_choices)]
    assert sorted(seen) == list(range(NUM_RECORDS))


def test_two_input_pipelines_each_bucket_their_own_share(data):
    # Two replicas of a global batch of 4: each pipeline reads every other record.
    per_replica, seen = BATCH // 2, []
    for pipeline in (0, 1):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline,
                                             num_replicas_in_sync=2)
        share = []
        for batch in _batches(data.path, NUM_RECORDS // BATCH, batch_size=per_replica,
                              input_context=context):
            share += _check_batch(batch, data.lengths, batch_size=per_replica)
        assert sorted(share) == list(range(pipeline, NUM_RECORDS, 2))
        seen += share
    assert sorted(seen) == list(range(NUM_RECORDS))


def _record_offsets(path):
    data = open(path, "rb").read()
    offsets, offset = [], 0
    while offset < len(data):
        offsets.append(offset)
        offset += 12 + int.from_bytes(data[offset:offset + 8], "little") + 4
    return offsets


def test_skip_corrupt_records_trains_on_the_whole_records_only(tmp_path, data):
    cut = tmp_path / "cut.tf_record"
    cut.write_bytes(open(data.path, "rb").read()[:_record_offsets(data.path)[150] + 20])
    limits = record_integrity.check_record_files([str(cut)], skip_corrupt_records=True)
    assert limits == {str(cut): 150}
    # Two windows: the 150 whole records repeat, every one of them is seen.
    batches = _batches(str(cut), 2 * NUM_RECORDS // BATCH, record_limits=limits,
                       skip_corrupt_records=True)
    seen = {index for batch in batches for index in _check_batch(batch, data.lengths)}
    assert seen == set(range(150))


def test_map_batch_sees_the_cut_batches_and_counts_them(data):
    def map_batch(features, batch_index, pipeline_id):
        return {**features, "batch_index": tf.fill([BATCH], batch_index + 100 * pipeline_id)}

    batches = _batches(data.path, 12, map_batch=map_batch)
    assert [int(batch["batch_index"][0]) for batch in batches] == list(range(12))
    for batch in batches:
        _check_batch(batch, data.lengths)


def test_the_bucketed_input_position_saves_and_restores(data, tmp_path):
    """What --exact_resume saves (bert_tf.training.resume): the iterator state, shuffle buffers and
    the half-used sorting window included, restored into a fresh pipeline."""
    prefix = str(tmp_path / "input_state")

    def run(restore, skip, take):
        with tf.Graph().as_default():
            tf1.set_random_seed(5)
            input_fn = input_pipeline.record_input_fn(
                [data.path], classification.feature_spec(SEQ, windowed=True), is_training=True,
                trim_keys=input_pipeline.SEQUENCE_FEATURES, bucket_boundaries=BOUNDARIES)
            iterator = tf1.data.make_initializable_iterator(input_fn({"batch_size": BATCH}))
            saver = tf1.train.Saver(
                [tf1.data.experimental.make_saveable_from_iterator(iterator)])
            batch = iterator.get_next()
            with tf1.Session() as session:
                session.run(iterator.initializer)
                if restore:
                    saver.restore(session, prefix)
                for _ in range(skip):
                    session.run(batch)
                if not restore:
                    saver.save(session, prefix)
                return [session.run(batch) for _ in range(take)]

    straight = run(restore=False, skip=7, take=60)
    resumed = run(restore=True, skip=0, take=60)
    for a, b in zip(straight, resumed, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def _evaluation_batches(path, batch_size=BATCH, num_choices=1, bucketed=True):
    """Every evaluation batch of `path` as numpy dicts."""
    input_fn = input_pipeline.record_input_fn(
        [path], classification.feature_spec(SEQ * num_choices, windowed=True),
        is_training=False, trim_keys=input_pipeline.SEQUENCE_FEATURES,
        bucket_boundaries=BOUNDARIES if bucketed else None, sequences_per_example=num_choices)
    return [{key: value.numpy() for key, value in batch.items()}
            for batch in input_fn({"batch_size": batch_size})]


@pytest.mark.parametrize("num_choices", [1, 3])
def test_evaluation_reads_every_record_once_in_order_of_length_within_windows(tmp_path,
                                                                              num_choices):
    # One window of 50 batches and a second, partial one (37 records: the last batch holds 1).
    lengths = _lengths(NUM_RECORDS + 37, seed=3)
    path = _write_records(tmp_path / "eval.tf_record", lengths, num_choices)
    batches = _evaluation_batches(path, num_choices=num_choices)
    assert [len(batch["input_ids"]) for batch in batches] == [BATCH] * 59 + [1]
    seen = []
    for batch in batches:
        indices = _check_batch(batch, lengths, len(batch["input_ids"]), num_choices)
        # Each record carries its position in the input (here also its example_index).
        np.testing.assert_array_equal(batch[input_pipeline.RECORD_INDEX], indices)
        seen += indices
    assert sorted(seen) == list(range(len(lengths)))
    for window in (seen[:NUM_RECORDS], seen[NUM_RECORDS:]):
        assert sorted(window) == list(range(min(window), min(window) + len(window)))
        longest = [max(_choice_lengths(i, lengths[i], num_choices)) for i in window]
        assert longest == sorted(longest)
        # Records of one length keep their input order.
        pairs = zip(window, window[1:], longest, longest[1:], strict=False)
        assert all(a < b for a, b, x, y in pairs if x == y)
    # At most one shape per bucket, and far fewer positions than each batch cut to its longest
    # in input order.
    widths = [batch["input_ids"].shape[1] // num_choices for batch in batches]
    in_order = [batch["input_ids"].shape[1] // num_choices
                for batch in _evaluation_batches(path, num_choices=num_choices,
                                                 bucketed=False)]
    assert len(set(widths)) <= len(BOUNDARIES)
    assert sum(widths) < 0.75 * sum(in_order), (sum(widths), sum(in_order))


def test_evaluation_without_buckets_reads_records_in_input_order(data):
    batches = _evaluation_batches(data.path, bucketed=False)
    seen = [index for batch in batches
            for index in batch["example_index"][:, 0]]
    assert seen == list(range(NUM_RECORDS))
    assert all(input_pipeline.RECORD_INDEX not in batch for batch in batches)
    for batch in batches:
        longest = max(data.lengths[i] for i in batch["example_index"][:, 0])
        assert batch["input_ids"].shape[1] == longest


def test_the_collector_returns_length_ordered_records_in_input_order():
    from bert_tf.tasks import base

    def collected(order, with_index=True):
        collector = base.ExampleCollector()
        for rows in order:
            batch = {"logits": np.array([[i, -i] for i in rows], np.float32),
                     "tag_ids": np.array([[i] * (3 + i % 2) for i in rows], dtype=object)}
            if with_index:
                batch[input_pipeline.RECORD_INDEX] = np.array(rows, np.int32)
            collector.batches.append(batch)
        return collector

    collector = collected([[3, 0], [4, 1], [2]])
    np.testing.assert_array_equal(collector.column("logits")[:, 0], [0, 1, 2, 3, 4])
    assert [list(row["tag_ids"]) for row in collector.examples()] == [
        [i] * (3 + i % 2) for i in range(5)]
    assert all(set(row) == {"logits", "tag_ids"} for row in collector.examples())
    # Without record positions the batches are taken as they came.
    plain = collected([[3, 0], [4, 1], [2]], with_index=False)
    np.testing.assert_array_equal(plain.column("logits")[:, 0], [3, 0, 4, 1, 2])


def test_length_ordered_evaluation_and_prediction_write_what_input_order_writes(tmp_path,
                                                                                vocab_file):
    """NER's evaluation and prediction, whose eval_predictions.txt and test_predictions.txt
    follow the input files sentence by sentence, on one checkpoint with --bucket_by_length on
    and off: the same files and metrics."""
    from finetune_helpers import read_key_values, write_tiny_config

    words = ["Peter", "Blackburn", "visited", "Paris", "today", "."]
    tags = ["B-PER", "I-PER", "O", "B-LOC", "O", "O"]
    rng = np.random.default_rng(0)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    sentences = []
    for length in rng.integers(2, 25, size=13):  # 13 sentences: 4 batches of 3, 1 partial.
        picks = rng.integers(0, len(words), size=length)
        sentences.append("".join(f"{words[i]} {tags[i]}\n" for i in picks))
    for name in ("train.txt", "dev.txt", "test.txt"):
        (data_dir / name).write_text("\n".join(sentences))
    out = tmp_path / "out"
    config = write_tiny_config(tmp_path)
    common = dict(data_dir=str(data_dir), vocab_file=vocab_file, bert_config_file=config,
                  output_dir=str(out), eval_batch_size=3, predict_batch_size=3)
    driver.run_task(options("ner", do_train=True, num_train_steps=3, **common))
    written = {}
    for bucket_by_length in (True, False):
        driver.run_task(options("ner", do_eval=True, do_predict=True,
                                bucket_by_length=bucket_by_length, **common))
        written[bucket_by_length] = (
            [(out / name).read_text() for name in ("eval_predictions.txt",
                                                   "test_predictions.txt")],
            read_key_values(out / "eval_results.txt"))
    (ordered_files, ordered), (plain_files, plain) = written[True], written[False]
    assert ordered_files == plain_files
    gold = [line.split() for text in sentences for line in text.splitlines()]
    for text in ordered_files:
        assert [line.split()[:2] for line in text.splitlines() if line.strip()] == gold
    # "loss" is the mean of the batches' losses, and the batches hold other sentences.
    assert ordered.keys() == plain.keys()
    for key in set(ordered) - {"loss"}:
        assert ordered[key] == pytest.approx(plain[key], abs=1e-5), key


def test_length_ordered_prediction_writes_test_results_in_input_order(tmp_path,
                                                                      minilm_converted):
    """The classifier's test_results.tsv (one row per test.tsv line) from MiniLM's encoder
    and a seeded head, with --bucket_by_length on and off, and with --doc_stride windows
    (logits aggregated per example)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    rng = np.random.default_rng(1)
    words = "the match was played in the rain and the crowd sang all night".split()
    texts = [" ".join(rng.choice(words, size=n)) for n in rng.integers(2, 40, size=20)]
    (data_dir / "test.tsv").write_text("sentence\n" + "\n".join(texts) + "\n")
    for windows in ({}, {"doc_stride": 8, "max_seq_length": 16}):
        results = {}
        for bucket_by_length in (True, False):
            out = tmp_path / f"out{len(windows)}{bucket_by_length}"
            driver.run_task(options(
                "classifier", task_name="tsv", text_a_column="sentence", labels=["a", "b"],
                data_dir=str(data_dir), output_dir=str(out), do_predict=True,
                predict_batch_size=3, bucket_by_length=bucket_by_length,
                **minilm_files(minilm_converted), **windows))
            results[bucket_by_length] = np.loadtxt(out / "test_results.tsv", delimiter="\t")
        assert results[True].shape == (20, 2)
        np.testing.assert_allclose(results[True], results[False], atol=1e-5)
        # The rows differ from example to example (else the order would not show).
        assert len(np.unique(results[False].round(3), axis=0)) > 10, results[False]


@pytest.mark.parametrize("task", ["classifier", "ner", "multiple_choice"])
def test_a_batch_cut_to_its_bucket_has_the_loss_of_the_full_length_batch(task):
    config = modeling.BertConfig.from_dict(TINY_CONFIG)
    num_choices = 2 if task == "multiple_choice" else 1
    lengths = [5, 9, 13, 7]
    rng = np.random.default_rng(3)
    ids = rng.integers(1000, 30000, size=(BATCH, num_choices, SEQ))
    mask = np.zeros((BATCH, num_choices, SEQ), np.int32)
    for row, length in enumerate(lengths):
        for c in range(num_choices):
            mask[row, c, :length - 2 * c] = 1
    full = {"input_ids": (ids * mask).reshape(BATCH, -1).astype(np.int32),
            "input_mask": mask.reshape(BATCH, -1),
            "segment_ids": (mask * (np.arange(SEQ) >= 3)).reshape(BATCH, -1).astype(np.int32),
            "is_real_example": np.ones((BATCH, 1), np.int32)}
    if task == "ner":
        model_fn = ner.model_fn_builder(model_fn_parts.Encoder(config), 5)
        full["label_ids"] = rng.integers(0, 5, size=(BATCH, SEQ)).astype(np.int32) * mask[:, 0]
        # Scored: the first piece of each word (every other real token here).
        full["label_mask"] = mask[:, 0] * (np.arange(SEQ) % 2 == 1)
        keys = ner.SEQUENCE_KEYS
    elif task == "classifier":
        model_fn = classification.model_fn_builder(model_fn_parts.Encoder(config), 3)
        full["label_ids"] = np.array([[0], [2], [1], [2]], np.int32)
        keys = input_pipeline.SEQUENCE_FEATURES
    else:
        model_fn = multiple_choice.model_fn_builder(model_fn_parts.Encoder(config), num_choices)
        full["label_ids"] = np.array([[0], [1], [1], [0]], np.int32)
        keys = input_pipeline.SEQUENCE_FEATURES
    full = {key: value.astype(np.int32) for key, value in full.items()}
    cut = {key: value.numpy() for key, value in input_pipeline.trim_to_bucket(
        {key: tf.constant(value) for key, value in full.items()}, BOUNDARIES, keys,
        num_choices).items()}
    assert cut["input_ids"].shape == (BATCH, num_choices * 16)  # Longest 13 -> bucket 16.
    assert cut["input_mask"].sum() == full["input_mask"].sum()

    with tf.Graph().as_default():
        placeholders = {key: tf1.placeholder(tf.int32, [BATCH, None] if key in keys else
                                             value.shape, name=key)
                        for key, value in full.items()}
        spec = model_fn(placeholders, None, estimator_lib.ModeKeys.EVAL, {})
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            losses = [session.run(spec.loss, {placeholders[k]: v for k, v in batch.items()})
                      for batch in (full, cut)]
    assert losses[0] > 0.1
    assert abs(losses[0] - losses[1]) <= 1e-6, losses


def test_the_flag_is_on_for_the_classifier_and_not_defined_for_squad():
    _, classifier = option_pair("classifier")
    assert classifier.bucket_by_length is True
    _, squad_options = option_pair("squad")
    assert squad_options.bucket_by_length is None
    flag_values = bert_flags.parse(lambda fv: bert_flags.define_finetuning_flags(
        length_buckets=False, flag_values=fv))
    assert "bucket_by_length" not in flag_values
    assert bert_options.FinetuneOptions.from_flags(flag_values).bucket_by_length is None


def test_buckets_are_off_when_asked_and_on_a_tpu():
    def distribution(**values):
        return bert_options.DistributionOptions(**values)

    assert input_pipeline.run_length_buckets(True, SEQ, distribution()) == BOUNDARIES
    assert input_pipeline.run_length_buckets(True, SEQ, distribution(
        distribution_strategy="mirrored")) == BOUNDARIES
    assert input_pipeline.run_length_buckets(False, SEQ, distribution()) is None
    assert input_pipeline.run_length_buckets(None, SEQ, distribution()) is None
    assert input_pipeline.run_length_buckets(True, SEQ, distribution(use_tpu=True)) is None
    assert input_pipeline.run_length_buckets(True, SEQ, distribution(
        distribution_strategy="tpu")) is None


def test_bucketed_minilm_run_learns_the_unseen_topics(tmp_path, minilm_converted,
                                                      monkeypatch):
    """tests/test_real_weights_finetune.py's run (>= 0.85 dev accuracy after 12 steps), at
    max_seq_length 64 with the buckets on: the topic sentences (< 16 word pieces) train in
    batches of 16 positions."""
    widths = []
    original = input_pipeline.trim_to_bucket

    def spy(features, *args, **kwargs):
        """trim_to_bucket, noting the width of every batch the input pipeline makes."""
        cut = original(features, *args, **kwargs)
        # Stateless: the pipeline's state stays saveable for --exact_resume.
        ids = tf.numpy_function(lambda ids: widths.append(ids.shape[1]) or ids,
                                [cut["input_ids"]], tf.int32, stateful=False)
        ids.set_shape(cut["input_ids"].shape)
        return {**cut, "input_ids": ids}

    monkeypatch.setattr(input_pipeline, "trim_to_bucket", spy)
    results = driver.run_task(options(
        "classifier", task_name="tsv", text_a_column="sentence",
        data_dir=TOPICS,
        **minilm_files(minilm_converted),
        output_dir=str(tmp_path / "out"), do_train=True, do_eval=True, max_seq_length=64,
        train_batch_size=8, num_train_steps=12, learning_rate=1e-4, eval_batch_size=40,
        keep_checkpoint_max=1))
    assert results["global_step"] == 12
    assert widths and set(widths) <= set(input_pipeline.length_bucket_boundaries(64)) - {64}
    assert results["eval_accuracy"] >= 0.85


# In a child: 2 logical CPU devices (possible only before TensorFlow starts), then a classifier
# run under MirroredStrategy that notes the shape of every per-replica training batch.
_MIRRORED_RUN = textwrap.dedent("""
    import json, os, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    sys.path.insert(0, {tests!r})
    from absl import logging
    logging.use_absl_handler()
    logging.set_verbosity(logging.INFO)
    from finetune_helpers import options, write_tiny_config, TOPICS
    from bert_tf.data import input_pipeline
    from bert_tf.runs import driver

    shapes, trim_to_bucket = [], input_pipeline.trim_to_bucket

    def spy(features, *args, **kwargs):
        cut = trim_to_bucket(features, *args, **kwargs)
        # Evaluation batches (read in order of length) carry their records' positions.
        evaluation = input_pipeline.RECORD_INDEX in features
        ids = tf.numpy_function(lambda ids: shapes.append([*ids.shape, evaluation]) or ids,
                                [cut["input_ids"]], tf.int32, stateful=False)
        ids.set_shape(cut["input_ids"].shape)
        return {{**cut, "input_ids": ids}}

    input_pipeline.trim_to_bucket = spy
    results = driver.run_task(options(
        "classifier", task_name="tsv", text_a_column="sentence", data_dir={data!r},
        vocab_file={vocab!r}, bert_config_file=write_tiny_config({out!r}),
        output_dir=os.path.join({out!r}, "run"), do_train=True, do_eval=True,
        max_seq_length=64, train_batch_size=8, num_train_steps=6,
        distribution_strategy="mirrored"))
    print("RESULT", json.dumps({{"global_step": results["global_step"],
                                "shapes": [list(shape) for shape in shapes]}}))
""")


def test_mirrored_replicas_train_on_bucketed_batches(tmp_path, minilm_dir):
    code = _MIRRORED_RUN.format(
        tests=os.path.dirname(os.path.abspath(__file__)),
        data=TOPICS,
        vocab=os.path.join(minilm_dir, "vocab.txt"), out=str(tmp_path))
    completed = run_python_code(code, [], env=child_env(), timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.split("RESULT ", 1)[1])
    assert result["global_step"] == 6
    # Each replica gets 4 of the global batch of 8, cut to a bucket below max_seq_length.
    training = [shape[:2] for shape in result["shapes"] if not shape[2]]
    assert len(training) >= 12
    for batch, width in training:
        assert batch == 4 and width in input_pipeline.length_bucket_boundaries(64) and width < 64
    # The evaluation (one process) reads the dev set in batches of --eval_batch_size=8.
    evaluation = [shape[:2] for shape in result["shapes"] if shape[2]]
    assert evaluation and all(batch <= 8 and width < 64 for batch, width in evaluation)
    assert "--bucket_by_length: on" in completed.stderr
