"""Typed options: what each entry point needs, built once from the parsed flags.

Each field's default is the only place that default is written: the flag groups in
`bert_tf.cli.flags` define each flag with the default of its field, and library callers who
build options in code (`ModelOptions(bert_config_file=...)`) get the same values. A script parses
its flags and turns them into one of the frozen dataclasses below with `from_flags(FLAGS)`; the
library only ever sees these objects. Each field is named after the
flag it comes from, so `from_flags` reads every field by name, and a nested group (a field whose
type is another options class) is read from the same flags.

    RunOptions          where and how a run executes: output dir, checkpoints, seed, XLA,
                        distribution (DistributionOptions)
    ModelOptions        the BERT config, init checkpoint, sequence length and precision
    TrainOptions        batch, learning rate, steps, optimizer, accumulation
    TokenizerOptions    vocab file and casing
    EvalOptions         --do_eval and its batch size
    FinetuneOptions     a fine-tuning run (run_classifier / run_ner / run_squad)
    PretrainOptions     a pre-training run (run_pretraining)
    PredictOptions      scripts/predict.py (OnnxExportOptions: scripts/export_onnx.py,
                        TfliteExportOptions: export_tflite.py, EncoderExportOptions:
                        export_encoder.py)

Tests build the same objects from a fresh `absl.flags.FlagValues` (see `bert_tf.cli.flags.parse`).
"""

import dataclasses
import os
from typing import ClassVar


def _group(options_class, optional=False, **defaults):
    """A field holding the nested options group `options_class` (None when `optional` and the
    script does not define the group's flags); by default the group's own defaults, with
    `defaults` (field name -> value) in their place."""
    return dataclasses.field(default_factory=lambda: options_class(**defaults),
                             metadata={"group": options_class, "optional": optional})


def _flag_of_some_scripts(default):
    """A field read from its flag where the script defines it, else None."""
    return dataclasses.field(default=default, metadata={"optional": True})


def _flag_or_default(default):
    """A field read from its flag where the script defines it, else its default."""
    return dataclasses.field(default=default, metadata={"optional": True, "keep_default": True})


def _from_flags(options_class, flag_values):
    values = {}
    for field in dataclasses.fields(options_class):
        group = field.metadata.get("group")
        if group is None and field.metadata.get("optional") and field.name not in flag_values:
            values[field.name] = field.default if field.metadata.get("keep_default") else None
        elif group is None:
            values[field.name] = flag_values[field.name].value
        elif field.metadata["optional"] and dataclasses.fields(group)[0].name not in flag_values:
            values[field.name] = None
        else:
            values[field.name] = _from_flags(group, flag_values)
    return options_class(**values)


class _FromFlags:
    """Adds `from_flags(flag_values)` to an options dataclass."""

    @classmethod
    def from_flags(cls, flag_values):
        """The options read from parsed absl flags (each field from the flag of its name)."""
        return _from_flags(cls, flag_values)


@dataclasses.dataclass(frozen=True)
class DistributionOptions(_FromFlags):
    """How training is replicated (see `bert_tf.training.distribute` and README "Scaling out")."""

    distribution_strategy: str = "none"  # "none", "mirrored", "multi_worker" or "tpu".
    num_gpus: int | None = None  # GPUs per host; None: all.
    # multi_worker: seconds a step may wait for the others (0: forever). It must cover the
    # longest pause of any worker, e.g. the chief writing a large checkpoint.
    step_timeout_secs: float = 300
    # multi_worker: seconds to wait for the others to start (TF start-up, building the graph),
    # and as long again to join the first step (which optimizes the graph, restores).
    startup_timeout_secs: float = 600
    use_tpu: bool = False  # The original flag; means distribution_strategy="tpu".
    tpu_name: str | None = None
    tpu_zone: str | None = None
    gcp_project: str | None = None
    master: str | None = None
    num_tpu_cores: int = 8
    iterations_per_loop: int = 1000

    @property
    def on_tpu(self):
        """Whether the run is on a TPU (--use_tpu or --distribution_strategy=tpu)."""
        return self.use_tpu or self.distribution_strategy == "tpu"


