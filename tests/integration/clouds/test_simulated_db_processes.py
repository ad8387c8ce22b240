"""The simulated cloud's state on PostgreSQL under several processes at once: four workers launching
(one shared client token), polling, probing and terminating lose nothing and duplicate nothing, on a
fresh PostgreSQL database on 127.0.0.1:5432 (in CI it must be there: the test fails, never skips).
The rest of what the database adds: tests/unit/clouds/simulated/test_simulated_db.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
from airflow_provider_skynomad.clouds.simulated.store import open_database
from tests.support.simulated import handle_of, one_region_rows, terminate_leftovers, write_trace


@pytest.fixture
def trace(tmp_path) -> Path:
    return write_trace(tmp_path / "trace.csv", one_region_rows)


@pytest.fixture
def postgres_url(fresh_postgres_database):
    """A fresh PostgreSQL database (not a schema: the racing processes each open it by URL)."""
    url = fresh_postgres_database[0]
    yield url
    open_database(url).dispose()  # before the database is dropped


@pytest.fixture(autouse=True)
def _no_leftover_groups(tmp_path):
    """Terminate whatever a test left running in any state directory it made (even when it failed)."""
    yield
    terminate_leftovers(tmp_path)


WORKER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from airflow_provider_skynomad.clouds.base import GroupStatus, LaunchRequest
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud

    state_dir, url, me, n, barrier = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    cloud = SimulatedCloud.attach(state_dir, state_url=url)

    def req(token, job, command=()):
        return LaunchRequest("gcp", "r1", "r1-b", "g1", 1, False, token, command=tuple(command), job_id=job)

    (barrier / f"ready-{me}").touch()
    while not (barrier / "go").exists():
        time.sleep(0.01)
    shared = cloud.launch(req("shared", "job-shared", sleeper))  # every worker at once: one group
    own = [cloud.launch(req(f"w{me}-{i}", f"job-{me}")) for i in range(n)]
    for round in range(3):
        for handle in [shared, *own]:
            assert cloud.poll(handle) in (GroupStatus.STARTING, GroupStatus.RUNNING), handle
        cloud.probe("r1", "r1-a", "g1", 2, tags={"worker": str(me)})
    for handle in own:
        cloud.terminate(handle)
    print(json.dumps({"shared": shared.to_dict(), "own": [h.to_dict() for h in own]}))
    """
)


def test_processes_launching_and_polling_at_once_on_postgresql_lose_and_duplicate_nothing(
    trace, tmp_path, postgres_url
):
    workers, per_worker = 4, 6
    # Trust authentication ignores the password: it is there to be kept out of plain data.
    postgres_url = postgres_url.replace("@127.0.0.1", ":pw-marker-7f3a@127.0.0.1")
    # Slow enough that the 48 h trace outlasts the workers' start-up on a loaded box (48 h = 8 wall minutes).
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=360.0, state_url=postgres_url)
    assert cloud._store.engine.dialect.name == "postgresql"
    assert "pw-marker-7f3a" not in json.dumps(cloud.to_config()) + (cloud.state_dir / "cloud.json").read_text()
    try:
        _race(cloud, postgres_url, tmp_path / "barrier", workers, per_worker)
    finally:
        for group in cloud.groups():
            cloud.terminate(handle_of(group))


def _race(cloud: SimulatedCloud, postgres_url: str, barrier: Path, workers: int, per_worker: int) -> None:
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(cloud.state_dir), postgres_url, str(me), str(per_worker), str(barrier)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(workers)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(list(barrier.glob("ready-*"))) < workers:
            assert time.monotonic() < deadline, "workers did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
            time.sleep(0.05)
        (barrier / "go").touch()
        outputs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0] * workers, [err[-2000:] for _, err in outputs]
    results = [json.loads(out) for out, _ in outputs]

    assert len({json.dumps(r["shared"], sort_keys=True) for r in results}) == 1  # one group for the shared token
    groups = cloud.groups()
    tokens = sorted(g["client_token"] for g in groups)
    assert tokens == sorted(["shared"] + [f"w{me}-{i}" for me in range(workers) for i in range(per_worker)])
    assert len({g["group_id"] for g in groups}) == len(groups)
    for me in range(workers):
        launches = cloud.launches(f"job-{me}")
        assert len(launches) == per_worker and all(x["status"] == "terminated" for x in launches)
        assert all(x["end_hours"] >= x["start_hours"] for x in launches)
    shared_group = next(g for g in groups if g["client_token"] == "shared")
    (shared,) = cloud.launches("job-shared")
    assert shared["end_hours"] is None and shared["status"] in ("starting", "running")
    assert shared_group["pgid"] is not None  # its processes started, once:
    assert [p.name for p in (cloud.state_dir / "groups").iterdir()] == [shared["group_id"]]
    bill = cloud.bill()
    assert bill["probes"] == workers * 3 and len(cloud.bill({"worker": "0"})["groups"]) == 0
    assert bill["total_usd"] == pytest.approx(bill["spot_usd"] + bill["on_demand_usd"] + bill["probe_usd"])
    cloud.terminate(handle_of(shared_group))
    assert cloud.launches("job-shared")[0]["end_reason"] == "terminated on request"
