"""Flag groups shared by the scripts: the single place each flag is defined.

Each `define_*` function registers absl flags with the original Google BERT names where they
exist, so old command lines keep working. A flag's default is the default of the field of its
name in the group's options dataclass (`defaults = options.<X>Options`), so it is written only
there. A script calls the groups it needs, parses, and hands
`bert_tf.options.<X>Options.from_flags(FLAGS)` to the library; nothing else reads flags.

Every group takes `flag_values` (default: absl's global FLAGS), so tests can define the same
groups into a fresh `FlagValues` and build real option objects with `parse`.
"""

import dataclasses

from absl import flags

from bert_tf import fileio, options

FLAGS = flags.FLAGS


class _PathParser(flags.ArgumentParser):
    """A path, or a comma-separated list of paths and globs, as people type them: `~` is
    expanded (the shell does not expand it after `--flag=`); relative paths stay relative to
    the working directory; remote ones (gs://, ...) are kept as given."""

    syntactic_help = "a path (relative, absolute, ~/..., or a TensorFlow filesystem URL)"

    def parse(self, argument):
        if argument is None:
            return None
        return ",".join(fileio.user_path(part) for part in str(argument).split(","))

    def flag_type(self):
        return "string"


def define_path(name, default, help_text, flag_values=FLAGS):
    """Defines the string flag `--name` holding a path (see `_PathParser`)."""
    flags.DEFINE(_PathParser(), name, default, help_text, flag_values=flag_values,
                 serializer=flags.ArgumentSerializer())


def define_model_flags(defaults=None, flag_values=FLAGS):
    """--bert_config_file, --init_checkpoint, --max_seq_length (`ModelOptions`, with
    --precision); `defaults`: a `ModelOptions` holding the script's defaults (None: the
    class's)."""
    defaults = defaults or options.ModelOptions()
    define_checkpoint_flags(flag_values)
    flags.DEFINE_integer("max_seq_length", defaults.max_seq_length,
                         "The maximum total input sequence length after WordPiece tokenization; "
                         "longer sequences are truncated, shorter ones padded.",
                         flag_values=flag_values)


def define_long_input_flags(flag_values=FLAGS):
    """--recompute_grad, --max_position_embeddings, --position_embedding_init and
    --new_token_init: longer inputs and bigger models in the same memory (`ModelOptions`)."""
    defaults = options.ModelOptions()
    define_recompute_grad_flag(flag_values)
    define_max_position_embeddings_flag(flag_values)
    flags.DEFINE_enum("position_embedding_init", defaults.position_embedding_init,
                      ["copy", "interpolate"],  # table_growth.POSITION_INITS
                      "When --max_position_embeddings (or the config) has more positions than "
                      "--init_checkpoint: copy repeats the learnt rows block after block; "
                      "interpolate resamples them. The learnt rows keep their weights.",
                      flag_values=flag_values)
    flags.DEFINE_enum("new_token_init", defaults.new_token_init, ["mean", "random"],
                      "When the config's vocab_size is larger than --init_checkpoint's tables "
                      "(scripts/extend_vocab.py): new word embeddings and MLM output biases "
                      "start as the mean learnt one, or from the initializer.",
                      flag_values=flag_values)


def define_recompute_grad_flag(flag_values=FLAGS):
    """--recompute_grad."""
    flags.DEFINE_bool("recompute_grad", options.ModelOptions().recompute_grad,
                      "Keep only each encoder layer's input for the backward pass and "
                      "recompute the layer there: much less activation memory for about one "
                      "more forward pass; the same gradients.", flag_values=flag_values)


def define_max_position_embeddings_flag(flag_values=FLAGS):
    """--max_position_embeddings."""
    flags.DEFINE_integer("max_position_embeddings",
                         options.ModelOptions().max_position_embeddings,
                         "Positions of the model, overriding the BERT config's (to train with "
                         "a --max_seq_length beyond it); a smaller checkpoint table is "
                         "extended as --position_embedding_init says.",
                         lower_bound=1, flag_values=flag_values)