@dataclasses.dataclass(frozen=True)
class ValidationOptions(_FromFlags):
    """Evaluation during training, the best checkpoint and early stopping."""

    eval_every_n_steps: int = 0  # 0: evaluate only at the end.
    best_checkpoint_metric: str | None = None  # Keep output_dir/best/ by this eval metric.
    # "max" or "min"; None: min for names containing "loss", else max.
    best_checkpoint_mode: str | None = None
    early_stopping_patience: int | None = None  # Evaluations without improvement before stopping.
    early_stopping_min_delta: float = 0.0  # An improvement must beat the best by more than this.

    @property
    def mode(self):
        """"max" or "min": how `best_checkpoint_metric` improves."""
        if self.best_checkpoint_mode:
            return self.best_checkpoint_mode
        return "min" if "loss" in (self.best_checkpoint_metric or "") else "max"


@dataclasses.dataclass(frozen=True)
class RunOptions(_FromFlags):
    """Where a training run writes and how it executes."""

    output_dir: str | None = None
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_every_n_steps: int = 100
    save_summary_steps: int = 100
    random_seed: int | None = None  # Graph-level seed for repeatable runs.
    use_xla: bool = False
    shuffle_train_input: bool = True  # False: training records in file order.
    skip_corrupt_records: bool = False  # Read a damaged TFRecord file to its last whole record.
    exact_resume: bool = True  # Checkpoint the input pipeline's position (one worker).
    preemption_grace_secs: float = 30.0  # SIGTERM / SIGINT: seconds to finish the step and save.
    export_release_dir: str | None = None  # Also write the release checkpoint layout here.
    distribution: DistributionOptions = _group(DistributionOptions)
    validation: ValidationOptions = _group(ValidationOptions)


@dataclasses.dataclass(frozen=True)
class ModelOptions(_FromFlags):
    """The model a run builds: config, starting weights, sequence length, compute precision."""

    bert_config_file: str | None = None
    init_checkpoint: str | None = None  # A checkpoint prefix or a directory; None: random weights.
    max_seq_length: int = 128  # run_squad.py: SquadOptions.MAX_SEQ_LENGTH.
    precision: str = "fp32"  # "fp32", "bf16" or "fp16"; variables stay float32.
    # Longer inputs and bigger models (docs/training-runs.md).
    recompute_grad: bool = _flag_or_default(False)  # Recompute layers in the backward.
    max_position_embeddings: int | None = _flag_or_default(None)  # Overrides the config's.
    position_embedding_init: str = _flag_or_default("copy")  # New position rows: copy,
    # interpolate.
    new_token_init: str = _flag_or_default("mean")  # New WordPiece rows: mean, random.

    @property
    def compute_dtype(self):
        """The tf.DType of `precision`."""
        # Imported here: data-preparation scripts use these options without TensorFlow.
        from bert_tf import precision as precision_lib

        return precision_lib.compute_dtype_from_name(self.precision)


@dataclasses.dataclass(frozen=True)
class TrainOptions(_FromFlags):
    """The optimizer side of a run; `train_batch_size` is the global batch per update."""

    do_train: bool = False
    train_batch_size: int = 32
    learning_rate: float = 5e-5
    num_train_steps: int | None = None  # Fine-tuning: None derives it from the epochs.
    optimizer: str = "adamw"  # "adamw" or "lamb".
    num_accumulation_steps: int = 1  # Micro-batches per update.
    trainable_scopes: list[str] | None = None  # Only variables under these name prefixes train.
    freeze_scopes: list[str] | None = None  # Variables under these name prefixes do not train.
    freeze_layers: int | None = None  # Freeze the embeddings and the lowest K encoder layers.

    @property
    def micro_batch_size(self):
        """Examples in one session run: train_batch_size / num_accumulation_steps."""
        return self.train_batch_size // self.num_accumulation_steps


@dataclasses.dataclass(frozen=True)
class TokenizerOptions(_FromFlags):
    """The WordPiece vocabulary and casing of the checkpoint."""

    vocab_file: str | None = None
    do_lower_case: bool = True


@dataclasses.dataclass(frozen=True)
class EvalOptions(_FromFlags):
    """Evaluation on the dev split (pre-training: the eval input files)."""

    do_eval: bool = False
    eval_batch_size: int = 8


