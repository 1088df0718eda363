# make book | test | test-book | venv | sync | clean   (see README.md)
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

# The install is redone only when the requirements files, pyproject.toml, DSL_CUDA or TILE change.
STAMP := $(VENV)/.installed-$(shell (cat requirements.txt requirements-book.txt requirements-book-test.txt pyproject.toml; echo $(DSL_CUDA) $(TILE)) | sha256sum | cut -c1-16)

# The book renders the chapters' stored outputs and runs no code, so `make book` needs only
# jupyter-book and its Sphinx stack (requirements-book.txt, a few hundred MB), in a venv of its
# own: no torch, no DSL, no GPU. `make test-book` adds the book's checks to that venv
# (requirements-book-test.txt) and runs tests/test_book.py alone. The GitHub Pages workflow
# (.github/workflows/book.yml) builds the site with the same file and the same command.
BOOK_VENV  := .venv-book
BOOK_PY    := $(BOOK_VENV)/bin/python
BOOK_STAMP := $(BOOK_VENV)/.book-$(shell cat requirements-book.txt | sha256sum | cut -c1-16)
BOOK_TEST_STAMP := $(BOOK_VENV)/.book-test-$(shell cat requirements-book.txt requirements-book-test.txt | sha256sum | cut -c1-16)
BOOK_BUILD := jupyter-book build . --all -W -n --keep-going

NOTEBOOKS := $(wildcard book/*.ipynb)
MYST      := $(wildcard book/*.myst.md)

.PHONY: venv book-venv test test-book book sync clean

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

book-venv: $(BOOK_STAMP)

$(BOOK_STAMP):
	test -x $(BOOK_PY) || $(PYTHON) -m venv $(BOOK_VENV)
	$(BOOK_PY) -m pip install -q --disable-pip-version-check -r requirements-book.txt
	rm -f $(BOOK_VENV)/.book-*
	touch $@

$(BOOK_TEST_STAMP): | $(BOOK_STAMP)
	$(BOOK_PY) -m pip install -q --disable-pip-version-check -r requirements-book-test.txt
	rm -f $(BOOK_VENV)/.book-test-*
	touch $@

# Everything: the kernel tests (compile-only without a GPU), the book's checks (the build with
# warnings as errors, the notebook pairs, the rendered pages in headless Chromium) and, on a
# GPU, every chapter re-executed with nbval.
test: venv
	$(TEST_ENV) $(PY) -m pytest -q tests
ifneq ($(HAS_GPU),)
ifneq ($(NOTEBOOKS),)
	$(PY) -m pytest --nbval-lax -p no:cacheprovider $(NOTEBOOKS)
endif
else
	@echo "no GPU: the GPU tests were skipped (counted above) and the chapters were not re-executed; on a Hopper GPU, make test runs both"
endif

# The book's checks alone, in the light book venv (no torch, no DSL).
test-book: $(BOOK_TEST_STAMP)
	$(BOOK_PY) -m pytest -q tests/test_book.py

book: book-venv
	$(BOOK_VENV)/bin/$(BOOK_BUILD)
	@echo "HTML: _build/html/index.html"

sync: $(BOOK_TEST_STAMP)
ifneq ($(MYST),)
	$(BOOK_VENV)/bin/jupytext --sync $(MYST)
endif

clean:
	rm -rf _build .pytest_cache .jupyter_cache *.egg-info
	find . \( -path ./$(VENV) -o -path ./$(BOOK_VENV) -o -path ./.device -o -path ./.git \) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
	find . \( -path ./$(VENV) -o -path ./$(BOOK_VENV) -o -path ./.device -o -path ./.git \) -prune -o -name .ipynb_checkpoints -type d -prune -exec rm -rf {} +
