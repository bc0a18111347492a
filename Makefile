# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
THREADS ?= 2

.PHONY: install demo test bench loadtest lint format retrain clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# Type stubs of TensorRT 10's API, to check the builder's calls; --no-deps: they require TensorRT itself,
	# whose libraries only NVIDIA's index serves.
	$(BIN)/python -m pip install --quiet --no-deps 'tensorrt-stubs==10.13.0.35.1'
	touch $(STAMP)

demo: install
	$(BIN)/trtpipe demo

test: install
	$(BIN)/ruff check trtpipe tests
	$(BIN)/python -m pytest

TRTPIPE := $(BIN)/trtpipe

models/resnet50/1/model.onnx models/digits_resnet/1/model.onnx: | install
	mkdir -p $(@D)
	$(TRTPIPE) convert $(word 2,$(subst /, ,$@)) -o $@

# Optimized variants, each a model of its own in the repository. ResNet-50 has random weights and no data:
# its INT8 is calibrated on noise (a speed test only); the digits model is calibrated and judged on real data.
models/resnet50_fused/1/model.onnx: models/resnet50/1/model.onnx
	mkdir -p $(@D) && $(TRTPIPE) optimize $< -o $@
models/resnet50_fp16/1/model.onnx: models/resnet50/1/model.onnx
	mkdir -p $(@D) && $(TRTPIPE) optimize $< -o $@ --precision fp16 --calib random --calib-samples 16
models/resnet50_int8_cpu/1/model.onnx: models/resnet50/1/model.onnx
	mkdir -p $(@D) && $(TRTPIPE) optimize $< -o $@ --precision int8 --target cpu --calib random --calib-samples 32
models/digits_resnet_fp16/1/model.onnx: models/digits_resnet/1/model.onnx
	mkdir -p $(@D) && $(TRTPIPE) optimize $< -o $@ --precision fp16 --calib digits --eval digits
models/digits_resnet_int8_cpu/1/model.onnx: models/digits_resnet/1/model.onnx
	mkdir -p $(@D) && $(TRTPIPE) optimize $< -o $@ --precision int8 --target cpu --calib digits --eval digits \
		--max-accuracy-drop 0.5
models/digits_resnet_int8_tensorrt/1/model.onnx: models/digits_resnet/1/model.onnx
	mkdir -p $(@D) && $(TRTPIPE) optimize $< -o $@ --precision int8 --target tensorrt --calib digits \
		--eval digits --max-accuracy-drop 0.5

RESNET50_VARIANTS := models/resnet50/1/model.onnx models/resnet50_fused/1/model.onnx \
	models/resnet50_fp16/1/model.onnx models/resnet50_int8_cpu/1/model.onnx
DIGITS_VARIANTS := models/digits_resnet/1/model.onnx models/digits_resnet_fp16/1/model.onnx \
	models/digits_resnet_int8_cpu/1/model.onnx models/digits_resnet_int8_tensorrt/1/model.onnx

# The README's results tables come from this target.
bench: install $(RESNET50_VARIANTS) $(DIGITS_VARIANTS)
	mkdir -p reports
	$(TRTPIPE) bench resnet50 $(RESNET50_VARIANTS) --batch 1,8 --threads $(THREADS) \
		--json reports/bench_resnet50.json --markdown reports/bench_resnet50.md
	$(TRTPIPE) bench digits_resnet $(DIGITS_VARIANTS) --batch 1,8,32 --threads $(THREADS) \
		--json reports/bench_digits_resnet.json --markdown reports/bench_digits_resnet.md

# Server throughput and latency with and without dynamic batching (README's serving table).
loadtest: install models/resnet50/1/model.onnx models/digits_resnet/1/model.onnx
	$(BIN)/python scripts/serve_bench.py

lint: install
	$(BIN)/ruff check trtpipe tests

format: install
	$(BIN)/ruff format trtpipe tests

retrain: install
	$(BIN)/python -m trtpipe.models.train_digits

clean:
	rm -rf $(VENV) reports .pytest_cache
	find models -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
