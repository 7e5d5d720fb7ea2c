# maskfed: two commands do everything.
#   make book   create the environment, run the experiments, execute the notebooks, build the HTML book
#   make test   create the environment and run the test suite
# Variables: PROFILE (smoke | cpu | cpu-long | paper; default cpu), DATA (path to a CIFAR-10 archive or folder).

SHELL   := /bin/bash
PROFILE ?= cpu
DATA    ?=
PYTHON  ?= python3

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

.PHONY: env book test clean help

help:
	@sed -n '2,5p' Makefile

$(STAMP): pyproject.toml
	@test -x "$(PY)" || $(PYTHON) -m venv "$(ENV_DIR)"
	"$(PY)" -m pip install --quiet --disable-pip-version-check -e '.[book,test]'
	@touch "$(STAMP)"

env: $(STAMP)

book: $(STAMP)
	@SECONDS=0; \
	"$(PY)" -m maskfed sweep --profile $(PROFILE) $(DATA_FLAG) && echo "[make book] runs: $${SECONDS} s" && \
	"$(PY)" -m maskfed.notebooks --profile $(PROFILE) $(DATA_FLAG) && echo "[make book] runs + notebooks: $${SECONDS} s" && \
	"$(ENV_DIR)/bin/jupyter-book" build book/ --quiet && \
	echo "[make book] done in $${SECONDS} s: open book/_build/html/index.html"

test: $(STAMP)
	"$(PY)" -m pytest

clean:
	rm -rf book/_build book/nb
