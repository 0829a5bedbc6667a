# turnstile — everything is driven from here.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install run test test-unit test-integration test-soak test-faults bench bench-quick schemas clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	@mkdir -p var
	$(BIN)/python -m consumers.devrun

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

test-integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration $(PYTEST_ARGS)

# The issue-sized crash soak (50 sessions × 20 messages, 10 SIGKILLs); TURNSTILE_SOAK_* set seed and sizes.
test-soak: $(STAMP)
	$(BIN)/python -m tests.soak --profile long $(SOAK_ARGS)

# The whole fault suite (tests/faults/): every fault and more runs; `make test` runs its CI selection.
test-faults: $(STAMP)
	TURNSTILE_FAULTS=all $(BIN)/python -m pytest tests/faults -p no:cacheprovider $(PYTEST_ARGS)

$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@touch $@

bench: $(VENV)/.bench-installed
	$(BIN)/python -m bench.run --profile full

bench-quick: $(VENV)/.bench-installed
	$(BIN)/python -m bench.run --profile quick

schemas: $(STAMP)
	$(BIN)/python -m schemas.export docs/schemas

clean:
	rm -rf var .pytest_cache
