# make venv | test | book | sync | clean   (see README.md)
SHELL := /bin/bash
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

# A GPU is present when `nvidia-smi -L` succeeds. Without one, install the CPU
# build of torch first (an unpinned torch would pull the multi-GB CUDA build),
# and tell the DSL which arch to compile for since it cannot detect one.
HAS_GPU  := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
TEST_ENV := $(if $(HAS_GPU),,CUTE_DSL_ARCH=sm_90a)

# The DSL's CUDA libraries: cu13 by default, the toolkit of the H200 the book is measured
# on (driver 580), so that GPU-free compiles (PTX, registers, spills) match what runs there.
# On a machine with a CUDA 12 driver: `make venv DSL_CUDA=cu12`.
DSL_CUDA ?= cu13
DSL_EXTRA := $(if $(filter cu13,$(DSL_CUDA)),"nvidia-cutlass-dsl[cu13]==4.8.1",)

# cuTile (kernels/mamba2) is the optional extra `.[tile]`: cuda-tile 1.7.0 and its compiler
# tileiras with libnvvm and ptxas 13.4, all pip wheels. Installed by default without a GPU, so that
# `make test` compiles the cuTile kernels to sm_90 cubins; on a GPU machine `make venv TILE=1`
# (launching cuTile kernels needs a CUDA 13 driver, r580 or later).
TILE ?= $(if $(HAS_GPU),0,1)
PKG  := $(if $(filter 1,$(TILE)),".[tile]",.)

# The install is redone only when requirements.txt, pyproject.toml, DSL_CUDA or TILE change.
STAMP := $(VENV)/.installed-$(shell (cat requirements.txt pyproject.toml; echo $(DSL_CUDA) $(TILE)) | sha256sum | cut -c1-16)

NOTEBOOKS := $(wildcard book/*.ipynb)
MYST      := $(wildcard book/*.myst.md)

.PHONY: venv test book sync clean

venv: $(STAMP)

$(STAMP):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=77" wheel
ifeq ($(HAS_GPU),)
	$(PY) -m pip install -q torch==2.13.0
endif
	$(PY) -m pip install -q -r requirements.txt $(DSL_EXTRA)
	$(PY) -m pip install -q --no-build-isolation -e $(PKG)
	rm -f $(VENV)/.installed-*
	touch $@

test: venv
	$(TEST_ENV) $(PY) -m pytest -q tests
ifneq ($(HAS_GPU),)
ifneq ($(NOTEBOOKS),)
	$(PY) -m pytest --nbval-lax -p no:cacheprovider $(NOTEBOOKS)
endif
endif

book: venv
	$(VENV)/bin/jupyter-book build . --all -W -n --keep-going
	@echo "HTML: _build/html/index.html"

sync: venv
ifneq ($(MYST),)
	$(VENV)/bin/jupytext --sync $(MYST)
endif

clean:
	rm -rf _build .pytest_cache .jupyter_cache *.egg-info
	find . \( -path ./$(VENV) -o -path ./.device -o -path ./.git \) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
	find . \( -path ./$(VENV) -o -path ./.device -o -path ./.git \) -prune -o -name .ipynb_checkpoints -type d -prune -exec rm -rf {} +