def define_checkpoint_flags(flag_values=FLAGS):
    """--bert_config_file and --init_checkpoint."""
    define_path("bert_config_file", None,
                        "The config json file corresponding to the pre-trained BERT model.",
                        flag_values=flag_values)
    define_path("init_checkpoint", None,
                        "Initial checkpoint (usually from a pre-trained BERT model): a prefix "
                        "such as .../bert_model.ckpt, or a directory (its latest checkpoint).",
                        flag_values=flag_values)


def define_tokenizer_flags(flag_values=FLAGS):
    """--vocab_file and --do_lower_case."""
    defaults = options.TokenizerOptions
    define_path("vocab_file", None, "The vocabulary file the BERT model was trained on.",
                        flag_values=flag_values)
    flags.DEFINE_bool("do_lower_case", defaults.do_lower_case,
                      "Whether to lower case the input text; True for uncased models.",
                      flag_values=flag_values)


def define_precision_flags(flag_values=FLAGS):
    """`--precision`: compute dtype with fp32 variables."""
    defaults = options.ModelOptions
    flags.DEFINE_enum("precision", defaults.precision, ["fp32", "bf16", "fp16"],
                      "Compute precision; variables and checkpoints stay float32.",
                      flag_values=flag_values)


def define_train_flags(defaults=None, flag_values=FLAGS):
    """--do_train, --train_batch_size, --learning_rate, --num_train_steps, --optimizer and
    --num_accumulation_steps (micro-batches per optimizer update); `defaults`: a
    `TrainOptions` holding the script's defaults (None: the class's)."""
    defaults = defaults or options.TrainOptions()
    flags.DEFINE_bool("do_train", defaults.do_train, "Whether to run training.",
                      flag_values=flag_values)
    flags.DEFINE_integer("train_batch_size", defaults.train_batch_size,
                         "Examples per optimizer update (the global batch).",
                         flag_values=flag_values)
    flags.DEFINE_float("learning_rate", defaults.learning_rate, "The initial learning rate.",
                       flag_values=flag_values)
    flags.DEFINE_integer("num_train_steps", defaults.num_train_steps,
                         "Optimizer updates to train" +
                         ("." if defaults.num_train_steps
                          else "; default: from --num_train_epochs."),
                         flag_values=flag_values)
    flags.DEFINE_enum("optimizer", defaults.optimizer, ["adamw", "lamb"], "The optimizer.",
                      flag_values=flag_values)
    flags.DEFINE_integer("num_accumulation_steps", defaults.num_accumulation_steps,
                         "Micro-batches accumulated per optimizer update; train_batch_size must "
                         "divide by it.", flag_values=flag_values)
    flags.DEFINE_list("trainable_scopes", None,
                      "Comma-separated variable name prefixes: only these variables train "
                      "(e.g. cls/,output_).", flag_values=flag_values)
    flags.DEFINE_list("freeze_scopes", None,
                      "Comma-separated variable name prefixes that do not train (e.g. "
                      "bert/embeddings,bert/encoder/layer_0); they get no optimizer slots.",
                      flag_values=flag_values)
    flags.DEFINE_integer("freeze_layers", None,
                         "Freeze the embeddings and the lowest K encoder layers.",
                         flag_values=flag_values)


def define_eval_flags(flag_values=FLAGS):
    """`--do_eval` and `--eval_batch_size`."""
    defaults = options.EvalOptions
    flags.DEFINE_bool("do_eval", defaults.do_eval, "Whether to run eval on the dev set.",
                      flag_values=flag_values)
    flags.DEFINE_integer("eval_batch_size", defaults.eval_batch_size, "Total batch size for eval.",
                         flag_values=flag_values)


