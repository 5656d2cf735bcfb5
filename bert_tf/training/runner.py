"""The set-up every training run shares, pre-training and fine-tuning alike.

A run (`runs.pretraining.run_pretraining`, `runs.driver.run_task`) goes through the
same steps, each done here once:

  1. check the options (`check_train_options`, `check_positive`) and the files
     (`require_model_files`), read the BERT config,
     checking `--max_seq_length` against it (`load_bert_config`); resolve `--init_checkpoint`
     (`resolve_init_checkpoint`) and build the tokenizer (`make_tokenizer`): all before any
     graph is built or anything is written, so bad input stops the run with one line and an
     untouched `--output_dir`;
  2. create the strategy, then `--output_dir`, whose lock the chief holds for the rest of the
     run (`claim_output_dir`, so a second run on it stops before writing anything), and the
     Estimator (`make_estimator`);
  3. read TFRecords through one input pipeline (`input_pipeline.record_input_fn`);
  4. train; only the chief (`is_chief`) evaluates and writes results (`evaluate`,
     `write_results`).
"""

import atexit
import contextlib
import dataclasses
import shutil
import tempfile

from absl import logging

from bert_tf import fileio, modeling, tokenization
from bert_tf.errors import BertTfError
from bert_tf.training import checkpoint_sources, checkpoints, distribute, run_lock, validation
from bert_tf.training import estimator as estimator_lib

# Fine-tuning and feature extraction need these in the vocab ([MASK] only pre-training).
NEEDED_SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]")


# ------------------------------------------------------------------------------- checks


def check_positive(options, *names):
    """Raises BertTfError naming the first flag among `names` whose value in `options` (an
    options dataclass) is not > 0."""
    for name in names:
        value = getattr(options, name)
        if value is None or value <= 0:
            raise BertTfError(f"--{name} must be a positive number, got {value}.")


def check_train_options(train, max_seq_length):
    """Checks the sizes and the batch / accumulation flags of a training run.

    Args:
      train: `options.TrainOptions`.
      max_seq_length: the run's `--max_seq_length`.
    """
    if max_seq_length <= 0:
        raise BertTfError(f"--max_seq_length must be a positive number, got {max_seq_length}.")
    check_positive(train, "train_batch_size", "num_accumulation_steps", "learning_rate")
    if train.num_train_steps is not None and train.num_train_steps < 1:
        raise BertTfError(f"--num_train_steps must be a positive number, got "
                          f"{train.num_train_steps}.")
    if train.freeze_layers is not None and train.freeze_layers < 0:
        raise BertTfError(f"--freeze_layers must be 0 or more, got {train.freeze_layers}.")
    if train.do_train and train.train_batch_size % train.num_accumulation_steps:
        raise BertTfError(
            f"--train_batch_size={train.train_batch_size} is not divisible by "
            f"--num_accumulation_steps={train.num_accumulation_steps}; the micro-batch is "
            "train_batch_size / num_accumulation_steps, pick values where it divides.")


def require_model_files(model, tokenizer_options=None):
    """Stops with one line naming the flag unless `--bert_config_file` (and, with
    `tokenizer_options`, `--vocab_file`) is a file: before either is read.

    Args:
      model: `options.ModelOptions`.
      tokenizer_options: `options.TokenizerOptions`, or None for a run without a tokenizer.
    """
    fileio.require_file(model.bert_config_file, flag="bert_config_file",
                        what="BERT config file")
    if tokenizer_options is not None:
        fileio.require_file(tokenizer_options.vocab_file, flag="vocab_file", what="vocab file")


