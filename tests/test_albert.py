"""ALBERT: factorized embeddings and shared layers (config keys `embedding_size`,
`num_hidden_groups`, `inner_group_num`) in Google's ALBERT checkpoint layout, against Hugging
Face's `AlbertModel` on the same random weights, moved across by the converter."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from finetune_helpers import (
    TOPICS,
    assert_clean_error,
    assert_ok,
    pretrain_options,
    read_key_values,
    run_script,
    write_records,
)

from bert_tf import keras as bert_keras
from bert_tf import modeling, tf2
from bert_tf.errors import BertTfError
from bert_tf.runs.pretraining import run_pretraining
from bert_tf.tasks import pretraining
from bert_tf.tools import albert_conversion, conversion

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

tf1 = tf.compat.v1

SIZES = dict(vocab_size=64, embedding_size=16, hidden_size=32, num_hidden_layers=3,
             num_attention_heads=4, intermediate_size=37, max_position_embeddings=24,
             type_vocab_size=2, hidden_act="gelu_new", hidden_dropout_prob=0.1,
             attention_probs_dropout_prob=0.1)
SHARED = dict(num_hidden_groups=1, inner_group_num=1)
GROUPED = dict(num_hidden_groups=2, inner_group_num=2)
TOLERANCE = 1e-5


def google_albert_names(num_hidden_groups, inner_group_num):
    """The variable names of Google's ALBERT (google-research/albert modeling.py and
    run_pretraining.py), written out here independently of the code under test."""
    names = [f"bert/embeddings/{table}_embeddings"
             for table in ("word", "token_type", "position")]
    names += ["bert/embeddings/LayerNorm/gamma", "bert/embeddings/LayerNorm/beta",
              "bert/encoder/embedding_hidden_mapping_in/kernel",
              "bert/encoder/embedding_hidden_mapping_in/bias"]
    for g in range(num_hidden_groups):
        for j in range(inner_group_num):
            block = f"bert/encoder/transformer/group_{g}/inner_group_{j}"
            for dense in ("attention_1/self/query", "attention_1/self/key",
                          "attention_1/self/value", "attention_1/output/dense",
                          "ffn_1/intermediate/dense", "ffn_1/intermediate/output/dense"):
                names += [f"{block}/{dense}/kernel", f"{block}/{dense}/bias"]
            for norm in ("LayerNorm", "LayerNorm_1"):
                names += [f"{block}/{norm}/gamma", f"{block}/{norm}/beta"]
    names += ["bert/pooler/dense/kernel", "bert/pooler/dense/bias",
              "cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
              "cls/predictions/transform/LayerNorm/gamma",
              "cls/predictions/transform/LayerNorm/beta", "cls/predictions/output_bias",
              "cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias"]
    return sorted(names)


def make_hf_albert(directory, seed=0, **sizes):
    """A random `AlbertForPreTraining` saved to `directory` (every parameter drawn, layer
    norms included, so a swapped weight shows); returns the model in eval mode."""
    torch.manual_seed(seed)
    model = transformers.AlbertForPreTraining(transformers.AlbertConfig(**sizes))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "decoder" not in name:  # Tied to the word embeddings and predictions.bias.
                parameter.normal_(0.0, 0.3)
    model.eval()
    model.save_pretrained(str(directory))
    return model


def inputs(seed=1, batch=3, seq=11, vocab=64):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    types = (np.arange(seq)[None, :] >= 5).astype(np.int32).repeat(batch, 0) * mask
    return ids, mask, types


def hf_outputs(model, ids, mask, types):
    with torch.no_grad():
        out = model.albert(input_ids=torch.tensor(ids, dtype=torch.long),
                           attention_mask=torch.tensor(mask, dtype=torch.long),
                           token_type_ids=torch.tensor(types, dtype=torch.long))
    return out.last_hidden_state.numpy(), out.pooler_output.numpy()


@pytest.fixture(scope="module", params=["shared", "grouped"])
def albert(request, tmp_path_factory):
    """(HF model, Google ALBERT directory from the converter, its sharing keys)."""
    sharing = SHARED if request.param == "shared" else GROUPED
    root = tmp_path_factory.mktemp(f"albert_{request.param}")
    model = make_hf_albert(root / "hf", **SIZES, **sharing)
    conversion.convert_hf_to_tf(str(root / "hf"), str(root / "tf"))
    return model, root / "tf", sharing


def graph_outputs(config, checkpoint, ids, mask, types):
    with tf.Graph().as_default():
        model = modeling.BertModel(config, False, tf.constant(ids), tf.constant(mask),
                                   tf.constant(types))
        _, missing = modeling.init_from_checkpoint(str(checkpoint))
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            sequence, pooled = sess.run([model.get_sequence_output(),
                                         model.get_pooled_output()])
    return missing, sequence, pooled


def test_converter_writes_google_albert_layout(albert):
    _, tf_dir, sharing = albert
    stored = dict(tf.train.list_variables(str(tf_dir / "bert_model.ckpt")))
    assert sorted(stored) == google_albert_names(**sharing)
    assert stored["bert/embeddings/word_embeddings"] == [64, 16]
    assert stored["bert/encoder/embedding_hidden_mapping_in/kernel"] == [16, 32]
    assert stored["cls/predictions/transform/dense/kernel"] == [32, 16]
    with open(tf_dir / "bert_config.json") as f:
        written = json.load(f)
    assert {key: written[key] for key in ("embedding_size", *sharing)} == {
        "embedding_size": 16, **sharing}
    assert written["hidden_act"] == "gelu_new"


def test_graph_mode_matches_hugging_face(albert):
    model, tf_dir, _ = albert
    config = modeling.BertConfig.from_json_file(str(tf_dir / "bert_config.json"))
    ids, mask, types = inputs()
    missing, sequence, pooled = graph_outputs(config, tf_dir / "bert_model.ckpt", ids, mask,
                                              types)
    assert missing == []
    hf_sequence, hf_pooled = hf_outputs(model, ids, mask, types)
    real = mask.astype(bool)
    assert np.abs(sequence - hf_sequence)[real].max() < TOLERANCE
    assert np.abs(pooled - hf_pooled).max() < TOLERANCE


def test_tf2_and_keras_encoders_load_it_and_match(albert):
    model, tf_dir, _ = albert
    config_file = str(tf_dir / "bert_config.json")
    ids, mask, types = inputs(seed=2)
    hf_sequence, hf_pooled = hf_outputs(model, ids, mask, types)
    real = mask.astype(bool)
    encoder = tf2.BertEncoder(config_file)
    assert encoder.load_checkpoint(str(tf_dir / "bert_model.ckpt")) == []
    out = tf.function(encoder)(tf.constant(ids), tf.constant(mask), tf.constant(types))
    assert np.abs(out["sequence_output"].numpy() - hf_sequence)[real].max() < TOLERANCE
    assert np.abs(out["pooled_output"].numpy() - hf_pooled).max() < TOLERANCE
    assert len(out["encoder_outputs"]) == SIZES["num_hidden_layers"]

    layer = bert_keras.BertEncoderLayer(config_file)
    assert layer.load_checkpoint(str(tf_dir / "bert_model.ckpt")) == []
    out = layer({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})
    assert np.abs(np.asarray(out["pooled_output"]) - hf_pooled).max() < TOLERANCE


def test_masked_lm_head_matches_hugging_face(albert):
    """cls/predictions is E wide, decoding with the [V, E] word embeddings."""
    model, tf_dir, _ = albert
    config = modeling.BertConfig.from_json_file(str(tf_dir / "bert_config.json"))
    ids, mask, types = inputs(seed=3)
    positions = np.array([[1, 2], [0, 6], [3, 1]], np.int32)
    with tf.Graph().as_default():
        bert = modeling.BertModel(config, False, tf.constant(ids), tf.constant(mask),
                                  tf.constant(types))
        _, _, log_probs = pretraining.masked_lm_output(
            config, bert.get_sequence_output(), bert.get_embedding_table(),
            tf.constant(positions), tf.zeros_like(positions), tf.ones(positions.shape))
        _, missing = modeling.init_from_checkpoint(str(tf_dir / "bert_model.ckpt"))
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            ours = sess.run(log_probs)
    assert missing == []
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(ids, dtype=torch.long),
                       attention_mask=torch.tensor(mask, dtype=torch.long),
                       token_type_ids=torch.tensor(types, dtype=torch.long)).prediction_logits
    expected = torch.log_softmax(logits, -1).numpy()[np.arange(3)[:, None], positions]
    assert np.abs(ours - expected.reshape(ours.shape)).max() < TOLERANCE


def test_computation_options_give_the_plain_outputs(albert):
    """The last layer at a few positions (pooled_only, sequence_positions: its last inner
    block only), the real tokens only (padding_free) and recomputation (gradients of the
    shared weights) agree with the plain model."""
    _, tf_dir, sharing = albert
    config = modeling.BertConfig.from_json_file(str(tf_dir / "bert_config.json"))
    ids, mask, types = inputs(seed=5)
    positions = np.array([[1, 2], [0, 6], [3, 1]], np.int32)
    variants = {"plain": {}, "pooled_only": dict(pooled_only=True),
                "positions": dict(sequence_positions=positions),
                "padding_free": dict(padding_free=True), "recompute": dict(recompute_grad=True)}
    results = {}
    for name, kwargs in variants.items():
        with tf.Graph().as_default():
            model = modeling.BertModel(config, False, tf.constant(ids), tf.constant(mask),
                                       tf.constant(types), **kwargs)
            pooled, sequence = model.get_pooled_output(), model.get_sequence_output()
            variables = tf1.trainable_variables()
            gradients = [tf.convert_to_tensor(gradient) for gradient in
                         tf.gradients(tf.reduce_sum(pooled ** 2), variables)]
            modeling.init_from_checkpoint(str(tf_dir / "bert_model.ckpt"))
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                results[name] = sess.run([pooled, sequence, gradients])
    plain_pooled, plain_sequence, plain_gradients = results["plain"]
    for name, (pooled, sequence, gradients) in results.items():
        assert np.abs(pooled - plain_pooled).max() < 1e-6, name
        if name == "positions":
            expected = plain_sequence[np.arange(3)[:, None], positions]
        elif name == "pooled_only":
            expected = plain_sequence[:, :1]
        else:
            sequence, expected = sequence[mask.astype(bool)], plain_sequence[mask.astype(bool)]
        assert np.abs(sequence - expected).max() < 1e-6, name
        if name == "recompute":
            for ours, reference in zip(gradients, plain_gradients, strict=True):
                assert np.abs(ours - reference).max() < 1e-5
    assert len(plain_gradients) == len(google_albert_names(**sharing)) - 7  # No cls/ heads.


def test_pretraining_starts_from_the_albert_checkpoint_and_learns(albert, tmp_path):
    """run_pretraining's MLM (E-wide transform) and sentence-order heads on ALBERT's layers."""
    _, tf_dir, sharing = albert
    if sharing != SHARED:
        pytest.skip("one sharing is enough for the training loop")
    write_records(str(tmp_path / "train.tfrecord"), num=8)
    common = dict(bert_config_file=str(tf_dir / "bert_config.json"),
                  init_checkpoint=str(tf_dir / "bert_model.ckpt"),
                  next_sentence_objective="sop")
    first = run_pretraining(pretrain_options(tmp_path, num_train_steps=1, **common))
    last = run_pretraining(pretrain_options(tmp_path, num_train_steps=30, **common))
    assert last["masked_lm_loss"] < 0.9 * first["masked_lm_loss"], (first, last)
    trained = dict(tf.train.list_variables(str(tmp_path / "out")))
    assert trained["cls/predictions/transform/dense/kernel"] == [32, 16]
    assert sorted(name for name in trained if "adam" not in name and name != "global_step") \
        == google_albert_names(**sharing)


def test_converter_round_trip_is_bit_exact_and_loads_in_hugging_face(albert, tmp_path):
    """tf -> hf (the script) gives back the HF model's tensors; hf -> tf again the checkpoint."""
    model, tf_dir, _ = albert
    assert_ok(run_script("convert_checkpoint.py", "--direction=tf_to_hf",
                         f"--bert_config_file={tf_dir / 'bert_config.json'}",
                         f"--init_checkpoint={tf_dir / 'bert_model.ckpt'}",
                         f"--output_dir={tmp_path / 'hf'}"))
    assert_ok(run_script("convert_checkpoint.py", "--direction=hf_to_tf",
                         f"--hf_dir={tmp_path / 'hf'}", f"--output_dir={tmp_path / 'tf'}"))
    first = tf.train.load_checkpoint(str(tf_dir / "bert_model.ckpt"))
    again = tf.train.load_checkpoint(str(tmp_path / "tf" / "bert_model.ckpt"))
    assert sorted(again.get_variable_to_shape_map()) == sorted(first.get_variable_to_shape_map())
    for name in first.get_variable_to_shape_map():
        assert np.array_equal(again.get_tensor(name), first.get_tensor(name)), name
    assert (tmp_path / "tf" / "bert_config.json").read_text() == (
        tf_dir / "bert_config.json").read_text()
    from safetensors.numpy import load_file

    written = load_file(str(tmp_path / "hf" / "model.safetensors"))
    original = {key: value.numpy() for key, value in model.state_dict().items()
                if "decoder" not in key and "position_ids" not in key
                and "token_type_ids" not in key}
    assert sorted(written) == sorted(original)
    for key, value in original.items():
        assert np.array_equal(written[key], value), key
    with open(tmp_path / "hf" / "config.json") as f:
        hf_config = json.load(f)
    assert (hf_config["model_type"], hf_config["architectures"]) == (
        "albert", ["AlbertForPreTraining"])
    again = transformers.AlbertModel.from_pretrained(str(tmp_path / "hf")).eval()
    ids, mask, types = inputs(seed=4)
    with torch.no_grad():
        pooled = again(input_ids=torch.tensor(ids, dtype=torch.long),
                       attention_mask=torch.tensor(mask, dtype=torch.long),
                       token_type_ids=torch.tensor(types, dtype=torch.long)).pooler_output
    assert np.array_equal(pooled.numpy(), hf_outputs(model, ids, mask, types)[1])


