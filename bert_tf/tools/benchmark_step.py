"""The step a benchmark times: what it is (`BenchmarkSpec`), its model FLOPs (`count_flops`),
its inputs (`synthetic_features`, random, made in the graph) and its graph (`build_step`: the
task's real model_fn, once per replica under a strategy). `benchmark` times it,
`step_profile` traces it, `batch_search` probes its memory, `tf2_benchmark` sets the
`tf2.BertEncoder` step beside it.
"""

import contextlib
import dataclasses

import tensorflow as tf

from bert_tf import precision
from bert_tf.errors import BertTfError
from bert_tf.options import BenchmarkOptions
from bert_tf.tasks import model_fn_parts, registry
from bert_tf.training import distribute
from bert_tf.training import estimator as estimator_lib
from bert_tf.training import session as session_lib
from bert_tf.training.training_step import TrainingStep

tf1 = tf.compat.v1

# The tasks with a benchmark step, in the order their `benchmarks` rank them.
TASKS = tuple(task.name for task in sorted(
    (task for task in registry.classes() if task.benchmarks), key=lambda task: task.benchmarks))
MODES = ("train", "infer")


@dataclasses.dataclass
class BenchmarkSpec:
    """What to benchmark.

    Attributes:
      bert_config: `modeling.BertConfig`.
      task: a task with a benchmark step (`TASKS`: "squad", "classifier", "pretraining").
      mode: "train" (forward + backward + optimizer update) or "infer" (forward).
      batch_size: sequences per micro-batch.
      max_seq_length: S.
      precision: "fp32", "bf16" or "fp16" (compute dtype; variables stay fp32).
      use_xla: XLA auto-clustering of the session (`session_lib.session_config`).
      num_warmup_steps: untimed steps first (graph optimisation, oneDNN primitive caches).
      num_steps: timed steps.
      num_accumulation_steps: micro-batches per optimizer update (train mode).
      max_predictions_per_seq: masked positions per sequence (pretraining).
      num_labels: classes of the classifier head.
      peak_matmul_size: n of the n x n x n matmul that measures the peak.
      seed: graph-level random seed.
      recompute_grad: recompute each encoder layer in the backward pass (train mode).
    """

    bert_config: object
    # The defaults are scripts/benchmark.py's flags'.
    task: str = BenchmarkOptions.task
    mode: str = BenchmarkOptions.mode
    batch_size: int = BenchmarkOptions.batch_size
    max_seq_length: int = BenchmarkOptions.max_seq_length
    precision: str = BenchmarkOptions.precision
    use_xla: bool = BenchmarkOptions.use_xla
    num_warmup_steps: int = BenchmarkOptions.num_warmup_steps
    num_steps: int = BenchmarkOptions.num_steps
    num_accumulation_steps: int = BenchmarkOptions.num_accumulation_steps
    max_predictions_per_seq: int = BenchmarkOptions.max_predictions_per_seq
    num_labels: int = BenchmarkOptions.num_labels
    peak_matmul_size: int = BenchmarkOptions.peak_matmul_size
    seed: int = 12345  # No flag: every benchmark run draws the same weights and masks.
    recompute_grad: bool = BenchmarkOptions.recompute_grad

    @classmethod
    def from_options(cls, options, bert_config):
        """The spec of `BenchmarkOptions` `options` for the model `bert_config`: every field
        the options share by name."""
        shared = {field.name for field in dataclasses.fields(cls)} - {"bert_config"}
        return cls(bert_config=bert_config,
                   **{name: getattr(options, name) for name in shared if hasattr(options, name)})

    @property
    def task_class(self):
        """The registered class of `task` (`step_task`)."""
        return step_task(self.task)

    def validate(self):
        """Raises BertTfError naming the flag of the first bad field."""
        task = self.task_class
        if self.mode not in MODES:
            raise BertTfError(f"--mode: unknown mode '{self.mode}'; use one of {', '.join(MODES)}.")
        precision.compute_dtype_from_name(self.precision)
        for name in ("batch_size", "max_seq_length", "num_steps", "num_accumulation_steps",
                     "peak_matmul_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise BertTfError(f"--{name} must be a positive integer, got {value!r}.")
        if self.num_warmup_steps < 0:
            raise BertTfError(f"--num_warmup_steps must be >= 0, got {self.num_warmup_steps}.")
        if self.max_seq_length > self.bert_config.max_position_embeddings:
            raise BertTfError(
                f"--max_seq_length={self.max_seq_length} is longer than max_position_embeddings "
                f"({self.bert_config.max_position_embeddings}) of --bert_config_file; use at "
                f"most {self.bert_config.max_position_embeddings}.")
        if self.mode == "infer" and self.num_accumulation_steps != 1:
            raise BertTfError("--num_accumulation_steps applies to --mode=train only; "
                              "drop it for --mode=infer.")
        task.check_step_sizes(self.max_seq_length, self.max_predictions_per_seq)

    @property
    def sequences_per_step(self):
        return self.batch_size * (self.num_accumulation_steps if self.mode == "train" else 1)


def step_task(name):
    """The registered task class of `--task` if it has a benchmark step; else BertTfError in
    one line naming those that do."""
    if not registry.known(name) or not registry.get(name).benchmarks:
        raise BertTfError(f"--task: unknown task '{name}'; use one of {', '.join(TASKS)}.")
    return registry.get(name)


def count_flops(bert_config, task, mode, batch_size, seq_length, max_predictions_per_seq=20,
                num_labels=2):
    """Model FLOPs of one micro-batch, counted from the config (a multiply-add is 2 FLOPs).

    Counts every matmul the step runs: per layer and sequence the Q, K, V and
    output projections (4 * 2*S*H*H), the two feed-forward matmuls (2 * 2*S*H*I),
    the attention scores and the probability-weighted sum of values (2 * 2*S*S*H);
    then the task head. Where the head reads F < S rows of the last layer (classifier
    training: F = 1, the [CLS] row; pre-training: F = 1 + P, [CLS] and the masked
    positions; absolute position embeddings only, as `modeling.BertModel` decides), that
    layer computes its keys and values at all S rows (2 * 2*S*H*H) and the rest at F
    (2 * 2*F*H*H + 2 * 2*F*H*I + 2 * 2*F*S*H). Embedding lookups (gathers), layer norm, softmax and
    element-wise ops are not counted. Training counts 3x the forward: the backward
    pass needs two matmuls (input and weight gradients) for each forward one.

    Heads (each task's `head_flops`): squad 2*S*H*2 (start/end logits); classifier the
    pooler 2*H*H plus 2*H*num_labels; pretraining the pooler and next-sentence head
    2*H*H + 2*H*2, and at the P = max_predictions_per_seq gathered positions the MLM
    transform 2*P*H*H and the tied decoder 2*P*H*V. (SQuAD does not use the pooler, so
    grappler prunes it.)

    Args:
      bert_config: `BertConfig` (hidden_size, intermediate_size, num_hidden_layers,
        vocab_size are used).
      task: a task with a benchmark step (`TASKS`: "squad", "classifier", "pretraining").
      mode: "train" or "infer".
      batch_size: B.
      seq_length: S.
      max_predictions_per_seq: P (pretraining).
      num_labels: classifier classes.

    Returns:
      int, FLOPs of one micro-batch.
    """
    hidden = bert_config.hidden_size
    intermediate = bert_config.intermediate_size
    seq = seq_length

    def layer(rows):
        # Keys and values at every position; queries and everything after them at `rows`.
        return (2 * 2 * seq * hidden * hidden + 2 * 2 * rows * hidden * hidden
                + 2 * 2 * rows * hidden * intermediate + 2 * 2 * rows * seq * hidden)

    task_class = step_task(task)
    last_layer_rows = seq
    if bert_config.position_embedding_type == "absolute":
        last_layer_rows = task_class.head_rows(mode, seq, max_predictions_per_seq)
    encoder = (bert_config.num_hidden_layers - 1) * layer(seq) + layer(last_layer_rows)
    head = task_class.head_flops(bert_config, seq, max_predictions_per_seq, num_labels)
    forward = batch_size * (encoder + head)
    return forward * (3 if mode == "train" else 1)


def synthetic_features(spec):
    """Random features of the task's TFRecord schema, generated in the graph on every run.

    Every token is real (input_mask all ones), as in full seq-384 SQuAD windows. The mask
    is still made at run time, as data would be: a constant mask would let grappler fold
    the attention masking away.

    Returns:
      dict name -> int32 / float32 Tensor with static shapes [B, S], [B] or [B, P].
    """
    config = spec.bert_config
    batch, seq = spec.batch_size, spec.max_seq_length

    def ints(shape, maxval):
        return tf.random.uniform(shape, 0, maxval, dtype=tf.int32)

    features = {
        "input_ids": ints([batch, seq], config.vocab_size),
        "input_mask": tf.random.uniform([batch, seq], 1, 2, dtype=tf.int32),  # All ones.
        "segment_ids": ints([batch, seq], min(2, config.type_vocab_size)),
    }
    for name, width, dtype, maxval in spec.task_class.step_features(
            seq, spec.max_predictions_per_seq, spec.num_labels, config.vocab_size):
        shape = [batch] if width is None else [batch, width]
        features[name] = tf.ones(shape, dtype) if maxval is None else ints(shape, maxval)
    features.update(spec.task_class.forward_features(batch))
    return features


def _task_model_fn(spec):
    """The task's real model_fn, as the run_* scripts build it."""
    compute_dtype = precision.compute_dtype_from_name(spec.precision)
    encoder = model_fn_parts.Encoder(spec.bert_config, compute_dtype=compute_dtype,
                                     recompute_grad=spec.recompute_grad)
    training = TrainingStep(learning_rate=5e-5, num_train_steps=1000000, num_warmup_steps=100,
                            num_accumulation_steps=spec.num_accumulation_steps,
                            compute_dtype=compute_dtype)
    return spec.task_class.step_model_fn(encoder, training, spec.num_labels)


def _replica_step(spec, model_fn):
    """(fetch, loss) of the step on `spec.batch_size` sequences; see `build_step`."""
    features = synthetic_features(spec)
    mode = (estimator_lib.ModeKeys.TRAIN if spec.mode == "train" else
            spec.task_class.infer_mode)
    estimator_spec = model_fn(features, None, mode, {"batch_size": spec.batch_size})
    loss = estimator_spec.loss
    if spec.mode == "train":
        fetch = estimator_spec.train_op
    elif estimator_spec.predictions is not None:
        # Fetched as values: grappler prunes ops that only feed a tf.group. They are
        # small ([B, S] logits), so copying them out costs nothing measurable.
        fetch = estimator_spec.predictions
    else:
        fetch = loss
    return fetch, loss


def build_step(spec, strategy=None):
    """Builds the step's graph, once per replica under `strategy`.

    Returns:
      (graph, fetch, loss): `fetch` is what one session run executes (the train
      op in train mode; the predictions, or the loss for pretraining, in infer
      mode; under a strategy the group of the replicas' train ops or the list of
      their outputs); `loss` a float32 scalar (None for SQuAD / classifier
      inference), the mean over replicas.

    Raises:
      BertTfError: if `spec.batch_size` does not split evenly over the replicas.
    """
    graph = tf.Graph()
    scope = contextlib.nullcontext() if strategy is None else strategy.scope()
    with graph.as_default(), scope:
        tf1.set_random_seed(spec.seed)
        model_fn = _task_model_fn(spec)
        if strategy is None:
            fetch, loss = _replica_step(spec, model_fn)
            return graph, fetch, loss
        replica_spec = dataclasses.replace(spec, batch_size=distribute.per_replica_batch_size(
            spec.batch_size, strategy, flag="batch_size"))
        tf1.train.get_or_create_global_step()  # Outside the replicas, as the Estimator does.

        def replica_fn():
            fetch, loss = _replica_step(replica_spec, model_fn)
            return {"fetch": fetch} if loss is None else {"fetch": fetch, "loss": loss}

        outputs = distribute.call_for_each_replica(strategy, replica_fn)
        if spec.mode == "train":
            fetch = strategy.group(outputs["fetch"])
        else:
            fetch = tf.nest.map_structure(strategy.experimental_local_results, outputs["fetch"])
        loss = None
        if "loss" in outputs:
            loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, outputs["loss"], axis=None)
    return graph, fetch, loss


def step_session_config(spec, graph, config=None):
    """The ConfigProto that runs `graph`, the step of `spec`, as a run would: `config` (default
    from `spec.use_xla`), with a training session's rewrites in train mode."""
    if config is None:
        config = session_lib.session_config(use_xla=spec.use_xla)
    if spec.mode != "train":
        return config
    return session_lib.training_session_config(config, graph)


def initialize(session, graph, options=None):
    """Runs the variable initializers of `graph` (with `options`, `tf1.RunOptions`)."""
    with graph.as_default():
        initializers = tf1.global_variables_initializer(), tf1.local_variables_initializer()
    # In this order: a weight copy cast once (`precision.weights_cast_once`) reads its variable.
    for initializer in initializers:
        session.run(initializer, options=options)
