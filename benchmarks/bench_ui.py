"""How long the plugin's pages take with a big market table and many jobs.

A throwaway AIRFLOW_HOME (SQLite metadata DB, `airflow db migrate`), a market table of 30 days of
observations for 50 markets every 10 minutes (216,000 rows), 200 finished SkyNomad jobs plus the
test seed's running ones. Each page is rendered by the plugin's FastAPI app in this process (the
api-server's own auth dependencies, with an allow-all auth manager standing in for the real one), so
the figures are the server's time to build the page; the browser adds its own rendering. Prints
median and slowest of 5 loads per page and the page size (the very first load also imports the page
code, which the plugin leaves out of every other Airflow process).

Run: ``python benchmarks/bench_ui.py`` (about two minutes on 2 cores, most of it seeding).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HOME = Path(tempfile.mkdtemp(prefix="skynomad-bench-ui-"))
os.environ.update(
    AIRFLOW_HOME=str(HOME),
    AIRFLOW__CORE__LOAD_EXAMPLES="False",
    AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{HOME}/airflow.db",
    SKYNOMAD_HOME=str(HOME / "skynomad"),
)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from allow_all import AllowAll  # noqa: E402 - tests/support, on the path from the line above

MARKETS, DAYS, JOBS, LOADS = 50, 30, 200, 5
CONN_ID = "skynomad_bench"


def main() -> None:
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    migrated = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True)
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    import plugin_seed as seed  # tests/support/plugin_seed.py

    started = time.perf_counter()
    url = f"sqlite:///{HOME}/market.db"
    rows = seed.seed_market(url, seed.market_frame(markets=MARKETS, days=DAYS))
    seed.seed_jobs()
    for i in range(JOBS):
        run = ("skynomad_fine_tune", f"bench_run_{i:04d}", "fine_tune")
        seed.insert_task(*run, "success", when=datetime.now(UTC) - timedelta(minutes=5 + i))
        seed.write_state(*run, seed.finished_record())
    seed.add_connection(CONN_ID, url, "bench-password")
    print(
        f"seeded {rows} market rows ({MARKETS} markets, {DAYS} days) and {JOBS + 3} jobs in "
        f"{time.perf_counter() - started:.1f} s"
    )

    from airflow.api_fastapi.core_api import security
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from airflow_provider_skynomad.plugin import SkyNomadPlugin

    security.get_auth_manager = lambda: AllowAll()
    root = FastAPI()
    (mounted,) = SkyNomadPlugin.fastapi_apps
    root.mount(mounted["url_prefix"], mounted["app"])
    client = TestClient(root, headers={"Cookie": "_token=bench"})
    pages = {
        f"jobs dashboard ({JOBS + 3} jobs, last 30 days)": "/skynomad/jobs?days=30",
        f"markets page ({MARKETS} markets, 30 days)": f"/skynomad/markets?conn_id={CONN_ID}&days=30",
        "markets page (7 days, the default)": f"/skynomad/markets?conn_id={CONN_ID}",
        "job page (finished job)": "/skynomad/job/skynomad_fine_tune/bench_run_0000/fine_tune",
        "job page (running job)": "/skynomad/job/skynomad_fine_tune/running_run/fine_tune",
    }
    print(f"{'page':<45} {'median s':>9} {'slowest s':>10} {'size KB':>8}")
    for name, path in pages.items():
        times, size = [], 0
        for _ in range(LOADS):
            t0 = time.perf_counter()
            response = client.get(path)
            times.append(time.perf_counter() - t0)
            assert response.status_code == 200, (path, response.status_code, response.text[:300])
            size = len(response.content)
        print(f"{name:<45} {statistics.median(times):>9.3f} {max(times):>10.3f} {size / 1024:>8.0f}")


if __name__ == "__main__":
    try:
        main()
    finally:
        import shutil

        shutil.rmtree(HOME, ignore_errors=True)