@dataclasses.dataclass(frozen=True)
class FinetuneOptions(_FromFlags):
    """A fine-tuning run (`bert_tf.runs.finetuning.run_finetuning`)."""

    do_predict: bool = False
    predict_batch_size: int = 8
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    export_dir: str | None = None
    # Training batches cut to length buckets; None where the script has no such flag (SQuAD).
    bucket_by_length: bool | None = _flag_of_some_scripts(True)
    # Encoder layers on the real tokens only; None where the script has no such flag (SQuAD).
    padding_free: bool | None = _flag_of_some_scripts(True)
    model: ModelOptions = _group(ModelOptions)
    train: TrainOptions = _group(TrainOptions)
    run: RunOptions = _group(RunOptions)
    tokenizer: TokenizerOptions = _group(TokenizerOptions)
    # None where the script has no --do_eval (SQuAD evaluates its predictions).
    evaluation: EvalOptions | None = _group(EvalOptions, optional=True)

    @property
    def do_eval(self):
        return self.evaluation is not None and self.evaluation.do_eval


@dataclasses.dataclass(frozen=True)
class PretrainOptions(_FromFlags):
    """A pre-training run (`bert_tf.runs.pretraining.run_pretraining`)."""

    input_file: str | None = None  # Comma-separated files and globs.
    eval_input_file: str | None = None  # Default: input_file.
    max_predictions_per_seq: int = 20
    num_warmup_steps: int = 10000
    max_eval_steps: int = 100
    report_majority_baseline: bool = False
    next_sentence_objective: str = "nsp"  # "nsp", "sop" or "none"; as the records were written.
    model: ModelOptions = _group(ModelOptions)
    train: TrainOptions = _group(TrainOptions, num_train_steps=100000)
    run: RunOptions = _group(RunOptions)
    evaluation: EvalOptions = _group(EvalOptions)


@dataclasses.dataclass(frozen=True)
class ClassifierOptions(_FromFlags):
    """The task flags of run_classifier.py (`bert_tf.tasks.classification`)."""

    task_name: str | None = None
    data_dir: str | None = None
    text_a_column: str | None = None  # csv/tsv task: header name or 0-based index.
    text_b_column: str | None = None
    label_column: str | None = None
    labels: list[str] | None = None
    has_header: bool | None = None
    regression: bool | None = None
    language: str | None = None  # xnli.
    doc_stride: int = 0  # 0: truncate; else windows of max_seq_length every doc_stride pieces.
    window_aggregation: str = "mean"  # "mean" or "max" of the windows' logits.
    multi_label: bool = False  # csv/tsv: sigmoid outputs, binary cross-entropy.
    label_separator: str = "|"  # Between the labels of a --multi_label label column.
    multi_label_threshold: float = 0.5  # A label is predicted when its probability is >= this.
    class_weights: str | None = None  # "w0,w1,..." in label order, or "balanced".
    pack_sequences: bool = False  # Several short training examples per max_seq_length row.


@dataclasses.dataclass(frozen=True)
class NerOptions(_FromFlags):
    """The task flags of run_ner.py (`bert_tf.tasks.ner`)."""

    data_dir: str | None = None
    doc_stride: int = 0  # 0: truncate; else windows every doc_stride word pieces.


@dataclasses.dataclass(frozen=True)
class MultipleChoiceOptions(_FromFlags):
    """The task flags of run_multiple_choice.py (`bert_tf.tasks.multiple_choice`)."""

    data_dir: str | None = None
    task_name: str | None = None  # "swag" or "jsonl".


@dataclasses.dataclass(frozen=True)
class SquadOptions(_FromFlags):
    """The task flags of run_squad.py (`bert_tf.tasks.squad`)."""

    # run_squad.py's default --max_seq_length (a `ModelOptions` field; 128 elsewhere).
    MAX_SEQ_LENGTH: ClassVar[int] = 384

    train_file: str | None = None
    predict_file: str | None = None
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    verbose_logging: bool = False
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0


@dataclasses.dataclass(frozen=True)
class PredictOptions(_FromFlags):
    """scripts/predict.py: which model answers, on what input (see `bert_tf.serving.predictor`)."""

    export_dir: str | None = None
    onnx_file: str | None = None
    tflite_file: str | None = None
    task: str | None = None  # --init_checkpoint only; an export or ONNX file names its own.
    input_file: str | None = None  # None: stdin.
    input_format: str = "text"  # "text" or "jsonl".
    output_file: str | None = None  # None: stdout.
    batch_size: int = 32
    labels: list[str] | None = None
    top_k: int = 5
    pooling: str | None = None  # None: an embedding export's pooling, else "cls".
    doc_stride: int = SquadOptions.doc_stride
    max_query_length: int = SquadOptions.max_query_length
    n_best_size: int = SquadOptions.n_best_size
    max_answer_length: int = SquadOptions.max_answer_length
    version_2_with_negative: bool = SquadOptions.version_2_with_negative
    null_score_diff_threshold: float = SquadOptions.null_score_diff_threshold
    model: ModelOptions = _group(ModelOptions)
    tokenizer: TokenizerOptions = _group(TokenizerOptions)


