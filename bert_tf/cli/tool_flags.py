"""Flag groups of the tools around training runs: data preparation, prediction, exports,
conversion and the benchmark. Each flag's default is its options field's, as in `flags`."""


from absl import flags

from bert_tf import options
from bert_tf.cli.flags import (
    FLAGS,
    define_checkpoint_flags,
    define_distribution_flags,
    define_labels_flag,
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


def define_pretraining_data_flags(flag_values=FLAGS):
    """The flags of create_pretraining_data.py (`PretrainingDataOptions`): the original's,
    plus --masking, --next_sentence_objective, --num_workers and --chunk_size_mb."""
    defaults = options.PretrainingDataConfig

    define_path("input_file", None,
                        "Input raw text file (or comma-separated list of files and globs): one "
                        "sentence a line, a blank line between documents.",
                        flag_values=flag_values)
    define_path("output_file", None,
                        "Output TF example file (or comma-separated list of files: shards).",
                        flag_values=flag_values)
    define_tokenizer_flags(flag_values)
    flags.DEFINE_bool("do_whole_word_mask", defaults.do_whole_word_mask,
                      "Whether to use whole word masking rather than per-WordPiece masking.",
                      flag_values=flag_values)
    flags.DEFINE_integer("max_seq_length", defaults.max_seq_length, "Maximum sequence length.",
                         flag_values=flag_values)
    flags.DEFINE_integer("max_predictions_per_seq", defaults.max_predictions_per_seq,
                         "Maximum number of masked LM predictions per sequence.",
                         flag_values=flag_values)
    flags.DEFINE_integer("random_seed", defaults.random_seed, "Random seed for data generation.",
                         flag_values=flag_values)
    flags.DEFINE_integer("dupe_factor", defaults.dupe_factor,
                         "Number of times to duplicate the input data (with different masks).",
                         flag_values=flag_values)
    flags.DEFINE_float("masked_lm_prob", defaults.masked_lm_prob, "Masked LM probability.",
                       flag_values=flag_values)
    flags.DEFINE_float("short_seq_prob", defaults.short_seq_prob,
                       "Probability of creating sequences which are shorter than the maximum "
                       "length.", flag_values=flag_values)
    flags.DEFINE_enum("masking", defaults.masking, ["static", "dynamic"],
                      "static: masks drawn here, once per dupe_factor pass (the original). "
                      "dynamic: records without masks; run_pretraining.py masks them afresh "
                      "every epoch (same 15%% / 80-10-10 / whole-word rules).",
                      flag_values=flag_values)
    define_sentence_objective_flag(flag_values)
    flags.DEFINE_integer("num_workers", options.PretrainingDataOptions.num_workers,
                         "Worker processes; the output is the same for any number.",
                         flag_values=flag_values)
    flags.DEFINE_float("chunk_size_mb", options.PretrainingDataOptions.chunk_size_mb,
                       "MB of text per chunk of whole documents processed together (random "
                       "next-sentence documents are drawn from the same chunk).",
                       flag_values=flag_values)


def define_prepare_corpus_flags(flag_values=FLAGS):
    """The flags of scripts/prepare_corpus.py (`PrepareCorpusOptions`)."""
    defaults = options.PrepareCorpusOptions

    define_path("input_file", None,
                        "Raw text to prepare: files and globs, comma separated. Plain text (a "
                        "blank line between documents), JSON lines, or a MediaWiki XML export "
                        "(.xml or .xml.bz2).", flag_values=flag_values)
    define_path("output_dir", None,
                        "Where to write the shards (corpus-NNNNN-of-NNNNN.txt: one sentence a "
                        "line, a blank line between documents).", flag_values=flag_values)
    flags.DEFINE_enum("format", defaults.format, ["auto", "text", "jsonl", "wiki_xml"],
                      "Input format; auto: wiki_xml for *.xml / *.xml.bz2, jsonl for *.jsonl / "
                      "*.json, else by the first bytes (<mediawiki, {), else text.",
                      flag_values=flag_values)
    flags.DEFINE_integer("num_shards", defaults.num_shards,
                         "Output files; documents go to them in turn.",
                         flag_values=flag_values)
    flags.DEFINE_string("text_key", defaults.text_key, "jsonl: the key holding a document's text.",
                        flag_values=flag_values)
    flags.DEFINE_string("language", defaults.language,
                        "Language code for sentence splitting (sentencex: ISO 639 codes of "
                        "~300 languages; unknown ones fall back to related languages or "
                        "English rules).", flag_values=flag_values)
    flags.DEFINE_integer("num_workers", defaults.num_workers,
                         "Worker processes that clean and split documents; the output is the "
                         "same for any number.", flag_values=flag_values)


def define_build_vocab_flags(flag_values=FLAGS):
    """The flags of scripts/build_vocab.py (`BuildVocabOptions`)."""
    defaults = options.BuildVocabOptions
    define_path("input_file", None,
                        "Text to learn the vocab from (files and globs, comma separated), e.g. "
                        "the shards prepare_corpus.py writes.", flag_values=flag_values)
    define_path("output_file", None, "The vocab.txt to write.", flag_values=flag_values)
    flags.DEFINE_integer("vocab_size", defaults.vocab_size,
                         "Tokens in the vocab, special and unused ones included.",
                         flag_values=flag_values)
    flags.DEFINE_bool("do_lower_case", defaults.do_lower_case,
                      "Lower-case and strip accents first (an uncased vocab); False keeps case.",
                      flag_values=flag_values)
    flags.DEFINE_integer("num_unused", defaults.num_unused,
                         "[unusedN] placeholders after [PAD] (ids 1..num_unused), for tokens "
                         "added when fine-tuning.", flag_values=flag_values)
    define_path("bert_config_file", defaults.bert_config_file,
                "A BERT config to size for the vocab (with --output_bert_config_file).",
                flag_values=flag_values)
    define_path("output_bert_config_file", defaults.output_bert_config_file,
                "Write --bert_config_file here with vocab_size set to the vocab's size.",
                flag_values=flag_values)


def define_extend_vocab_flags(flag_values=FLAGS):
    """The flags of scripts/extend_vocab.py (`ExtendVocabOptions`)."""
    defaults = options.ExtendVocabOptions()
    define_path("vocab_file", None, "The vocab.txt to grow (ids never move).",
                flag_values=flag_values)
    define_path("new_words_file", None,
                "New words, one a line: they take the [unusedN] places first, then follow the "
                "last token.", flag_values=flag_values)
    define_path("output_vocab_file", None, "The grown vocab.txt to write.",
                flag_values=flag_values)
    flags.DEFINE_bool("do_lower_case", defaults.do_lower_case,
                      "Normalise the new words as the uncased tokenizer does (lower case, no "
                      "accents); False for a cased vocab.", flag_values=flag_values)


def define_recipe_flags(flag_values=FLAGS):
    """The flags of scripts/pretrain_recipe.py (`RecipeOptions`): raw text -> prepared corpus
    -> vocab -> phase 1 (short sequences) -> phase 2 (long, from phase 1) -> held-out eval."""
    defaults = options.RecipeOptions

    define_path("input_file", defaults.input_file, "Raw training text.",
                        flag_values=flag_values)
    define_path("eval_input_file", defaults.eval_input_file, "Raw held-out text.",
                        flag_values=flag_values)
    define_path("output_dir", defaults.output_dir,
                        "Where every stage writes (corpus/, vocab.txt, bert_config.json, data/, "
                        "phase1/, phase2/).", flag_values=flag_values)
    define_path("bert_config_file", defaults.bert_config_file,
                        "Model config; its vocab_size is set to the learned vocab's.",
                        flag_values=flag_values)
    flags.DEFINE_integer("vocab_size", defaults.vocab_size, "Size of the learned vocab.",
                         flag_values=flag_values)
    flags.DEFINE_integer("phase1_seq_length", defaults.phase1_seq_length,
                         "Phase 1 sequence length.",
                         flag_values=flag_values)
    flags.DEFINE_integer("phase2_seq_length", defaults.phase2_seq_length,
                         "Phase 2 sequence length.",
                         flag_values=flag_values)
    flags.DEFINE_integer("phase1_steps", defaults.phase1_steps, "Phase 1 optimizer updates.",
                         flag_values=flag_values)
    flags.DEFINE_integer("phase2_steps", defaults.phase2_steps,
                         "Phase 2 optimizer updates (after phase 1's).",
                         flag_values=flag_values)
    flags.DEFINE_integer("train_batch_size", defaults.train_batch_size,
                         "Batch size of both phases.",
                         flag_values=flag_values)
    flags.DEFINE_float("learning_rate", defaults.learning_rate,
                       "Peak learning rate of both phases.",
                       flag_values=flag_values)
    flags.DEFINE_enum("masking", defaults.masking, ["static", "dynamic"],
                      "See create_pretraining_data.",
                      flag_values=flag_values)
    define_sentence_objective_flag(flag_values)
    flags.DEFINE_integer("num_workers", defaults.num_workers,
                         "Worker processes of the data stages.", flag_values=flag_values)
    flags.DEFINE_integer("random_seed", defaults.random_seed,
                         "Seed of every stage.", flag_values=flag_values)


def define_predict_flags(flag_values=FLAGS):
    """The flags of scripts/predict.py (`PredictOptions`): the model (an export, an ONNX file
    or a checkpoint), the input and output, and the task settings a checkpoint needs."""
    defaults = options.PredictOptions
    from bert_tf.cli import predict
    from bert_tf.serving import export, predictor

    define_model_flags(flag_values=flag_values)
    define_precision_flags(flag_values)
    define_tokenizer_flags(flag_values)
    define_squad_window_flags(flag_values)
    define_labels_flag("--init_checkpoint: the classifier / NER labels in id order, comma "
                       "separated (default: label_list.txt next to the checkpoint).",
                       flag_values)

    def string(name, help_text):
        flags.DEFINE_string(name, None, help_text, flag_values=flag_values)

    def path(name, help_text):
        define_path(name, None, help_text, flag_values=flag_values)

    path("export_dir", "An export of run_*.py --export_dir (<export_dir>/<timestamp>); it "
           "carries the task, vocab and settings.")
    path("onnx_file", "An ONNX model written by scripts/export_onnx.py.")
    path("tflite_file", "A TFLite model written by scripts/export_tflite.py.")
    flags.DEFINE_enum("task", None, list(export.TASKS),
                      "With --init_checkpoint: what the checkpoint predicts (fill_mask: a "
                      "pre-training checkpoint; embed: any).", flag_values=flag_values)
    path("input_file", "One example a line (default: stdin): see --input_format.")
    flags.DEFINE_enum("input_format", defaults.input_format, list(predict.INPUT_FORMATS),
                      "text: the text, 'a ||| b' for a pair (SQuAD: 'question ||| context'); "
                      "jsonl: a JSON object a line with text / text_b / question / context "
                      "(and an optional id, copied to the output).", flag_values=flag_values)
    path("output_file", "JSON lines, one per input line (default: stdout).")
    flags.DEFINE_integer("batch_size", defaults.batch_size,
                         "Examples (SQuAD: windows) per model call.",
                         flag_values=flag_values)
    flags.DEFINE_integer("top_k", defaults.top_k, "fill_mask: tokens listed per [MASK].",
                         flag_values=flag_values)
    flags.DEFINE_enum("pooling", defaults.pooling, list(predictor.POOLINGS),
                      "embed: the final layer at [CLS], or its mean over the real tokens "
                      "(default: an embedding export's own pooling, else cls).",
                      flag_values=flag_values)


def define_onnx_export_flags(flag_values=FLAGS):
    """The flags of scripts/export_onnx.py (`OnnxExportOptions`)."""
    defaults = options.OnnxExportOptions
    from bert_tf.serving import onnx_export

    define_path("export_dir", None,
                        "The export to convert (<export_dir>/<timestamp> of run_*.py).",
                        flag_values=flag_values)
    define_path("output_file", None, "Where to write the .onnx model.",
                        flag_values=flag_values)
    flags.DEFINE_enum("quantize", defaults.quantize, list(onnx_export.QUANTIZE_MODES),
                      "int8: onnxruntime dynamic quantization (int8 MatMul weights).",
                      flag_values=flag_values)
    flags.DEFINE_integer("opset", defaults.opset, "The ONNX opset.",
                         flag_values=flag_values)
    flags.DEFINE_boolean("optimize", defaults.optimize,
                         "Fuse to ONNX Runtime's BERT operators (Attention, "
                         "SkipLayerNormalization, BiasGelu) before writing / quantizing.",
                         flag_values=flag_values)


def define_tfhub_export_flags(flag_values=FLAGS):
    """The flags of scripts/export_tfhub.py (`TfHubExportOptions`)."""
    defaults = options.TfHubExportOptions
    define_checkpoint_flags(flag_values)
    define_tokenizer_flags(flag_values)
    define_path("export_path", None, "Where to write the encoder SavedModel (a new directory).",
                flag_values=flag_values)
    define_path("preprocessor_export_path", None,
                "Where to write the text preprocessor SavedModel (a new directory); unset: "
                "the encoder only.", flag_values=flag_values)
    flags.DEFINE_integer("seq_length", defaults.seq_length,
                         "The preprocessor's packed sequence length (bert_pack_inputs, "
                         "__call__).", flag_values=flag_values)


def define_encoder_export_flags(flag_values=FLAGS):
    """The flags of scripts/export_encoder.py (`EncoderExportOptions`): the checkpoint, its
    config and vocab, the export directory and the pooling."""
    from bert_tf.serving import encoder_export

    defaults = options.EncoderExportOptions
    define_model_flags(flag_values=flag_values)
    define_precision_flags(flag_values)
    define_tokenizer_flags(flag_values)
    define_path("export_dir", None,
                "Where to write the SavedModel (as <export_dir>/<timestamp>).",
                flag_values=flag_values)
    flags.DEFINE_enum("pooling", defaults.pooling, list(encoder_export.POOLINGS),
                      "The `embedding` output: the final layer at [CLS], or its mean over the "
                      "real tokens.", flag_values=flag_values)


def define_tflite_export_flags(flag_values=FLAGS):
    """The flags of scripts/export_tflite.py (`TfliteExportOptions`)."""
    from bert_tf.serving import tflite_export

    defaults = options.TfliteExportOptions
    define_path("export_dir", None,
                "The export to convert (<export_dir>/<timestamp> of run_*.py or "
                "export_encoder.py).", flag_values=flag_values)
    define_path("output_file", None, "Where to write the .tflite model.",
                flag_values=flag_values)
    flags.DEFINE_enum("quantize", defaults.quantize, list(tflite_export.QUANTIZE_MODES),
                      "dynamic: int8 weights, activations quantized at run time; float16: "
                      "float16 weights.", flag_values=flag_values)


def define_conversion_flags(flag_values=FLAGS):
    """The flags of convert_checkpoint.py (see `bert_tf.tools.conversion`)."""
    from bert_tf.tools import conversion

    flags.DEFINE_enum("direction", None, ["hf_to_tf", "tf_to_hf"],
                      "hf_to_tf: Hugging Face config.json + model.safetensors -> bert_config.json "
                      "+ bert_model.ckpt. tf_to_hf: the reverse, in the BertForPreTraining "
                      "layout (with --task: the task's Hugging Face class).",
                      flag_values=flag_values)
    define_path("hf_dir", None, "hf_to_tf: Hugging Face BERT model directory.",
                        flag_values=flag_values)
    define_path("bert_config_file", None, "tf_to_hf: the checkpoint's bert_config.json.",
                        flag_values=flag_values)
    define_path("init_checkpoint", None,
                        "tf_to_hf: checkpoint prefix, e.g. .../bert_model.ckpt, or a run's "
                        "--output_dir (its latest checkpoint).", flag_values=flag_values)
    define_path("vocab_file", None,
                        "tf_to_hf: vocab.txt to copy (default: vocab.txt beside "
                        "--bert_config_file).", flag_values=flag_values)
    define_path("output_dir", None, "Directory to write the converted model to.",
                        flag_values=flag_values)
    flags.DEFINE_bool("skip_unknown_keys", False,
                      "hf_to_tf: drop keys that are not BERT weights (e.g. a classifier head) "
                      "instead of failing.", flag_values=flag_values)
    flags.DEFINE_enum("task", None, list(conversion.TASK_HEADS),
                      "Convert a fine-tuned model with this task head: classifier, multi_label "
                      "and regression (BertForSequenceClassification), squad "
                      "(BertForQuestionAnswering), ner (BertForTokenClassification), "
                      "multiple_choice (BertForMultipleChoice).", flag_values=flag_values)
    define_path("label_list", None,
                        "tf_to_hf with --task classifier / multi_label / ner: the run's "
                        "label_list.txt for id2label (default: label_list.txt beside the "
                        "checkpoint).", flag_values=flag_values)


def define_benchmark_flags(flag_values=FLAGS):
    """The flags of scripts/benchmark.py (`BenchmarkOptions`)."""
    from bert_tf.tools import benchmark_step

    defaults = options.BenchmarkOptions
    fv = flag_values
    define_path("bert_config_file", defaults.bert_config_file,
                "The config json file of the BERT model.", flag_values=fv)
    flags.DEFINE_enum("task", defaults.task, list(benchmark_step.TASKS),
                      "Which task's model_fn to run.", flag_values=fv)
    flags.DEFINE_enum("mode", defaults.mode, list(benchmark_step.MODES),
                      "train: forward + backward + optimizer update; infer: forward only.",
                      flag_values=fv)
    flags.DEFINE_integer("max_seq_length", defaults.max_seq_length, "Sequence length S.",
                         flag_values=fv)
    flags.DEFINE_integer("batch_size", defaults.batch_size,
                         "Sequences per micro-batch, over all replicas of "
                         "--distribution_strategy.", flag_values=fv)
    flags.DEFINE_integer("num_warmup_steps", defaults.num_warmup_steps,
                         "Untimed steps before timing.", flag_values=fv)
    flags.DEFINE_integer("num_steps", defaults.num_steps, "Timed steps.", flag_values=fv)
    flags.DEFINE_integer("num_accumulation_steps", defaults.num_accumulation_steps,
                         "Micro-batches per optimizer update (--mode=train); one step is one "
                         "update.", flag_values=fv)
    flags.DEFINE_integer("max_predictions_per_seq", defaults.max_predictions_per_seq,
                         "Masked positions per sequence (pretraining).", flag_values=fv)
    flags.DEFINE_integer("num_labels", defaults.num_labels, "Classes of the classifier head.",
                         flag_values=fv)
    flags.DEFINE_integer("peak_matmul_size", defaults.peak_matmul_size,
                         "n of the n x n x n matmul that measures the peak TFLOP/s.",
                         flag_values=fv)
    define_path("output_json", defaults.output_json, "Write the result as JSON here.",
                flag_values=fv)
    define_path("output_plot", defaults.output_plot,
                "Draw step time and throughput across --plot_batch_sizes to this image (needs "
                "matplotlib).", flag_values=fv)
    flags.DEFINE_string("plot_batch_sizes", defaults.plot_batch_sizes,
                        "Batch sizes of the --output_plot sweep.", flag_values=fv)
    define_path("trace_file", defaults.trace_file,
                "Also trace one step: print time per op type and write a Chrome trace here.",
                flag_values=fv)
    flags.DEFINE_bool("check_onednn", defaults.check_onednn,
                      "On CPU, report which oneDNN ISA and matmul kernels this precision uses "
                      "(a child process with ONEDNN_VERBOSE=1).", flag_values=fv)
    flags.DEFINE_enum("api", defaults.api, ["graph", "tf2"],
                      "graph: the task's model_fn in a session. tf2: the SQuAD training step "
                      "through bert_tf.tf2.BertEncoder under tf.function, with and without XLA, "
                      "beside the graph-mode step, fp32 and bf16, timed alternately in one run.",
                      flag_values=fv)
    flags.DEFINE_bool("find_max_batch", defaults.find_max_batch,
                      "Instead of timing --batch_size, search the largest batch whose step runs "
                      "within --memory_limit_mb (doubling, then bisection; each probe a child "
                      "process).", flag_values=fv)
    flags.DEFINE_bool("find_max_seq_length", defaults.find_max_seq_length,
                      "Instead of timing --max_seq_length, search the longest sequence (a "
                      "multiple of 128) whose step at --batch_size runs within "
                      "--memory_limit_mb (doubling from 128, then bisection; a probe past the "
                      "config's position table gets a table of its length).", flag_values=fv)
    flags.DEFINE_integer("memory_limit_mb", defaults.memory_limit_mb,
                         "--find_max_batch / --find_max_seq_length: resident-memory budget of "
                         "one probe, in MB.", flag_values=fv)
    define_recompute_grad_flag(fv)
    define_max_position_embeddings_flag(fv)
    define_precision_flags(fv)
    define_xla_flags(fv)
    define_distribution_flags(fv)


def define_export_step_flags(flag_values=FLAGS):
    """The flags of scripts/export_step.py (`ExportStepOptions`)."""
    from bert_tf.step_program import export

    defaults = options.ExportStepOptions
    fv = flag_values
    flags.DEFINE_enum("task", defaults.task, list(export.TASKS),
                      "Whose training step to export: run_squad.py's, run_classifier.py's or "
                      "run_pretraining.py's (masked LM + next sentence).", flag_values=fv)
    define_checkpoint_flags(fv)
    flags.DEFINE_integer("max_seq_length", defaults.max_seq_length, "Sequence length S.",
                         flag_values=fv)
    flags.DEFINE_integer("train_batch_size", defaults.train_batch_size,
                         "Sequences per step (one optimizer update).", flag_values=fv)
    flags.DEFINE_enum("precision", defaults.precision, list(export.PRECISIONS),
                      "Compute precision; variables and optimizer slots stay float32.",
                      flag_values=fv)
    flags.DEFINE_enum("optimizer", defaults.optimizer, ["adamw", "lamb"],
                      "The optimizer of the step, as in run_*.py.", flag_values=fv)
    flags.DEFINE_float("learning_rate", defaults.learning_rate, "Peak learning rate.",
                       flag_values=fv)
    flags.DEFINE_integer("num_train_steps", defaults.num_train_steps,
                         "Updates of the learning-rate schedule (linear decay to 0).",
                         flag_values=fv)
    flags.DEFINE_integer("num_warmup_steps", defaults.num_warmup_steps,
                         "Updates of linear warmup.", flag_values=fv)
    define_recompute_grad_flag(fv)
    flags.DEFINE_integer("max_predictions_per_seq", defaults.max_predictions_per_seq,
                         "Masked positions per sequence (--task=pretraining).", flag_values=fv)
    flags.DEFINE_integer("num_labels", defaults.num_labels,
                         "Classes of the classifier head (--task=classifier).", flag_values=fv)
    define_path("train_file", defaults.train_file,
                "Also write the batches of these TFRecords (the task's features, e.g. the "
                "train.tf_record run_squad.py writes; comma-separated files and globs) as "
                "safetensors shards.", flag_values=fv)
    define_path("input_file", None, "Pre-training records: the same as --train_file.",
                flag_values=fv)
    flags.DEFINE_integer("num_batches", defaults.num_batches,
                         "Write at most this many batches of --train_file (default: all "
                         "whole batches).", flag_values=fv)
    flags.DEFINE_integer("random_seed", defaults.random_seed,
                         "Seed of the initializers' draws (weights not in --init_checkpoint).",
                         flag_values=fv)
    define_path("output_dir", defaults.output_dir,
                "Write step.mlirbc, step.json, state.safetensors (and feature shards) here.",
                flag_values=fv)
