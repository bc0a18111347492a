# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
THREADS ?= 2

.PHONY: install demo test bench lint format retrain clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: install
	$(BIN)/trtpipe demo

test: install
	$(BIN)/ruff check trtpipe tests
	$(BIN)/python -m pytest

models/resnet50/1/model.onnx models/digits_resnet/1/model.onnx: | install
	mkdir -p $(@D)
	$(BIN)/trtpipe convert $(word 2,$(subst /, ,$@)) -o $@

# The README's results tables come from this target.
bench: install models/resnet50/1/model.onnx models/digits_resnet/1/model.onnx
	mkdir -p reports
	$(BIN)/trtpipe bench resnet50 models/resnet50/1/model.onnx --batch 1,8 --threads $(THREADS) \
		--json reports/bench_resnet50.json --markdown reports/bench_resnet50.md
	$(BIN)/trtpipe bench digits_resnet models/digits_resnet/1/model.onnx --batch 1,8,32 --threads $(THREADS) \
		--json reports/bench_digits_resnet.json --markdown reports/bench_digits_resnet.md

lint: install
	$(BIN)/ruff check trtpipe tests

format: install
	$(BIN)/ruff format trtpipe tests

retrain: install
	$(BIN)/python -m trtpipe.models.train_digits

clean:
	rm -rf $(VENV) reports .pytest_cache
	find models -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
