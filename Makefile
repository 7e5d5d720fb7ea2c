# maskfed: two commands do everything.
#   make book   create the environment, run the experiments, execute the notebooks, build the HTML book
#   make test   create the environment and run the test suite (make test-fast: the tests not marked slow)
#   make env / make clean   only create the environment / remove the built book (book/_build, book/nb)
#   make book-check   read every page of the built book in headless Chromium (apt-get install -y chromium)
#   make lab   the chapters as notebooks in JupyterLab (a chapter's .md opens as a notebook; run it top to bottom)
#   make bench / make device-prepare / make device-check   benchmark / carry wheels+data / the GPU check (docs/operations.md)
#   make device-compat   the GPU machine's torch (2.11) in a throwaway venv, running the tiny GPU check here
# Variables: PROFILE (smoke | cpu | cpu-long | cpu-paper | paper; default cpu), DATA (path to a CIFAR-10 archive or folder),
#   NB_JOBS (notebooks executed at once, default 2), DEVICE_CHECK_SIZE (full | tiny; default full), BENCH_ARGS, COMPAT_PYTHON.

SHELL   := /bin/bash
PROFILE ?= cpu
DATA    ?=
PYTHON  ?= python3
# notebooks executed at once by make book, each in its own one-thread process (2: this project's 2-core machine)
NB_JOBS ?= 2

# The active virtualenv or conda environment if there is one, else .venv (created from pyproject.toml).
ifneq ($(VIRTUAL_ENV),)
  ENV_DIR := $(VIRTUAL_ENV)
else ifneq ($(CONDA_PREFIX),)
  ENV_DIR := $(CONDA_PREFIX)
else
  ENV_DIR := .venv
endif
PY    := $(ENV_DIR)/bin/python
STAMP := $(ENV_DIR)/.maskfed-installed
DATA_FLAG := $(if $(DATA),--data-path "$(DATA)")

.PHONY: env book book-check test test-fast clean help bench device-prepare device-check device-compat lab

help:
	@sed -n '2,10p' Makefile

$(STAMP): pyproject.toml
	@test -x "$(PY)" || $(PYTHON) -m venv "$(ENV_DIR)"
	"$(PY)" -m pip install --quiet --disable-pip-version-check -e '.[book,test,ray,flower,lab]'
	@touch "$(STAMP)"

env: $(STAMP)

book: $(STAMP)
	@SECONDS=0; \
	"$(PY)" -m maskfed sweep --profile $(PROFILE) $(DATA_FLAG) && echo "[make book] runs: $${SECONDS} s" && \
	"$(PY)" -m maskfed.book.notebooks --profile $(PROFILE) --jobs $(NB_JOBS) $(DATA_FLAG) && echo "[make book] runs + notebooks: $${SECONDS} s" && \
	"$(ENV_DIR)/bin/jupyter-book" build book/ --quiet && \
	echo "[make book] done in $${SECONDS} s: open book/_build/html/index.html"

# Every page of the built book at 1400 and 390 px in Debian's headless Chromium (book/_tools/browsercheck.py):
# JavaScript errors, requests to other hosts, elements wider than their column, clipped equations,
# images below 2x their displayed size, raw LaTeX, debug lines. Exit status 1 on any finding.
book-check: $(STAMP)
	"$(PY)" book/_tools/browsercheck.py book/_build/html

test: $(STAMP)
	"$(PY)" -m pytest

# JupyterLab on notebooks/: book/_lab/overrides.json makes a MyST chapter (.md) open as a notebook (jupytext), whose
# Markdown jupyterlab-myst renders; outside the book build each chapter also shows the values its text glues.
# LAB_ARGS: further flags of jupyter lab, e.g. LAB_ARGS="--no-browser --port 8899".
LAB_ARGS ?=
lab: $(STAMP)
	@mkdir -p "$(ENV_DIR)/share/jupyter/lab/settings"
	@cp book/_lab/overrides.json "$(ENV_DIR)/share/jupyter/lab/settings/overrides.json"
	"$(ENV_DIR)/bin/jupyter" lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# The fast tier: every test not marked slow (notebooks, subprocesses, signals, real data, long runs).
test-fast: $(STAMP)
	"$(PY)" -m pytest -m "not slow" -q

clean:
	rm -rf book/_build book/nb

# Throughput benchmark (one round per protocol: ours vs bare SGD vs a typical FedAvg loop, batched vs
# sequential engine) into results/bench/bench-<utc>.csv. τ = 1 for each batch size: a round's time
# scales with its steps, and τ = 2, 5 repeat the same steps (the whole grid would take about 15 min here).
BENCH_ARGS ?= --profile cpu --protocols 32:1 128:1 full:1 --repeats 3
bench: $(STAMP)
	"$(PY)" -m maskfed.perf.bench $(BENCH_ARGS) $(DATA_FLAG)

