"""The BERT encoder as a Keras 3 layer (TensorFlow backend).

`BertEncoderLayer` holds the encoder's weights as Keras variables (so `trainable_weights`,
`model.fit`, `model.save("m.keras")` and `keras.models.load_model` work) and runs
`modeling.py`'s builders on them through `bert_tf.tf2.variables_from`: one model
implementation. Keras names may not contain "/", so each weight is named after its Google
checkpoint name with "/" -> "." (`bert.encoder.layer_0.attention.self.query.kernel`);
`load_checkpoint` / `save_checkpoint` map them back.

    encoder = BertEncoderLayer("minilm/bert_config.json")
    inputs = {key: keras.Input([128], dtype="int32", name=key) for key in INPUT_KEYS}
    pooled = encoder(inputs)["pooled_output"]  # [B, H]
    encoder.load_checkpoint("minilm/bert_model.ckpt")

`SentencePoolingLayer` pools the encoder's outputs into sentence vectors as the embedding
exports do (cls, mean, max, pooler; a layer; L2 normalized).
"""

import keras
import tensorflow as tf

from bert_tf import tf2
from bert_tf.encoder import sentence_pooling
from bert_tf.errors import BertTfError
from bert_tf.keras_crf import CRF  # noqa: F401 (re-exported)
from bert_tf.keras_preprocessor import BertPreprocessor  # noqa: F401 (re-exported)

# The input dict's keys (TF Hub's BERT encoder interface), each int32 [B, S].
INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")
# Google's checkpoint names use "/", which Keras 3 refuses in a variable name.
_KERAS_SEPARATOR = "."


def keras_name(google_name):
    """The Keras 3 weight name of a Google checkpoint name ("/" -> ".")."""
    return google_name.replace("/", _KERAS_SEPARATOR)


def google_name(keras_weight_name):
    """The Google checkpoint name of a `keras_name` ("." -> "/")."""
    return keras_weight_name.replace(_KERAS_SEPARATOR, "/")


