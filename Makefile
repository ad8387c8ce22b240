PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast evaluate benchmarks clean browser

# Python's compiled modules are kept (__pycache__, ignored by git) even where the environment says
# not to write them: every xdist worker and every Airflow process the tests start imports the package
# and the tests again, and recompiling them costs each one seconds.
export PYTHONDONTWRITEBYTECODE :=

$(STAMP): pyproject.toml setup.cfg
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/skynomad demo

# The plugin's browser test (tests/integration/plugin/test_browser.py) drives Debian's chromium through chromium-driver.
browser:
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver)

# All of tests/: tests/unit and tests/integration. Two xdist workers (the machine's two cores); the tests
# of one xdist_group run on one worker, one after another: "services" (Airflow's service processes and
# whole dag.test() runs: no two load the two cores at once), "browser" (its api-server starts once).
test: $(STAMP) browser
	$(BIN)/ruff check --no-cache --quiet .
	$(BIN)/ruff format --no-cache --check --quiet .
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup --durations=20 tests

# tests/unit only: no Airflow services, no clusters, no browser (PostgreSQL on 127.0.0.1:5432 as for
# `make test`); under 2 minutes on two cores.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --durations=10 tests/unit

evaluate: $(STAMP)
	$(BIN)/skynomad evaluate --trace airflow_provider_skynomad/data/gcp-h100-2025-first-week.csv.gz \
	  --zones us-central1-a,us-west1-a,europe-west1-c,europe-west3-c,asia-southeast1-b,asia-south2-b \
	  --work-hours 43.19 --deadline-hours 51.83 --cold-start-hours 0.2 --checkpoint-gb 50

benchmarks: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .skynomad