def define_run_flags(flag_values=FLAGS):
    """Output dir, checkpointing, logging, seed, XLA and distribution: how a training run
    executes (`RunOptions`)."""
    defaults = options.RunOptions
    define_path("output_dir", None,
                        "The output directory where checkpoints, cached features and results "
                        "are written.", flag_values=flag_values)
    flags.DEFINE_integer("save_checkpoints_steps", defaults.save_checkpoints_steps,
                         "How often to save the model checkpoint.", flag_values=flag_values)
    flags.DEFINE_integer("keep_checkpoint_max", defaults.keep_checkpoint_max,
                         "How many recent checkpoints to keep.",
                         flag_values=flag_values)
    flags.DEFINE_integer("log_every_n_steps", defaults.log_every_n_steps,
                         "Steps between progress lines.",
                         flag_values=flag_values)
    flags.DEFINE_integer("save_summary_steps", defaults.save_summary_steps,
                         "Steps between TensorBoard summaries.",
                         flag_values=flag_values)
    flags.DEFINE_integer("random_seed", None, "Graph-level random seed for repeatable runs.",
                         flag_values=flag_values)
    flags.DEFINE_bool("shuffle_train_input", defaults.shuffle_train_input,
                      "Shuffle the training records. False reads them in file order "
                      "(repeatable runs, e.g. to compare a distributed run with a "
                      "single-process one).", flag_values=flag_values)
    define_fault_flags(flag_values)
    flags.DEFINE_float("preemption_grace_secs", defaults.preemption_grace_secs,
                       "On SIGTERM / SIGINT: seconds to finish the current step and write its "
                       "checkpoint before exiting (143 / 130); the same command resumes.",
                       flag_values=flag_values)
    define_path("export_release_dir", None,
                        "At the end of training also write the released-checkpoint layout "
                        "(bert_model.ckpt without optimizer state, bert_config.json, vocab.txt) "
                        "here.", flag_values=flag_values)
    define_validation_flags(flag_values)
    define_xla_flags(flag_values)
    define_distribution_flags(flag_values)


def define_fault_flags(flag_values=FLAGS):
    """--skip_corrupt_records and --exact_resume: what a run does about damaged input and
    where a restarted run picks up its input (README "Crashes")."""
    defaults = options.RunOptions
    flags.DEFINE_bool("skip_corrupt_records", defaults.skip_corrupt_records,
                      "Train on when a TFRecord file is truncated or damaged: read it up to its "
                      "last whole record and log what was skipped. Default: stop with an error "
                      "naming the file.", flag_values=flag_values)
    flags.DEFINE_bool("exact_resume", defaults.exact_resume,
                      "Save the input pipeline's position with every checkpoint, so a restarted "
                      "run sees the batches an uninterrupted one would (one worker; with more, "
                      "or with a checkpoint without it, the input restarts from the first "
                      "record, as with false).", flag_values=flag_values)


def define_validation_flags(flag_values=FLAGS):
    """Evaluation during training, best checkpoint and early stopping (`ValidationOptions`)."""
    defaults = options.ValidationOptions
    flags.DEFINE_integer("eval_every_n_steps", defaults.eval_every_n_steps,
                         "Evaluate on the eval split every N optimizer updates while training "
                         "(0: only at the end); results go to TensorBoard under eval/ and to "
                         "output_dir/eval_history.jsonl.", flag_values=flag_values)
    flags.DEFINE_string("best_checkpoint_metric", None,
                        "Keep the checkpoint with the best value of this eval metric (e.g. "
                        "eval_accuracy, f1, masked_lm_accuracy) in output_dir/best/; final eval, "
                        "predict and export then use it.", flag_values=flag_values)
    flags.DEFINE_enum("best_checkpoint_mode", None, ["max", "min"],
                      "Whether a larger or smaller --best_checkpoint_metric is better (default "
                      "max; min for names containing 'loss').", flag_values=flag_values)
    flags.DEFINE_integer("early_stopping_patience", None,
                         "Stop training after this many evaluations without improvement of "
                         "--best_checkpoint_metric.", flag_values=flag_values)
    flags.DEFINE_float("early_stopping_min_delta", defaults.early_stopping_min_delta,
                       "An evaluation improves only if it beats the best by more than this.",
                       flag_values=flag_values)


