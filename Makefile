# `make demo` and `make test` each create (or refresh, when pyproject.toml changes) the
# virtual environment .venv, install the project into it, and run.
PYTHON ?= python3
VENV ?= .venv
PY ?= $(VENV)/bin/python
STAMP := $(VENV)/.installed
# With an NVIDIA driver present, the demo needs the GPU extras too.
DEMO_STAMP := $(if $(shell command -v nvidia-smi 2>/dev/null),$(STAMP)-gpu,$(STAMP))

.PHONY: venv demo lint format test test-gpu bench model clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

# GPU targets add the CUDA 13 toolkit wheels (NVVM, NVRTC) that numba-cuda compiles with.
$(STAMP)-gpu: $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,cu13]'
	touch $@

venv: $(STAMP)

# The main job: every algorithm checked and timed (simulator at small sizes without a GPU).
demo: $(DEMO_STAMP)
	$(PY) -m numba_gemm demo

# Lint and formatting, checked (CI runs this before the tests); `make format` rewrites in place.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# The CPU suite: kernels on the Numba CUDA simulator, JAX on the CPU; `gpu` tests skip. One
# pytest process per CPU (pytest-xdist): the simulator is bound by one core's Python.
test: $(STAMP)
	NUMBA_ENABLE_CUDASIM=1 JAX_PLATFORMS=cpu $(PY) -m pytest -q -n auto

# On a GPU machine: the whole test suite against the real GPU (the `gpu` tests included).
test-gpu: $(STAMP)-gpu
	$(PY) -m pytest -q

# On a GPU machine: the pytest benchmark suites; each writes benchmarks/results/<suite>/<device>.json.
bench: $(STAMP)-gpu
	$(PY) -m pytest -q benchmarks

model: $(STAMP)
	$(PY) -m numba_gemm model

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks
