"""How long the jobs dashboard takes on its first load in a fresh api-server process, and after.

The api-server imports the plugin (``airflow_provider_skynomad.plugin``) when it starts; the first
request to a page then pays for whatever the page imports or builds on first use. This benchmark
seeds a throwaway AIRFLOW_HOME in a separate process (tests/support/plugin_seed.py: the test
fixtures' jobs and market table), then, in a fresh interpreter that has imported only the plugin as
the api-server does, times the dashboard's first and second loads and the plugin's own import.

Run: ``python benchmarks/bench_ui_cold.py`` (add ``--jobs 200`` for the big dashboard).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONN_ID = "skynomad_bench"


# The test fixtures' seed (tests/unit/plugin/conftest.py): jobs in a DAG that declares the connection, so
# the dashboard reads their live statuses from its market database as the api-server does.
SEED = """
import sys
from datetime import UTC, datetime, timedelta
from tests.support import plugin_seed as seed
url, extra, conn_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
seed.seed_market(url, seed.market_frame())
seed.declare_dag("skynomad_fine_tune", ("fine_tune", "train"), conn_id)
seed.seed_jobs()
for i in range(extra):
    run = ("skynomad_fine_tune", f"bench_run_{i:04d}", "fine_tune")
    seed.insert_task(*run, "success", when=datetime.now(UTC) - timedelta(minutes=5 + i))
    seed.write_state(*run, seed.finished_record(seed.own_job_id(*run)))
seed.add_connection(conn_id, url, "bench-password")
"""


def measure() -> None:
    """In this (fresh) process: import the plugin as the api-server does, then time dashboard loads."""
    started = time.perf_counter()
    from airflow_provider_skynomad.plugin import SkyNomadPlugin

    imported = time.perf_counter() - started
    from airflow.api_fastapi.core_api import security
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    sys.path.insert(0, str(ROOT))
    from tests.support.allow_all import AllowAll

    security.get_auth_manager = lambda: AllowAll()
    root = FastAPI()
    (mounted,) = SkyNomadPlugin.fastapi_apps
    root.mount(mounted["url_prefix"], mounted["app"])
    client = TestClient(root, headers={"Cookie": "_token=bench"})
    print(f"plugin import (api-server start): {imported:.2f} s")
    for label in ("first", "second", "third"):
        before = set(sys.modules)
        t0 = time.perf_counter()
        response = client.get("/skynomad/jobs?days=7")
        assert response.status_code == 200, response.text[:300]
        print(
            f"jobs dashboard, {label} load: {time.perf_counter() - t0:.2f} s ({len(response.content) / 1024:.0f} KB, "
            f"{len(set(sys.modules) - before)} modules imported)"
        )
        if os.environ.get("BENCH_SHOW_MODULES") and label == "first":
            print(sorted(m for m in set(sys.modules) - before if "." not in m))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=0, help="extra finished jobs on the dashboard")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure()
        return
    home = Path(tempfile.mkdtemp(prefix="skynomad-bench-cold-"))
    env = dict(
        os.environ,
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
        SKYNOMAD_HOME=str(home / "skynomad"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])),
    )
    try:
        for command in (
            [sys.executable, "-m", "airflow", "db", "migrate"],
            [sys.executable, "-c", SEED, f"sqlite:///{home}/market.db", str(args.jobs), CONN_ID],
        ):
            done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
            assert done.returncode == 0, done.stderr[-2000:]
        subprocess.run([sys.executable, __file__, "--measure"], env=env, cwd=ROOT, check=True)
    finally:
        import shutil

        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
