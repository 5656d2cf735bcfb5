"""Defaults are written once, in bert_tf/options.py: a command line that sets nothing builds the
same options as the dataclasses' defaults, for every script's flag groups, so library users who
build options in code get what the scripts give."""

import dataclasses

import pytest

from bert_tf import options
from bert_tf.cli import flags as bert_flags
from bert_tf.cli import step_flags, tool_flags


def _finetuning(**kwargs):
    return lambda fv: bert_flags.define_finetuning_flags(flag_values=fv, **kwargs)


CASES = {
    "run_classifier": (_finetuning(), options.FinetuneOptions, options.FinetuneOptions()),
    "run_squad": (
        _finetuning(max_seq_length=options.SquadOptions.MAX_SEQ_LENGTH, has_eval=False,
                    length_buckets=False),
        options.FinetuneOptions,
        options.FinetuneOptions(model=options.ModelOptions(max_seq_length=384),
                                evaluation=None, bucket_by_length=None, padding_free=None)),
    "run_pretraining": (bert_flags.define_pretraining_flags, options.PretrainOptions,
                        options.PretrainOptions()),
    "classifier task": (bert_flags.define_classifier_flags, options.ClassifierOptions,
                        options.ClassifierOptions()),
    "ner task": (bert_flags.define_ner_flags, options.NerOptions, options.NerOptions()),
    "squad task": (bert_flags.define_squad_flags, options.SquadOptions, options.SquadOptions()),
    "multiple choice task": (bert_flags.define_multiple_choice_flags,
                             options.MultipleChoiceOptions, options.MultipleChoiceOptions()),
    "predict": (tool_flags.define_predict_flags, options.PredictOptions,
                options.PredictOptions()),
    "export_onnx": (tool_flags.define_onnx_export_flags, options.OnnxExportOptions,
                    options.OnnxExportOptions()),
    "create_pretraining_data": (tool_flags.define_pretraining_data_flags,
                                options.PretrainingDataOptions,
                                options.PretrainingDataOptions()),
    "prepare_corpus": (tool_flags.define_prepare_corpus_flags, options.PrepareCorpusOptions,
                       options.PrepareCorpusOptions()),
    "build_vocab": (tool_flags.define_build_vocab_flags, options.BuildVocabOptions,
                    options.BuildVocabOptions()),
    "export_tfhub": (tool_flags.define_tfhub_export_flags, options.TfHubExportOptions,
                     options.TfHubExportOptions()),
    "export_encoder": (tool_flags.define_encoder_export_flags, options.EncoderExportOptions,
                       options.EncoderExportOptions()),
    "export_tflite": (tool_flags.define_tflite_export_flags, options.TfliteExportOptions,
                      options.TfliteExportOptions()),
    "benchmark": (tool_flags.define_benchmark_flags, options.BenchmarkOptions,
                  options.BenchmarkOptions()),
    "pretrain_recipe": (tool_flags.define_recipe_flags, options.RecipeOptions,
                        options.RecipeOptions()),
    "extend_vocab": (tool_flags.define_extend_vocab_flags, options.ExtendVocabOptions,
                     options.ExtendVocabOptions()),
    "convert_checkpoint": (tool_flags.define_conversion_flags, options.ConversionOptions,
                           options.ConversionOptions()),
    "export_step": (tool_flags.define_export_step_flags, options.ExportStepOptions,
                    options.ExportStepOptions()),
    "run_step": (step_flags.define_run_step_flags, options.RunStepOptions,
                 options.RunStepOptions()),
}


@pytest.mark.parametrize("script", sorted(CASES))
def test_empty_command_line_gives_the_dataclass_defaults(script):
    define, options_class, expected = CASES[script]
    assert options_class.from_flags(bert_flags.parse(define)) == expected


def test_script_defaults_that_differ_are_the_originals():
    # Google's run_pretraining.py: 100000 steps; run_squad.py: 384 tokens.
    assert options.PretrainOptions().train.num_train_steps == 100000
    assert options.FinetuneOptions().train.num_train_steps is None
    squad = options.FinetuneOptions.from_flags(bert_flags.parse(_finetuning(
        max_seq_length=options.SquadOptions.MAX_SEQ_LENGTH, has_eval=False)))
    assert squad.model.max_seq_length == 384


def test_a_flag_given_overrides_its_default():
    flag_values = bert_flags.parse(bert_flags.define_pretraining_flags,
                                   ["--learning_rate=1e-3", "--max_seq_length=64"])
    got = options.PretrainOptions.from_flags(flag_values)
    assert got == dataclasses.replace(
        options.PretrainOptions(),
        train=dataclasses.replace(options.PretrainOptions().train, learning_rate=1e-3),
        model=options.ModelOptions(max_seq_length=64))
