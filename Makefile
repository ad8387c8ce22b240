PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test evaluate benchmarks clean browser

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

# Two xdist workers (the machine's two cores); tests marked xdist_group("services") run on one of them.
test: $(STAMP) browser
	$(BIN)/ruff check --no-cache --quiet .
	$(BIN)/ruff format --no-cache --check --quiet .
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup --durations=20 tests

evaluate: $(STAMP)
	$(BIN)/skynomad evaluate --trace airflow_provider_skynomad/data/gcp-h100-2025-first-week.csv.gz \
	  --zones us-central1-a,us-west1-a,europe-west1-c,europe-west3-c,asia-southeast1-b,asia-south2-b \
	  --work-hours 43.19 --deadline-hours 51.83 --cold-start-hours 0.2 --checkpoint-gb 50

benchmarks: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .skynomad
