"""TF Serving's warm-up requests of an export (assets.extra/tf_serving_warmup_requests), parsed
with TF Serving's own protos and run through the loaded signatures they name.

Imports nothing of bert_tf or of the tests' helpers, so that a plain-TensorFlow child process
(tests/test_export_core_ops.py) runs them on the model it has loaded already.
"""

import os

import tensorflow as tf


def answer_warmup_requests(export_path, loaded):
    """Runs each warm-up request's inputs through the signature of `loaded` (the export's
    `tf.saved_model.load`) it names: one request per signature, each answered with a batch of
    its rows. Returns {signature: {output: numpy array}}.

    Raises:
      ImportError: tensorflow-serving-api (a test dependency) is not installed.
    """
    from tensorflow_serving.apis import prediction_log_pb2

    path = os.path.join(export_path, "assets.extra", "tf_serving_warmup_requests")
    requests = [prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
                for record in tf.data.TFRecordDataset(path)]
    names = [request.model_spec.signature_name for request in requests]
    assert sorted(names) == sorted(loaded.signatures), names
    answers = {}
    for request in requests:
        signature = loaded.signatures[request.model_spec.signature_name]
        inputs = {key: tf.make_ndarray(value) for key, value in request.inputs.items()}
        assert set(inputs) == set(signature.structured_input_signature[1])
        rows = {len(value) for value in inputs.values()}
        assert rows == {2}, rows
        answers[request.model_spec.signature_name] = {
            key: value.numpy() for key, value in signature(
                **{key: tf.constant(value) for key, value in inputs.items()}).items()}
        for value in answers[request.model_spec.signature_name].values():
            assert value.shape[0] == 2
    return answers