def define_finetuning_flags(max_seq_length=None, has_eval=True, length_buckets=True,
                            flag_values=FLAGS):
    """The flags run_classifier.py, run_squad.py and run_ner.py share (`FinetuneOptions`).

    The original Google names and defaults (vocab_file, bert_config_file, init_checkpoint,
    do_lower_case, do_train, do_predict, train/predict_batch_size, learning_rate,
    num_train_epochs, warmup_proportion, save_checkpoints_steps, output_dir, the TPU flags), plus
    export_dir, num_train_steps, precision, optimizer, num_accumulation_steps and run controls.

    Args:
      max_seq_length: the script's default `--max_seq_length` (None: `ModelOptions`' 128;
        SQuAD: `SquadOptions.MAX_SEQ_LENGTH`).
      has_eval: define --do_eval / --eval_batch_size (SQuAD evaluates its predictions instead).
      length_buckets: define --bucket_by_length and --padding_free (not for SQuAD: its span
        loss runs over every max_seq_length position, so a cut batch would change it).
      flag_values: where to define them.
    """
    defaults = options.FinetuneOptions
    model_defaults = options.ModelOptions()
    if max_seq_length is not None:
        model_defaults = dataclasses.replace(model_defaults, max_seq_length=max_seq_length)
    define_model_flags(model_defaults, flag_values)
    define_precision_flags(flag_values)
    define_long_input_flags(flag_values)
    define_tokenizer_flags(flag_values)
    define_train_flags(flag_values=flag_values)
    define_run_flags(flag_values)
    if has_eval:
        define_eval_flags(flag_values)
    flags.DEFINE_bool("do_predict", defaults.do_predict, "Whether to run prediction.",
                      flag_values=flag_values)
    flags.DEFINE_integer("predict_batch_size", defaults.predict_batch_size,
                         "Total batch size for prediction.", flag_values=flag_values)
    flags.DEFINE_float("num_train_epochs", defaults.num_train_epochs,
                       "Total number of training epochs to perform.", flag_values=flag_values)
    flags.DEFINE_float("warmup_proportion", defaults.warmup_proportion,
                       "Proportion of training to perform linear learning rate warmup for.",
                       flag_values=flag_values)
    if length_buckets:
        flags.DEFINE_bool("bucket_by_length", defaults.bucket_by_length,
                          "Training batches from length buckets: records are grouped by "
                          "length bucket in windows of 50 batches and each batch is cut to the "
                          "smallest of at most 16 lengths (multiples of max_seq_length / 16 "
                          "rounded up to a multiple of 8: 8, 16, ..., 128 at 128) that "
                          "holds its longest example, so short texts do not compute on "
                          "padding; the loss is unchanged. Evaluation and prediction read "
                          "their records in order of length (50 batches at a time), cut "
                          "alike; what they write is in input order. False: every training "
                          "batch at max_seq_length, evaluation and prediction in input order. "
                          "Off on TPUs.",
                          flag_values=flag_values)
        flags.DEFINE_bool("padding_free", defaults.padding_free,
                          "Run the encoder's layers on the real tokens of a training, "
                          "evaluation or prediction batch only (exports keep the padded "
                          "graph): padding costs no dense-layer work, only "
                          "attention sees the padded [batch, length] layout. The same outputs "
                          "at real tokens (dropout draws other masks). Off with --use_xla and "
                          "on TPUs, which need fixed shapes.",
                          flag_values=flag_values)
    define_path("export_dir", None,
                        "If set, export the trained model as a SavedModel to "
                        "<export_dir>/<timestamp> (signatures serving_default, int32 inputs, "
                        "and serving_int64).", flag_values=flag_values)


def define_pretraining_flags(flag_values=FLAGS):
    """The flags of run_pretraining.py (`PretrainOptions`), with the original's defaults."""
    defaults = options.PretrainOptions()
    define_model_flags(defaults.model, flag_values)
    define_precision_flags(flag_values)
    define_long_input_flags(flag_values)
    define_train_flags(defaults.train, flag_values)
    define_eval_flags(flag_values)
    define_run_flags(flag_values)
    define_path("input_file", None, "Input TF example files (glob or comma separated).",
                        flag_values=flag_values)
    define_path("eval_input_file", None,
                        "Held-out TF example files for --do_eval (default: --input_file).",
                        flag_values=flag_values)
    flags.DEFINE_integer("max_predictions_per_seq", defaults.max_predictions_per_seq,
                         "Masked LM predictions per sequence.", flag_values=flag_values)
    flags.DEFINE_integer("num_warmup_steps", defaults.num_warmup_steps,
                         "Number of warmup steps.", flag_values=flag_values)
    flags.DEFINE_integer("max_eval_steps", defaults.max_eval_steps,
                         "Maximum number of eval batches.",
                         flag_values=flag_values)
    flags.DEFINE_bool("report_majority_baseline", defaults.report_majority_baseline,
                      "After eval, also log the masked-LM accuracy of always predicting the most "
                      "frequent masked token of the training data.", flag_values=flag_values)
    define_sentence_objective_flag(flag_values)


