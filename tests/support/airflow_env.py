"""Airflow test environment: one throwaway AIRFLOW_HOME per session, migrated once.

Airflow reads its configuration when first imported, so the environment is set here, at import time
of this module; tests/conftest.py imports it, so every session (unit, integration or both) configures
Airflow once, before any test module imports Airflow. The DAGs folder holds copies of the example DAGs
(``dag.test()`` only runs DAGs it finds in a bundle); a folder with DAGs of its own copies them in from
its conftest (tests/integration/airflow, tests/integration/clouds, tests/integration/faults). Each test
gets its own SKYNOMAD_HOME (market table, simulated cloud state).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

EXAMPLE_DAGS = Path(__file__).resolve().parents[2] / "example_dags"
DATA = Path(__file__).resolve().parents[2] / "airflow_provider_skynomad" / "data"
GCP_TRACE = DATA / "gcp-h100-2025-first-week.csv.gz"

_HOME = Path(tempfile.mkdtemp(prefix="skynomad-airflow-tests-"))
DAGS_FOLDER = _HOME / "dags"
DAGS_FOLDER.mkdir()
for _source in EXAMPLE_DAGS.glob("skynomad_*.py"):
    shutil.copy(_source, DAGS_FOLDER / _source.name)
os.environ.update(
    AIRFLOW_HOME=str(_HOME),
    AIRFLOW__CORE__LOAD_EXAMPLES="False",
    AIRFLOW__CORE__DAGS_FOLDER=str(DAGS_FOLDER),
    AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{_HOME}/airflow.db",
    AIRFLOW__CORE__UNIT_TEST_MODE="False",
    SKYNOMAD_HOME=str(_HOME / "skynomad"),
)


@pytest.fixture(scope="session")
def airflow_db():
    """`airflow db migrate` once for the session (dag.test() needs the metadata tables)."""
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True, env=os.environ.copy()
    )
    assert result.returncode == 0, result.stderr[-3000:]
    yield _HOME
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture
def skynomad_home(tmp_path, monkeypatch):
    home = tmp_path / "skynomad"
    monkeypatch.setenv("SKYNOMAD_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def gcp_frame():
    from airflow_provider_skynomad.market.observations import read_observations

    return read_observations(GCP_TRACE)


def seed_market(frame: pd.DataFrame, until: pd.Timestamp, hours: float = 48.0, url: str | None = None):
    """Write the trace rows of [until - hours, until) to the market table: the probe DAG's history."""
    from airflow_provider_skynomad.market.store.table import MarketTable

    table = MarketTable(url)
    table.create()
    rows = frame[(frame["observed_at"] < until) & (frame["observed_at"] >= until - pd.Timedelta(hours=hours))]
    table.append(rows)
    table.close()
    return len(rows)


def copy_dags(folder: Path) -> Path:
    """Copy a test folder's DAG files (skynomad_*.py) into the session's DAGs folder; `folder` back."""
    for source in folder.glob("skynomad_*.py"):
        shutil.copy(source, DAGS_FOLDER / source.name)
    return folder
