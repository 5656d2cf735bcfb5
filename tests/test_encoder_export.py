"""scripts/export_encoder.py on the real MiniLM weights: the export's `embedding` equals the
checkpoint Predictor's (both poolings), its `sequence_output` equals PyTorch transformers'
(tests/fixtures/minilm_reference.npz), a fine-tuning run's checkpoint exports its encoder,
ONNX of it agrees within 1e-4, and scripts/predict.py answers from it."""

import json
import os

import numpy as np
import pytest
from finetune_helpers import (
    assert_clean_error,
    assert_ok,
    check_warmup_requests,
    encoder_export_options,
    minilm_files,
    pretrain_options,
    run_script,
    write_records,
)

from bert_tf.errors import BertTfError
from bert_tf.serving import backends, encoder_export
from bert_tf.serving.predictor import Predictor

pytestmark = pytest.mark.slow

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                         "minilm_reference.npz")
TEXTS = ["A fine match at the stadium.", "x",
         "Ada Lovelace published the first algorithm for Babbage's Analytical Engine, and "
         "speculated that such a machine might one day compose music of any complexity.",
         "Stir the onions into the sauce and let it simmer for ten minutes."]


@pytest.fixture(scope="module")
def checkpoint_embedder(minilm_converted):
    files = minilm_files(minilm_converted)
    return Predictor.from_checkpoint(files["init_checkpoint"], files["bert_config_file"],
                                     files["vocab_file"], "embed", max_seq_length=64)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_embedding_equals_checkpoint_predictor(pooling, minilm_encoder_exports,
                                               checkpoint_embedder):
    predictor = Predictor.from_saved_model(minilm_encoder_exports[pooling])
    assert predictor.config.task == "embed" and predictor.config.pooling == pooling
    got = predictor.embed(TEXTS)
    expected = checkpoint_embedder.embed(TEXTS, pooling=pooling)
    assert got.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # The other pooling is another export's: asking this one for it is an error.
    other = "mean" if pooling == "cls" else "cls"
    with pytest.raises(BertTfError, match=f"--pooling={other}"):
        predictor.embed(TEXTS, pooling=other)


def test_outputs_equal_transformers(minilm_encoder_exports):
    # The ids, mask and last_hidden_state of transformers' BertModel on the same weights.
    reference = dict(np.load(REFERENCE))
    inputs = {name: reference[name] for name in ("input_ids", "input_mask", "segment_ids")}
    mask = reference["input_mask"].astype(bool)
    hidden = reference["sequence_output"]
    expected = {"cls": hidden[:, 0],
                "mean": (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)}
    for pooling, path in sorted(minilm_encoder_exports.items()):
        outputs = backends.SavedModelBackend(path)(inputs)
        assert outputs["sequence_output"].shape == hidden.shape
        # test_minilm_parity's bound for real tokens (padded positions are meaningless).
        assert np.abs(outputs["sequence_output"] - hidden)[mask].max() <= 2e-5
        np.testing.assert_allclose(outputs["embedding"], expected[pooling], atol=2e-5)


def test_warmup_requests_answer_every_signature(minilm_encoder_exports):
    answers = check_warmup_requests(minilm_encoder_exports["mean"])
    assert set(answers) == {"serving_default", "serving_int64", "serving_text"}
    # The text and id requests pack the same two texts (a short one, one cut at 64 pieces).
    assert answers["serving_text"]["input_ids"].shape == (2, 64)
    assert (answers["serving_text"]["input_ids"][0] > 0).sum() < 20
    for name in ("serving_default", "serving_int64"):
        np.testing.assert_allclose(answers[name]["embedding"],
                                   answers["serving_text"]["embedding"], atol=1e-5)


def test_fine_tuning_checkpoint_exports_its_encoder(minilm_topics_classifier,
                                                    minilm_converted, tmp_path):
    # A fine-tuning run's --output_dir: the encoder plus a classifier head and Adam slots.
    run = minilm_topics_classifier.output_dir
    files = {**minilm_files(minilm_converted), "init_checkpoint": run}
    export = encoder_export.export_encoder(encoder_export_options(
        **files, export_dir=str(tmp_path / "export"), pooling="mean", max_seq_length=32))
    got = Predictor.from_saved_model(export).embed(TEXTS)
    expected = Predictor.from_checkpoint(run, files["bert_config_file"], files["vocab_file"],
                                         "embed", max_seq_length=32).embed(TEXTS, "mean")
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # Fine-tuning moved the encoder: this is not the pre-trained model's embedding.
    pretrained = Predictor.from_checkpoint(
        minilm_files(minilm_converted)["init_checkpoint"], files["bert_config_file"],
        files["vocab_file"], "embed",
        max_seq_length=32).embed(TEXTS, "mean")
    assert np.abs(got - pretrained).max() > 1e-3


