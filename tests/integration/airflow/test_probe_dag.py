"""The probe DAG through ``dag.test()`` (each zone probed once for one instance, its cost recorded) and
`skynomad cleanup` against Airflow's metadata database. The operator's planning, budget and signals
without Airflow's services: tests/unit/operators/test_probe_operator.py; a day of its runs:
tests/integration/probing/test_probe_day.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

from airflow_provider_skynomad.hooks.skynomad import SkyNomadHook
from airflow_provider_skynomad.market.store.signals import SignalTable
from airflow_provider_skynomad.market.store.table import MarketTable

from .conftest import seed_market
from .test_dag_runs import SPEED, TRACE_START_HOURS, load_dag

# `make test` runs the suite on two xdist workers; the tests that start Airflow's services or a whole
# cloud end to end share one, so no two of them load the two cores at once.
pytestmark = pytest.mark.xdist_group("services")


@pytest.fixture
def simulated(airflow_db, skynomad_home, gcp_frame, monkeypatch):
    extra = {"cloud": "simulated", "speed": SPEED, "cloud_options": {"trace_start": TRACE_START_HOURS}}
    monkeypatch.setenv("AIRFLOW_CONN_SKYNOMAD_DEFAULT", json.dumps({"conn_type": "skynomad", "extra": extra}))
    start = gcp_frame["observed_at"].min() + pd.Timedelta(hours=TRACE_START_HOURS)
    seed_market(gcp_frame, until=start)
    return SimpleNamespace(home=skynomad_home, trace_start=start)


def test_the_probe_dag_probes_each_zone_once_for_one_instance_and_records_the_cost(simulated, monkeypatch):
    from airflow_provider_skynomad.cli.demo import run_dag_test
    from airflow_provider_skynomad.clouds.base import GroupStatus

    monkeypatch.setenv("SKYNOMAD_COLD_START_HOURS", "0")
    cloud, leftover = _leftover_group("no_such_dag")  # its cleanup task asks Airflow's API about it
    try:
        state, _ = run_dag_test(load_dag("skynomad_probe"))
        assert state == "success"
        # Airflow has no such task instance: that proves nothing, so the group is kept.
        assert cloud.poll(leftover) in (GroupStatus.STARTING, GroupStatus.RUNNING)
    finally:
        cloud.terminate(leftover)
    with MarketTable() as table:
        probed = table.read(since=simulated.trace_start)
        spend = SignalTable(market=table).read_spend()
    # first run: every zone is new to the planner, so each is probed once, for 1 instance (not 16)
    assert sorted(probed["zone"]) == sorted(set(probed["zone"])) and len(probed) == 13
    assert set(probed["requested"]) == {1}
    assert sorted(spend["zone"]) == sorted(probed["zone"])
    assert spend["usd"].sum() < 13 * 8.74 / 60 + 1e-9  # at most a minute of one instance per zone
    assert all("never probed" in reason or "fresh" in reason for reason in spend["reason"])


def _leftover_group(dag_id: str):
    """An on-demand group tagged as a job of a task instance Airflow does not have."""
    import sys

    from airflow_provider_skynomad.clouds.base import LaunchRequest
    from airflow_provider_skynomad.hooks.skynomad import make_cloud
    from airflow_provider_skynomad.jobs.record import job_id_for

    cloud = make_cloud(SkyNomadHook().get_config())
    job = job_id_for(dag_id, "manual__1", "job", -1, "a")
    tags = {"skynomad-job": job, "skynomad-dag": dag_id, "skynomad-run": "manual__1", "skynomad-task": "job"}
    sleeper = (sys.executable, "-c", "import time; time.sleep(120)")
    request = LaunchRequest(
        "gcp", "us-central1", "us-central1-a", "a3-highgpu-1g", 1, False, f"tok-{dag_id}", command=sleeper,
        tags=tags, job_id=job,
    )  # fmt: skip
    return cloud, cloud.launch(request)


def test_skynomad_cleanup_keeps_a_group_whose_task_instance_it_cannot_find(simulated, monkeypatch, capsys):
    """A task instance Airflow does not have (another Airflow's, a deleted run) is unknown, not ended."""
    from airflow_provider_skynomad.cli import main
    from airflow_provider_skynomad.clouds.base import GroupStatus
    from airflow_provider_skynomad.jobs.record import job_id_for

    monkeypatch.setenv("SKYNOMAD_COLD_START_HOURS", "0")
    cloud, handle = _leftover_group("no_such_dag")
    job = job_id_for("no_such_dag", "manual__1", "job", -1, "a")
    try:
        assert main(["cleanup", "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert "would end nothing" in out, out
        assert f"cannot tell whether job {job} ended (Airflow has no task instance no_such_dag/manual__1/job" in out
        assert main(["cleanup"]) == 0
        assert "ended nothing" in capsys.readouterr().out
        assert cloud.poll(handle) in (GroupStatus.STARTING, GroupStatus.RUNNING)
    finally:
        cloud.terminate(handle)