def define_sentence_objective_flag(flag_values=FLAGS):
    """`--next_sentence_objective`, which create_pretraining_data.py and run_pretraining.py
    must be given alike."""
    defaults = options.PretrainOptions
    flags.DEFINE_enum("next_sentence_objective", defaults.next_sentence_objective,
                      ["nsp", "sop", "none"],
                      "The sentence-level objective beside masked LM. nsp: next-sentence "
                      "prediction (B follows A or comes from another document). sop: "
                      "sentence-order prediction (ALBERT: A and B consecutive, swapped half the "
                      "time). none: masked LM only, one full-length segment (RoBERTa); no "
                      "sentence head in the model.", flag_values=flag_values)


def define_tpu_flags(flag_values=FLAGS):
    """The original TPU flags (accepted everywhere; see README for what is wired)."""
    defaults = options.DistributionOptions
    flags.DEFINE_bool("use_tpu", defaults.use_tpu,
                      "Whether to use TPU or GPU/CPU.", flag_values=flag_values)
    flags.DEFINE_string("tpu_name", None, "The Cloud TPU to use for training.",
                        flag_values=flag_values)
    flags.DEFINE_string("tpu_zone", None, "GCE zone where the Cloud TPU is located in.",
                        flag_values=flag_values)
    flags.DEFINE_string("gcp_project", None, "Project name for the Cloud TPU-enabled project.",
                        flag_values=flag_values)
    flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL.",
                        flag_values=flag_values)
    flags.DEFINE_integer("num_tpu_cores", defaults.num_tpu_cores, "Only used if `use_tpu` is True.",
                         flag_values=flag_values)
    flags.DEFINE_integer("iterations_per_loop", defaults.iterations_per_loop,
                         "Accepted for compatibility (TPU loop size).", flag_values=flag_values)


def define_xla_flags(flag_values=FLAGS):
    """`--use_xla`: XLA auto-clustering (JIT) of the session's element-wise ops, on CPU and
    GPU (`session.enable_xla_cpu_jit`)."""
    defaults = options.RunOptions
    flags.DEFINE_bool("use_xla", defaults.use_xla,
                      "Compile the graph's element-wise ops (layer norm, GELU, dropout, softmax, "
                      "the optimizer's arithmetic) with XLA; matmuls stay TensorFlow's kernels. "
                      "bf16 training steps ran 1.1-1.3x faster on a CPU with AMX, fp32 level; "
                      "each new input shape compiles first (~10-30 s), so it pays on long runs "
                      "at fixed shapes; off by default.",
                      flag_values=flag_values)
    # Validators run when the command line is parsed, before main() lets TF create devices.
    flags.register_validator("use_xla", _enable_xla_cpu_jit_if_set, flag_values=flag_values)


def _enable_xla_cpu_jit_if_set(use_xla):
    if use_xla:

        from bert_tf.training import session as session_lib

        session_lib.enable_xla_cpu_jit()
    return True


def define_distribution_flags(flag_values=FLAGS):
    """`--distribution_strategy`, `--num_gpus`, `--step_timeout_secs`,
    `--startup_timeout_secs` and the TPU flags
    (`DistributionOptions`; see `bert_tf.training.distribute` and the README section "Scaling out").
    `--use_tpu` means `--distribution_strategy=tpu`."""
    defaults = options.DistributionOptions
    from bert_tf.training import distribute

    meanings = {"none": "one device", "mirrored": "this host's GPUs (or CPU devices) in sync",
                "multi_worker": "several hosts/processes described by TF_CONFIG",
                "tpu": "the TPU of --tpu_name"}
    flags.DEFINE_enum("distribution_strategy", defaults.distribution_strategy,
                      list(distribute.STRATEGY_NAMES),
                      ". ".join(f"{name}: {meanings[name]}"
                                for name in distribute.STRATEGY_NAMES) +
                      ". --train_batch_size stays the global batch.", flag_values=flag_values)
    flags.DEFINE_integer("num_gpus", None,
                         "GPUs per host for mirrored / multi_worker (the first ones); default: "
                         "all. Without GPUs, mirrored uses the CPU.", flag_values=flag_values)
    flags.DEFINE_float("step_timeout_secs", defaults.step_timeout_secs,
                       "multi_worker: seconds a training step may wait for the other workers "
                       "before this worker stops with an error (a worker died or hangs); must "
                       "exceed the longest pause, e.g. the chief writing a checkpoint. 0: no "
                       "limit.", flag_values=flag_values)
    flags.DEFINE_float("startup_timeout_secs", defaults.startup_timeout_secs,
                       "multi_worker: seconds this worker waits for every task of TF_CONFIG to "
                       "start, and as long again for them to join the first step, before it "
                       "stops with an error naming the missing ones. 0: no limit.",
                       flag_values=flag_values)
    define_tpu_flags(flag_values)


