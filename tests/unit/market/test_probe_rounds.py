"""Fresh means fresh: a job's start follows the probe DAG's completed rounds, not the rows' ages on a
cloud clock that a busy box makes run far ahead of Airflow; a refusal names the one thing to do."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from airflow_provider_skynomad.exceptions import MarketInputError
from airflow_provider_skynomad.market.freshness import CompletedRound, rounds_verdict
from airflow_provider_skynomad.market.source import select_markets
from airflow_provider_skynomad.market.store.rounds import KEEP_PER_MARKET, ProbeRoundTable
from airflow_provider_skynomad.market.store.table import MarketTable
from airflow_provider_skynomad.operators.probe import SkyNomadProbeOperator
from tests.support.fakes import FakeCloud

T0 = pd.Timestamp("2025-10-05T12:00:00Z")
ZONES = ["us-east4-a", "us-east4-b", "us-east4-c"]
MAX_AGE = timedelta(hours=10)  # two rounds of a probe DAG every 60 s of wall time at 300x


class SlowBoxCloud(FakeCloud):
    """A simulated cloud beside a busy box: each probe takes many cloud hours of Airflow's time."""

    hours_per_probe = 23.0 / len(ZONES)  # the whole round: 4 min 40 s of wall time at 300x

    def probe(self, region, zone, instance_type, count, *, tags=None, kind="launch"):
        self.hours += self.hours_per_probe
        return super().probe(region, zone, instance_type, count, tags=tags, kind=kind)


def probe_round(cloud, monkeypatch, zones=ZONES, region="us-east4"):
    monkeypatch.setattr("airflow_provider_skynomad.operators.probe.make_cloud", lambda config: cloud)
    target = {"cloud": "gcp", "region": region, "zones": list(zones), "instance_type": "a3-highgpu-1g"}
    plan = [{"zone": z, "reason": "test", "usd": 0.05, "most_usd": 0.05} for z in zones]
    target.update(probe_zones=plan, probe_budget_usd=0.05 * len(zones), planned_at=cloud.now_timestamp().isoformat())
    SkyNomadProbeOperator(task_id="probe", target=target, probe_budget_usd_per_day=10.0).execute({})


def start_check(now, zones=None, trace_end=None):
    with MarketTable() as table:
        return select_markets(
            table,
            now,
            zones=zones,
            regions=None,
            clouds=None,
            instance_types=None,
            accelerator=None,
            lookback_hours=72.0,
            max_market_age=MAX_AGE,
            where="the test's table",
            trace_end=trace_end,
        )


def test_a_job_queued_minutes_after_a_slow_probe_run_is_not_refused(skynomad_home, monkeypatch):
    cloud = SlowBoxCloud(T0)
    probe_round(cloud, monkeypatch)
    ended = cloud.now_timestamp()
    assert ended - T0 == pd.Timedelta(hours=23)  # the run took 23 cloud hours
    # the job reaches its check 2 min 12 s of wall time later: 11 cloud hours at 300x, so even the
    # newest row is over max_market_age
    selection, rows = start_check(ended + pd.Timedelta(hours=11))
    assert selection.zones == ZONES and (ended + pd.Timedelta(hours=11) - rows["newest"].max()) > MAX_AGE
    # two of the DAG's own paces after its last round nothing has come: now it is stale
    with pytest.raises(MarketInputError, match="ended 47.0 h ago .* its rounds come 23 h apart\\): unpause it"):
        start_check(ended + pd.Timedelta(hours=47))


def test_without_the_rounds_the_same_rows_are_refused_by_their_age(skynomad_home, monkeypatch):
    cloud = SlowBoxCloud(T0)
    probe_round(cloud, monkeypatch)
    with ProbeRoundTable() as rounds, rounds.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM probe_rounds")
    with pytest.raises(MarketInputError, match="no probe round has completed yet: unpause and run the skynomad_probe"):
        start_check(cloud.now_timestamp() + pd.Timedelta(hours=11))


def test_past_the_simulated_trace_the_refusal_says_the_trace_ended_and_how_to_start_again(skynomad_home, monkeypatch):
    """The recipe's probe DAG was unpaused, but its runs failed with TraceEndedError (in its own log
    only): "unpause it or see why its runs fail" sent the reader the wrong way."""
    cloud = FakeCloud(T0)
    probe_round(cloud, monkeypatch)
    trace_end = T0 + pd.Timedelta(hours=2)
    now = T0 + pd.Timedelta(hours=40)
    with pytest.raises(MarketInputError) as refused:
        start_check(now, trace_end=trace_end)
    words = str(refused.value)
    assert words.startswith("the market table is stale") and words.endswith("; nothing was launched")
    assert f"past the end of its trace ({trace_end.isoformat()})" in words and "TraceEndedError" in words
    assert "restart the recipe" in words and "trace_start" in words
    assert "unpause" not in words
    # long past it, when no row is left in the job's window at all, the same reason
    with pytest.raises(MarketInputError, match="no market rows in the last 72 h: the simulated cloud's clock"):
        start_check(T0 + pd.Timedelta(hours=100), trace_end=trace_end)
    # before the trace's end the refusal stays the probe DAG's
    with pytest.raises(MarketInputError, match="unpause it or see why its runs fail"):
        start_check(now, trace_end=now + pd.Timedelta(hours=1))


