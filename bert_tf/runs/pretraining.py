"""Pre-training as `scripts/run_pretraining.py` runs it: `run_pretraining(options)`.

The masked-LM + next-sentence task (its checks, records, heads, model_fn, input_fn and
majority baseline) is `bert_tf.tasks.pretraining.PretrainingTask`; the run's order (checks ->
BERT config, init checkpoint -> strategy -> output dir and its lock -> train, evaluating every
--eval_every_n_steps -> the released layout -> eval) is the one every task runs,
`bert_tf.runs.driver.run_task`.
"""

from bert_tf.runs import driver
from bert_tf.tasks import pretraining


def run_pretraining(options):
    """Runs pre-training and/or evaluation as `scripts/run_pretraining.py` configures it;
    every check runs before any graph is built or anything is written, and the chief holds
    the lock of --output_dir from its creation to the end of the run.

    Args:
      options: `bert_tf.options.PretrainOptions`.

    Returns:
      The eval results dict if --do_eval (on the chief), else None.
    """
    return driver.run_task(pretraining.PretrainingTask(None, options))
