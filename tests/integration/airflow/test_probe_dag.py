"""The probe DAG and its operator: free signals first, launch probes planned within a daily budget,
every probe's cost recorded, markets in use kept fresher than max_market_age; then cleanup."""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import timedelta
from types import SimpleNamespace

import pandas as pd
import pytest

from airflow_provider_skynomad.clouds.base import Signal
from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig, SkyNomadHook
from airflow_provider_skynomad.market.store.signals import SignalTable
from airflow_provider_skynomad.market.store.table import MarketTable
from airflow_provider_skynomad.operators.probe import SkyNomadProbeOperator, plan_probes, probe_targets
from tests.support.fakes import FakeCloud

from .conftest import seed_market
from .test_dag_runs import SPEED, TRACE_START_HOURS, load_dag

# `make test` runs the suite on two xdist workers; the tests that start Airflow's services or a whole
# cloud end to end share one, so no two of them load the two cores at once.
pytestmark = pytest.mark.xdist_group("services")

SIX_ZONES = ["us-central1-a", "us-west1-a", "europe-west1-c", "europe-west3-c", "asia-southeast1-b", "asia-south2-b"]
MAX_AGE = timedelta(hours=2)
INTERVAL = timedelta(minutes=10)
RUNS = 25 * 6  # 25 hours of 10-minute runs from 12:10 UTC: crosses a UTC midnight


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


class SteppedClock:
    """The simulated cloud's clock, moved by the test: a day of 10-minute runs in seconds."""

    def __init__(self, start: pd.Timestamp):
        self.start, self.hours = start, 0.0

    def now_hours(self) -> float:
        return self.hours

    def now(self) -> pd.Timestamp:
        return (self.start + pd.Timedelta(hours=self.hours)).floor("us")


def _simulated_cloud(home, start_hours: float):
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
    from airflow_provider_skynomad.hooks.skynomad import bundled_trace

    cloud = SimulatedCloud(bundled_trace(), home / "cloud", speed=1.0, trace_start=start_hours)
    cloud.clock = SteppedClock(cloud.clock.now() - pd.Timedelta(hours=cloud.clock.now_hours()))
    return cloud


def test_a_day_of_probing_stays_within_budget_and_keeps_used_markets_fresh(skynomad_home, monkeypatch):
    """Jobs on the benchmarks' six GCP zones (one of them asia-south2-b at $8.74/h), $5 a day."""
    budget, job_zones = 5.0, SIX_ZONES
    cloud = _simulated_cloud(skynomad_home, start_hours=60.0)
    monkeypatch.setattr("airflow_provider_skynomad.operators.probe.make_cloud", lambda config: cloud)
    monkeypatch.setattr("airflow_provider_skynomad.probing.round.make_cloud", lambda config: cloud)
    config = SkyNomadConfig.default()
    monkeypatch.setattr(SkyNomadHook, "get_config", lambda self: config)
    targets = probe_targets(config, count=1, job_zones=job_zones)
    used = set(job_zones or [z for t in targets for z in t["zones"]])
    log = logging.getLogger("test")
    worst_age = pd.Timedelta(0)
    with MarketTable() as table:
        for run in range(RUNS):  # 26 hours of 10-minute runs: crosses a UTC midnight
            cloud.clock.hours = run * INTERVAL.total_seconds() / 3600
            now = cloud.now_timestamp()
            if run > 0:  # before this run's probes: how stale may a used market get
                latest = table.read(since=now - pd.Timedelta(hours=6)).groupby("zone")["observed_at"].max()
                worst_age = max(worst_age, max(now - latest.get(z, now - pd.Timedelta(days=1)) for z in used))
            for target in plan_probes(config, targets, budget_usd_per_day=budget, log=log):
                if target["probe_zones"]:  # (a region with nothing planned only stores free signals: none here)
                    op = SkyNomadProbeOperator(task_id=f"probe_{run}_{target['region']}", target=target)
                    op.execute({})
        spend = SignalTable(market=table).read_spend()
    per_day = spend.groupby(spend["probed_at"].dt.floor("D"))["usd"].sum()
    assert len(per_day) == 2 and (per_day <= budget + 1e-9).all(), per_day
    assert worst_age < MAX_AGE, worst_age
    # adaptive, not every zone every run: far below 13 zones × 156 runs
    assert len(spend) < 13 * RUNS / 4
    print(f"budget ${budget}/day: spent {per_day.round(2).to_dict()}, {len(spend)} probes, worst age {worst_age}")


class SignallingCloud(FakeCloud):
    def signals(self, region, zones, instance_type, count):
        now = self.now_timestamp()
        return [Signal(now, "gcp", region, z, instance_type, "placement_score", 3.0, count) for z in zones] + [
            Signal(now, "gcp", region, zones[0], instance_type, "spot_price", 1.5, count)
        ]


def test_free_signals_land_in_the_table_and_price_the_probes(skynomad_home, monkeypatch):
    cloud = SignallingCloud(pd.Timestamp("2025-10-05T12:00:00Z"))
    monkeypatch.setattr("airflow_provider_skynomad.operators.probe.make_cloud", lambda config: cloud)
    monkeypatch.setattr("airflow_provider_skynomad.probing.round.make_cloud", lambda config: cloud)
    target = {"cloud": "gcp", "region": "us-east4", "zones": ["us-east4-a", "us-east4-b"], "instance_type": "t"}
    op = SkyNomadProbeOperator(task_id="probe", target=target, probe_budget_usd_per_day=1.0)
    op.execute({})
    with SignalTable() as records:
        signals = records.read_signals()
        spend = records.read_spend()
    assert sorted(signals["kind"]) == ["placement_score", "placement_score", "spot_price"]
    # us-east4-a is priced by its free spot-price signal before any launch; us-east4-b has no price yet
    assert list(spend["zone"]) == ["us-east4-a"] and cloud.probes == ["us-east4-a"]
    assert spend["usd"].iloc[0] == pytest.approx(2.0 / 60)  # the fake grants 1 at $2/h for a minute


