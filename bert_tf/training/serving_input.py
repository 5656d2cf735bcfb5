"""What an export feeds the model_fn: `ServingInputReceiver` (the `tf.estimator` contract of a
serving_input_receiver_fn), a receiver of raw placeholders, and the SignatureDefs
`Estimator.export_saved_model` writes from it."""

import collections

import tensorflow as tf

ServingInputReceiver = collections.namedtuple(
    "ServingInputReceiver", ["features", "receiver_tensors", "receiver_tensors_alternatives",
                             "alternative_outputs"],
    defaults=[None, None])
ServingInputReceiver.__doc__ = """What a serving_input_receiver_fn returns: the features fed to
the model_fn, the tensors (a dict name -> tensor) that become the signatures' inputs, and
optionally {signature name: {name: tensor}}: more signatures with the "serving_default"
outputs and other input tensors (any graph tensor can be fed, e.g. an int64 placeholder that
is cast to the features' int32), and {signature name: {name: tensor}}: outputs such an
alternative signature returns besides those."""


def build_raw_serving_input_receiver_fn(feature_specs, default_batch_size=None):
    """Returns a serving_input_receiver_fn that feeds each feature from its own placeholder.

    Args:
      feature_specs: dict name -> anything with `.dtype` and `.shape` (a `tf.TensorSpec`, a
        tensor), e.g. {"input_ids": tf.TensorSpec([None, 128], tf.int32)}.
      default_batch_size: fills the leading dimension when it is None in a spec.
    """

    def serving_input_receiver_fn():
        placeholders = {}
        for name, spec in feature_specs.items():
            shape = tf.TensorShape(spec.shape)
            if shape.rank and shape[0] is None and default_batch_size is not None:
                shape = tf.TensorShape([default_batch_size]).concatenate(shape[1:])
            placeholders[name] = tf.compat.v1.placeholder(tf.as_dtype(spec.dtype), shape, name)
        return ServingInputReceiver(placeholders, placeholders)

    return serving_input_receiver_fn


def tensor_info(tensor):
    """The TensorInfo proto of a dense `tensor` in a SignatureDef (what the deprecated
    `tf.compat.v1.saved_model.build_tensor_info` builds for one)."""
    if not isinstance(tensor, tf.Tensor):
        raise TypeError(f"export signatures take dense tensors; got {tensor!r}.")
    return tf.compat.v1.TensorInfo(name=tensor.name, dtype=tensor.dtype.as_datatype_enum,
                                   tensor_shape=tensor.shape.as_proto())


def predict_signature_def(inputs, outputs):
    """`tf.compat.v1.saved_model.predict_signature_def(inputs, outputs)`, without its
    deprecation warning (it calls the deprecated `build_tensor_info`)."""
    return tf.compat.v1.saved_model.build_signature_def(
        inputs={key: tensor_info(tensor) for key, tensor in inputs.items()},
        outputs={key: tensor_info(tensor) for key, tensor in outputs.items()},
        method_name=tf.compat.v1.saved_model.PREDICT_METHOD_NAME)