def test_bert_config_without_embedding_size_names_the_fix(albert, tmp_path):
    _, tf_dir, _ = albert
    with open(tf_dir / "bert_config.json") as f:
        values = json.load(f)
    for key in ("embedding_size", "num_hidden_groups", "inner_group_num"):
        values.pop(key)
    config = modeling.BertConfig.from_dict(values)
    with pytest.raises(BertTfError) as graph_error:
        graph_outputs(config, tf_dir / "bert_model.ckpt", *inputs())
    with pytest.raises(BertTfError) as tf2_error:
        tf2.BertEncoder(config).load_checkpoint(str(tf_dir / "bert_model.ckpt"))
    for error in (graph_error, tf2_error):
        message = str(error.value)
        assert "\n" not in message and "ALBERT" in message and "embedding_size" in message
        assert str(tf_dir / "bert_model.ckpt") in message
    with pytest.raises(BertTfError, match="'num_hidden_groups' is an ALBERT key"):
        modeling.BertConfig.from_dict({**values, "num_hidden_groups": 1}).validate()
    with pytest.raises(BertTfError, match="embedding_size equals hidden_size"):
        albert_conversion.hf_config_to_bert_config(
            {"model_type": "albert", **SIZES, "embedding_size": 32})
    with pytest.raises(BertTfError, match="--task=classifier: fine-tuned ALBERT heads"):
        conversion.convert_tf_to_hf(str(tf_dir / "bert_config.json"),
                                    str(tf_dir / "bert_model.ckpt"), str(tmp_path / "hf"),
                                    task="classifier")


