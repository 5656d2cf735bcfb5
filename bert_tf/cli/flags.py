"""Flag groups shared by the scripts.

Each `define_*` function registers absl flags with the original Google BERT names where they
exist, so old command lines keep working. Every flag is generated from the field of its name in
the group's options dataclass (`option_flags.define_fields`), which holds its default, help,
kind and choices, so each is written only there. A script calls the groups it needs, parses,
and hands `bert_tf.options.<X>Options.from_flags(FLAGS)` to the library; nothing else reads
flags.

Every group takes `flag_values` (default: absl's global FLAGS), so tests can define the same
groups into a fresh `FlagValues` and build real option objects with `parse`.
"""

import dataclasses

from absl import flags

from bert_tf import options
from bert_tf.cli.option_flags import define_fields
from bert_tf.cli.option_flags import define_path as define_path  # Scripts' own path flags.

FLAGS = flags.FLAGS


def define_model_flags(defaults=None, flag_values=FLAGS):
    """--bert_config_file, --init_checkpoint, --max_seq_length (`ModelOptions`, with
    --precision); `defaults`: a `ModelOptions` holding the script's defaults (None: the
    class's)."""
    define_checkpoint_flags(flag_values)
    define_fields(options.ModelOptions, ["max_seq_length"], defaults, flag_values)


def define_long_input_flags(flag_values=FLAGS):
    """--recompute_grad, --max_position_embeddings, --position_embedding_init and
    --new_token_init: longer inputs and bigger models in the same memory (`ModelOptions`)."""
    define_fields(options.ModelOptions, ["recompute_grad", "max_position_embeddings",
                                         "position_embedding_init", "new_token_init"],
                  flag_values=flag_values)


def define_recompute_grad_flag(flag_values=FLAGS):
    """--recompute_grad."""
    define_fields(options.ModelOptions, ["recompute_grad"], flag_values=flag_values)


def define_max_position_embeddings_flag(flag_values=FLAGS):
    """--max_position_embeddings."""
    define_fields(options.ModelOptions, ["max_position_embeddings"], flag_values=flag_values)


def define_checkpoint_flags(flag_values=FLAGS):
    """--bert_config_file and --init_checkpoint."""
    define_fields(options.ModelOptions, ["bert_config_file", "init_checkpoint"],
                  flag_values=flag_values)


def define_tokenizer_flags(flag_values=FLAGS):
    """--vocab_file and --do_lower_case."""
    define_fields(options.TokenizerOptions, ["vocab_file", "do_lower_case"],
                  flag_values=flag_values)


def define_precision_flags(flag_values=FLAGS):
    """`--precision`: compute dtype with fp32 variables."""
    define_fields(options.ModelOptions, ["precision"], flag_values=flag_values)


def define_train_flags(defaults=None, flag_values=FLAGS):
    """--do_train, --train_batch_size, --learning_rate, --num_train_steps, --optimizer,
    --num_accumulation_steps (micro-batches per optimizer update) and what trains; `defaults`:
    a `TrainOptions` holding the script's defaults (None: the class's)."""
    define_fields(options.TrainOptions,
                  ["do_train", "train_batch_size", "learning_rate", "num_train_steps",
                   "optimizer", "num_accumulation_steps", "trainable_scopes", "freeze_scopes",
                   "freeze_layers"], defaults, flag_values)


def define_eval_flags(flag_values=FLAGS):
    """`--do_eval` and `--eval_batch_size`."""
    define_fields(options.EvalOptions, ["do_eval", "eval_batch_size"], flag_values=flag_values)


def define_run_flags(flag_values=FLAGS):
    """Output dir, checkpointing, logging, seed, XLA and distribution: how a training run
    executes (`RunOptions`)."""
    define_fields(options.RunOptions,
                  ["output_dir", "save_checkpoints_steps", "keep_checkpoint_max",
                   "log_every_n_steps", "save_summary_steps", "random_seed",
                   "shuffle_train_input"], flag_values=flag_values)
    define_fault_flags(flag_values)
    define_fields(options.RunOptions, ["preemption_grace_secs", "export_release_dir"],
                  flag_values=flag_values)
    define_validation_flags(flag_values)
    define_xla_flags(flag_values)
    define_distribution_flags(flag_values)


