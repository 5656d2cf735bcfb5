"""Run by tests/test_keras_preprocessor.py in a fresh process in which tensorflow_text cannot be
imported: calls the serving export (before bert_tf is imported), then loads the saved `.keras`
model (whose vocab file is gone) and predicts, on the text pairs of a JSON file.

    python tests/keras_preprocessor_child.py MODEL.keras EXPORT_DIR TEXTS.json OUT.npz

Writes OUT.npz (keras, serve, serving_default: the logits; ids: the loaded preprocessor's
input_word_ids) and prints one JSON line: the tensorflow_text imports tried, whether it and
bert_tf were in sys.modules when the export answered, and the loaded preprocessor's settings.
"""

import importlib.abc
import json
import sys


class _Blocker(importlib.abc.MetaPathFinder):
    """Fails every import of tensorflow_text and records that one was tried."""

    attempts = []

    def find_spec(self, name, path=None, target=None):
        del path, target
        if name.partition(".")[0] == "tensorflow_text":
            self.attempts.append(name)
            raise ImportError(f"{name} is blocked: the model must not need tensorflow-text")
        return None


sys.meta_path.insert(0, _Blocker())

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main(model_path, export_dir, texts_file, out_file):
    with open(texts_file, encoding="utf-8") as f:
        texts = json.load(f)
    text_a, text_b = tf.constant(texts["text"]), tf.constant(texts["text_b"])
    exported = tf.saved_model.load(export_dir)
    serve = exported.serve([text_a, text_b]).numpy()
    serving_default = next(iter(exported.signatures["serving_default"](
        text=text_a, text_b=text_b).values())).numpy()
    before_bert_tf = {"tensorflow_text": "tensorflow_text" in sys.modules,
                      "bert_tf": any(name.startswith("bert_tf") for name in sys.modules)}

    import keras

    import bert_tf.keras  # noqa: F401 (registers bert_tf>BertPreprocessor, BertEncoderLayer)

    model = keras.models.load_model(model_path)
    logits = model.predict([text_a, text_b], verbose=0)
    preprocessor = model.get_layer("preprocessor")
    ids = preprocessor([text_a, text_b])["input_word_ids"].numpy()
    np.savez(out_file, keras=logits, serve=serve, serving_default=serving_default, ids=ids)
    print(json.dumps({
        "attempts": _Blocker.attempts, "at_export": before_bert_tf,
        "tensorflow_text_in_modules": "tensorflow_text" in sys.modules,
        "preprocessor": {"vocab_file": preprocessor.vocab_file,
                         "do_lower_case": preprocessor.do_lower_case,
                         "seq_length": preprocessor.seq_length,
                         "vocab_size": preprocessor.vocab_size}}))


if __name__ == "__main__":
    main(*sys.argv[1:])