def test_bert_configs_are_unchanged():
    config = modeling.BertConfig(vocab_size=10)
    assert "embedding_size" not in config.to_dict()
    assert config.sharing is None and config.embedding_width == config.hidden_size
    assert modeling.LayerConfig.of(config, False).variant.sharing is None


@pytest.fixture(scope="module")
def albert_over_vocab(tmp_path_factory):
    """A Google-layout ALBERT directory over the real 30522-token vocab."""
    root = tmp_path_factory.mktemp("albert_vocab")
    make_hf_albert(root / "hf", **{**SIZES, "vocab_size": 30522, "max_position_embeddings": 64},
                   **SHARED)
    conversion.convert_hf_to_tf(str(root / "hf"), str(root / "tf"))
    return root / "tf"


def test_run_classifier_fine_tunes_an_albert_checkpoint(tmp_path, vocab_file, albert_over_vocab):
    """Every encoder variable is read, training runs and the evaluation is written; the
    fine-tuned checkpoint keeps the layout; a config without ALBERT's keys is one line."""
    tf_dir = albert_over_vocab
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for name in ("train.tsv", "dev.tsv"):
        shutil.copy(os.path.join(TOPICS, name), data_dir / name)
    out = tmp_path / "out"
    args = ("run_classifier.py", "--task_name=tsv", "--text_a_column=sentence",
            f"--data_dir={data_dir}", f"--vocab_file={vocab_file}",
            f"--init_checkpoint={tf_dir / 'bert_model.ckpt'}", "--max_seq_length=24",
            "--train_batch_size=8", "--learning_rate=1e-3", "--eval_batch_size=16")
    result = run_script(*args, f"--bert_config_file={tf_dir / 'bert_config.json'}",
                        f"--output_dir={out}", "--do_train", "--do_eval", "--num_train_steps=8")
    assert_ok(result)
    assert "as expected for a pre-trained checkpoint" in result.stderr
    results = read_key_values(out / "eval_results.txt")
    assert results["global_step"] == 8 and np.isfinite(results["eval_loss"])
    trained = dict(tf.train.list_variables(str(out)))
    assert "bert/encoder/transformer/group_0/inner_group_0/LayerNorm_1/gamma" in trained
    assert not any("/layer_0/" in name for name in trained)

    with open(tf_dir / "bert_config.json") as f:
        bert_only = {key: value for key, value in json.load(f).items()
                     if key not in ("embedding_size", "num_hidden_groups", "inner_group_num")}
    with open(tmp_path / "bert_config.json", "w") as f:
        json.dump(bert_only, f)
    result = run_script(*args, f"--bert_config_file={tmp_path / 'bert_config.json'}",
                        f"--output_dir={tmp_path / 'bad'}", "--do_train",
                        "--num_train_steps=1")
    assert_clean_error(result, "ALBERT", "embedding_size")


