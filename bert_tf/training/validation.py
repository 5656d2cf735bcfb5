"""Evaluation during training, the best checkpoint and early stopping, for every run.

With `--eval_every_n_steps=N` the chief evaluates the checkpoint of every N-th update while
training goes on in the same session (`Validation` is the Estimator's `evaluate_fn`): it
writes the metrics to TensorBoard under `output_dir/eval`, appends one JSON line to
`output_dir/eval_history.jsonl`, and with `--best_checkpoint_metric` keeps the best checkpoint
so far in `output_dir/best/` (with `best/best_eval.json`: its step and all its metrics). With
`--early_stopping_patience=K` training stops after K evaluations in a row that do not improve
on the best by more than `--early_stopping_min_delta`; the history makes a re-run of the same
command stop too.

`best/` is switched atomically: the new checkpoint's files are copied first, then
`best_eval.json` (which names the checkpoint) is replaced in one rename, then the previous
best's files are removed; a kill at any point leaves a whole best checkpoint that
`best_eval.json` names.
"""

import json
import os

import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.errors import BertTfError
from bert_tf.training import checkpoints, hooks

HISTORY_FILE = "eval_history.jsonl"
BEST_DIR = "best"
BEST_FILE = "best_eval.json"


def check_options(validation, metric_names=None, can_evaluate=True, eval_flags="--do_eval"):
    """Checks the validation flags before any work.

    Args:
      validation: `options.ValidationOptions`.
      metric_names: the metrics the run's evaluation reports (None: not known in advance).
      can_evaluate: whether the run has an eval split to evaluate on.
      eval_flags: the flags that give it, for the message.
    """
    v = validation
    if v.eval_every_n_steps < 0:
        raise BertTfError(f"--eval_every_n_steps must be 0 (off) or positive, got "
                          f"{v.eval_every_n_steps}.")
    if v.eval_every_n_steps and not can_evaluate:
        raise BertTfError(f"--eval_every_n_steps={v.eval_every_n_steps} needs eval data; pass "
                          f"{eval_flags}.")
    if v.early_stopping_patience is not None and v.early_stopping_patience < 1:
        raise BertTfError(f"--early_stopping_patience must be a positive number of "
                          f"evaluations, got {v.early_stopping_patience}.")
    if v.early_stopping_min_delta < 0:
        raise BertTfError(f"--early_stopping_min_delta must be 0 or more, got "
                          f"{v.early_stopping_min_delta}.")
    if v.early_stopping_patience and not v.best_checkpoint_metric:
        raise BertTfError("--early_stopping_patience needs --best_checkpoint_metric (the "
                          "metric that must improve).")
    if v.best_checkpoint_metric and not v.eval_every_n_steps:
        raise BertTfError("--best_checkpoint_metric needs --eval_every_n_steps (how often to "
                          "evaluate and compare).")
    if v.best_checkpoint_metric and metric_names is not None and (
            v.best_checkpoint_metric not in metric_names):
        raise BertTfError(f"--best_checkpoint_metric: unknown metric "
                          f"'{v.best_checkpoint_metric}'; this run reports "
                          f"{', '.join(sorted(metric_names))}.")