def parse(define, argv=(), **values):
    """Defines flag groups into a fresh FlagValues, parses `argv` and sets `values`.

    Args:
      define: a function taking `flag_values` that defines the groups (e.g.
        `lambda fv: define_finetuning_flags(flag_values=fv)`).
      argv: command-line arguments (without the program name).
      **values: flag values to set after parsing, by flag name.

    Returns:
      The parsed `absl.flags.FlagValues`.
    """
    flag_values = flags.FlagValues()
    define(flag_values)
    flag_values(["bert_tf", *argv])
    for name, value in values.items():
        setattr(flag_values, name, value)
    return flag_values


def define_classifier_flags(flag_values=FLAGS):
    """The task flags of run_classifier.py (`ClassifierOptions`): the task and its data, and
    the columns / labels of the generic csv/tsv task."""
    defaults = options.ClassifierOptions
    def string(name, help_text):
        flags.DEFINE_string(name, None, help_text, flag_values=flag_values)

    define_path("data_dir", None, "The input data dir: the task's .tsv files (or "
                "train/dev/test.csv for the csv task, .tsv for the tsv task).",
                flag_values=flag_values)
    string("task_name", "The task: cola, sst-2, mrpc, sts-b, qqp, mnli, mnli-mm, qnli, rte, "
           "wnli, xnli, or csv / tsv for your own files.")
    string("text_a_column", "csv/tsv task: column of the first text (header name or 0-based "
           "index).")
    string("text_b_column", "csv/tsv task: column of the second text, for sentence-pair tasks.")
    string("label_column", "csv/tsv task: column of the label (default 'label').")
    define_labels_flag("csv/tsv task: the label list, comma separated (default: the distinct "
                       "labels of the train file, sorted).", flag_values)
    flags.DEFINE_bool("has_header", None,
                      "csv/tsv task: whether the first row names the columns (default True).",
                      flag_values=flag_values)
    flags.DEFINE_bool("regression", None,
                      "csv/tsv task: labels are real numbers (MSE loss, Pearson/Spearman).",
                      flag_values=flag_values)
    string("language", "xnli task: the language to train and evaluate on (default zh).")
    define_doc_stride_flag(defaults.doc_stride,
                           "Long texts: cut text_a into windows of max_seq_length starting "
                           "every doc_stride word pieces (text_b repeated in each) and score "
                           "the example from all its windows (--window_aggregation). 0: "
                           "truncate, as the original.", flag_values)
    flags.DEFINE_enum("window_aggregation", defaults.window_aggregation, ["mean", "max"],
                      "With --doc_stride: an example's logits are the mean (or the per-class "
                      "max) of its windows' logits.", flag_values=flag_values)
    flags.DEFINE_bool("multi_label", defaults.multi_label,
                      "csv/tsv task: each row has any number of labels (in the label column, "
                      "separated by --label_separator); sigmoid outputs, binary cross-entropy.",
                      flag_values=flag_values)
    flags.DEFINE_string("label_separator", defaults.label_separator,
                        "--multi_label: separator of the labels inside the label column.",
                        flag_values=flag_values)
    flags.DEFINE_float("multi_label_threshold", defaults.multi_label_threshold,
                       "--multi_label: a label is predicted when its probability is >= this.",
                       flag_values=flag_values)
    flags.DEFINE_bool("pack_sequences", defaults.pack_sequences,
                      "Training: pack several short examples into each max_seq_length "
                      "sequence, each with its own positions, attending only to itself and "
                      "pooled at its own [CLS]; a batch then holds about --train_batch_size "
                      "examples in fewer sequences. Single-label classification and "
                      "regression; evaluation and prediction stay one example a sequence.",
                      flag_values=flag_values)
    string("class_weights", "Single-label classification: weights of the classes in the "
           "cross-entropy, comma separated in label order (w0,w1,...), or 'balanced' "
           "(n_examples / (n_classes * n_examples_of_class), from the training labels).")