def load_bert_config(model):
    """Reads `--bert_config_file` (checked by `require_model_files`; with
    `--max_position_embeddings` over its own) and checks
    `--max_seq_length` against it.

    Args:
      model: `options.ModelOptions`.

    Returns:
      The `modeling.BertConfig`.
    """
    bert_config = modeling.BertConfig.from_json_file(model.bert_config_file)
    if model.max_position_embeddings:
        if bert_config.position_embedding_type != "absolute":
            logging.info("--max_position_embeddings=%d: %s has relative positions, which need "
                         "no position table; only their distance table grows.",
                         model.max_position_embeddings, model.bert_config_file)
        bert_config.max_position_embeddings = model.max_position_embeddings
    if model.max_seq_length > bert_config.max_position_embeddings:
        raise BertTfError(
            f"--max_seq_length={model.max_seq_length} is longer than max_position_embeddings "
            f"({bert_config.max_position_embeddings}) in {model.bert_config_file}; lower "
            "--max_seq_length or raise --max_position_embeddings.")
    return bert_config


def with_checkpoint_source(options):
    """`options` (`FinetuneOptions` or `PretrainOptions`) for a run whose `--init_checkpoint`
    is another library's checkpoint (`checkpoint_sources`: a KerasHub preset, a Hugging Face
    model directory): `--init_checkpoint` becomes the prefix of its Google-layout conversion,
    and `--bert_config_file` and `--vocab_file`, where not given, the source's; given, they
    must describe the same model, and `--do_lower_case` must match the source's casing.
    Other options are returned as they are.

    Raises:
      BertTfError: one line, when a given file or the casing disagrees with the source, or
        the source has no vocabulary and `--vocab_file` is not given.
    """
    model = options.model
    converted = checkpoint_sources.resolve(model.init_checkpoint)
    if converted is None:
        return options
    if model.bert_config_file:
        fileio.require_file(model.bert_config_file, flag="bert_config_file",
                            what="BERT config file")
        checkpoint_sources.check_config_agrees(model.bert_config_file, converted)
    changes = {"model": dataclasses.replace(
        model, init_checkpoint=converted.prefix,
        bert_config_file=model.bert_config_file or converted.bert_config_file)}
    tokenizer = getattr(options, "tokenizer", None)
    if tokenizer is not None:
        if tokenizer.vocab_file:
            fileio.require_file(tokenizer.vocab_file, flag="vocab_file", what="vocab file")
            checkpoint_sources.check_vocab_agrees(tokenizer.vocab_file, converted)
        elif converted.vocab_file is None:
            raise BertTfError(f"--init_checkpoint: the {converted.source_name} "
                              f"{converted.path} has no vocabulary; pass --vocab_file.")
        if converted.do_lower_case not in (None, tokenizer.do_lower_case):
            raise BertTfError(
                f"--do_lower_case={tokenizer.do_lower_case} but the {converted.source_name} "
                f"{converted.path} is {'uncased' if converted.do_lower_case else 'cased'}; "
                f"pass --do_lower_case={converted.do_lower_case}.")
        changes["tokenizer"] = dataclasses.replace(
            tokenizer, vocab_file=tokenizer.vocab_file or converted.vocab_file)
    return dataclasses.replace(options, **changes)


def resolve_init_checkpoint(init_checkpoint):
    """The checkpoint prefix for `--init_checkpoint` (a prefix or a directory), or None.

    Without one the encoder starts from random weights (a warning says so).
    """
    if not init_checkpoint:
        logging.warning("No --init_checkpoint: the model starts from random weights.")
        return None
    prefix = checkpoints.resolve_checkpoint(init_checkpoint)
    # Reads every tensor: a damaged index, a missing or a short .data shard all fail here.
    checkpoints.check_init_checkpoint(prefix)
    return prefix