class RacingCloud(SignallingCloud):
    """Answers request probes as EC2 does when the request was cancelled before fulfilment
    (granted, nothing billed), except in `lost`, where EC2 fulfilled it first."""

    lost: tuple[str, ...] = ()

    def probe(self, region, zone, instance_type, count, *, tags=None, kind="launch"):
        result = super().probe(region, zone, instance_type, count, tags=tags, kind=kind)
        if kind != "request":
            return result
        billed = result.available if zone in self.lost else 0
        return dataclasses.replace(result, billed=billed, usd=billed * result.spot_usd_per_hour / 60)


def test_aws_markets_are_probed_by_request_and_the_row_says_so(skynomad_home, monkeypatch):
    cloud = RacingCloud(pd.Timestamp("2025-10-05T12:00:00Z"))
    cloud.lost = ("us-east-1b",)
    monkeypatch.setattr("airflow_provider_skynomad.operators.probe.make_cloud", lambda config: cloud)
    zones = ["us-east-1a", "us-east-1b"]
    target = {"cloud": "aws", "region": "us-east-1", "zones": zones, "instance_type": "t", "spot_usd_per_hour": 2.0}
    SkyNomadProbeOperator(task_id="probe", target=target, probe_budget_usd_per_day=1.0).execute({})
    assert cloud.probe_kinds_asked == ["request", "request"]
    with MarketTable() as table:
        kinds = table.probe_kinds()
        spend = SignalTable(market=table).read_spend()
    assert dict(zip(kinds["zone"], kinds["probe_kind"], strict=True)) == {z: "request" for z in zones}
    # cancelled in time: granted and free; fulfilled first: the minute of what ran
    assert dict(zip(spend["zone"], spend["usd"], strict=True)) == {
        "us-east-1a": 0.0,
        "us-east-1b": pytest.approx(2.0 / 60),
    }


def test_the_operator_setting_overrides_the_kind_and_gcp_probes_by_request(skynomad_home, monkeypatch):
    cloud = RacingCloud(pd.Timestamp("2025-10-05T12:00:00Z"))
    monkeypatch.setattr("airflow_provider_skynomad.operators.probe.make_cloud", lambda config: cloud)
    aws = {"cloud": "aws", "region": "us-east-1", "zones": ["us-east-1a"], "instance_type": "t", "spot_usd_per_hour": 2}
    SkyNomadProbeOperator(task_id="a", target=aws, probe_budget_usd_per_day=1.0, probe_kind="launch").execute({})
    gcp = {"cloud": "gcp", "region": "us-east4", "zones": ["us-east4-a"], "instance_type": "t", "spot_usd_per_hour": 2}
    SkyNomadProbeOperator(task_id="g", target=gcp, probe_budget_usd_per_day=1.0).execute({})
    assert cloud.probe_kinds_asked == ["launch", "request"]
    with pytest.raises(ValueError, match="probe_kind must be"):
        SkyNomadProbeOperator(task_id="r", target=gcp, probe_budget_usd_per_day=1.0, probe_kind="offer").execute({})


def test_a_zero_budget_probes_nothing(skynomad_home, monkeypatch):
    cloud = SignallingCloud(pd.Timestamp("2025-10-05T12:00:00Z"))
    monkeypatch.setattr("airflow_provider_skynomad.operators.probe.make_cloud", lambda config: cloud)
    monkeypatch.setattr("airflow_provider_skynomad.probing.round.make_cloud", lambda config: cloud)
    target = {"cloud": "gcp", "region": "us-east4", "zones": ["us-east4-a"], "instance_type": "t"}
    SkyNomadProbeOperator(task_id="probe", target=target, probe_budget_usd_per_day=0.0).execute({})
    assert cloud.probes == []


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


def test_a_retried_probe_task_does_not_pay_twice_for_its_part_of_the_plan(skynomad_home, monkeypatch):
    cloud = SignallingCloud(pd.Timestamp("2025-10-05T12:00:00Z"))
    monkeypatch.setattr("airflow_provider_skynomad.operators.probe.make_cloud", lambda config: cloud)
    monkeypatch.setattr("airflow_provider_skynomad.probing.round.make_cloud", lambda config: cloud)
    config = SkyNomadConfig.default()
    monkeypatch.setattr(SkyNomadHook, "get_config", lambda self: config)
    target = {"cloud": "gcp", "region": "us-east4", "zones": ["us-east4-a"], "instance_type": "t", "count": 1}
    target["spot_usd_per_hour"] = 1.5  # a price to plan with before any observation
    (planned,) = plan_probes(config, [target], budget_usd_per_day=1.0)
    assert [z["zone"] for z in planned["probe_zones"]] == ["us-east4-a"]
    for _ in range(2):  # the first try, then its retry with the same planned target
        SkyNomadProbeOperator(task_id="probe", target=planned).execute({})
    assert cloud.probes == ["us-east4-a"]


def test_every_task_of_the_probe_dag_retries_a_database_blip():
    """A PostgreSQL restart while `plan_targets` read the market table failed a whole probe run
    (tests/integration/distributed/test_faults.py): every task, not only the probes, retries once."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "example_dags" / "skynomad_probe.py"
    spec = importlib.util.spec_from_file_location("skynomad_probe_for_retries", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert {task.task_id: task.retries for task in module.dag.tasks} == {"plan_targets": 1, "probe": 1, "cleanup": 1}