def define_fault_flags(flag_values=FLAGS):
    """--skip_corrupt_records and --exact_resume: what a run does about damaged input and
    where a restarted run picks up its input (README "Crashes")."""
    define_fields(options.RunOptions, ["skip_corrupt_records", "exact_resume"],
                  flag_values=flag_values)


def define_validation_flags(flag_values=FLAGS):
    """Evaluation during training, best checkpoint and early stopping (`ValidationOptions`)."""
    define_fields(options.ValidationOptions, flag_values=flag_values)


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
    define_fields(options.FinetuneOptions,
                  ["do_predict", "predict_batch_size", "num_train_epochs", "warmup_proportion"],
                  flag_values=flag_values)
    if length_buckets:
        define_fields(options.FinetuneOptions, ["bucket_by_length", "padding_free"],
                      flag_values=flag_values)
    define_fields(options.FinetuneOptions, ["export_dir"], flag_values=flag_values)


def define_pretraining_flags(flag_values=FLAGS):
    """The flags of run_pretraining.py (`PretrainOptions`), with the original's defaults."""
    defaults = options.PretrainOptions()
    define_model_flags(defaults.model, flag_values)
    define_precision_flags(flag_values)
    define_long_input_flags(flag_values)
    define_train_flags(defaults.train, flag_values)
    define_eval_flags(flag_values)
    define_run_flags(flag_values)
    define_fields(options.PretrainOptions,
                  ["input_file", "eval_input_file", "max_predictions_per_seq",
                   "num_warmup_steps", "max_eval_steps", "report_majority_baseline"],
                  flag_values=flag_values)
    define_sentence_objective_flag(flag_values)


def define_sentence_objective_flag(flag_values=FLAGS):
    """`--next_sentence_objective`, which create_pretraining_data.py and run_pretraining.py
    must be given alike."""
    define_fields(options.PretrainOptions, ["next_sentence_objective"], flag_values=flag_values)


def define_tpu_flags(flag_values=FLAGS):
    """The original TPU flags (accepted everywhere; see README for what is wired)."""
    define_fields(options.DistributionOptions,
                  ["use_tpu", "tpu_name", "tpu_zone", "gcp_project", "master", "num_tpu_cores",
                   "iterations_per_loop"], flag_values=flag_values)


def define_xla_flags(flag_values=FLAGS):
    """`--use_xla`: XLA auto-clustering (JIT) of the session's element-wise ops, on CPU and
    GPU (`session.enable_xla_cpu_jit`)."""
    define_fields(options.RunOptions, ["use_xla"], flag_values=flag_values)
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
    define_fields(options.DistributionOptions,
                  ["distribution_strategy", "num_gpus", "step_timeout_secs",
                   "startup_timeout_secs"], flag_values=flag_values)
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
    define_fields(options.ClassifierOptions,
                  ["data_dir", "task_name", "text_a_column", "text_b_column", "label_column",
                   "labels", "has_header", "regression", "language", "doc_stride",
                   "window_aggregation", "multi_label", "label_separator",
                   "multi_label_threshold", "pack_sequences", "class_weights"],
                  flag_values=flag_values)


def define_ner_flags(flag_values=FLAGS):
    """The task flags of run_ner.py (`NerOptions`)."""
    define_fields(options.NerOptions, ["data_dir", "doc_stride", "use_crf"],
                  flag_values=flag_values)


def define_squad_flags(flag_values=FLAGS):
    """The task flags of run_squad.py (`SquadOptions`), with the original's defaults."""
    define_fields(options.SquadOptions, ["train_file", "predict_file"], flag_values=flag_values)
    define_squad_window_flags(flag_values)
    define_fields(options.SquadOptions, ["verbose_logging"], flag_values=flag_values)


def define_squad_window_flags(flag_values=FLAGS):
    """SQuAD windowing and post-processing (run_squad.py and scripts/predict.py)."""
    define_fields(options.SquadOptions,
                  ["doc_stride", "max_query_length", "n_best_size", "max_answer_length",
                   "version_2_with_negative", "null_score_diff_threshold"],
                  flag_values=flag_values)


def define_multiple_choice_flags(flag_values=FLAGS):
    """The task flags of run_multiple_choice.py (`MultipleChoiceOptions`)."""
    define_fields(options.MultipleChoiceOptions, ["data_dir", "task_name"],
                  flag_values=flag_values)
