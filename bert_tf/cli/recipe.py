"""Raw text -> pre-trained model in one command (scripts/pretrain_recipe.py,
`make pretrain-example`): the chain the README's "Pre-training from your own text" describes,
at a size that runs on a laptop. It sits with the command line because it composes the
scripts: each stage's options are built from that stage's own flag groups, so a stage runs
with the defaults its script has.

Stages, each writing under --output_dir:

  prepare   corpus/train/, corpus/eval/   one sentence a line (`corpus.prepare_corpus`)
  vocab     vocab.txt                     WordPiece vocab learnt from corpus/train
  config    bert_config.json              --bert_config_file with the vocab's size
  data      data/{train,eval}_{seq}.tfrecord for both sequence lengths
  phase 1   phase1/                       pre-training at --phase1_seq_length
  phase 2   phase2/                       --phase2_seq_length, starting from phase 1's weights
                                          (its own warmup and schedule, as BERT's paper and
                                          NVIDIA's recipe), then the held-out evaluation
"""

import os
import time

from absl import logging

from bert_tf import modeling
from bert_tf import options as bert_options
from bert_tf.data import corpus, pretraining_data, vocab
from bert_tf.errors import BertTfError
from bert_tf.runs.pretraining import run_pretraining

# Masked positions per sequence: BERT's 20 at 128, NVIDIA's 80 at 512 (~15 %, rounded up).
_PREDICTIONS = {128: 20, 512: 80}


def _predictions(seq_length):
    return _PREDICTIONS.get(seq_length, -(-seq_length * 15 // 100))


class _Stages:
    """Runs stages and remembers how long each took."""

    def __init__(self):
        self.seconds = {}

    def run(self, name, fn, *args, **kwargs):
        logging.info("=== %s ===", name)
        start = time.time()
        result = fn(*args, **kwargs)
        self.seconds[name] = time.time() - start
        logging.info("=== %s: %.1f s ===", name, self.seconds[name])
        return result


def _prepare(options, path, output_dir):
    return corpus.prepare_corpus(bert_options.PrepareCorpusOptions(
        input_file=path, output_dir=output_dir, format="auto", num_shards=1, text_key="text",
        language="en", num_workers=options.num_workers))


def _write_config(options, vocab_size, path):
    config = modeling.BertConfig.from_json_file(options.bert_config_file)
    config.max_position_embeddings = max(config.max_position_embeddings,
                                         options.phase2_seq_length)
    return vocab.write_sized_config(config, vocab_size, path)


def _records(options, text_dir, vocab_file, seq_length, output_file, dupe_factor):
    config = bert_options.PretrainingDataConfig(
        vocab_file=vocab_file, max_seq_length=seq_length,
        max_predictions_per_seq=_predictions(seq_length), random_seed=options.random_seed,
        dupe_factor=dupe_factor, masking=options.masking,
        next_sentence_objective=options.next_sentence_objective)
    pretraining_data.create_pretraining_data(os.path.join(text_dir, "*.txt"), output_file,
                                             config, num_workers=options.num_workers)
    return output_file


def _pretrain(options, config_file, phase, train_file, eval_file, init_checkpoint=None):
    seq_length = getattr(options, f"phase{phase}_seq_length")
    steps = getattr(options, f"phase{phase}_steps")
    # run_pretraining.py's defaults but for what the recipe sets.
    return run_pretraining(bert_options.PretrainOptions(
        input_file=train_file, eval_input_file=eval_file,
        max_predictions_per_seq=_predictions(seq_length), num_warmup_steps=max(1, steps // 10),
        max_eval_steps=1000, report_majority_baseline=True,
        next_sentence_objective=options.next_sentence_objective,
        model=bert_options.ModelOptions(bert_config_file=config_file,
                                        init_checkpoint=init_checkpoint,
                                        max_seq_length=seq_length),
        train=bert_options.TrainOptions(do_train=True, train_batch_size=options.train_batch_size,
                                        learning_rate=options.learning_rate,
                                        num_train_steps=steps),
        run=bert_options.RunOptions(output_dir=os.path.join(options.output_dir, f"phase{phase}"),
                                    save_checkpoints_steps=steps,
                                    random_seed=options.random_seed),
        evaluation=bert_options.EvalOptions(do_eval=True,
                                            eval_batch_size=options.train_batch_size)))


def run_recipe(options):
    """Runs every stage; returns {"seconds": {stage: s}, "phase1": results, "phase2": results}.

    Args:
      options: `bert_tf.options.RecipeOptions`.
    """
    for name in ("phase1_steps", "phase2_steps", "train_batch_size", "vocab_size"):
        if getattr(options, name) < 1:
            raise BertTfError(f"--{name}={getattr(options, name)} must be a positive number.")
    out = options.output_dir
    stages = _Stages()
    text = {split: os.path.join(out, "corpus", split) for split in ("train", "eval")}
    stages.run("prepare", lambda: [_prepare(options, path, text[split]) for split, path in
                                   (("train", options.input_file),
                                    ("eval", options.eval_input_file))])
    vocab_file = os.path.join(out, "vocab.txt")
    built = stages.run("vocab", vocab.build_vocab, bert_options.BuildVocabOptions(
        input_file=os.path.join(text["train"], "*.txt"), output_file=vocab_file,
        vocab_size=options.vocab_size))
    config_file = _write_config(options, built["vocab_size"],
                                os.path.join(out, "bert_config.json"))
    data = {}
    for phase in (1, 2):
        seq = getattr(options, f"phase{phase}_seq_length")
        for split, dupe_factor in (("train", 5), ("eval", 1)):
            data[phase, split] = stages.run(
                f"data {split} seq {seq}", _records, options, text[split], vocab_file, seq,
                os.path.join(out, "data", f"{split}_{seq}.tfrecord"), dupe_factor)
    results = {"phase1": stages.run("phase 1", _pretrain, options, config_file, 1,
                                    data[1, "train"], data[1, "eval"])}
    results["phase2"] = stages.run("phase 2", _pretrain, options, config_file, 2,
                                   data[2, "train"], data[2, "eval"],
                                   init_checkpoint=os.path.join(out, "phase1"))
    results["seconds"] = stages.seconds
    logging.info("Stage times (s): %s; total %.1f s", ", ".join(
        f"{name} {s:.1f}" for name, s in stages.seconds.items()), sum(stages.seconds.values()))
    for phase in ("phase1", "phase2"):
        r = results[phase]
        logging.info("%s held-out masked_lm_accuracy %.4f (majority baseline %.4f)", phase,
                     r["masked_lm_accuracy"], r["majority_baseline_accuracy"])
    return results