class Validation:
    """The evaluate-every-N-steps callback of one run and what it keeps on disk.

    Args:
      options: `options.ValidationOptions`.
      output_dir: the run's output directory.
      evaluate: `evaluate(checkpoint_path) -> dict` of metrics (with "global_step").
    """

    def __init__(self, options, output_dir, evaluate):
        self.options = options
        self.output_dir = output_dir
        self._evaluate = evaluate

    @property
    def every_n_steps(self):
        return self.options.eval_every_n_steps

    @property
    def best_dir(self):
        return os.path.join(self.output_dir, BEST_DIR)

    def __call__(self, step, checkpoint_path):
        """Evaluates `checkpoint_path` (step `step`); returns True to stop training early."""
        results = self._evaluate(checkpoint_path)
        results["global_step"] = step
        self._record(results)
        metric = self.options.best_checkpoint_metric
        if not metric:
            return False
        if metric not in results:
            raise BertTfError(f"--best_checkpoint_metric: unknown metric '{metric}'; this run "
                              f"reports {', '.join(sorted(results))}.")
        best = self.best()
        if best is None or self._improves(results[metric], best[metric]):
            self._keep_best(checkpoint_path, results)
            logging.info("New best %s = %.6g at step %d (%s).", metric, results[metric], step,
                         self.best_dir)
        return self.should_stop(log=True)

    def history(self):
        """The evaluations so far, in order (a torn last line from a kill is skipped)."""
        path = os.path.join(self.output_dir, HISTORY_FILE)
        if not tf.io.gfile.exists(path):
            return []
        entries = []
        with tf.io.gfile.GFile(path) as f:
            for line in f:
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError:
                    break
        return entries

    def best(self):
        """The metrics of the best checkpoint (with "checkpoint", its path), or None."""
        path = os.path.join(self.best_dir, BEST_FILE)
        if not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path) as f:
            best = json.load(f)
        best["checkpoint"] = os.path.join(self.best_dir, best["checkpoint"])
        return best

    def best_checkpoint(self):
        """The best checkpoint's path when --best_checkpoint_metric keeps one, else None."""
        best = self.best() if self.options.best_checkpoint_metric else None
        return best and best["checkpoint"]

    def should_stop(self, log=False):
        """Whether early stopping has fired: the last `patience` evaluations after the best
        one did not improve on it."""
        patience = self.options.early_stopping_patience
        best = self.best()
        if not patience or best is None:
            return False
        after_best = [entry for entry in self.history()
                      if entry["global_step"] > best["global_step"]]
        if len(after_best) < patience:
            return False
        if log:
            metric = self.options.best_checkpoint_metric
            logging.info(
                "Early stopping at step %d: %s has not improved on %.6g (step %d) in %d "
                "evaluations (--early_stopping_patience=%d).", after_best[-1]["global_step"],
                metric, best[metric], best["global_step"], len(after_best), patience)
        return True

    def _improves(self, value, best_value):
        delta = self.options.early_stopping_min_delta
        if self.options.mode == "max":
            return value > best_value + delta
        return value < best_value - delta

    def _record(self, results):
        """Appends `results` to eval_history.jsonl and writes them to TensorBoard (eval/)."""
        path = os.path.join(self.output_dir, HISTORY_FILE)
        fileio.append_line(path, json.dumps(results, sort_keys=True))
        hooks.write_scalar_summaries(os.path.join(self.output_dir, "eval"), results,
                                     int(results["global_step"]))
        logging.info("Evaluation at step %d: %s", results["global_step"],
                     ", ".join(f"{key} = {value:.6g}" for key, value in sorted(results.items())))

    def _keep_best(self, checkpoint_path, results):
        """Copies the checkpoint into best/ and switches best_eval.json to it."""
        tf.io.gfile.makedirs(self.best_dir)
        previous = self.best()
        name = os.path.basename(checkpoint_path)
        for source in tf.io.gfile.glob(checkpoint_path + ".*"):
            tf.io.gfile.copy(source, os.path.join(self.best_dir, os.path.basename(source)),
                             overwrite=True)
        fileio.atomic_write_text(os.path.join(self.best_dir, BEST_FILE),
                                 json.dumps({**results, "checkpoint": name}, indent=2,
                                            sort_keys=True) + "\n")
        # TF's state file too, so `--init_checkpoint=output_dir/best` finds it.
        checkpoints.write_state(self.best_dir, name)
        if previous and os.path.basename(previous["checkpoint"]) != name:
            for old in tf.io.gfile.glob(previous["checkpoint"] + ".*"):
                tf.io.gfile.remove(old)
