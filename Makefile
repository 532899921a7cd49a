# The two commands of the README: `make demo` (the main job) and `make test` (every test).
# Each creates .venv on first use and installs the project into it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install clean-venv

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: 2.13.0 is the CPU build that lies on this project's machines;
	# an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	# The official package, for parity tests only: its own dependency list pulls torchaudio and
	# gradio, which its model classes never use (tests/official.py explains the import shim).
	$(BIN)/pip install -q --no-deps qwen-tts==0.1.1
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/rvqspec demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=25

clean-venv:
	rm -rf $(VENV)
