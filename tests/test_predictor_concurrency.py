"""One Predictor shared by 16 threads, 50 requests each of mixed lengths: every answer equals
the answer the same Predictor gives the same request alone, with no error, for the
checkpoint's session, the export's session, ONNX Runtime and LiteRT (tiny models); with
micro-batching, within float32 rounding, in fewer model calls."""

import os
import random
import threading

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import encoder_export_options, write_tiny_config

from bert_tf import tf2
from bert_tf.serving import encoder_export
from bert_tf.serving.predictor import Predictor
from bert_tf.training import checkpoints

SEQ = 48
THREADS = 16
REQUESTS_PER_THREAD = 50
# Words of one word piece each.
WORDS = tuple("the cat sat on a mat while rain fell over old town hall and children played "
              "football under grey skies".split())
# And of several.
LONG_WORDS = ("antidisestablishmentarianism", "unbelievably")


def _requests(seed, word_counts=range(1, 31), words=WORDS + LONG_WORDS):
    """THREADS * REQUESTS_PER_THREAD requests: lists of 1 or 2 texts, each of a count of
    `words` drawn from `word_counts`."""
    rng = random.Random(seed)
    return [[" ".join(rng.choice(words) for _ in range(rng.choice(word_counts)))
             for _ in range(rng.randint(1, 2))] for _ in range(THREADS * REQUESTS_PER_THREAD)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, vocab_file):
    """A random 2-layer checkpoint with a 3-label classifier head, and its encoder's export."""
    directory = tmp_path_factory.mktemp("concurrency")
    config_file = write_tiny_config(directory)
    tf.random.set_seed(7)
    encoder = tf2.BertEncoder(config_file)
    rng = np.random.RandomState(8)
    tensors = {name: variable.numpy() for name, variable in encoder.variables_by_name.items()}
    tensors.update(output_weights=rng.normal(0, 0.5, [3, 32]).astype(np.float32),
                   output_bias=rng.normal(0, 0.5, [3]).astype(np.float32))
    checkpoint = str(directory / "model.ckpt")
    checkpoints.write_tf_checkpoint(tensors, checkpoint)
    export = encoder_export.export_encoder(encoder_export_options(
        bert_config_file=config_file, init_checkpoint=checkpoint, vocab_file=vocab_file,
        export_dir=str(directory / "export"), pooling="mean", max_seq_length=SEQ))
    return dict(directory=directory, config_file=config_file, checkpoint=checkpoint,
                export=export)


def _hammer(predictor, call, requests, same=None):
    """Runs `requests` from THREADS threads started together on a fresh `predictor`, then
    one by one; asserts every concurrent answer equals the one-by-one answer (`same(a, b)`,
    default: bit for bit)."""
    same = same or _same
    answers, errors = [None] * len(requests), []
    start = threading.Barrier(THREADS)

    def work(first):
        start.wait()
        for i in range(first, len(requests), THREADS):
            try:
                answers[i] = call(predictor, requests[i])
            except Exception as e:  # noqa: BLE001 (every error is a failure, reported below)
                errors.append(f"request {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    for i, request in enumerate(requests):
        alone = call(predictor, request)
        assert same(answers[i], alone), f"request {i} ({request!r}) answered differently"


def _same(a, b):
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


def _embed(predictor, texts):
    return predictor.embed(texts)


def test_checkpoint_session_embeddings_and_labels(tiny, vocab_file):
    def embedder():
        return Predictor.from_checkpoint(tiny["checkpoint"], tiny["config_file"], vocab_file,
                                         "embed", max_seq_length=SEQ)

    _hammer(embedder(), lambda p, texts: p.embed(texts, "max", pooling_layer=-2), _requests(1))
    classifier = Predictor.from_checkpoint(
        tiny["checkpoint"], tiny["config_file"], vocab_file, "classifier",
        max_seq_length=SEQ, label_list=["a", "b", "c"])
    _hammer(classifier, lambda p, texts: p.predict(texts), _requests(2))


def test_export_session(tiny):
    _hammer(Predictor.from_saved_model(tiny["export"]), _embed, _requests(3))


def test_micro_batching_merges_calls_and_answers_within_rounding(tiny):
    predictor = Predictor.from_saved_model(tiny["export"], micro_batching=True)
    # Texts of three lengths in one-piece words: many concurrent calls of the same width.
    requests = _requests(6, word_counts=(4, 12, 20), words=WORDS)
    calls = predictor._backend.model_calls  # noqa: SLF001 (the merged calls' counter)

    def close(a, b):
        return a.shape == b.shape and np.allclose(a, b, rtol=0, atol=1e-6)

    _hammer(predictor, _embed, requests, close)
    # Every request is one model call alone, and was run alone once more after the threads.
    concurrent_calls = predictor._backend.model_calls - calls - len(requests)  # noqa: SLF001
    assert 0 < concurrent_calls < 0.75 * len(requests)


def test_onnx_runtime(tiny):
    pytest.importorskip("tf2onnx", reason="the [onnx] extra is not installed")
    from bert_tf.serving import onnx_export

    path = str(tiny["directory"] / "encoder.onnx")
    onnx_export.export_onnx(tiny["export"], path)
    _hammer(Predictor.from_onnx(path), _embed, _requests(4))


def test_litert_interpreter(tiny):
    pytest.importorskip("ai_edge_litert", reason="the [tflite] extra is not installed")
    from bert_tf.serving import tflite_export

    path = str(tiny["directory"] / "encoder.tflite")
    tflite_export.export_tflite(tiny["export"], path)
    assert os.path.exists(path)
    _hammer(Predictor.from_tflite(path), _embed, _requests(5))