@dataclasses.dataclass(frozen=True)
class OnnxExportOptions(_FromFlags):
    """scripts/export_onnx.py (see `bert_tf.serving.onnx_export`)."""

    export_dir: str | None = None
    output_file: str | None = None
    quantize: str = "none"  # "none" or "int8".
    opset: int = 17
    optimize: bool = True  # Fuse to ONNX Runtime's BERT operators first.


@dataclasses.dataclass(frozen=True)
class TfHubExportOptions(_FromFlags):
    """scripts/export_tfhub.py (see `bert_tf.serving.tfhub_export`)."""

    bert_config_file: str | None = None
    init_checkpoint: str | None = None
    export_path: str | None = None  # The encoder SavedModel.
    preprocessor_export_path: str | None = None  # The preprocessor SavedModel; None: none.
    seq_length: int = 128  # The preprocessor's packed length.
    tokenizer: TokenizerOptions = _group(TokenizerOptions)


@dataclasses.dataclass(frozen=True)
class EncoderExportOptions(_FromFlags):
    """scripts/export_encoder.py (see `bert_tf.serving.encoder_export`)."""

    export_dir: str | None = None
    pooling: str = "cls"  # "cls" or "mean": the `embedding` output.
    model: ModelOptions = _group(ModelOptions)
    tokenizer: TokenizerOptions = _group(TokenizerOptions)


@dataclasses.dataclass(frozen=True)
class TfliteExportOptions(_FromFlags):
    """scripts/export_tflite.py (see `bert_tf.serving.tflite_export`)."""

    export_dir: str | None = None
    output_file: str | None = None
    quantize: str = "none"  # "none", "dynamic" (int8 weights) or "float16" (float16 weights).


@dataclasses.dataclass(frozen=True)
class BenchmarkOptions(_FromFlags):
    """The flags of scripts/benchmark.py (`bert_tf.tools.benchmark.run`)."""

    bert_config_file: str | None = None
    task: str = "squad"
    mode: str = "train"  # "train" or "infer".
    batch_size: int = 4  # Global micro-batch over all replicas.
    max_seq_length: int = 384
    precision: str = ModelOptions.precision
    use_xla: bool = RunOptions.use_xla
    num_warmup_steps: int = 2  # Untimed steps.
    num_steps: int = 10  # Timed steps.
    num_accumulation_steps: int = 1
    max_predictions_per_seq: int = 20
    num_labels: int = 2
    peak_matmul_size: int = 2048
    output_json: str | None = None
    output_plot: str | None = None
    plot_batch_sizes: str = "1,2,4,8"
    trace_file: str | None = None
    check_onednn: bool = True
    recompute_grad: bool = ModelOptions.recompute_grad
    max_position_embeddings: int | None = None  # Overrides the config's; None: keep.
    find_max_batch: bool = False  # Search the largest batch that trains instead of timing one.
    find_max_seq_length: bool = False  # Search the longest sequence at --batch_size instead.
    memory_limit_mb: int = 8000  # Resident-memory budget of each search probe.
    api: str = "graph"  # "tf2": the step through bert_tf.tf2 beside graph mode (tf2_benchmark).
    distribution: DistributionOptions = _group(DistributionOptions)


@dataclasses.dataclass(frozen=True)
class ExportStepOptions(_FromFlags):
    """scripts/export_step.py (see `bert_tf.step_program.export`)."""

    task: str = BenchmarkOptions.task  # "squad", "classifier" or "pretraining".
    bert_config_file: str | None = None
    init_checkpoint: str | None = None  # None: the initializers' draws.
    max_seq_length: int = BenchmarkOptions.max_seq_length
    train_batch_size: int = TrainOptions.train_batch_size
    precision: str = ModelOptions.precision  # "fp32" or "bf16".
    optimizer: str = TrainOptions.optimizer
    learning_rate: float = TrainOptions.learning_rate
    num_train_steps: int = 10000  # The schedule's length in updates.
    num_warmup_steps: int = 1000
    recompute_grad: bool = ModelOptions.recompute_grad
    max_predictions_per_seq: int = BenchmarkOptions.max_predictions_per_seq
    num_labels: int = BenchmarkOptions.num_labels
    train_file: str | None = None  # TFRecords of the task's features (--input_file too).
    num_batches: int | None = None  # Batches of --train_file to write; None: every whole one.
    random_seed: int = 12345  # Seeds the initializers' draws.
    output_dir: str | None = None


