"""A linear-chain CRF as a Keras 3 layer (TensorFlow backend), `bert_tf.keras.CRF`.

The ops are `bert_tf.crf`'s, the ones `run_ner.py --use_crf` trains and exports. Put it after a
tagger's logits, e.g. `BertEncoderLayer` and a Dense layer:

    encoder = BertEncoderLayer("minilm/bert_config.json")
    logits = keras.layers.Dense(num_tags)(encoder(inputs)["sequence_output"])  # [B, S, L]
    crf = CRF(num_tags)
    tags = crf(logits, label_mask)           # Viterbi tags, int32 [B, S]
    loss = crf.loss(logits, gold, label_mask)  # train it with the rest (GradientTape / fit)

`label_mask` [B, S] marks the positions in the chain (a NER sentence's first word pieces;
None: every position); the others are skipped (see `bert_tf.crf`). Its weights are named
as run_ner.py's checkpoint variables under `cls/ner/crf/`, "/" -> "." (`transitions`,
`start_transitions`, `end_transitions`), so `load_checkpoint` reads a run_ner.py --use_crf
checkpoint and `save_checkpoint` writes one its --init_checkpoint reads.
"""

import keras
import tensorflow as tf

from bert_tf import crf, tf2

# run_ner.py's CRF scope (`bert_tf.tasks.ner.CRF_SCOPE`).
CHECKPOINT_SCOPE = "cls/ner/crf"


@keras.saving.register_keras_serializable(package="bert_tf")
class CRF(keras.layers.Layer):
    """A linear-chain CRF over float logits [B, S, num_tags]: Viterbi tags out (`call`),
    the log-likelihood of given tags (`log_likelihood`, `loss`)."""

    def __init__(self, num_tags, **kwargs):
        """Args:
          num_tags: the number of tags L (the logits' last dimension).
          **kwargs: Keras layer arguments (name, trainable).
        """
        super().__init__(**kwargs)
        self.num_tags = int(num_tags)
        # `transitions` [L, L], `start_transitions` [L], `end_transitions` [L]: zeros (an
        # untrained CRF scores each position on its own); the shapes need no input.
        for name, shape in crf.variable_shapes(self.num_tags).items():
            setattr(self, name, self.add_weight(shape=shape, name=name, initializer="zeros",
                                                dtype="float32", autocast=False))
        self.built = True

    @property
    def parameters(self):
        """(transitions, start_transitions, end_transitions) as tf.Variables."""
        return tuple(getattr(self, name).value for name in crf.VARIABLE_NAMES)

    def call(self, logits, label_mask=None):
        """Args:
          logits: float [B, S, L].
          label_mask: int or bool [B, S], the positions in the chain (None: all).

        Returns:
          int32 [B, S]: the Viterbi tags, 0 where `label_mask` is 0.
        """
        tags, _ = crf.viterbi_decode(tf.cast(logits, tf.float32), _mask(logits, label_mask),
                                     *self.parameters)
        return tags

    def compute_output_spec(self, logits, label_mask=None):
        del label_mask
        return keras.KerasTensor(logits.shape[:-1], dtype="int32")

    def log_likelihood(self, logits, tags, label_mask=None):
        """log p(tags | logits) of each row over its chain: float32 [B] (0 for an empty
        chain); see `crf.log_likelihood`."""
        return crf.log_likelihood(tf.cast(logits, tf.float32), tags,
                                  _mask(logits, label_mask), *self.parameters)

    def loss(self, logits, tags, label_mask=None):
        """run_ner.py --use_crf's loss: the rows' negative log-likelihoods summed and divided
        by the positions in their chains (+ 1e-5), a float32 scalar."""
        mask = _mask(logits, label_mask)
        positions = tf.reduce_sum(tf.cast(mask, tf.float32))
        return -tf.reduce_sum(self.log_likelihood(logits, tags, mask)) / (positions + 1e-5)

    @property
    def variables_by_name(self):
        """dict checkpoint name (`CHECKPOINT_SCOPE`/...) -> Keras variable."""
        return {f"{CHECKPOINT_SCOPE}/{name}": getattr(self, name)
                for name in crf.VARIABLE_NAMES}

    def load_checkpoint(self, checkpoint):
        """Loads the CRF of a run_ner.py --use_crf checkpoint (a prefix or an output dir);
        a CRF of another number of tags raises BertTfError naming the variable and shapes."""
        return tf2.load_variables(self.variables_by_name, checkpoint)

    def save_checkpoint(self, checkpoint_prefix):
        """Writes the CRF's weights under run_ner.py's names; returns the prefix."""
        return tf2.save_variables(self.variables_by_name, checkpoint_prefix)

    def get_config(self):
        config = super().get_config()
        config.update(num_tags=self.num_tags)
        return config


def _mask(logits, label_mask):
    """`label_mask`, or all ones [B, S] for None."""
    if label_mask is None:
        return tf.ones(tf.shape(logits)[:2], tf.int32)
    return label_mask