# The prepared GPU check (docs/operations.md "Running on a GPU"). DEVICE_CHECK_SIZE=tiny runs it on this CPU in seconds.
# device-prepare fills the git-ignored .device/ with what the GPU machine lacks: pydantic's wheels
# (Python 3.12, x86-64) and the offline CIFAR-10 archive (about 22 MB in all).
DEVICE_CHECK_SIZE ?= full
# DEVICE_CHECK_ARGS: further flags of python -m maskfed.perf.devicecheck, e.g. --budget-s 120
DEVICE_CHECK_ARGS ?=
DEVICE_WHEELS := pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
DEVICE_ARCHIVE ?= ../shared/data/cifar10-jpeg.tar.gz
device-prepare:
	mkdir -p .device/whl
	"$(if $(wildcard $(PY)),$(PY),$(PYTHON))" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
	  --python-version 3.12 --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  -d .device/whl $(DEVICE_WHEELS)
	cp "$(DEVICE_ARCHIVE)" .device/cifar10-jpeg.tar.gz
	@du -ab .device | sort -k2 | awk '{printf "%10.1f MB  %s\n", $$1/1e6, $$2}'

# Runs with DEVICE_PY (default: the environment's python if there is one, else python3: on the GPU machine
# its own torch). Where pydantic is missing, installs every carried wheel into DEVICE_SITE (/tmp/site) first.
# Writes under $OUT when set, else results/device-check/. The exit status is the check's (docs/operations.md).
DEVICE_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
DEVICE_SITE ?= /tmp/site
device-check:
	@set -o pipefail; OUTDIR="$${OUT:-results/device-check}"; mkdir -p "$$OUTDIR"; \
	if ! "$(DEVICE_PY)" -c "import pydantic" 2>/dev/null; then \
	  "$(DEVICE_PY)" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
	    --target "$(DEVICE_SITE)" .device/whl/*.whl || exit 1; fi; \
	export PYTHONPATH="$$PWD/src:$(DEVICE_SITE)$${PYTHONPATH:+:$$PYTHONPATH}" PYTHONUNBUFFERED=1; \
	if [ -f .device/cifar10-jpeg.tar.gz ]; then export MASKFED_SHARED_ARCHIVE="$$PWD/.device/cifar10-jpeg.tar.gz"; fi; \
	"$(DEVICE_PY)" -m maskfed.perf.devicecheck --size $(DEVICE_CHECK_SIZE) --out "$$OUTDIR" $(DEVICE_CHECK_ARGS) 2>&1 | tee "$$OUTDIR/log.txt"

# The GPU machine's torch, checked here (docs/operations.md "Running on a GPU"): a throwaway virtualenv in a temporary
# folder with torch COMPAT_TORCH from the package index (with the CUDA libraries its wheel needs to import:
# about 6 GB), the other packages the check imports, and the carried wheels' pydantic; then
# `make device-check DEVICE_CHECK_SIZE=tiny` in it on this CPU. The folder is removed at the end, pass or fail.
# COMPAT_PYTHON: the interpreter of the venv. Under Python 3.12 (the GPU machine's) the carried wheels of
# `make device-prepare` are installed as the GPU machine installs them; under another Python their
# pydantic-core cannot load, so the same pinned versions (DEVICE_WHEELS) are installed for that Python.
COMPAT_PYTHON ?= python3
COMPAT_TORCH ?= torch==2.11.0 torchvision==0.26.0
COMPAT_PACKAGES ?= numpy pandas pillow pyyaml tqdm
device-compat:
	@set -e; tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/maskfed-compat-XXXXXX"); trap 'rm -rf "$$tmp"' EXIT; \
	echo "[device-compat] venv in $$tmp ($$($(COMPAT_PYTHON) --version))"; \
	$(COMPAT_PYTHON) -m venv "$$tmp/venv"; \
	nice -n 5 "$$tmp/venv/bin/python" -m pip install --quiet --no-cache-dir $(COMPAT_TORCH) $(COMPAT_PACKAGES); \
	if [ "$$("$$tmp/venv/bin/python" -c 'import sys; print(sys.version_info[:2] == (3, 12))')" = True ]; then \
	  test -n "$$(ls .device/whl/*.whl 2>/dev/null)" || $(MAKE) --no-print-directory device-prepare; \
	else \
	  nice -n 5 "$$tmp/venv/bin/python" -m pip install --quiet --no-cache-dir --no-deps $(DEVICE_WHEELS); fi; \
	"$$tmp/venv/bin/python" -c 'import torch, torchvision, pydantic; print("[device-compat] torch", torch.__version__, "torchvision", torchvision.__version__, "pydantic", pydantic.VERSION)'; \
	SECONDS=0; nice -n 5 $(MAKE) --no-print-directory device-check DEVICE_CHECK_SIZE=tiny \
	  DEVICE_PY="$$tmp/venv/bin/python" DEVICE_SITE="$$tmp/site" OUT="$${OUT:-$$tmp/out}"; \
	echo "[device-compat] the tiny check passed under $$("$$tmp/venv/bin/python" -c 'import torch; print(torch.__version__)') in $${SECONDS} s"
