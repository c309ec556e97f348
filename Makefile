# The two set-up commands: `make demo` (main job) and `make test` (lint + tests).
# Both bootstrap .venv from nothing; pip (not uv) so the local CPU torch wheel is used later.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.synattn-installed
DEMO_OUT ?= build/demo
# the CPU build on this machine's disk; set TORCH_SPEC for a CUDA build elsewhere
TORCH_SPEC ?= torch==2.13.0
PROJECTS := shared/pyproject.toml services/parser/pyproject.toml services/trainer/pyproject.toml

.PHONY: venv demo test lint pytest bench clean

venv: $(STAMP)

$(STAMP): $(PROJECTS) requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e shared -e services/parser -e services/trainer -r requirements-dev.txt
	touch $@

demo: venv
	rm -rf $(DEMO_OUT)
	$(BIN)/synattn features --trees examples/running_example.mrg --out $(DEMO_OUT)/ptb
	$(BIN)/synattn features --trees examples/running_example.conllu --out $(DEMO_OUT)/conllu
	$(BIN)/synattn inspect $(DEMO_OUT)/ptb --row 0
	$(BIN)/synattn inspect $(DEMO_OUT)/conllu --row 0

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

pytest: venv
	bash .ci/services.sh
	$(BIN)/python -m pytest

test: lint pytest

bench: venv
	$(BIN)/python bench/features.py

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache .hypothesis
