"""The probe operator without Airflow's services: free signals first, launch probes planned within a
daily budget, every probe's cost recorded, a retry that does not pay twice; the probe DAG's retries.
A day of probe runs kept within budget with the markets in use fresher than max_market_age:
tests/integration/probing/test_probe_day.py. The whole probe DAG under ``dag.test()`` and
`skynomad cleanup` against Airflow's metadata database: tests/integration/airflow/test_probe_dag.py."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from airflow_provider_skynomad.clouds.base import Signal
from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig, SkyNomadHook
from airflow_provider_skynomad.market.store.signals import SignalTable
from airflow_provider_skynomad.market.store.table import MarketTable
from airflow_provider_skynomad.operators.probe import SkyNomadProbeOperator, plan_probes
from tests.support.fakes import FakeCloud


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


def test_a_probe_task_that_fails_says_at_which_step_and_why_in_its_log_and_its_state(
    skynomad_home, monkeypatch, capsys
):
    from airflow_provider_skynomad.jobs.record import STATUS_KEY

    from .test_operator import FakeStore

    def no_cloud(config):
        raise ConnectionError("the cloud's API refused the credentials")

    monkeypatch.setattr("airflow_provider_skynomad.operators.probe.make_cloud", no_cloud)
    target = {"cloud": "gcp", "region": "us-east4", "zones": ["us-east4-a"], "instance_type": "t"}
    store = FakeStore()
    op = SkyNomadProbeOperator(task_id="probe", target=target, probe_budget_usd_per_day=1.0)
    with pytest.raises(ConnectionError):
        op.execute({"task_state_store": store})
    log = capsys.readouterr().out  # the task's log: the operator's logger writes it
    why = (
        "the probe of gcp/us-east4 failed while setting up the simulated cloud: "
        "ConnectionError: the cloud's API refused the credentials"
    )
    errors = [line for line in log.splitlines() if "[error" in line]
    assert len(errors) == 1 and why in errors[0], log
    assert log.index("SkyNomad probe of gcp/us-east4: reading the 'skynomad_default' connection") < log.index(why)
    assert store.get(STATUS_KEY) == {"state": "failed", "reason": why}
