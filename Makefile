# turnstile — everything is driven from here.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install browser run cluster test test-unit test-integration test-soak test-faults bench bench-quick bench-profile schemas screenshot clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	@mkdir -p var
	$(BIN)/python -m consumers.devrun

# A 3-node NATS cluster, PostgreSQL (TURNSTILE_DATABASE_URL) and two workers in the foreground (README).
cluster: $(STAMP)
	@mkdir -p var
	$(BIN)/python -m consumers.clusterrun

# Debian's chromium for the inspector's browser test (tests/integration/test_inspector_browser.py);
# where it cannot be installed (not root, no apt) the test skips and says why.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian's chromium for the inspector's browser test"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "chromium could not be installed: the inspector's browser test will skip"; }

test: $(STAMP) browser
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

test-integration: $(STAMP) browser
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

# Where a plain message's time and writes go (bench/hotpath.py): cProfile + SQL and publish counts,
# on SQLite and on PostgreSQL (127.0.0.1:5432). BENCH_PROFILE=quick for a shorter run.
BENCH_PROFILE ?= full
bench-profile: $(VENV)/.bench-installed
	$(BIN)/python -m bench.hotpath --profile $(BENCH_PROFILE) --store sqlite
	$(BIN)/python -m bench.hotpath --profile $(BENCH_PROFILE) --store postgres

schemas: $(STAMP)
	$(BIN)/python -m schemas.export docs/schemas

# Re-take docs/inspector.png (the README's picture of the inspector) with the browser test.
screenshot: $(STAMP) browser
	TURNSTILE_UPDATE_DOCS_SCREENSHOT=1 $(BIN)/python -m pytest tests/integration/test_inspector_browser.py -q

clean:
	rm -rf var .pytest_cache