def make_tokenizer(tokenizer_options, bert_config, model):
    """A `FullTokenizer` for `--vocab_file` (checked by `require_model_files`), checked
    against the casing and the config.

    Args:
      tokenizer_options: `options.TokenizerOptions`.
      bert_config: the run's `BertConfig` (its vocab_size bounds the vocab's ids; a vocab
        with fewer tokens than it is logged as a warning).
      model: `options.ModelOptions` (names the config file and the init checkpoint).
    """
    vocab_file = tokenizer_options.vocab_file
    tokenization.validate_case_matches_checkpoint(tokenizer_options.do_lower_case,
                                                  model.init_checkpoint)
    tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file,
                                           do_lower_case=tokenizer_options.do_lower_case)
    tokenization.check_vocab_has_special_tokens(tokenizer.vocab, vocab_file,
                                                tokens=NEEDED_SPECIAL_TOKENS)
    largest_id = max(tokenizer.vocab.values())
    if largest_id >= bert_config.vocab_size:
        raise BertTfError(
            f"--vocab_file {vocab_file} has token id {largest_id} but vocab_size in "
            f"{model.bert_config_file} is {bert_config.vocab_size}; pass the vocab.txt that "
            f"came with the checkpoint, or for a grown vocab (extend_vocab.py) set "
            f"\"vocab_size\": {largest_id + 1} in {model.bert_config_file}.")
    if largest_id + 1 < bert_config.vocab_size:
        # Not an error: some configs pad the table on purpose (to a multiple of 8 or 64); but a
        # vocab from another model (cased for uncased, 28996 for 30522) looks just like this.
        logging.warning(
            "--vocab_file %s has %d tokens but vocab_size in %s is %d: embedding rows %d..%d "
            "are never used. If this vocab did not come with the checkpoint, pass the one that "
            "did; a table padded on purpose needs no change.", vocab_file, largest_id + 1,
            model.bert_config_file, bert_config.vocab_size, largest_id + 1,
            bert_config.vocab_size - 1)
    return tokenizer


# ---------------------------------------------------------------------- estimator and chief


def claim_output_dir(run, strategy):
    """Creates `--output_dir` (the first thing a run writes, after every check) and returns a
    context manager holding its lock (`training.run_lock`) on the chief: a second run on the
    directory stops there with `BertTfError` (a killed run's lock is taken over). The other
    workers of a multi-worker run write to the chief's directory by design, so they take no
    lock."""
    fileio.ensure_output_dir(run.output_dir)
    return run_lock.hold(run.output_dir) if is_chief(strategy) else contextlib.nullcontext()


def make_strategy(run, train):
    """The training strategy of `--distribution_strategy` (None: one device), with the
    global batch checked against its replicas. Without --do_train only a multi-worker strategy
    is built, so that the other workers still leave the chief's work to it."""
    if not train.do_train and run.distribution.distribution_strategy != "multi_worker":
        return None
    strategy = distribute.strategy_from_options(run.distribution)
    if not train.do_train:
        return strategy
    per_replica = distribute.per_replica_batch_size(
        train.train_batch_size, strategy, num_accumulation_steps=train.num_accumulation_steps)
    logging.info("Training: batch %d (%d micro-batches of %d); %d replicas with %d examples "
                 "each per micro-batch.", train.train_batch_size, train.num_accumulation_steps,
                 train.micro_batch_size, distribute.num_replicas(strategy), per_replica)
    return strategy


def make_estimator(model_fn, run, train, strategy, eval_batch_size=None,
                   predict_batch_size=None):
    """An Estimator writing to `--output_dir`; its train batch is the micro-batch.

    Training runs under `strategy` (see `training.distribute`): the train batch stays global,
    each replica computes train_batch_size / replicas of it. Evaluation and prediction run on
    one device of the chief.
    """
    return estimator_lib.Estimator(
        model_fn, run.output_dir, config=estimator_lib.run_config(run, strategy),
        train_batch_size=train.micro_batch_size, eval_batch_size=eval_batch_size,
        predict_batch_size=predict_batch_size)


def is_chief(strategy):
    """Whether this process writes to `--output_dir`, evaluates, predicts and exports: always,
    except on the non-chief workers of `--distribution_strategy=multi_worker`."""
    return distribute.is_chief(strategy)