@dataclasses.dataclass(frozen=True)
class RunStepOptions(_FromFlags):
    """scripts/run_step.py (see `bert_tf.step_program.runtime`); no TensorFlow needed."""

    step_dir: str | None = None
    platform: str = "cpu"  # "cpu", "gpu" or "tpu": JAX's PJRT backend.
    num_steps: int = 10
    num_warmup_steps: int = 2  # Untimed steps after compilation, before the timed ones.
    features: str | None = None  # Feature shards; None: the step directory's own.
    random_features: bool = False
    random_init: bool = False  # Draw the state on the device from step.json's initializers.
    state_file: str | None = None  # None: the step directory's state.safetensors.
    seed: int = 12345  # The dropout seed argument.
    output_dir: str | None = None
    output_json: str | None = None
    peak_matmul_size: int = 4096
    log_every_n_steps: int = 10


@dataclasses.dataclass(frozen=True)
class PretrainingDataConfig:
    """The flags that decide the content of the records (all of Google's, same meaning)."""

    vocab_file: str | None = None
    do_lower_case: bool = True
    do_whole_word_mask: bool = False
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    random_seed: int = 12345
    dupe_factor: int = 10
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    masking: str = "static"  # "dynamic": no masks in the records; the reader draws them.
    next_sentence_objective: str = "nsp"  # "sop" or "none" (see the module docstring).


@dataclasses.dataclass(frozen=True)
class PretrainingDataOptions(_FromFlags):
    """The flags of create_pretraining_data.py
    (`bert_tf.data.pretraining_data.create_pretraining_data`)."""

    input_file: str | None = None
    output_file: str | None = None
    num_workers: int = os.cpu_count() or 1
    chunk_size_mb: float = 1.0
    config: PretrainingDataConfig = _group(PretrainingDataConfig)


@dataclasses.dataclass(frozen=True)
class PrepareCorpusOptions(_FromFlags):
    """The flags of prepare_corpus.py (`bert_tf.data.corpus.prepare_corpus`)."""

    input_file: str | None = None
    output_dir: str | None = None
    format: str = "auto"  # "auto", "text", "jsonl" or "wiki_xml".
    num_shards: int = 1
    text_key: str = "text"
    language: str = "en"  # Sentence-splitting rules (sentencex language code).
    num_workers: int = os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class BuildVocabOptions(_FromFlags):
    """The flags of build_vocab.py (`bert_tf.data.vocab.build_vocab`)."""

    input_file: str | None = None
    output_file: str | None = None
    vocab_size: int = 30522
    do_lower_case: bool = True
    num_unused: int = 100
    bert_config_file: str | None = None
    output_bert_config_file: str | None = None


@dataclasses.dataclass(frozen=True)
class ExtendVocabOptions(_FromFlags):
    """The flags of extend_vocab.py (`bert_tf.data.vocab_extension.extend_vocab`)."""

    vocab_file: str | None = None
    new_words_file: str | None = None
    output_vocab_file: str | None = None
    do_lower_case: bool = True


@dataclasses.dataclass(frozen=True)
class RecipeOptions(_FromFlags):
    """The flags of pretrain_recipe.py (`bert_tf.cli.recipe.run_recipe`)."""

    input_file: str = "data/corpus/train.txt"
    eval_input_file: str = "data/corpus/eval.txt"
    output_dir: str = "pretrain_example"
    bert_config_file: str = "configs/bert_tiny.json"
    vocab_size: int = 4000
    phase1_seq_length: int = 128
    phase2_seq_length: int = 512
    phase1_steps: int = 1500
    phase2_steps: int = 100
    train_batch_size: int = 32
    learning_rate: float = 1e-3
    masking: str = "dynamic"
    next_sentence_objective: str = "nsp"
    num_workers: int = min(os.cpu_count() or 1, 4)
    random_seed: int = 12345
