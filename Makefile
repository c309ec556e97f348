# The two set-up commands: `make demo` (main job) and `make test` (lint + tests).
# Both bootstrap .venv from nothing; pip (not uv) so the local CPU torch wheel is used later.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.synattn-installed
DEMO_OUT ?= build/demo
# the CPU build on this machine's disk; set TORCH_SPEC for a CUDA build elsewhere
TORCH_SPEC ?= torch==2.13.0
PROJECTS := shared/pyproject.toml services/parser/pyproject.toml services/trainer/pyproject.toml \
	services/jobs/pyproject.toml

.PHONY: venv data demo demo-help test test-durations lint pytest docs bench bench-peer clean compose-up \
	compose-down compose-demo compose-test

venv: $(STAMP)

$(STAMP): $(PROJECTS) requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e shared -e services/parser -e services/trainer \
		-e services/jobs -r requirements-dev.txt
	touch $@

DATA_DIR ?= ../shared/data
DEMO_PAIRS ?= 6000
M30K := $(DEMO_OUT)/m30k
# the demo's own job queue and runs: every command about its experiment needs these settings
DEMO_ENV = SYNATTN_HOME=$(DEMO_OUT)/jobs SYNATTN_DATA_ROOT=$(CURDIR) \
	SYNATTN_RUNS_DIR=$(DEMO_OUT)/runs

# Multi30k parsed for the full-size configs (examples/configs/m30k-*.yaml): train (29k pairs),
# valid and test2016 with spaCy, and the joint 8k BPE vocabulary. Resumable: finished shards
# are kept, and the vocabulary is learned once.
M30K_DATA ?= build/m30k
data: venv
	$(BIN)/python -m synattn_shared.datasets --data-dir $(DATA_DIR) --out $(M30K_DATA)/raw
	$(BIN)/synattn parse --src $(M30K_DATA)/raw/train.en.gz --tgt $(M30K_DATA)/raw/train.de.gz \
		--out $(M30K_DATA)/train --workers 2 --rows-per-shard 5000
	$(BIN)/synattn parse --src $(M30K_DATA)/raw/val.en.gz --tgt $(M30K_DATA)/raw/val.de.gz \
		--out $(M30K_DATA)/valid
	$(BIN)/synattn parse --src $(M30K_DATA)/raw/test_2016_flickr.en.gz \
		--tgt $(M30K_DATA)/raw/test_2016_flickr.de.gz --out $(M30K_DATA)/test2016
	test -f $(M30K_DATA)/tokenizer.json || $(BIN)/synattn tokenizer train \
		--data $(M30K_DATA)/train --data $(M30K_DATA)/valid \
		--out $(M30K_DATA)/tokenizer.json --vocab-size 8000

# parse a Multi30k subset, learn the vocabulary, then an experiment (vanilla, dea, slr-gated)
# through the embedded queue and worker: train, translate, score, compare, report
demo: venv
	$(BIN)/synattn features --trees examples/running_example.mrg --out $(DEMO_OUT)/ptb --overwrite
	$(BIN)/synattn inspect $(DEMO_OUT)/ptb --row 0
	$(BIN)/python -m synattn_shared.datasets --data-dir $(DATA_DIR) --out $(DEMO_OUT)/raw
	$(BIN)/synattn parse --src $(DEMO_OUT)/raw/train.en.gz --tgt $(DEMO_OUT)/raw/train.de.gz \
		--limit $(DEMO_PAIRS) --out $(M30K)/train --workers 2 --rows-per-shard 2000
	$(BIN)/synattn parse --src $(DEMO_OUT)/raw/val.en.gz --tgt $(DEMO_OUT)/raw/val.de.gz \
		--out $(M30K)/valid
	$(BIN)/synattn tokenizer train --data $(M30K)/train --data $(M30K)/valid \
		--out $(M30K)/tokenizer.json --vocab-size 4000
	$(DEMO_ENV) $(BIN)/synattn experiment run examples/experiments/demo.yaml --wait \
		--embedded-worker || { $(MAKE) -s --no-print-directory demo-help; exit 1; }
	@$(MAKE) -s --no-print-directory demo-help

# what to type to see the demo's experiment again: its job store is not the default one
demo-help:
	@echo
	@echo "The demo's experiment is in its own job store, $(DEMO_OUT)/jobs. To see it again:"
	@echo "  its report:     $(DEMO_ENV) $(BIN)/synattn report demo"
	@echo "  its dashboard:  $(DEMO_ENV) $(BIN)/synattn token create me --admin"
	@echo "                  $(DEMO_ENV) $(BIN)/synattn serve-jobs"
	@echo "  then open http://127.0.0.1:8002/ and sign in with that token (an admin token sees"
	@echo "  every user's experiments; the demo's belong to the command line's user, local)"

MYPY = $(BIN)/mypy --strict shared/src services/parser/src services/trainer/src services/jobs/src

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MYPY)

# two pytest-xdist workers (one per core here), each test file on one worker: a file's tests
# share its module fixtures, and a fixed Redis database is never flushed under another test.
# (A third worker on two cores was no faster: 666 s against 673 s, each test slower, and a
# Slurm test that must notice a dead node in 30 s missed it.) Files go slowest first, by the
# seconds tests/file_durations.json holds (tests/file_order.py), not xdist's most-tests-first:
# a long file taken last leaves the other core idle; make test-durations measures them anew.
PYTEST_ARGS ?= -n 2 --dist loadfile --no-loadscope-reorder

pytest: venv
	bash .ci/services.sh
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-durations: venv
	bash .ci/services.sh
	$(BIN)/python -m pytest $(PYTEST_ARGS) --store-durations

# ruff first (seconds); mypy (about a minute with a cold cache) runs beside the tests, its
# report after theirs; either failing fails the target
test: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	bash .ci/services.sh
	@mkdir -p build; $(MYPY) > build/mypy.log 2>&1 & typing=$$!; \
	$(BIN)/python -m pytest $(PYTEST_ARGS); tests=$$?; \
	wait $$typing; typed=$$?; echo "mypy:"; cat build/mypy.log; exit $$(( tests || typed ))

# The documentation site into build/site: the configuration and CLI references regenerated from
# the code (tools/gen_reference.py), then a strict build (a broken link or anchor fails it).
docs: venv
	$(BIN)/python tools/gen_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: venv
	$(BIN)/python bench/parsing/features.py
	$(BIN)/python bench/parsing/parse.py

# synattn against fairseq on the same data, BPE, shape and batches (installs fairseq-fixed into
# .cache/peer/venv once, with this venv's torch pinned; ~40 min on 2 CPU cores)
bench-peer: venv
	$(BIN)/python bench/peers/peer.py --data-dir $(DATA_DIR)

# The pipeline in containers (deploy/compose.sh): Redis, PostgreSQL, the APIs and the workers,
# with the CPU trainer; dockerd, Compose v2 and base images are set up when missing (local
# stand-ins from Debian packages where no image registry answers: deploy/local-images.sh).
compose-up: venv
	bash deploy/compose.sh up

compose-down:
	bash deploy/compose.sh down

compose-demo: venv
	DATA_DIR=$(DATA_DIR) bash deploy/compose.sh demo

# up, tests/compose end to end, down; exits non-zero on any failure
compose-test: venv
	DATA_DIR=$(DATA_DIR) bash deploy/compose.sh test

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache .hypothesis