def train(estimator, input_fn, max_steps, run, evaluate=None):
    """Trains to `max_steps`, evaluating every --eval_every_n_steps (see `training.validation`).

    Args:
      estimator: the run's Estimator.
      input_fn: the training input_fn.
      max_steps: optimizer updates to reach.
      run: `options.RunOptions`.
      evaluate: on the chief with --eval_every_n_steps, `evaluate(checkpoint_path) -> dict`
        of eval metrics; else None.

    Returns:
      The checkpoint that evaluation, prediction and export use after training: the best one
      with --best_checkpoint_metric, else None (the latest).
    """
    keeper = validation.Validation(run.validation, run.output_dir, evaluate)
    if keeper.should_stop(log=True):
        logging.info("Early stopping fired in an earlier run of this command: not training "
                     "further.")
    else:
        estimator.train(input_fn, max_steps=max_steps,
                        evaluate_fn=keeper if evaluate is not None else None,
                        evaluate_every_n_steps=run.validation.eval_every_n_steps)
    best = keeper.best_checkpoint()
    if best:
        logging.info("Using the best checkpoint %s (%s) for what follows.", best,
                     run.validation.best_checkpoint_metric)
    return best


def export_release(run, model, checkpoint=None, vocab_file=None):
    """With --export_release_dir, writes the released-checkpoint layout of `checkpoint`
    (default: the latest in --output_dir) there (`checkpoints.export_release_checkpoint`)."""
    if run.export_release_dir:
        checkpoints.export_release_checkpoint(checkpoint or run.output_dir,
                                              model.bert_config_file, run.export_release_dir,
                                              vocab_file=vocab_file,
                                              bert_config=load_bert_config(model))


def evaluate(estimator, input_fn, steps=None, checkpoint_path=None):
    """`estimator.evaluate` of `checkpoint_path` (default: the latest) as plain Python numbers
    (global_step an int, the rest floats)."""
    results = estimator.evaluate(input_fn, steps=steps, checkpoint_path=checkpoint_path)
    return {key: int(value) if key == "global_step" else float(value)
            for key, value in results.items()}


def write_results(output_dir, results, header=()):
    """Writes eval_results.txt (`# header` lines, then `key = value` lines) and logs each
    result."""
    path = fileio.write_eval_results(output_dir, results, header=header)
    logging.info("***** Eval results (%s) *****", path)
    for line in header:
        logging.info("  # %s", line)
    for key in sorted(results):
        logging.info("  %s = %s", key, results[key])
    return path


# ------------------------------------------------------------------------------------- input


def finetuning_schedule(options, train_examples):
    """(num_train_steps, num_warmup_steps) of a fine-tuning run, in optimizer updates.

    `--num_train_steps` if given, else len(train_examples) / train_batch_size *
    num_train_epochs (rounded down, as the original); warmup is `--warmup_proportion` of it.
    Without --do_train 1 step and no warmup (the model_fn still builds in eval and predict
    mode).
    """
    train = options.train
    if not train.do_train:
        return 1, 0
    num_examples = len(train_examples)
    if train.num_train_steps:
        steps = train.num_train_steps
    else:
        steps = int(num_examples / train.train_batch_size * options.num_train_epochs)
    if steps < 1:
        raise BertTfError(
            f"--num_train_epochs={options.num_train_epochs} over {num_examples} training "
            f"examples at --train_batch_size={train.train_batch_size} makes no optimizer "
            "update; train for more epochs, use a smaller batch or pass --num_train_steps.")
    return steps, int(steps * options.warmup_proportion)


def feature_cache_dir(chief, output_dir):
    """Where this process writes its cached TFRecord features: `output_dir` on the chief; a
    private temporary directory, removed when the process exits, on the other workers."""
    if chief:
        return output_dir
    path = tempfile.mkdtemp(prefix="bert_tf_worker_features_")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    logging.info("Not the chief: caching features in %s (removed at exit), not in "
                 "--output_dir.", path)
    return path


def untrained_run_checkpoint(estimator, options):
    """What a run without --do_train evaluates and exports: None (the latest checkpoint of
    --output_dir) when --output_dir has one, else the checkpoint of --init_checkpoint (a
    prefix, or a directory's latest), so a trained run re-exports from a new --output_dir."""
    if (options.train.do_train or not options.model.init_checkpoint
            or estimator.latest_checkpoint()):
        return None
    checkpoint = checkpoints.resolve_checkpoint(options.model.init_checkpoint)
    logging.info("--output_dir '%s' has no checkpoint: using --init_checkpoint %s.",
                 options.run.output_dir, checkpoint)
    return checkpoint