def test_pre_training_checkpoint_exports_its_encoder(tmp_path):
    # run_pretraining.py's checkpoint: the encoder, the masked-LM / NSP heads, Adam slots.
    from bert_tf.runs import pretraining

    write_records(str(tmp_path / "train.tfrecord"), 16)
    options = pretrain_options(tmp_path, num_train_steps=2, do_eval=False,
                               save_checkpoints_steps=2)
    pretraining.run_pretraining(options)
    vocab_file = tmp_path / "vocab.txt"  # PRETRAINING_TINY's 64 ids, specials first
    vocab_file.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                                    [f"w{i}" for i in range(59)]) + "\n")
    files = dict(bert_config_file=options.model.bert_config_file, vocab_file=str(vocab_file),
                 init_checkpoint=options.run.output_dir)
    export = encoder_export.export_encoder(encoder_export_options(
        **files, export_dir=str(tmp_path / "export"), pooling="cls", max_seq_length=16))
    texts = ["w1 w2 w3", "w40 w7", "w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 w17 w18"]
    np.testing.assert_allclose(
        Predictor.from_saved_model(export).embed(texts),
        Predictor.from_checkpoint(options.run.output_dir, files["bert_config_file"],
                                  str(vocab_file), "embed", max_seq_length=16).embed(texts),
        atol=1e-5)


def test_onnx_of_the_export_agrees(minilm_encoder_exports, tmp_path):
    pytest.importorskip("tf2onnx", reason="the [onnx] extra is not installed")
    path = str(tmp_path / "encoder.onnx")
    assert_ok(run_script("export_onnx.py", f"--export_dir={minilm_encoder_exports['mean']}",
                         f"--output_file={path}"))
    got = Predictor.from_onnx(path)
    assert got.config.pooling == "mean"
    np.testing.assert_allclose(got.embed(TEXTS),
                               Predictor.from_saved_model(minilm_encoder_exports["mean"]).embed(
                                   TEXTS), atol=1e-4)


def test_predict_script_answers_from_the_export(minilm_encoder_exports, tmp_path):
    input_file, output_file = tmp_path / "texts.txt", tmp_path / "vectors.jsonl"
    input_file.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    export = os.path.dirname(minilm_encoder_exports["cls"])  # its newest export
    assert_ok(run_script("predict.py", f"--export_dir={export}", f"--input_file={input_file}",
                         f"--output_file={output_file}"))
    lines = [json.loads(line) for line in output_file.read_text().splitlines()]
    # predict.py keeps the weights packed (prediction_process), whose fp32 kernels sum in
    # another order than this process's: measured up to 1.2e-6 apart.
    np.testing.assert_allclose([line["embedding"] for line in lines],
                               Predictor.from_saved_model(export).embed(TEXTS), atol=1e-5)


def test_bad_input_stops_before_writing(minilm_converted, tmp_path):
    files = minilm_files(minilm_converted)
    export_dir = tmp_path / "export"
    result = run_script("export_encoder.py", f"--bert_config_file={files['bert_config_file']}",
                        f"--vocab_file={files['vocab_file']}", f"--export_dir={export_dir}",
                        f"--init_checkpoint={tmp_path / 'missing.ckpt'}")
    assert_clean_error(result, "--init_checkpoint", "missing.ckpt")
    result = run_script("export_encoder.py", f"--bert_config_file={files['bert_config_file']}",
                        f"--vocab_file={files['vocab_file']}", f"--export_dir={export_dir}",
                        f"--init_checkpoint={files['init_checkpoint']}",
                        "--max_seq_length=1000")
    assert_clean_error(result, "--max_seq_length=1000", "max_position_embeddings")
    assert not export_dir.exists()
    # A config that does not fit the checkpoint (a restored resource variable would take the
    # checkpoint's shape without a word).
    config = json.loads(open(files["bert_config_file"], encoding="utf-8").read())
    wrong_config = tmp_path / "bert_config.json"
    wrong_config.write_text(json.dumps({**config, "intermediate_size": 64}))
    result = run_script("export_encoder.py", f"--bert_config_file={wrong_config}",
                        f"--vocab_file={files['vocab_file']}", f"--export_dir={export_dir}",
                        f"--init_checkpoint={files['init_checkpoint']}")
    assert_clean_error(result, "intermediate/dense/kernel", "[384, 1536]", "[384, 64]",
                       "bert_config.json")
    assert not [path for path in export_dir.rglob("saved_model.pb")]