@pytest.mark.parametrize("script", ["run_squad.py", "run_ner.py"])
def test_squad_and_ner_fine_tune_it(tmp_path, vocab_file, albert_over_vocab, script):
    tf_dir = albert_over_vocab
    data = os.path.join(os.path.dirname(__file__), "data")
    if script == "run_squad.py":
        squad = os.path.join(data, "squad", "windows_v2.json")
        task = [f"--train_file={squad}", "--do_predict", f"--predict_file={squad}",
                "--version_2_with_negative", "--doc_stride=8", "--max_query_length=6",
                "--n_best_size=5", "--max_answer_length=4", "--max_seq_length=32"]
        written = "predictions.json"
    else:
        data_dir = tmp_path / "data"
        data_dir.mkdir()
        for name, source in (("train.txt", "train.txt"), ("dev.txt", "train.txt"),
                             ("test.txt", "test.txt")):
            shutil.copy(os.path.join(data, "ner", source), data_dir / name)
        task = [f"--data_dir={data_dir}", "--do_eval", "--max_seq_length=48"]
        written = "eval_results.txt"
    result = run_script(script, f"--vocab_file={vocab_file}",
                        f"--bert_config_file={tf_dir / 'bert_config.json'}",
                        f"--init_checkpoint={tf_dir / 'bert_model.ckpt'}",
                        f"--output_dir={tmp_path / 'out'}", "--do_train", "--num_train_steps=4",
                        "--train_batch_size=4", "--learning_rate=1e-3", *task)
    assert_ok(result)
    assert "as expected for a pre-trained checkpoint" in result.stderr
    assert (tmp_path / "out" / written).is_file()
