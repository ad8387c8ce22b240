"""The simulated cloud's state in a database: SQLite by default, PostgreSQL when configured.

What the database adds to the cloud's semantics (tests/unit/clouds/simulated/test_simulated.py covers those):
polls that change nothing write nothing, clouds of different state directories share one
database without seeing each other, the URL's password stays out of plain data, a state directory
of the JSON version is taken over. Several processes launching, polling, probing and terminating at
once on a fresh PostgreSQL database: tests/integration/clouds/test_simulated_db_processes.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import event

from airflow_provider_skynomad.clouds.base import GroupStatus, LaunchRequest
from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
from airflow_provider_skynomad.clouds.simulated.store import display_url, open_database
from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig, make_cloud
from tests.support.simulated import FAST, SLEEPER, one_region_rows, terminate_leftovers, write_trace


@pytest.fixture
def trace(tmp_path) -> Path:
    return write_trace(tmp_path / "trace.csv", one_region_rows)


def request(token: str, job_id: str = "job-a", command: tuple = ()) -> LaunchRequest:
    return LaunchRequest("gcp", "r1", "r1-b", "g1", 1, False, token, command=command, job_id=job_id)


@pytest.fixture(autouse=True)
def _no_leftover_groups(tmp_path):
    """Terminate whatever a test left running in any state directory it made (even when it failed)."""
    yield
    terminate_leftovers(tmp_path)


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