def check_inputs(inputs):
    """Raises BertTfError naming the first of `INPUT_KEYS` that the dict `inputs` lacks."""
    if not isinstance(inputs, dict):
        raise BertTfError(f"BertEncoderLayer takes a dict with the keys {', '.join(INPUT_KEYS)} "
                          f"(int32 [batch, seq]), got {type(inputs).__name__}.")
    for key in INPUT_KEYS:
        if key not in inputs:
            raise BertTfError(f"BertEncoderLayer: the input dict has no '{key}' (it has "
                              f"{', '.join(sorted(inputs)) or 'no keys'}); pass "
                              f"{', '.join(INPUT_KEYS)}, each int32 [batch, seq].")


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEncoderLayer(keras.layers.Layer):
    """BERT as a Keras 3 layer: a dict of `INPUT_KEYS` in, `BertEncoder`'s outputs out.

    The layer's dtype policy sets the compute dtype ("mixed_bfloat16": weights float32,
    matmuls bfloat16, as `BertModel(compute_dtype=tf.bfloat16)`).
    """

    def __init__(self, bert_config, use_one_hot_embeddings=False, **kwargs):
        """Args:
          bert_config: `modeling.BertConfig`, its dict, or the path of a bert_config.json.
          use_one_hot_embeddings: as `BertModel`'s.
          **kwargs: Keras layer arguments (name, dtype, trainable).

        Raises:
          BertTfError: for a bad config (naming the file).
        """
        super().__init__(**kwargs)
        self.bert_config = tf2.load_bert_config(bert_config)
        self.use_one_hot_embeddings = use_one_hot_embeddings
        self._google_names = []

    def build(self, input_shape=None):
        """Makes the weights (randomly initialised as in graph mode); the shapes are unused."""
        del input_shape  # The config alone sizes every weight.
        one_token = tf.zeros([1, 1], tf.int32)
        values = tf2.initial_values(lambda: tf2.bert_outputs(
            self.bert_config, one_token, compute_dtype=tf.as_dtype(self.compute_dtype),
            use_one_hot_embeddings=self.use_one_hot_embeddings))
        for name, value in values.items():
            self.add_weight(shape=value.shape, name=keras_name(name), dtype="float32",
                            initializer=lambda shape, dtype=None, value=value: value,
                            autocast=False)  # The builders cast to the compute dtype themselves.
        self._google_names = list(values)

    @property
    def variables_by_name(self):
        """dict Google name -> Keras variable, in creation order."""
        return dict(zip(self._google_names, self.weights, strict=True))

    def __call__(self, inputs, *args, **kwargs):
        check_inputs(inputs)  # Here, before Keras wraps errors of `call` in its report.
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs, training=None):
        """Args:
          inputs: dict "input_word_ids", "input_mask", "input_type_ids": int32 [B, S].
          training: True turns dropout on.

        Returns:
          dict "sequence_output" [B, S, H], "pooled_output" [B, H], "encoder_outputs" (list
          of num_hidden_layers [B, S, H]), in the layer's compute dtype.
        """
        # The Keras variables' tf.Variables: the builders read them as graph-mode code does.
        variables = {name: weight.value for name, weight in self.variables_by_name.items()}
        with tf2.variables_from(variables):
            return tf2.bert_outputs(
                self.bert_config, inputs["input_word_ids"], inputs["input_mask"],
                inputs["input_type_ids"], training=bool(training),
                compute_dtype=tf.as_dtype(self.compute_dtype),
                use_one_hot_embeddings=self.use_one_hot_embeddings)

    def load_checkpoint(self, checkpoint, allow_missing=False):
        """Loads a Google / bert_tf checkpoint by name (see `bert_tf.tf2.load_variables`).

        Returns:
          The names the checkpoint lacked (only with `allow_missing`; else they raise).
        """
        self._build_once()
        return tf2.load_variables(self.variables_by_name, checkpoint, allow_missing)

    def save_checkpoint(self, checkpoint_prefix):
        """Writes the weights in Google's layout (e.g. "out/bert_model.ckpt"); returns it."""
        self._build_once()
        return tf2.save_variables(self.variables_by_name, checkpoint_prefix)

    def _build_once(self):
        if not self.built:
            self.build()
            self.built = True

    def get_config(self):
        config = super().get_config()
        config.update(bert_config=self.bert_config.to_dict(),
                      use_one_hot_embeddings=self.use_one_hot_embeddings)
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class SentencePoolingLayer(keras.layers.Layer):
    """Sentence vectors from `BertEncoderLayer`'s outputs, pooled as the embedding exports
    pool them (`bert_tf.encoder.sentence_pooling.pool`).

        encoder_outputs = encoder(inputs)
        vectors = SentencePoolingLayer("mean", normalize=True)(encoder_outputs,
                                                                inputs["input_mask"])  # [B, H]
    """

    def __init__(self, pooling="cls", pooling_layer=-1, normalize=False, **kwargs):
        """Args:
          pooling: "cls", "mean", "max" (over the real tokens) or "pooler".
          pooling_layer: the encoder layer pooled: -1 the last, -2 the one before, ...
          normalize: divide each vector by its L2 norm.
          **kwargs: Keras layer arguments (name, dtype).

        Raises:
          BertTfError: naming the argument, for an unknown pooling or layer.
        """
        super().__init__(**kwargs)
        self.spec = sentence_pooling.SentencePooling(pooling, pooling_layer, normalize)
        self.spec.check(prefix="")

    def __call__(self, encoder_outputs, input_mask, *args, **kwargs):
        # Here, before Keras wraps errors of `call` in its report.
        if not isinstance(encoder_outputs, dict) or "encoder_outputs" not in encoder_outputs:
            raise BertTfError("SentencePoolingLayer takes BertEncoderLayer's output dict "
                              "(with encoder_outputs and pooled_output) and the input_mask.")
        self.spec.check(len(encoder_outputs["encoder_outputs"]), prefix="")
        return super().__call__(encoder_outputs, input_mask, *args, **kwargs)

    def call(self, encoder_outputs, input_mask):
        """Args:
          encoder_outputs: `BertEncoderLayer`'s output dict ("encoder_outputs": the list of
            [B, S, H] layers, "pooled_output" [B, H]).
          input_mask: int [B, S], 1 for real tokens.

        Returns:
          float32 [B, H].
        """
        return sentence_pooling.pool(encoder_outputs["encoder_outputs"], input_mask, self.spec,
                                     encoder_outputs["pooled_output"])

    def get_config(self):
        config = super().get_config()
        config.update(pooling=self.spec.pooling, pooling_layer=self.spec.layer,
                      normalize=self.spec.normalize)
        return config
