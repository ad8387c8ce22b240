"""A day of the probe DAG's runs (150 ten-minute rounds, across a UTC midnight) through the probe
operator on the simulated cloud replaying the bundled GCP trace: the spend stays within the daily
budget, the markets jobs use stay fresher than max_market_age, and not every zone is probed every
run. The operator's single runs: tests/unit/operators/test_probe_operator.py."""

from __future__ import annotations

import logging
from datetime import timedelta

import pandas as pd

from airflow_provider_skynomad.clouds.simulated.clock import SteppedClock
from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig, SkyNomadHook
from airflow_provider_skynomad.market.store.signals import SignalTable
from airflow_provider_skynomad.market.store.table import MarketTable
from airflow_provider_skynomad.operators.probe import SkyNomadProbeOperator, plan_probes, probe_targets

SIX_ZONES = ["us-central1-a", "us-west1-a", "europe-west1-c", "europe-west3-c", "asia-southeast1-b", "asia-south2-b"]
MAX_AGE = timedelta(hours=2)
INTERVAL = timedelta(minutes=10)
RUNS = 25 * 6  # 25 hours of 10-minute runs from 12:10 UTC: crosses a UTC midnight


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
