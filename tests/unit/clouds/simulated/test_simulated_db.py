"""The simulated cloud's state in a database: SQLite by default, PostgreSQL when configured.

What the database adds to the cloud's semantics (tests/unit/clouds/simulated/test_simulated.py covers those):
polls that change nothing write nothing, clouds of different state directories share one
database without seeing each other, the URL's password stays out of plain data, and several
processes launching, polling, probing and terminating at once lose nothing and duplicate
nothing — against a fresh PostgreSQL database (in CI it must be there: the test fails, never skips).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import event

from airflow_provider_skynomad.clouds.base import GroupHandle, GroupStatus, LaunchRequest
from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
from airflow_provider_skynomad.clouds.simulated.store import display_url, open_database
from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig, make_cloud

FAST = 36000.0
START = pd.Timestamp("2025-01-01T00:00:00Z")
SLEEPER = (sys.executable, "-c", "import time; time.sleep(600)")


@pytest.fixture
def trace(tmp_path) -> Path:
    rows = [
        {
            "observed_at": (START + pd.Timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "cloud": "gcp",
            "region": "r1",
            "zone": zone,
            "instance_type": "g1",
            "accelerator": "H100",
            "accelerator_count": 1,
            "requested": 4,
            "available": 4,
            "spot_price": 1.0,
            "on_demand_price": 10.0,
        }
        for h in range(48)
        for zone in ("r1-a", "r1-b")
    ]
    path = tmp_path / "trace.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def request(token: str, job_id: str = "job-a", command: tuple = ()) -> LaunchRequest:
    return LaunchRequest("gcp", "r1", "r1-b", "g1", 1, False, token, command=command, job_id=job_id)


def _handle(group: dict) -> GroupHandle:
    return GroupHandle.from_dict({k: group[k] for k in GroupHandle.__dataclass_fields__})


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
    for config in tmp_path.rglob("cloud.json"):
        if "***" in (json.loads(config.read_text()).get("state_url") or ""):
            continue  # a test with a password in its URL ends its own groups (its database is gone by now)
        cloud = SimulatedCloud.attach(config.parent)
        for group in cloud.groups():
            cloud.terminate(_handle(group))


def _writes(engine) -> list[str]:
    """Every INSERT/UPDATE/DELETE the engine sends from now on (a list that fills up)."""
    sent: list[str] = []

    def record(conn, cursor, statement, *args):
        if statement.lstrip().split(" ", 1)[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            sent.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    return sent


def test_state_is_a_wal_sqlite_file_in_the_state_dir_and_a_quiet_poll_writes_nothing(trace, tmp_path):
    cloud = SimulatedCloud(trace, tmp_path / "state", speed=FAST)
    handle = cloud.launch(request("t-1"))
    assert (tmp_path / "state" / "state.db").is_file() and not (tmp_path / "state" / "state.json").exists()
    with open_database(f"sqlite:///{tmp_path / 'state' / 'state.db'}").connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    writes = _writes(cloud._store.engine)
    for _ in range(20):
        assert cloud.poll(handle) in (GroupStatus.STARTING, GroupStatus.RUNNING)
        cloud.progress(handle), cloud.describe(handle), cloud.bill()
    assert writes == []
    cloud.terminate(handle)
    assert len(writes) == 1 and writes[0].lstrip().upper().startswith("UPDATE")  # one row, the group's
    assert cloud.poll(handle) is GroupStatus.TERMINATED


def test_clouds_of_two_state_dirs_share_one_database_without_seeing_each_other(trace, tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    a = SimulatedCloud(trace, tmp_path / "a", speed=FAST, state_url=url)
    b = SimulatedCloud(trace, tmp_path / "b", speed=FAST, state_url=url)
    first = a.launch(request("same-token", "job-a"))
    other = b.launch(request("same-token", "job-b"))  # the token is another cloud's: a group of its own
    b.probe("r1", "r1-a", "g1", 2)
    assert [g["job_id"] for g in a.groups()] == ["job-a"] and [g["job_id"] for g in b.groups()] == ["job-b"]
    assert a.bill()["probes"] == 0 and b.bill()["probes"] == 1
    assert a.find("same-token") == first and b.find("same-token") == other
    assert not (tmp_path / "a" / "state.db").exists()
    again = SimulatedCloud.attach(tmp_path / "a")  # the URL has no password: cloud.json says where the state is
    assert [g["group_id"] for g in again.groups()] == [g["group_id"] for g in a.groups()]


def test_the_state_url_is_fixed_with_the_state_dir_and_attach_asks_for_a_password(trace, tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    cloud = SimulatedCloud(trace, tmp_path / "s", speed=FAST, state_url=url)
    cloud.launch(request("t-1"))
    assert [g["client_token"] for g in SimulatedCloud(**cloud.to_config()).groups()] == ["t-1"]
    with pytest.raises(ValueError, match="other settings: state_url"):
        SimulatedCloud(trace, tmp_path / "s", speed=FAST)  # the same state dir, another database: refused
    masked = display_url("postgresql://skynomad:hunter2-marker@127.0.0.1:1/sim")
    assert masked == "postgresql://skynomad:***@127.0.0.1:1/sim"
    config = json.loads((tmp_path / "s" / "cloud.json").read_text())
    (tmp_path / "s" / "cloud.json").write_text(json.dumps({**config, "state_url": masked}))
    with pytest.raises(ValueError, match="password is not stored: pass state_url"):
        SimulatedCloud.attach(tmp_path / "s")


def test_the_skynomad_connection_sets_the_state_url_through_cloud_options(trace, tmp_path):
    url = f"sqlite:///{tmp_path / 'from-connection.db'}"
    config = SkyNomadConfig(
        market_url=f"sqlite:///{tmp_path / 'market.db'}",
        trace_path=str(trace),
        state_dir=str(tmp_path / "cloud"),
        speed=FAST,
        cloud_options={"state_url": url},
    )
    cloud = make_cloud(config)
    cloud.launch(request("conn-1"))
    assert (tmp_path / "from-connection.db").is_file() and not (tmp_path / "cloud" / "state.db").exists()
    assert [g["client_token"] for g in make_cloud(config).groups()] == ["conn-1"]


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
            cloud.terminate(_handle(group))


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
    cloud.terminate(_handle(shared_group))
    assert cloud.launches("job-shared")[0]["end_reason"] == "terminated on request"


def test_a_state_dir_of_the_json_version_is_taken_over_with_its_running_group(trace, tmp_path):
    """What an earlier version kept in state.json (a group still running, a probe) is the cloud's after an upgrade."""
    first = SimulatedCloud(trace, tmp_path / "first", speed=FAST)
    running = first.launch(request("old-1", command=SLEEPER))
    (record,) = first._store.records()
    probe = {"zone": "r1-a", "usd": 0.5, "tags": {"skynomad:purpose": "probe"}}
    groups = {record["group_id"]: record}
    legacy = {"version": 1, "groups": groups, "tokens": {"old-1": record["group_id"]}, "probes": [probe], "egress": []}
    state = tmp_path / "legacy"
    state.mkdir()
    config = json.loads((tmp_path / "first" / "cloud.json").read_text())
    old_keys = {k: v for k, v in config.items() if k not in ("cloud_id", "state_url")}
    (state / "cloud.json").write_text(json.dumps(old_keys))
    (state / "state.json").write_text(json.dumps(legacy))

    upgraded = SimulatedCloud.attach(state)
    assert not (state / "state.json").exists() and (state / "state.json.imported").is_file()
    assert upgraded.find("old-1") == running
    assert upgraded.poll(running) in (GroupStatus.STARTING, GroupStatus.RUNNING)
    assert upgraded.bill()["probe_usd"] == 0.5
    upgraded.terminate(running)
    assert upgraded.launches()[0]["end_reason"] == "terminated on request"
    (state / "state.json").write_text(json.dumps(legacy))  # as if an opener died before its rename
    again = SimulatedCloud.attach(state)
    assert len(again.groups()) == 1 and again.bill()["probes"] == 1
