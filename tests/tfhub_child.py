"""Run by tests/test_tfhub_export.py in a fresh process, under tf-keras (TF_USE_LEGACY_KERAS=1):
loads the exported TF Hub SavedModels with tensorflow_text made unimportable, fine-tunes
hub.KerasLayer(preprocessor) -> hub.KerasLayer(encoder, trainable=True) -> Dense on data/topics,
and tokenizes every line of tests/data/multilingual.txt with both preprocessors.

    python tests/tfhub_child.py ENCODER UNCASED_PREPROCESSOR CASED_PREPROCESSOR VOCAB TRAIN_TSV

Prints one JSON line: the losses before and after, how far the encoder's weights moved, and per
casing how many lines' ids equal FullTokenizer's (tokenize, and packed by __call__).
"""

import csv
import json
import os
import sys

sys.modules["tensorflow_text"] = None  # Any import of it fails: the models must not need it.

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_hub as hub  # noqa: E402
from ragged_lists import ragged_lists  # noqa: E402

from bert_tf import tokenization  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def fine_tune(encoder_path, preprocessor_path, train_tsv):
    with open(train_tsv, encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:48]
    labels = sorted({row["label"] for row in rows})
    texts = np.array([row["sentence"] for row in rows])
    y = np.array([labels.index(row["label"]) for row in rows], np.int32)

    tf.keras.utils.set_random_seed(0)
    text = tf.keras.Input(shape=(), dtype=tf.string)
    packed = hub.KerasLayer(preprocessor_path)(text)
    encoder = hub.KerasLayer(encoder_path, trainable=True)
    logits = tf.keras.layers.Dense(len(labels))(encoder(packed)["pooled_output"])
    model = tf.keras.Model(text, logits)
    model.compile(tf.keras.optimizers.Adam(5e-5),
                  tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before_weights = [w.numpy().copy() for w in encoder.trainable_weights]
    before = model.evaluate(texts, y, batch_size=16, verbose=0)
    model.fit(texts, y, batch_size=8, epochs=2, shuffle=True, verbose=0)
    after = model.evaluate(texts, y, batch_size=16, verbose=0)
    moved = max(float(np.abs(w.numpy() - b).max())
                for w, b in zip(encoder.trainable_weights, before_weights, strict=True))
    return {"loss_before": before, "loss_after": after, "weights_moved": moved,
            "trainable_weights": len(encoder.trainable_weights)}


def agreement(preprocessor_path, vocab_file, do_lower_case):
    """Lines whose ids equal FullTokenizer's: by word (tokenize) and packed (__call__)."""
    with open(os.path.join(DATA, "multilingual.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    preprocessor = tf.saved_model.load(preprocessor_path)
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    got = ragged_lists(preprocessor.tokenize(tf.constant(lines)))
    packed = preprocessor(tf.constant(lines))
    seq_length = packed["input_word_ids"].shape[1]
    word_ids, mask = packed["input_word_ids"].numpy(), packed["input_mask"].numpy()
    cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    by_word = packed_ok = 0
    for index, line in enumerate(lines):
        words = [tokenizer.convert_tokens_to_ids(tokenizer.wordpiece_tokenizer.tokenize(word))
                 for word in tokenizer.basic_tokenizer.tokenize(line)]
        by_word += got[index] == words
        ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))
        expected = [cls_id] + ids[:seq_length - 2] + [sep_id]
        packed_ok += (word_ids[index, :len(expected)].tolist() == expected
                      and int(mask[index].sum()) == len(expected))
    return {"lines": len(lines), "by_word": by_word, "packed": packed_ok}


def main(encoder_path, uncased_path, cased_path, vocab_file, train_tsv):
    result = fine_tune(encoder_path, uncased_path, train_tsv)
    result["uncased"] = agreement(uncased_path, vocab_file, True)
    result["cased"] = agreement(cased_path, vocab_file, False)
    encoder = tf.saved_model.load(encoder_path)
    result["encoder_attributes"] = {
        "vocab_file": os.path.basename(encoder.vocab_file.asset_path.numpy().decode()),
        "do_lower_case": bool(encoder.do_lower_case.numpy()),
        "variables": len(encoder.variables),
        "regularization_losses": len(encoder.regularization_losses)}
    result["tensorflow_text_loaded"] = sys.modules.get("tensorflow_text") is not None
    result["keras_module"] = tf.keras.layers.Dense.__module__  # tf_keras, not Keras 3
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
