"""Flag groups of the tools around training runs: data preparation, prediction, exports,
conversion and the benchmark. Each flag is generated from its options field, as in `flags`."""


from bert_tf import options
from bert_tf.cli.flags import (
    FLAGS,
    define_checkpoint_flags,
    define_distribution_flags,
    define_max_position_embeddings_flag,
    define_model_flags,
    define_path,
    define_precision_flags,
    define_recompute_grad_flag,
    define_sentence_objective_flag,
    define_squad_window_flags,
    define_tokenizer_flags,
    define_xla_flags,
)
from bert_tf.cli.option_flags import define_fields


def define_pretraining_data_flags(flag_values=FLAGS):
    """The flags of create_pretraining_data.py (`PretrainingDataOptions`): the original's,
    plus --masking, --next_sentence_objective, --num_workers and --chunk_size_mb."""
    define_fields(options.PretrainingDataOptions, ["input_file", "output_file"],
                  flag_values=flag_values)
    define_tokenizer_flags(flag_values)
    define_fields(options.PretrainingDataConfig, flag_values=flag_values)
    define_sentence_objective_flag(flag_values)
    define_fields(options.PretrainingDataOptions, ["num_workers", "chunk_size_mb"],
                  flag_values=flag_values)


def define_prepare_corpus_flags(flag_values=FLAGS):
    """The flags of scripts/prepare_corpus.py (`PrepareCorpusOptions`)."""
    define_fields(options.PrepareCorpusOptions, flag_values=flag_values)


def define_build_vocab_flags(flag_values=FLAGS):
    """The flags of scripts/build_vocab.py (`BuildVocabOptions`)."""
    define_fields(options.BuildVocabOptions, flag_values=flag_values)


def define_extend_vocab_flags(flag_values=FLAGS):
    """The flags of scripts/extend_vocab.py (`ExtendVocabOptions`)."""
    define_fields(options.ExtendVocabOptions, flag_values=flag_values)


def define_recipe_flags(flag_values=FLAGS):
    """The flags of scripts/pretrain_recipe.py (`RecipeOptions`): raw text -> prepared corpus
    -> vocab -> phase 1 (short sequences) -> phase 2 (long, from phase 1) -> held-out eval."""
    define_fields(options.RecipeOptions, flag_values=flag_values)
    define_sentence_objective_flag(flag_values)


def define_predict_flags(flag_values=FLAGS):
    """The flags of scripts/predict.py (`PredictOptions`): the model (an export, an ONNX file
    or a checkpoint), the input and output, and the task settings a checkpoint needs."""
    define_model_flags(flag_values=flag_values)
    define_precision_flags(flag_values)
    define_tokenizer_flags(flag_values)
    define_squad_window_flags(flag_values)
    define_fields(options.PredictOptions, flag_values=flag_values)


def define_onnx_export_flags(flag_values=FLAGS):
    """The flags of scripts/export_onnx.py (`OnnxExportOptions`)."""
    define_fields(options.OnnxExportOptions, flag_values=flag_values)


def define_tfhub_export_flags(flag_values=FLAGS):
    """The flags of scripts/export_tfhub.py (`TfHubExportOptions`)."""
    define_checkpoint_flags(flag_values)
    define_tokenizer_flags(flag_values)
    define_fields(options.TfHubExportOptions, flag_values=flag_values)


def define_encoder_export_flags(flag_values=FLAGS):
    """The flags of scripts/export_encoder.py (`EncoderExportOptions`): the checkpoint, its
    config and vocab, the export directory and the pooling."""
    define_model_flags(flag_values=flag_values)
    define_precision_flags(flag_values)
    define_tokenizer_flags(flag_values)
    define_fields(options.EncoderExportOptions, flag_values=flag_values)


def define_tflite_export_flags(flag_values=FLAGS):
    """The flags of scripts/export_tflite.py (`TfliteExportOptions`)."""
    define_fields(options.TfliteExportOptions, flag_values=flag_values)


def define_conversion_flags(flag_values=FLAGS):
    """The flags of convert_checkpoint.py (`ConversionOptions`; see `bert_tf.tools.conversion`)."""
    define_fields(options.ConversionOptions, flag_values=flag_values)


def define_benchmark_flags(flag_values=FLAGS):
    """The flags of scripts/benchmark.py (`BenchmarkOptions`)."""
    define_fields(options.BenchmarkOptions, flag_values=flag_values)
    define_recompute_grad_flag(flag_values)
    define_max_position_embeddings_flag(flag_values)
    define_precision_flags(flag_values)
    define_xla_flags(flag_values)
    define_distribution_flags(flag_values)


def define_export_step_flags(flag_values=FLAGS):
    """The flags of scripts/export_step.py (`ExportStepOptions`)."""
    define_checkpoint_flags(flag_values)
    define_fields(options.ExportStepOptions, flag_values=flag_values)
    define_recompute_grad_flag(flag_values)
    # Pre-training's name for --train_file; the script takes either.
    define_path("input_file", None, "Pre-training records: the same as --train_file.",
                flag_values=flag_values)