def test_a_simulated_cloud_names_the_end_of_its_trace(tmp_path):
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
    from airflow_provider_skynomad.clouds.wrapped import WrappedCloud
    from airflow_provider_skynomad.hooks.skynomad import bundled_trace

    cloud = SimulatedCloud(bundled_trace(), tmp_path / "cloud", speed=60.0)
    first = cloud.market.grid.start
    assert cloud.trace_end == first + pd.Timedelta(hours=cloud.market.end_hours) > cloud.now_timestamp()
    assert WrappedCloud(cloud).trace_end == cloud.trace_end  # what the job's worker holds
    assert getattr(FakeCloud(T0), "trace_end", None) is None  # a real cloud's trace never ends


def test_a_region_whose_task_fails_is_named(skynomad_home, monkeypatch):
    cloud = FakeCloud(T0)
    probe_round(cloud, monkeypatch)  # us-east4 completes a round at T0 ...
    cloud.hours = 30.0
    probe_round(cloud, monkeypatch, zones=["eu-west1-b"], region="eu-west1")  # ... and later only eu-west1 does
    cloud.probe_fail = set(ZONES)
    with pytest.raises(Exception, match="probes failed"):
        probe_round(cloud, monkeypatch)  # us-east4's task fails: no round recorded
    with pytest.raises(MarketInputError, match="probe task for gcp/us-east4 has not completed one since .*its log"):
        start_check(T0 + pd.Timedelta(hours=31), zones=ZONES)


def test_zones_the_probe_dag_never_probes_are_named(skynomad_home, monkeypatch):
    cloud = FakeCloud(T0)
    probe_round(cloud, monkeypatch)
    with ProbeRoundTable() as rounds, rounds.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM probe_rounds WHERE zone = 'us-east4-c'")
    cloud.hours = 30.0
    probe_round(cloud, monkeypatch, zones=["us-east4-a"])
    with pytest.raises(MarketInputError, match=r"never probes the job's zones \(us-east4-c\): add them"):
        start_check(T0 + pd.Timedelta(hours=31), zones=["us-east4-c"])


def test_the_verdict_follows_the_real_pace_and_never_goes_below_max_market_age():
    def done(planned, ended, zone="z"):
        return CompletedRound("gcp", "r", zone, "t", T0 + pd.Timedelta(hours=planned), T0 + pd.Timedelta(hours=ended))

    quick = [done(0, 0.1), done(5, 5.1)]  # a punctual DAG, 5 h apart
    assert rounds_verdict(quick, T0 + pd.Timedelta(hours=15), 2.0).fresh
    assert not rounds_verdict(quick, T0 + pd.Timedelta(hours=15.2), 2.0).fresh
    assert rounds_verdict([done(0, 0.1)], T0 + pd.Timedelta(hours=1.9), 2.0).fresh  # max_market_age at least
    assert not rounds_verdict([], T0, 2.0).fresh
    # the freshest market decides
    mixed = [done(0, 0.1, "a"), done(0, 20, "b")]
    verdict = rounds_verdict(mixed, T0 + pd.Timedelta(hours=30), 2.0)
    assert verdict.fresh and verdict.last.zone == "b"


def test_a_market_keeps_its_newest_rounds_only_and_a_retry_stamps_once(market_url):
    with ProbeRoundTable(market_url) as rounds:
        stamps = [
            CompletedRound("gcp", "r", "z", "t", T0 + pd.Timedelta(hours=h), T0 + pd.Timedelta(hours=h, minutes=1))
            for h in range(KEEP_PER_MARKET + 3)
        ]
        for stamp in stamps:
            assert rounds.record([stamp]) == 1
        assert rounds.record([stamps[-1]]) == 0
        with rounds.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM probe_rounds").scalar_one() == KEEP_PER_MARKET
        assert rounds.recent(T0 + pd.Timedelta(days=1), [("z", "t")]) == stamps[-2:]
        assert rounds.recent(T0 + pd.Timedelta(days=1), [("z", "other")]) == []
        assert rounds.newest(T0 + pd.Timedelta(days=1)) == stamps[-1]
