"""Typed options: what each entry point needs, built once from the parsed flags.

Each option is written once, as a field below: its name, type, default, and, for a field made
with `flag_field`, its flag's help, kind and choices. The flag groups in `bert_tf.cli.flags`
generate each flag from its field (`bert_tf.cli.option_flags.define_fields`), and library
callers who build options in code (`ModelOptions(bert_config_file=...)`) get the same values. A
script parses its flags and turns them into one of the frozen dataclasses below with
`from_flags(FLAGS)`; the library only ever sees these objects. Each field is named after the
flag it comes from, so `from_flags` reads every field by name, and a nested group (a field whose
type is another options class) is read from the same flags. A field without flag metadata is
read from the flag another class's field defines (e.g. `BenchmarkOptions.precision` from
`ModelOptions.precision`'s).

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


def flag_field(default, help_text, *, kind=None, choices=None, lower_bound=None,
               optional=False, keep_default=False):
    """A field that is also a command-line flag of the same name.

    Args:
      default: the field's default, and its flag's.
      help_text: the flag's help: what it sets and why one would.
      kind: "path" for paths (`~` expanded); None: from the annotation (str, int, float, bool,
        list[str]) or "enum" with `choices`.
      choices: the allowed values; a list, or "package.module:NAME" for a sequence defined in a
        module that imports TensorFlow (imported only when the flag is defined).
      lower_bound: the smallest value of an int flag.
      optional: the field is read from its flag where the script defines it, else None (or its
        default, with `keep_default`).
      keep_default: see `optional`.
    """
    metadata = {"help": help_text, "kind": kind, "choices": choices, "lower_bound": lower_bound}
    if optional:
        metadata.update(optional=True, keep_default=keep_default)
    return dataclasses.field(default=default, metadata=metadata)


def _path(help_text, default=None):
    """A path flag field (default None: unset)."""
    return flag_field(default, help_text, kind="path")


def _group(options_class, optional=False, **defaults):
    """A field holding the nested options group `options_class` (None when `optional` and the
    script does not define the group's flags); by default the group's own defaults, with
    `defaults` (field name -> value) in their place."""
    return dataclasses.field(default_factory=lambda: options_class(**defaults),
                             metadata={"group": options_class, "optional": optional})


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

    distribution_strategy: str = flag_field(
        "none",
        "none: one device. mirrored: this host's GPUs (or CPU devices) in sync. multi_worker: "
        "several hosts/processes described by TF_CONFIG. tpu: the TPU of --tpu_name. "
        "--train_batch_size stays the global batch.",
        choices="bert_tf.training.distribute:STRATEGY_NAMES")
    num_gpus: int | None = flag_field(
        None, "GPUs per host for mirrored / multi_worker (the first ones); default: all. "
        "Without GPUs, mirrored uses the CPU.")
    step_timeout_secs: float = flag_field(
        300, "multi_worker: seconds a training step may wait for the other workers before this "
        "worker stops with an error (a worker died or hangs); must exceed the longest pause, "
        "e.g. the chief writing a checkpoint. 0: no limit.")
    startup_timeout_secs: float = flag_field(
        600, "multi_worker: seconds this worker waits for every task of TF_CONFIG to start "
        "(TensorFlow start-up, building the graph), and as long again for them to join the "
        "first step, before it stops with an error naming the missing ones. 0: no limit.")
    use_tpu: bool = flag_field(False, "Whether to use TPU or GPU/CPU.")  # Means tpu strategy.
    tpu_name: str | None = flag_field(None, "The Cloud TPU to use for training.")
    tpu_zone: str | None = flag_field(None, "GCE zone where the Cloud TPU is located in.")
    gcp_project: str | None = flag_field(None, "Project name for the Cloud TPU-enabled project.")
    master: str | None = flag_field(None, "[Optional] TensorFlow master URL.")
    num_tpu_cores: int = flag_field(8, "Only used if `use_tpu` is True.")
    iterations_per_loop: int = flag_field(1000, "Accepted for compatibility (TPU loop size).")

    @property
    def on_tpu(self):
        """Whether the run is on a TPU (--use_tpu or --distribution_strategy=tpu)."""
        return self.use_tpu or self.distribution_strategy == "tpu"


@dataclasses.dataclass(frozen=True)
class ValidationOptions(_FromFlags):
    """Evaluation during training, the best checkpoint and early stopping."""

    eval_every_n_steps: int = flag_field(
        0, "Evaluate on the eval split every N optimizer updates while training (0: only at "
        "the end); results go to TensorBoard under eval/ and to "
        "output_dir/eval_history.jsonl.")
    best_checkpoint_metric: str | None = flag_field(
        None, "Keep the checkpoint with the best value of this eval metric (e.g. eval_accuracy, "
        "f1, masked_lm_accuracy) in output_dir/best/; final eval, predict and export then use "
        "it.")
    best_checkpoint_mode: str | None = flag_field(
        None, "Whether a larger or smaller --best_checkpoint_metric is better (default max; "
        "min for names containing 'loss').", choices=["max", "min"])
    early_stopping_patience: int | None = flag_field(
        None, "Stop training after this many evaluations without improvement of "
        "--best_checkpoint_metric.")
    early_stopping_min_delta: float = flag_field(
        0.0, "An evaluation improves only if it beats the best by more than this.")

    @property
    def mode(self):
        """"max" or "min": how `best_checkpoint_metric` improves."""
        if self.best_checkpoint_mode:
            return self.best_checkpoint_mode
        return "min" if "loss" in (self.best_checkpoint_metric or "") else "max"


@dataclasses.dataclass(frozen=True)
class RunOptions(_FromFlags):
    """Where a training run writes and how it executes."""

    output_dir: str | None = _path(
        "The output directory where checkpoints, cached features and results are written.")
    save_checkpoints_steps: int = flag_field(1000, "How often to save the model checkpoint.")
    keep_checkpoint_max: int = flag_field(5, "How many recent checkpoints to keep.")
    log_every_n_steps: int = flag_field(100, "Steps between progress lines.")
    save_summary_steps: int = flag_field(100, "Steps between TensorBoard summaries.")
    random_seed: int | None = flag_field(None, "Graph-level random seed for repeatable runs.")
    use_xla: bool = flag_field(
        False, "Compile the graph's element-wise ops (layer norm, GELU, dropout, softmax, the "
        "optimizer's arithmetic) with XLA; matmuls stay TensorFlow's kernels. Each new input "
        "shape compiles first, so it pays on long runs at fixed shapes; off by default.")
    shuffle_train_input: bool = flag_field(
        True, "Shuffle the training records. False reads them in file order (repeatable runs, "
        "e.g. to compare a distributed run with a single-process one).")
    skip_corrupt_records: bool = flag_field(
        False, "Train on when a TFRecord file is truncated or damaged: read it up to its last "
        "whole record and log what was skipped. Default: stop with an error naming the file.")
    exact_resume: bool = flag_field(
        True, "Save the input pipeline's position with every checkpoint, so a restarted run "
        "sees the batches an uninterrupted one would (one worker; with more, or with a "
        "checkpoint without it, the input restarts from the first record, as with false).")
    preemption_grace_secs: float = flag_field(
        30.0, "On SIGTERM / SIGINT: seconds to finish the current step and write its checkpoint "
        "before exiting (143 / 130); the same command resumes.")
    export_release_dir: str | None = _path(
        "At the end of training also write the released-checkpoint layout (bert_model.ckpt "
        "without optimizer state, bert_config.json, vocab.txt) here.")
    distribution: DistributionOptions = _group(DistributionOptions)
    validation: ValidationOptions = _group(ValidationOptions)


@dataclasses.dataclass(frozen=True)
class ModelOptions(_FromFlags):
    """The model a run builds: config, starting weights, sequence length, compute precision."""

    bert_config_file: str | None = _path(
        "The config json file corresponding to the pre-trained BERT model (default with a "
        "KerasHub preset or Hugging Face --init_checkpoint: the source's).")
    init_checkpoint: str | None = _path(
        "Initial checkpoint (usually from a pre-trained BERT model): a prefix such as "
        ".../bert_model.ckpt, or a directory (its latest checkpoint), or a KerasHub preset or "
        "Hugging Face model directory (converted once, cached in $BERT_TF_CACHE_DIR).")
    max_seq_length: int = flag_field(  # run_squad.py: SquadOptions.MAX_SEQ_LENGTH.
        128, "The maximum total input sequence length after WordPiece tokenization; longer "
        "sequences are truncated, shorter ones padded.")
    precision: str = flag_field("fp32", "Compute precision; variables and checkpoints stay "
                                "float32.", choices=["fp32", "bf16", "fp16"])
    # Longer inputs and bigger models (docs/training-runs.md).
    recompute_grad: bool = flag_field(
        False, "Keep only each encoder layer's input for the backward pass and recompute the "
        "layer there: much less activation memory for about one more forward pass; the same "
        "gradients.", optional=True, keep_default=True)
    max_position_embeddings: int | None = flag_field(
        None, "Positions of the model, overriding the BERT config's (to train with a "
        "--max_seq_length beyond it); a smaller checkpoint table is extended as "
        "--position_embedding_init says.", lower_bound=1, optional=True, keep_default=True)
    position_embedding_init: str = flag_field(
        "copy", "When --max_position_embeddings (or the config) has more positions than "
        "--init_checkpoint: copy repeats the learnt rows block after block; interpolate "
        "resamples them. The learnt rows keep their weights.",
        choices=["copy", "interpolate"],  # table_growth.POSITION_INITS
        optional=True, keep_default=True)
    new_token_init: str = flag_field(
        "mean", "When the config's vocab_size is larger than --init_checkpoint's tables "
        "(scripts/extend_vocab.py): new word embeddings and MLM output biases start as the "
        "mean learnt one, or from the initializer.", choices=["mean", "random"],
        optional=True, keep_default=True)

    @property
    def compute_dtype(self):
        """The tf.DType of `precision`."""
        # Imported here: data-preparation scripts use these options without TensorFlow.
        from bert_tf import precision as precision_lib

        return precision_lib.compute_dtype_from_name(self.precision)


@dataclasses.dataclass(frozen=True)
class TrainOptions(_FromFlags):
    """The optimizer side of a run; `train_batch_size` is the global batch per update."""

    do_train: bool = flag_field(False, "Whether to run training.")
    train_batch_size: int = flag_field(32, "Examples per optimizer update (the global batch).")
    learning_rate: float = flag_field(5e-5, "The initial learning rate.")
    num_train_steps: int | None = flag_field(
        None, "Optimizer updates to train; fine-tuning's default: from --num_train_epochs.")
    optimizer: str = flag_field("adamw", "The optimizer.", choices=["adamw", "lamb"])
    num_accumulation_steps: int = flag_field(
        1, "Micro-batches accumulated per optimizer update; train_batch_size must divide by "
        "it.")
    trainable_scopes: list[str] | None = flag_field(
        None, "Comma-separated variable name prefixes: only these variables train (e.g. "
        "cls/,output_).")
    freeze_scopes: list[str] | None = flag_field(
        None, "Comma-separated variable name prefixes that do not train (e.g. "
        "bert/embeddings,bert/encoder/layer_0); they get no optimizer slots.")
    freeze_layers: int | None = flag_field(
        None, "Freeze the embeddings and the lowest K encoder layers.")

    @property
    def micro_batch_size(self):
        """Examples in one session run: train_batch_size / num_accumulation_steps."""
        return self.train_batch_size // self.num_accumulation_steps


@dataclasses.dataclass(frozen=True)
class TokenizerOptions(_FromFlags):
    """The WordPiece vocabulary and casing of the checkpoint."""

    vocab_file: str | None = _path(
        "The vocabulary file the BERT model was trained on (default with a KerasHub preset or "
        "Hugging Face --init_checkpoint: the source's).")
    do_lower_case: bool = flag_field(
        True, "Whether to lower case the input text; True for uncased models.")


@dataclasses.dataclass(frozen=True)
class EvalOptions(_FromFlags):
    """Evaluation on the dev split (pre-training: the eval input files)."""

    do_eval: bool = flag_field(False, "Whether to run eval on the dev set.")
    eval_batch_size: int = flag_field(8, "Total batch size for eval.")


@dataclasses.dataclass(frozen=True)
class FinetuneOptions(_FromFlags):
    """A fine-tuning run (`bert_tf.runs.driver.run_task`)."""

    do_predict: bool = flag_field(False, "Whether to run prediction.")
    predict_batch_size: int = flag_field(8, "Total batch size for prediction.")
    num_train_epochs: float = flag_field(3.0, "Total number of training epochs to perform.")
    warmup_proportion: float = flag_field(
        0.1, "Proportion of training to perform linear learning rate warmup for.")
    export_dir: str | None = _path(
        "If set, export the trained model as a SavedModel to <export_dir>/<timestamp> "
        "(signatures serving_default, int32 inputs, and serving_int64).")
    # None where the script has no such flag (SQuAD).
    bucket_by_length: bool | None = flag_field(
        True, "Training batches from length buckets: records are grouped by length bucket in "
        "windows of 50 batches and each batch is cut to the smallest of at most 16 lengths "
        "(multiples of max_seq_length / 16 rounded up to a multiple of 8: 8, 16, ..., 128 at "
        "128) that holds its longest example, so short texts do not compute on padding; the "
        "loss is unchanged. Evaluation and prediction read their records in order of length "
        "(50 batches at a time), cut alike; what they write is in input order. False: every "
        "training batch at max_seq_length, evaluation and prediction in input order. Off on "
        "TPUs.", optional=True)
    # None where the script has no such flag (SQuAD).
    padding_free: bool | None = flag_field(
        True, "Run the encoder's layers on the real tokens of a training, evaluation or "
        "prediction batch only (exports keep the padded graph): padding costs no dense-layer "
        "work, only attention sees the padded [batch, length] layout. The same outputs at real "
        "tokens (dropout draws other masks). Off with --use_xla and on TPUs, which need fixed "
        "shapes.", optional=True)
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

    input_file: str | None = _path("Input TF example files (glob or comma separated).")
    eval_input_file: str | None = _path(
        "Held-out TF example files for --do_eval (default: --input_file).")
    max_predictions_per_seq: int = flag_field(20, "Masked LM predictions per sequence.")
    num_warmup_steps: int = flag_field(10000, "Number of warmup steps.")
    max_eval_steps: int = flag_field(100, "Maximum number of eval batches.")
    report_majority_baseline: bool = flag_field(
        False, "After eval, also log the masked-LM accuracy of always predicting the most "
        "frequent masked token of the training data.")
    # As the records were written (create_pretraining_data.py).
    next_sentence_objective: str = flag_field(
        "nsp", "The sentence-level objective beside masked LM. nsp: next-sentence prediction "
        "(B follows A or comes from another document). sop: sentence-order prediction (ALBERT: "
        "A and B consecutive, swapped half the time). none: masked LM only, one full-length "
        "segment (RoBERTa); no sentence head in the model.", choices=["nsp", "sop", "none"])
    model: ModelOptions = _group(ModelOptions)
    train: TrainOptions = _group(TrainOptions, num_train_steps=100000)
    run: RunOptions = _group(RunOptions)
    evaluation: EvalOptions = _group(EvalOptions)


@dataclasses.dataclass(frozen=True)
class ClassifierOptions(_FromFlags):
    """The task flags of run_classifier.py (`bert_tf.tasks.classification`)."""

    task_name: str | None = flag_field(
        None, "The task: cola, sst-2, mrpc, sts-b, qqp, mnli, mnli-mm, qnli, rte, wnli, xnli, "
        "or csv / tsv for your own files.")
    data_dir: str | None = _path(
        "The input data dir: the task's .tsv files (or train/dev/test.csv for the csv task, "
        ".tsv for the tsv task).")
    text_a_column: str | None = flag_field(
        None, "csv/tsv task: column of the first text (header name or 0-based index).")
    text_b_column: str | None = flag_field(
        None, "csv/tsv task: column of the second text, for sentence-pair tasks.")
    label_column: str | None = flag_field(
        None, "csv/tsv task: column of the label (default 'label').")
    labels: list[str] | None = flag_field(
        None, "csv/tsv task: the label list, comma separated (default: the distinct labels of "
        "the train file, sorted).")
    has_header: bool | None = flag_field(
        None, "csv/tsv task: whether the first row names the columns (default True).")
    regression: bool | None = flag_field(
        None, "csv/tsv task: labels are real numbers (MSE loss, Pearson/Spearman).")
    language: str | None = flag_field(
        None, "xnli task: the language to train and evaluate on (default zh).")
    doc_stride: int = flag_field(
        0, "Long texts: cut text_a into windows of max_seq_length starting every doc_stride "
        "word pieces (text_b repeated in each) and score the example from all its windows "
        "(--window_aggregation). 0: truncate, as the original.")
    window_aggregation: str = flag_field(
        "mean", "With --doc_stride: an example's logits are the mean (or the per-class max) of "
        "its windows' logits.", choices=["mean", "max"])
    multi_label: bool = flag_field(
        False, "csv/tsv task: each row has any number of labels (in the label column, "
        "separated by --label_separator); sigmoid outputs, binary cross-entropy.")
    label_separator: str = flag_field(
        "|", "--multi_label: separator of the labels inside the label column.")
    multi_label_threshold: float = flag_field(
        0.5, "--multi_label: a label is predicted when its probability is >= this.")
    class_weights: str | None = flag_field(
        None, "Single-label classification: weights of the classes in the cross-entropy, comma "
        "separated in label order (w0,w1,...), or 'balanced' (n_examples / (n_classes * "
        "n_examples_of_class), from the training labels).")
    pack_sequences: bool = flag_field(
        False, "Training: pack several short examples into each max_seq_length sequence, each "
        "with its own positions, attending only to itself and pooled at its own [CLS]; a batch "
        "then holds about --train_batch_size examples in fewer sequences. Single-label "
        "classification and regression; evaluation and prediction stay one example a "
        "sequence.")


@dataclasses.dataclass(frozen=True)
class NerOptions(_FromFlags):
    """The task flags of run_ner.py (`bert_tf.tasks.ner`)."""

    data_dir: str | None = _path("Directory with the CoNLL files train.txt, dev.txt and test.txt.")
    doc_stride: int = flag_field(
        0, "Long sentences: cut them into windows of max_seq_length starting every doc_stride "
        "word pieces; each word is tagged from the window where it has the most context. 0: "
        "truncate (words that do not fit are tagged O).")
    use_crf: bool = flag_field(
        False, "A linear-chain CRF over the tag logits at the first piece of each word "
        "(transitions in cls/ner/crf/): trained by the sentence log-likelihood, tags by "
        "Viterbi decoding; the export's id signatures then also take label_mask.")


@dataclasses.dataclass(frozen=True)
class MultipleChoiceOptions(_FromFlags):
    """The task flags of run_multiple_choice.py (`bert_tf.tasks.multiple_choice`)."""

    data_dir: str | None = _path(
        "The input data dir: train.csv, val.csv, test.csv (swag) or train.jsonl, dev.jsonl, "
        "test.jsonl (jsonl).")
    task_name: str | None = flag_field(
        None, "swag: SWAG's CSV layout (sent1 or startphrase, sent2, ending0..3, label). jsonl: "
        "one {\"context\", \"question\", \"choices\": [...], \"label\": k} object a line.",
        choices=["swag", "jsonl"])


@dataclasses.dataclass(frozen=True)
class SquadOptions(_FromFlags):
    """The task flags of run_squad.py (`bert_tf.tasks.squad`)."""

    # run_squad.py's default --max_seq_length (a `ModelOptions` field; 128 elsewhere).
    MAX_SEQ_LENGTH: ClassVar[int] = 384

    train_file: str | None = _path("SQuAD json for training, e.g. train-v1.1.json.")
    predict_file: str | None = _path(
        "SQuAD json for predictions, e.g. dev-v1.1.json or test-v1.1.json.")
    doc_stride: int = flag_field(
        128, "When splitting up a long document into chunks, how much stride to take between "
        "chunks.")
    max_query_length: int = flag_field(
        64, "The maximum number of tokens for the question; longer questions are truncated to "
        "this length.")
    n_best_size: int = flag_field(
        20, "The total number of n-best predictions to generate in nbest_predictions.json.")
    max_answer_length: int = flag_field(
        30, "The maximum length of an answer that can be generated (word pieces).")
    verbose_logging: bool = flag_field(
        False, "Log warnings while mapping predictions back to the original text.")
    version_2_with_negative: bool = flag_field(
        False, "SQuAD v2.0: some questions have no answer.")
    null_score_diff_threshold: float = flag_field(
        0.0, "v2.0: predict the null answer when null score - best non-null score is above "
        "this.")


@dataclasses.dataclass(frozen=True)
class SquadEvaluateOptions(_FromFlags):
    """The options of squad_evaluate.py beyond the official scripts' (`bert_tf.metrics.squad`)."""

    language: str = flag_field(
        "auto", "Which metric: en = the official SQuAD one (words); zh = the official CMRC "
        "2018 one, also used for DRCD (characters, longest common substring); auto = zh when "
        "the contexts are mostly CJK ideographs (and not --version_2), else en (said in the "
        "log).",
        choices=["auto", "en", "zh"])


@dataclasses.dataclass(frozen=True)
class PredictOptions(_FromFlags):
    """scripts/predict.py: which model answers, on what input (see `bert_tf.serving.predictor`)."""

    export_dir: str | None = _path(
        "An export of run_*.py --export_dir (<export_dir>/<timestamp>); it carries the task, "
        "vocab and settings.")
    onnx_file: str | None = _path("An ONNX model written by scripts/export_onnx.py.")
    tflite_file: str | None = _path("A TFLite model written by scripts/export_tflite.py.")
    task: str | None = flag_field(  # An export or ONNX file names its own.
        None, "With --init_checkpoint: what the checkpoint predicts (fill_mask: a pre-training "
        "checkpoint; embed: any).", choices="bert_tf.serving.export:TASKS")
    input_file: str | None = _path("One example a line (default: stdin): see --input_format.")
    input_format: str = flag_field(
        "text", "text: the text, 'a ||| b' for a pair (SQuAD: 'question ||| context'); jsonl: a "
        "JSON object a line with text / text_b / question / context (and an optional id, "
        "copied to the output).", choices="bert_tf.cli.predict:INPUT_FORMATS")
    output_file: str | None = _path("JSON lines, one per input line (default: stdout).")
    batch_size: int = flag_field(32, "Examples (SQuAD: windows) per model call.")
    labels: list[str] | None = flag_field(
        None, "--init_checkpoint: the classifier / NER labels in id order, comma separated "
        "(default: label_list.txt next to the checkpoint).")
    top_k: int = flag_field(5, "fill_mask: tokens listed per [MASK].")
    pooling: str | None = flag_field(
        None, "embed: the layer at [CLS], its mean or maximum over the real tokens, or the "
        "pooler's output (default: an embedding export's own pooling, else cls).",
        choices="bert_tf.serving.predictor:POOLINGS")
    pooling_layer: int | None = flag_field(
        None, "embed: the encoder layer pooled, -1 the last, -2 the one before, ... (default: "
        "an embedding export's own, else -1).")
    normalize: bool = flag_field(
        False, "embed: divide each embedding by its L2 norm (default: as an embedding export "
        "was made).")
    # The SQuAD settings' flags are SquadOptions' (`define_squad_window_flags`).
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

    export_dir: str | None = _path(
        "The export to convert (<export_dir>/<timestamp> of run_*.py).")
    output_file: str | None = _path("Where to write the .onnx model.")
    quantize: str = flag_field(
        "none", "int8: onnxruntime dynamic quantization (int8 MatMul weights).",
        choices="bert_tf.serving.onnx_export:QUANTIZE_MODES")
    opset: int = flag_field(17, "The ONNX opset.")
    optimize: bool = flag_field(
        True, "Fuse to ONNX Runtime's BERT operators (Attention, SkipLayerNormalization, "
        "BiasGelu) before writing / quantizing.")


@dataclasses.dataclass(frozen=True)
class TfHubExportOptions(_FromFlags):
    """scripts/export_tfhub.py (see `bert_tf.serving.tfhub_export`)."""

    # Their flags are ModelOptions' (`define_checkpoint_flags`).
    bert_config_file: str | None = None
    init_checkpoint: str | None = None
    export_path: str | None = _path("Where to write the encoder SavedModel (a new directory).")
    preprocessor_export_path: str | None = _path(
        "Where to write the text preprocessor SavedModel (a new directory); unset: the encoder "
        "only.")
    seq_length: int = flag_field(
        128, "The preprocessor's packed sequence length (bert_pack_inputs, __call__).")
    tokenizer: TokenizerOptions = _group(TokenizerOptions)


@dataclasses.dataclass(frozen=True)
class EncoderExportOptions(_FromFlags):
    """scripts/export_encoder.py (see `bert_tf.serving.encoder_export`)."""

    export_dir: str | None = _path("Where to write the SavedModel (as <export_dir>/<timestamp>).")
    pooling: str = flag_field(
        "cls", "The `embedding` output: the layer at [CLS], its mean or maximum over the real "
        "tokens, or the pooler's output (tanh dense layer on the last layer at [CLS]).",
        choices="bert_tf.serving.encoder_export:POOLINGS")
    pooling_layer: int = flag_field(
        -1, "The encoder layer the embedding pools: -1 the last, -2 the one before, ...")
    normalize: bool = flag_field(
        False, "Divide each embedding by its L2 norm (unit vectors: dot products are cosines).")
    model: ModelOptions = _group(ModelOptions)
    tokenizer: TokenizerOptions = _group(TokenizerOptions)


@dataclasses.dataclass(frozen=True)
class TfliteExportOptions(_FromFlags):
    """scripts/export_tflite.py (see `bert_tf.serving.tflite_export`)."""

    export_dir: str | None = _path(
        "The export to convert (<export_dir>/<timestamp> of run_*.py or export_encoder.py).")
    output_file: str | None = _path("Where to write the .tflite model.")
    quantize: str = flag_field(
        "none", "dynamic: int8 weights, activations quantized at run time; float16: float16 "
        "weights.", choices="bert_tf.serving.tflite_export:QUANTIZE_MODES")


@dataclasses.dataclass(frozen=True)
class ConversionOptions(_FromFlags):
    """The flags of convert_checkpoint.py (see `bert_tf.tools.conversion`)."""

    direction: str | None = flag_field(
        None, "hf_to_tf: Hugging Face config.json + model.safetensors -> bert_config.json + "
        "bert_model.ckpt. tf_to_hf: the reverse, in the BertForPreTraining layout (with --task: "
        "the task's Hugging Face class). keras_hub_to_tf: a KerasHub BertBackbone preset "
        "directory -> bert_config.json + bert_model.ckpt + vocab.txt. tf_to_keras_hub: the "
        "reverse (with --task=classifier: a BertTextClassifier preset). model_garden_to_tf: a "
        "Model Garden BertEncoder / BertEncoderV2 checkpoint or TF Hub SavedModel "
        "(--init_checkpoint) -> bert_config.json + bert_model.ckpt. tf_to_model_garden: the "
        "reverse, an object-based checkpoint both encoders restore (with --task: a "
        "BertClassifier).",
        choices=["hf_to_tf", "tf_to_hf", "keras_hub_to_tf", "tf_to_keras_hub",
                 "model_garden_to_tf", "tf_to_model_garden"])
    hf_dir: str | None = _path("hf_to_tf: Hugging Face BERT model directory.")
    keras_hub_preset: str | None = _path(
        "keras_hub_to_tf: KerasHub preset directory (config.json, model.weights.h5, "
        "tokenizer.json, assets/tokenizer/vocabulary.txt).")
    do_lower_case: bool = flag_field(
        True, "tf_to_keras_hub: whether the model is uncased (the preset tokenizer's "
        "lowercase).")
    bert_config_file: str | None = _path(
        "tf_to_hf, tf_to_keras_hub, tf_to_model_garden: the checkpoint's bert_config.json. "
        "model_garden_to_tf: optional; its sizes must match the checkpoint's (default: "
        "bert_config.json beside the checkpoint, else the sizes read from it and Model "
        "Garden's tanh GELU).")
    init_checkpoint: str | None = _path(
        "tf_to_hf, tf_to_keras_hub, tf_to_model_garden: checkpoint prefix, e.g. "
        ".../bert_model.ckpt, or a run's --output_dir (its latest checkpoint). "
        "model_garden_to_tf: the Model Garden checkpoint prefix or directory, or a TF Hub "
        "SavedModel directory.")
    vocab_file: str | None = _path(
        "tf_to_hf, tf_to_keras_hub, tf_to_model_garden: vocab.txt to copy (default: vocab.txt "
        "beside --bert_config_file). model_garden_to_tf: default: the one stored with the "
        "checkpoint.")
    output_dir: str | None = _path("Directory to write the converted model to.")
    skip_unknown_keys: bool = flag_field(
        False, "hf_to_tf: drop keys that are not BERT weights (e.g. a classifier head) instead "
        "of failing.")
    task: str | None = flag_field(
        None, "Convert a fine-tuned model with this task head: classifier, multi_label and "
        "regression (BertForSequenceClassification), squad (BertForQuestionAnswering), ner "
        "(BertForTokenClassification), multiple_choice (BertForMultipleChoice).",
        choices="bert_tf.tools.conversion:TASK_HEADS")
    label_list: str | None = _path(
        "tf_to_hf with --task classifier / multi_label / ner: the run's label_list.txt for "
        "id2label (default: label_list.txt beside the checkpoint).")


@dataclasses.dataclass(frozen=True)
class BenchmarkOptions(_FromFlags):
    """The flags of scripts/benchmark.py (`bert_tf.tools.benchmark.run`)."""

    bert_config_file: str | None = _path("The config json file of the BERT model.")
    task: str = flag_field("squad", "Which task's model_fn to run.",
                           choices="bert_tf.tools.benchmark_step:TASKS")
    mode: str = flag_field("train", "train: forward + backward + optimizer update; infer: "
                           "forward only.", choices="bert_tf.tools.benchmark_step:MODES")
    batch_size: int = flag_field(
        4, "Sequences per micro-batch, over all replicas of --distribution_strategy.")
    max_seq_length: int = flag_field(SquadOptions.MAX_SEQ_LENGTH, "Sequence length S.")
    # The flags of these four are ModelOptions' and RunOptions'.
    precision: str = ModelOptions.precision
    use_xla: bool = RunOptions.use_xla
    num_warmup_steps: int = flag_field(2, "Untimed steps before timing.")
    num_steps: int = flag_field(10, "Timed steps.")
    num_accumulation_steps: int = flag_field(
        TrainOptions.num_accumulation_steps,
        "Micro-batches per optimizer update (--mode=train); one step is one update.")
    max_predictions_per_seq: int = flag_field(PretrainOptions.max_predictions_per_seq,
                                              "Masked positions per sequence (pretraining).")
    num_labels: int = flag_field(2, "Classes of the classifier head.")
    peak_matmul_size: int = flag_field(
        2048, "n of the n x n x n matmul that measures the peak TFLOP/s.")
    output_json: str | None = _path("Write the result as JSON here.")
    output_plot: str | None = _path(
        "Draw step time and throughput across --plot_batch_sizes to this image (needs "
        "matplotlib).")
    plot_batch_sizes: str = flag_field("1,2,4,8", "Batch sizes of the --output_plot sweep.")
    trace_file: str | None = _path(
        "Also trace one step: print time per op type and write a Chrome trace here.")
    check_onednn: bool = flag_field(
        True, "On CPU, report which oneDNN ISA and matmul kernels this precision uses (a child "
        "process with ONEDNN_VERBOSE=1).")
    recompute_grad: bool = ModelOptions.recompute_grad
    max_position_embeddings: int | None = None  # Overrides the config's; None: keep.
    find_max_batch: bool = flag_field(
        False, "Instead of timing --batch_size, search the largest batch whose step runs within "
        "--memory_limit_mb (doubling, then bisection; each probe a child process).")
    find_max_seq_length: bool = flag_field(
        False, "Instead of timing --max_seq_length, search the longest sequence (a multiple of "
        "128) whose step at --batch_size runs within --memory_limit_mb (doubling from 128, then "
        "bisection; a probe past the config's position table gets a table of its length).")
    memory_limit_mb: int = flag_field(
        8000, "--find_max_batch / --find_max_seq_length: resident-memory budget of one probe, "
        "in MB.")
    api: str = flag_field(
        "graph", "graph: the task's model_fn in a session. tf2: the SQuAD training step through "
        "bert_tf.tf2.BertEncoder under tf.function, with and without XLA, beside the "
        "graph-mode step, fp32 and bf16, timed alternately in one run.",
        choices=["graph", "tf2"])
    distribution: DistributionOptions = _group(DistributionOptions)


@dataclasses.dataclass(frozen=True)
class ExportStepOptions(_FromFlags):
    """scripts/export_step.py (see `bert_tf.step_program.export`)."""

    task: str = flag_field(
        BenchmarkOptions.task, "Whose training step to export: run_squad.py's, "
        "run_classifier.py's or run_pretraining.py's (masked LM + next sentence).",
        choices="bert_tf.step_program.export:TASKS")
    # Their flags are ModelOptions' (`define_checkpoint_flags`); init_checkpoint None: the
    # initializers' draws.
    bert_config_file: str | None = None
    init_checkpoint: str | None = None
    max_seq_length: int = flag_field(BenchmarkOptions.max_seq_length, "Sequence length S.")
    train_batch_size: int = flag_field(TrainOptions.train_batch_size,
                                       "Sequences per step (one optimizer update).")
    precision: str = flag_field(
        ModelOptions.precision, "Compute precision; variables and optimizer slots stay "
        "float32.", choices="bert_tf.step_program.export:PRECISIONS")
    optimizer: str = flag_field(TrainOptions.optimizer, "The optimizer of the step, as in "
                                "run_*.py.", choices=["adamw", "lamb"])
    learning_rate: float = flag_field(TrainOptions.learning_rate, "Peak learning rate.")
    num_train_steps: int = flag_field(
        10000, "Updates of the learning-rate schedule (linear decay to 0).")
    num_warmup_steps: int = flag_field(1000, "Updates of linear warmup.")
    recompute_grad: bool = ModelOptions.recompute_grad  # The flag is ModelOptions'.
    max_predictions_per_seq: int = flag_field(
        BenchmarkOptions.max_predictions_per_seq,
        "Masked positions per sequence (--task=pretraining).")
    num_labels: int = flag_field(BenchmarkOptions.num_labels,
                                 "Classes of the classifier head (--task=classifier).")
    train_file: str | None = _path(
        "Also write the batches of these TFRecords (the task's features, e.g. the "
        "train.tf_record run_squad.py writes; comma-separated files and globs) as safetensors "
        "shards.")
    num_batches: int | None = flag_field(
        None, "Write at most this many batches of --train_file (default: all whole batches).")
    random_seed: int = flag_field(
        12345, "Seed of the initializers' draws (weights not in --init_checkpoint).")
    output_dir: str | None = _path(
        "Write step.mlirbc, step.json, state.safetensors (and feature shards) here.")


@dataclasses.dataclass(frozen=True)
class RunStepOptions(_FromFlags):
    """scripts/run_step.py (see `bert_tf.step_program.runtime`); no TensorFlow needed.

    Its paths are plain strings, read as local files (`~` expanded by the runtime)."""

    step_dir: str | None = flag_field(None, "A directory written by scripts/export_step.py.")
    platform: str = flag_field("cpu", "JAX's PJRT backend to compile and run the step on.",
                               choices=["cpu", "gpu", "tpu"])
    num_steps: int = flag_field(10, "Timed training steps.")
    num_warmup_steps: int = flag_field(
        2, "Untimed steps after compilation, before the timed ones (they train too).")
    features: str | None = flag_field(
        None, "Feature shards to train on (comma-separated safetensors files and globs); "
        "default: the step directory's own.")
    random_features: bool = flag_field(
        False, "Train on random features drawn on the device (ids in range, every token real) "
        "instead.")
    random_init: bool = flag_field(
        False, "Draw the starting state on the device from step.json's initializers (zero "
        "optimizer slots) instead of reading state.safetensors.")
    state_file: str | None = flag_field(
        None, "The starting state; default: the step directory's state.safetensors.")
    seed: int = flag_field(
        12345, "The dropout seed: each step's masks are a function of it and global_step.")
    output_dir: str | None = flag_field(
        None, "Write the trained state here (state.safetensors; with TensorFlow installed also "
        "a Google-layout checkpoint).")
    output_json: str | None = flag_field(None, "Write the measurements as JSON here.")
    peak_matmul_size: int = flag_field(
        4096, "n of the n x n x n matmul that measures the device's peak in the step's dtype.")
    log_every_n_steps: int = flag_field(10, "Print a progress line every N steps.")


@dataclasses.dataclass(frozen=True)
class PretrainingDataConfig:
    """The flags that decide the content of the records (all of Google's, same meaning)."""

    # Their flags are TokenizerOptions' (`define_tokenizer_flags`).
    vocab_file: str | None = None
    do_lower_case: bool = TokenizerOptions.do_lower_case
    do_whole_word_mask: bool = flag_field(
        False, "Whether to use whole word masking rather than per-WordPiece masking.")
    max_seq_length: int = flag_field(ModelOptions.max_seq_length, "Maximum sequence length.")
    max_predictions_per_seq: int = flag_field(
        PretrainOptions.max_predictions_per_seq,
        "Maximum number of masked LM predictions per sequence.")
    random_seed: int = flag_field(12345, "Random seed for data generation.")
    dupe_factor: int = flag_field(
        10, "Number of times to duplicate the input data (with different masks).")
    masked_lm_prob: float = flag_field(0.15, "Masked LM probability.")
    short_seq_prob: float = flag_field(
        0.1, "Probability of creating sequences which are shorter than the maximum length.")
    masking: str = flag_field(
        "static", "static: masks drawn here, once per dupe_factor pass (the original). dynamic: "
        "records without masks; run_pretraining.py masks them afresh every epoch (same 15%% / "
        "80-10-10 / whole-word rules).", choices=["static", "dynamic"])
    # "sop" or "none" (see the module docstring); its flag is PretrainOptions'.
    next_sentence_objective: str = PretrainOptions.next_sentence_objective
    word_segmenter: str = flag_field(
        "none", "With --do_whole_word_mask: the words whose characters are masked together "
        "(Chinese). none: '##' pieces only (the original). jieba: jieba's words (pip install "
        "bert_tf[chinese]). ref_file: the words in --word_segmenter_ref_file. Latin words keep "
        "the '##' rule; the 80-10-10 choice is made once per word.",
        choices=["none", "jieba", "ref_file"])  # word_segmenters.SEGMENTERS
    word_segmenter_ref_file: str | None = _path(
        "--word_segmenter=ref_file: the word boundaries, one file per --input_file file "
        "(comma-separated), in the format of Hugging Face's run_chinese_ref.py output: one JSON "
        "list per non-blank input line of the positions of the pieces that continue a word, "
        "counted in the line's pieces with [CLS] = 0.")


@dataclasses.dataclass(frozen=True)
class PretrainingDataOptions(_FromFlags):
    """The flags of create_pretraining_data.py
    (`bert_tf.data.pretraining_data.create_pretraining_data`)."""

    input_file: str | None = _path(
        "Input raw text file (or comma-separated list of files and globs): one sentence a "
        "line, a blank line between documents.")
    output_file: str | None = _path(
        "Output TF example file (or comma-separated list of files: shards).")
    num_workers: int = flag_field(os.cpu_count() or 1,
                                  "Worker processes; the output is the same for any number.")
    chunk_size_mb: float = flag_field(
        1.0, "MB of text per chunk of whole documents processed together (random next-sentence "
        "documents are drawn from the same chunk).")
    config: PretrainingDataConfig = _group(PretrainingDataConfig)


@dataclasses.dataclass(frozen=True)
class PrepareCorpusOptions(_FromFlags):
    """The flags of prepare_corpus.py (`bert_tf.data.corpus.prepare_corpus`)."""

    input_file: str | None = _path(
        "Raw text to prepare: files and globs, comma separated. Plain text (a blank line "
        "between documents), JSON lines, or a MediaWiki XML export (.xml or .xml.bz2).")
    output_dir: str | None = _path(
        "Where to write the shards (corpus-NNNNN-of-NNNNN.txt: one sentence a line, a blank "
        "line between documents).")
    format: str = flag_field(
        "auto", "Input format; auto: wiki_xml for *.xml / *.xml.bz2, jsonl for *.jsonl / "
        "*.json, else by the first bytes (<mediawiki, {), else text.",
        choices=["auto", "text", "jsonl", "wiki_xml"])
    num_shards: int = flag_field(1, "Output files; documents go to them in turn.")
    text_key: str = flag_field("text", "jsonl: the key holding a document's text.")
    language: str = flag_field(
        "en", "Language code for sentence splitting (sentencex: ISO 639 codes of ~300 "
        "languages; unknown ones fall back to related languages or English rules). Chinese "
        "(zh, zh-*, yue, wuu, lzh) is also split after 。！？； and their closing quotes.")
    num_workers: int = flag_field(
        os.cpu_count() or 1, "Worker processes that clean and split documents; the output is "
        "the same for any number.")


@dataclasses.dataclass(frozen=True)
class BuildVocabOptions(_FromFlags):
    """The flags of build_vocab.py (`bert_tf.data.vocab.build_vocab`)."""

    input_file: str | None = _path(
        "Text to learn the vocab from (files and globs, comma separated), e.g. the shards "
        "prepare_corpus.py writes.")
    output_file: str | None = _path("The vocab.txt to write.")
    vocab_size: int = flag_field(30522, "Tokens in the vocab, special and unused ones included.")
    do_lower_case: bool = flag_field(
        TokenizerOptions.do_lower_case,
        "Lower-case and strip accents first (an uncased vocab); False keeps case.")
    num_unused: int = flag_field(
        100, "[unusedN] placeholders after [PAD] (ids 1..num_unused), for tokens added when "
        "fine-tuning.")
    bert_config_file: str | None = _path(
        "A BERT config to size for the vocab (with --output_bert_config_file).")
    output_bert_config_file: str | None = _path(
        "Write --bert_config_file here with vocab_size set to the vocab's size.")


@dataclasses.dataclass(frozen=True)
class ExtendVocabOptions(_FromFlags):
    """The flags of extend_vocab.py (`bert_tf.data.vocab_extension.extend_vocab`)."""

    vocab_file: str | None = _path("The vocab.txt to grow (ids never move).")
    new_words_file: str | None = _path(
        "New words, one a line: they take the [unusedN] places first, then follow the last "
        "token.")
    output_vocab_file: str | None = _path("The grown vocab.txt to write.")
    do_lower_case: bool = flag_field(
        TokenizerOptions.do_lower_case, "Normalise the new words as the uncased tokenizer does "
        "(lower case, no accents); False for a cased vocab.")


@dataclasses.dataclass(frozen=True)
class RecipeOptions(_FromFlags):
    """The flags of pretrain_recipe.py (`bert_tf.cli.recipe.run_recipe`)."""

    input_file: str = _path("Raw training text.", "data/corpus/train.txt")
    eval_input_file: str = _path("Raw held-out text.", "data/corpus/eval.txt")
    output_dir: str = _path(
        "Where every stage writes (corpus/, vocab.txt, bert_config.json, data/, phase1/, "
        "phase2/).", "pretrain_example")
    bert_config_file: str = _path("Model config; its vocab_size is set to the learned vocab's.",
                                  "configs/bert_tiny.json")
    vocab_size: int = flag_field(4000, "Size of the learned vocab.")
    phase1_seq_length: int = flag_field(128, "Phase 1 sequence length.")
    phase2_seq_length: int = flag_field(512, "Phase 2 sequence length.")
    phase1_steps: int = flag_field(1500, "Phase 1 optimizer updates.")
    phase2_steps: int = flag_field(100, "Phase 2 optimizer updates (after phase 1's).")
    train_batch_size: int = flag_field(32, "Batch size of both phases.")
    learning_rate: float = flag_field(1e-3, "Peak learning rate of both phases.")
    masking: str = flag_field("dynamic", "See create_pretraining_data.",
                              choices=["static", "dynamic"])
    next_sentence_objective: str = PretrainOptions.next_sentence_objective  # Its flag's.
    num_workers: int = flag_field(min(os.cpu_count() or 1, 4),
                                  "Worker processes of the data stages.")
    random_seed: int = flag_field(12345, "Seed of every stage.")
