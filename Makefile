# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
THREADS ?= 2
QUARK_VENV  := .venv-quark
QUARK_STAMP := $(QUARK_VENV)/.installed-stamp
MODELOPT_VENV  := .venv-modelopt
MODELOPT_STAMP := $(MODELOPT_VENV)/.installed-stamp

.PHONY: install demo test bench zoo peers int8-decisions cpu-classes loadtest soak conformance gpu-check lint docs format retrain clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# Type stubs of TensorRT 10's API, to check the builder's calls; --no-deps: they require TensorRT itself,
	# whose libraries only NVIDIA's index serves.
	$(BIN)/python -m pip install --quiet --no-deps 'tensorrt-stubs==10.13.0.35.1'
	# Trained ONNX models that these wheels ship (PP-OCRv4's text detector, PP-PicoDet's layout detector;
	# trtpipe/models/packaged.py); --no-deps: their own __init__ needs OpenCV, and trtpipe reads only the .onnx files.
	# rapidocr-onnxruntime 1.4.4 declares Python < 3.13; pip skips it (and its tests skip) where the marker fails.
	$(BIN)/python -m pip install --quiet --no-deps 'rapidocr-onnxruntime==1.4.4; python_version < "3.13"' \
		'rapid-layout==1.2.1'
	# TensorRT 11's full Python bindings (builder included), kept as a wheel, never imported: their libraries come
	# only from NVIDIA's index. The API checks read the names the extension module defines.
	-$(BIN)/python -m pip download --quiet --no-deps --only-binary=:all: -d $(VENV)/tensorrt-11-bindings \
		'tensorrt-cu13-bindings==11.4.0.106'
	# A real Triton Inference Server for the tests and `make loadtest`: the tritonserver binary, its libraries and
	# the Python backend ship in nvidia-pytriton's wheel (kept as a wheel: its own Python code pins NumPy 1, which
	# the server's Python-backend stub needs too; trtpipe/tools/tritonserver.py unpacks both).
	$(BIN)/python -m pip download --quiet --no-deps --only-binary=:all: -d $(VENV)/tritonserver \
		'nvidia-pytriton==0.7.0' 'numpy==1.26.4'
	touch $(STAMP)

demo: install
	$(BIN)/trtpipe demo

