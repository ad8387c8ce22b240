PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo standalone test test-fast evaluate benchmarks clean browser

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

# The README's `airflow standalone` recipe: the example DAGs on the simulated cloud at 300x, Airflow's
# home and the market table under .skynomad/. Airflow's metadata database is SQLite by default; under
# load its scheduler, triggerer and dag-processor can exit on "database is locked". One setting puts it
# on the local PostgreSQL (the database is created when missing):
#   make standalone AIRFLOW_DB=postgresql+psycopg2://postgres@127.0.0.1:5432/airflow_standalone
AIRFLOW_DB ?=
standalone: $(STAMP)
	@if [ -n "$(AIRFLOW_DB)" ]; then $(BIN)/python -c "$$CREATE_DATABASE" '$(AIRFLOW_DB)'; fi
	export PATH=$(CURDIR)/$(BIN):$$PATH \
	  AIRFLOW_HOME=$(CURDIR)/.skynomad/standalone AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/example_dags \
	  AIRFLOW__CORE__LOAD_EXAMPLES=False SKYNOMAD_HOME=$(CURDIR)/.skynomad/standalone-home \
	  AIRFLOW_CONN_SKYNOMAD_DEFAULT='{"conn_type": "skynomad", "extra": {"cloud": "simulated", "speed": 300, "cloud_options": {"trace_start": 90}}}' \
	  $(if $(AIRFLOW_DB),AIRFLOW__DATABASE__SQL_ALCHEMY_CONN='$(AIRFLOW_DB)' AIRFLOW__CORE__EXECUTOR=LocalExecutor) \
	  && exec airflow standalone

define CREATE_DATABASE
import sys
from sqlalchemy import create_engine, make_url, text
url = make_url(sys.argv[1])
server = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
with server.connect() as conn:
    if conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": url.database}).first() is None:
        conn.execute(text(f'CREATE DATABASE "{url.database}"'))
        print(f"created database {url.database}")
server.dispose()
endef
export CREATE_DATABASE

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
