"""A migrated Airflow metadata database with seeded SkyNomad jobs, and a market table behind a connection.

Airflow reads its configuration when first imported: when another folder's conftest (tests/airflow)
already chose an AIRFLOW_HOME, these tests use that database too; alone, they make their own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

if "airflow.configuration" not in sys.modules and "AIRFLOW_HOME" not in os.environ:
    _HOME = Path(tempfile.mkdtemp(prefix="skynomad-plugin-tests-"))
    os.environ.update(
        AIRFLOW_HOME=str(_HOME),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{_HOME}/airflow.db",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        SKYNOMAD_HOME=str(_HOME / "skynomad"),
    )

MARKER_PASSWORD = "Marker-Pa55word-never-shown"
CONN_ID = "skynomad_plugin_test"


@pytest.fixture(scope="session")
def seeded(tmp_path_factory):
    """Metadata DB migrated, the jobs of seed.py written, a market table behind connection CONN_ID."""
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True, env=os.environ.copy()
    )
    assert result.returncode == 0, result.stderr[-3000:]
    from . import seed

    market_db = tmp_path_factory.mktemp("market") / "market.db"
    url = f"sqlite:///{market_db}"
    rows = seed.seed_market(url, seed.market_frame())
    seed.seed_jobs()
    seed.add_connection(CONN_ID, url, MARKER_PASSWORD)
    return {"market_url": url, "rows": rows}