def define_doc_stride_flag(default, help_text, flag_values=FLAGS):
    """`--doc_stride`: the distance in word pieces between the starts of a long input's
    windows (SQuAD, and the classifier and NER with windows)."""
    flags.DEFINE_integer("doc_stride", default, help_text, flag_values=flag_values)


def define_ner_flags(flag_values=FLAGS):
    """The task flags of run_ner.py (`NerOptions`)."""
    define_path("data_dir", None,
                        "Directory with the CoNLL files train.txt, dev.txt and test.txt.",
                        flag_values=flag_values)
    define_doc_stride_flag(options.NerOptions.doc_stride,
                           "Long sentences: cut them into windows of max_seq_length "
                           "starting every doc_stride word pieces; each word is tagged from the "
                           "window where it has the most context. 0: truncate (words that do "
                           "not fit are tagged O).", flag_values)


def define_labels_flag(help_text, flag_values=FLAGS):
    """`--labels`: a comma-separated label list."""
    flags.DEFINE_list("labels", None, help_text, flag_values=flag_values)


def define_squad_flags(flag_values=FLAGS):
    """The task flags of run_squad.py (`SquadOptions`), with the original's defaults."""
    defaults = options.SquadOptions
    define_path("train_file", None, "SQuAD json for training, e.g. train-v1.1.json.",
                        flag_values=flag_values)
    define_path("predict_file", None,
                        "SQuAD json for predictions, e.g. dev-v1.1.json or test-v1.1.json.",
                        flag_values=flag_values)
    define_squad_window_flags(flag_values)
    flags.DEFINE_bool("verbose_logging", defaults.verbose_logging,
                      "Log warnings while mapping predictions back to the original text.",
                      flag_values=flag_values)


def define_squad_window_flags(flag_values=FLAGS):
    """SQuAD windowing and post-processing (run_squad.py and scripts/predict.py)."""
    defaults = options.SquadOptions
    define_doc_stride_flag(defaults.doc_stride,
                           "When splitting up a long document into chunks, how much "
                           "stride to take between chunks.", flag_values)
    flags.DEFINE_integer("max_query_length", defaults.max_query_length,
                         "The maximum number of tokens for the question; longer questions are "
                         "truncated to this length.", flag_values=flag_values)
    flags.DEFINE_integer("n_best_size", defaults.n_best_size,
                         "The total number of n-best predictions to generate in "
                         "nbest_predictions.json.", flag_values=flag_values)
    flags.DEFINE_integer("max_answer_length", defaults.max_answer_length,
                         "The maximum length of an answer that can be generated (word pieces).",
                         flag_values=flag_values)
    flags.DEFINE_bool("version_2_with_negative", defaults.version_2_with_negative,
                      "SQuAD v2.0: some questions have no answer.", flag_values=flag_values)
    flags.DEFINE_float("null_score_diff_threshold", defaults.null_score_diff_threshold,
                       "v2.0: predict the null answer when null score - best non-null score is "
                       "above this.", flag_values=flag_values)


def define_multiple_choice_flags(flag_values=FLAGS):
    """The task flags of run_multiple_choice.py (`MultipleChoiceOptions`)."""
    define_path("data_dir", None,
                        "The input data dir: train.csv, val.csv, test.csv (swag) or "
                        "train.jsonl, dev.jsonl, test.jsonl (jsonl).", flag_values=flag_values)
    flags.DEFINE_enum("task_name", None, ["swag", "jsonl"],
                      "swag: SWAG's CSV layout (sent1 or startphrase, sent2, ending0..3, "
                      "label). jsonl: one {\"context\", \"question\", \"choices\": [...], "
                      "\"label\": k} object a line.", flag_values=flag_values)