# The demo's HTML reports in headless Chromium (Debian: apt-get install chromium): a PNG of each page beside it
# (reports/<model>/report.png), and checks, measured by Chromium, that each page fits 1280 px without scrolling
# sideways and that no two texts of a chart overlap (scripts/report_check.py). Run `make demo` first.
.PHONY: report-check
report-check: install
	$(BIN)/python scripts/report_check.py $(wildcard reports/*/report.html)

test: install
	$(BIN)/ruff check trtpipe tests scripts
	$(BIN)/lint-imports
	$(BIN)/mypy trtpipe
	$(BIN)/python -m pytest

TRTPIPE := $(BIN)/trtpipe

# The CPU results tables (docs/results/cpu.md): the digits model, ResNet-50 and the pretrained depthwise-separable
# EfficientNet-Lite0 (with AdaRound), with 5 s of timed runs per variant and batch in 20 rounds taken in turn
# (bench's default; docs/guides/bench.md, 'Figures on a busy machine'), both CPU runtimes, the PyTorch baselines and
# the peer quantizers. Reports land in reports/<model>/ (bench.md, report.html).
BENCH_PIPELINES := digits resnet50 efficientnet_lite0
bench: install
	for name in $(BENCH_PIPELINES); do \
		$(TRTPIPE) run trtpipe/pipeline/examples/$$name.toml --set bench.duration=5 \
			--set bench.threads=$(THREADS) --set bench.baselines=compile,autocast --set bench.peers=true \
			--set output.repository=$(CURDIR)/models --set output.reports=$(CURDIR)/reports || exit 1; \
	done

# The model-zoo sweep (docs/results/model-zoo.md): timm and torchvision architectures with seeded random weights
# through convert, FP16, INT8 cpu and tensorrt, check, and a paired bench of FP32, trtpipe's INT8 and ONNX Runtime's
# quantize_static (scripts/zoo.py). ZOO_ARGS passes options, e.g. ZOO_ARGS='--budget-minutes 40 timm:resnet18'.
zoo: install
	$(BIN)/python scripts/zoo.py $(ZOO_ARGS)

# Server throughput, latency and CPU: trtpipe serve with and without dynamic batching, and a real Triton server
# (Python-backend export) on the same artifacts and load (docs/results/serving.md).
models/resnet50/1/model.onnx models/digits_resnet/1/model.onnx: | install
	mkdir -p $(@D)
	$(TRTPIPE) convert $(word 2,$(subst /, ,$@)) -o $@

loadtest: install models/resnet50/1/model.onnx models/digits_resnet/1/model.onnx
	PYTHONPATH=. $(BIN)/python scripts/serve_bench.py

# A few minutes of load and faults against a real trtpipe serve on loopback ports under a memory limit: valid,
# malformed, oversized, memory-exhausting and abandoned requests over HTTP and gRPC (scripts/soak.py;
# docs/guides/serving.md). Exits 1 on an undocumented 5xx, a wrong answer, a dead server or capacity that did not come back.
# SOAK_ARGS passes options, e.g. SOAK_ARGS='--duration 60 --json reports/soak.json'.
soak: install
	$(BIN)/python scripts/soak.py $(SOAK_ARGS)

# Each trained model's INT8 made for the avx2 class and for this machine's, judged on ONNX Runtime and on OpenVINO,
# natively and under ONEDNN_MAX_CPU_ISA=AVX2 (docs/results/accuracy-by-cpu-class.md; reports/cpu_classes.md).
cpu-classes: install
	$(BIN)/python scripts/cpu_classes.py $(CPU_CLASSES_ARGS)

# trtpipe's INT8 against ONNX Runtime's quantize_static, NNCF, AMD Quark and NVIDIA ModelOpt on the pretrained
# models and photos (docs/results/int8-peers.md, docs/results/dense-models.md; reports/peers.md).
peers: install $(QUARK_STAMP) $(MODELOPT_STAMP)
	TRTPIPE_QUARK_PYTHON=$(QUARK_VENV)/bin/python TRTPIPE_MODELOPT_PYTHON=$(MODELOPT_VENV)/bin/python \
		$(BIN)/python scripts/peers.py

# Issue #55's measurement: each trained model's INT8 for cpu and tensorrt by optimize's default recipe before the step
# rule (a checkout of 2f2eca5 at BEFORE_TREE) and after it, NNCF's default PTQ and ONNX Runtime's quantize_static, on
# one fixed calibration set, scored on a disjoint unseen set (docs/results/int8-decisions.md; about an hour on 2 cores).
# BEFORE_TREE: git worktree add --detach ../wt-before 2f2eca5
BEFORE_TREE ?= ../wt-before
int8-decisions: install
	# Trained models from wheels no default was chosen on (YOLOv8n, YOLOX-tiny, ddddocr's CRNN reader); --no-deps: only their .onnx
	# files are read (nudenet's model says AGPL-3.0 in its metadata: measured here, never redistributed).
	$(BIN)/python -m pip install --quiet --no-deps 'nudenet==3.4.2' 'ddddocr==1.6.1'
	$(BIN)/python scripts/int8_decisions.py --before $(BEFORE_TREE) $(INT8_DECISIONS_ARGS)

# AMD Quark's ONNX quantizer in an environment of its own: it pins an older onnx than trtpipe's and brings
# datasets, pandas and pyarrow. Its AdaRound needs torch, which it borrows from .venv (a .pth entry placed after
# its own site-packages) rather than installing another 6 GB of CUDA wheels.
$(QUARK_STAMP): | install
	$(PYTHON) -m venv $(QUARK_VENV)
	$(QUARK_VENV)/bin/python -m pip install --quiet 'amd-quark==0.13' "onnxruntime==$$($(BIN)/python -c 'import onnxruntime; print(onnxruntime.__version__)')"
	$(QUARK_VENV)/bin/python -c 'import site, sys; print(sys.argv[1], file=open(site.getsitepackages()[0] + "/zz-trtpipe-torch.pth", "w"))' \
		"$$($(BIN)/python -c 'import site; print(site.getsitepackages()[0])')"
	$(QUARK_VENV)/bin/python -c 'import quark.onnx, torch'
	touch $@

# NVIDIA ModelOpt's ONNX PTQ in an environment of its own: nvidia-modelopt[onnx] pins onnx 1.21 and, on Linux x86-64,
# onnxruntime-gpu and cupy-cuda12x. It goes in --no-deps, then what it declares (base and [onnx]) pinned, less those
# two: the CPU onnxruntime of the series it takes on other platforms (its INT8 path needs no cupy). Its ONNX code
# imports torch, which it borrows from .venv as Quark does (scripts/modelopt_peer.py hides the tensorrt/ stubs folder
# that comes with it; pip's complaint that torch is not installed is expected).
$(MODELOPT_STAMP): | install
	$(PYTHON) -m venv $(MODELOPT_VENV)
	$(MODELOPT_VENV)/bin/python -m pip install --quiet --no-deps 'nvidia-modelopt==0.47.0'
	$(MODELOPT_VENV)/bin/python -m pip install --quiet 'onnx==1.21.0' 'onnxruntime==1.24.4' 'onnx-graphsurgeon==0.6.1' \
		'onnxconverter-common==1.16.0' 'onnxscript==0.7.2' 'onnxslim==0.1.98' 'polygraphy==0.53.6' 'lief==1.0.0' \
		'ml_dtypes==0.6.0' 'cppimport==26.4.17' 'numpy==2.4.6' 'nvidia-ml-py==13.615.71' 'ninja==1.13.2' \
		'packaging==26.3' 'setuptools==84.2.1' 'tqdm==4.70.1' 'PyYAML==6.0.4' 'omegaconf==2.4.0' 'PuLP==3.3.2' \
		'pydantic==2.14.4' 'regex==2026.11.19' 'rich==15.0.0' 'safetensors==0.8.0' 'scipy==1.17.1'
	$(MODELOPT_VENV)/bin/python -c 'import site, sys; print(sys.argv[1], file=open(site.getsitepackages()[0] + "/zz-trtpipe-torch.pth", "w"))' \
		"$$($(BIN)/python -c 'import site; print(site.getsitepackages()[0])')"
	$(MODELOPT_VENV)/bin/python -c 'import modelopt.onnx.quantization, torch'
	touch $@

# On a GPU machine: the GPU tests and the ResNet-50 and dense-model GPU benches in one command, JSON and Markdown in
# reports/gpu-check/ (scripts/gpu_check.py). Runs with this project's venv where there is one, else python3 (a GPU
# machine staged as ../shared/gpu/README.md says, with the working tree on PYTHONPATH).
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
gpu-check:
	$(GPU_PYTHON) scripts/gpu_check.py $(GPU_CHECK_ARGS)

# Every registry model's TensorRT-target INT8 and FP16 ONNX through `trtpipe check` (docs/results/demo-and-ci.md).
conformance: install
	$(BIN)/python scripts/conformance_registry.py

# The command reference in docs/commands/, generated from the click commands (tests/docs/ fails when it is stale).
docs: install
	$(BIN)/python scripts/docs.py

lint: install
	$(BIN)/ruff check trtpipe tests scripts
	$(BIN)/lint-imports
	$(BIN)/mypy trtpipe

format: install
	$(BIN)/ruff format trtpipe tests scripts

retrain: install
	$(BIN)/python -m trtpipe.models.train_digits

clean:
	rm -rf $(VENV) $(QUARK_VENV) $(MODELOPT_VENV) reports .pytest_cache
	find models -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
