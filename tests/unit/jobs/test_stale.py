"""The stale-market rule follows the probe DAG's pace (jobs/stale.py, with jobs/probe_schedule.py's
schedule): a punctual probe DAG gives no warning, a late one gives one line, once."""

from __future__ import annotations

import numpy as np
import pandas as pd

from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig
from airflow_provider_skynomad.jobs.stale import StaleGuard
from airflow_provider_skynomad.market.grid import build_grid
from airflow_provider_skynomad.market.view import MarketView
from tests.support.plugin_seed import h100_rows

ZONES = [f"us-central1-{z}" for z in "abcf"] + [f"us-east4-{z}" for z in "abc"] + ["europe-west4-a"]
T0 = pd.Timestamp("2025-10-07T18:00:00Z")


def simulated(speed: float) -> SkyNomadConfig:
    return SkyNomadConfig(market_url="sqlite://", cloud="simulated", speed=speed)


def market_rows(rounds_at_hours: list[float]) -> pd.DataFrame:
    """Probe rounds over every zone at the given hours after T0 (all available)."""
    times = [T0 + pd.Timedelta(hours=h) for h in rounds_at_hours]
    frames = [h100_rows(zone, times, 1, spot_price=2.0 + i * 0.1, on_demand_price=10.0) for i, zone in enumerate(ZONES)]
    return pd.concat(frames, ignore_index=True).sort_values("observed_at", kind="stable", ignore_index=True)


def view_at(frame: pd.DataFrame) -> MarketView:
    """The view at the newest tick (the last observation holds until `now`, as MarketSource shows it)."""
    grid = build_grid(frame, step_hours=1 / 6)
    return MarketView(grid, grid.ticks - 1, 1)


def spot_zones(view: MarketView) -> set[str]:
    available = view._grid.available[view.tick]  # noqa: SLF001
    return {m.zone for m, a in zip(view.markets, available, strict=True) if a > 0 and np.isfinite(a)}


def test_a_punctual_probe_dag_at_300x_gives_no_warning_and_keeps_spot_in_view():
    """Before: 12 warnings 'market data for <zone> is 11 h old (is the skynomad_probe DAG paused?)'
    from each job in the standalone recipe, whose probe DAG ran on time."""
    frame = market_rows([0.0, 5.0])  # rounds every 5 cloud hours: one minute of wall time at 300x
    guard = StaleGuard.for_config(simulated(300.0), environ={})
    now = T0 + pd.Timedelta(hours=9.5)  # the next round is due
    view, warnings = guard.apply(view_at(frame), frame, now, running_key=None)
    assert warnings == []
    assert spot_zones(view) == set(ZONES)


def test_a_late_probe_dag_is_said_once_in_one_line_and_spot_is_not_trusted():
    frame = market_rows([0.0])
    guard = StaleGuard.for_config(simulated(300.0), environ={})
    said = []
    for hours in (10.5, 11.0, 12.0):
        now = T0 + pd.Timedelta(hours=hours)
        view, warnings = guard.apply(view_at(frame), frame, now, running_key=None)
        said += warnings
        assert spot_zones(view) == set()
    (line,) = said
    assert "10 h old in every zone the job may move to" in line and "and 5 more" in line
    assert "every 60 s of wall time = 5 h of the cloud's clock" in line and "paused or failing?" in line
    # Fresh data, then late again: said again, once.
    frame = market_rows([0.0, 12.5])
    for hours in (13.0, 23.0, 24.0):
        now = T0 + pd.Timedelta(hours=hours)
        _, warnings = guard.apply(view_at(frame), frame, now, running_key=None)
        said += warnings
    assert len(said) == 2


def test_one_old_market_is_the_probe_planners_choice_not_a_warning():
    frame = pd.concat([market_rows([0.0]), market_rows([0.0, 4.0]).query("zone != 'europe-west4-a'")])
    guard = StaleGuard.for_config(SkyNomadConfig(market_url="sqlite://", cloud="gcp"), environ={})  # 3 h
    now = T0 + pd.Timedelta(hours=4.5)
    view, warnings = guard.apply(view_at(frame), frame, now, running_key=None)
    assert warnings == []
    assert spot_zones(view) == set(ZONES) - {"europe-west4-a"}  # not trusted for spot, silently


def test_without_a_schedule_the_rule_follows_the_pace_the_probe_dags_rows_show():
    """The runtime may build StaleGuard() with no schedule: rounds 5 h apart are then no warning."""
    frame = market_rows([0.0, 5.0])
    guard = StaleGuard()
    now = T0 + pd.Timedelta(hours=9.5)
    view, warnings = guard.apply(view_at(frame), frame, now, running_key=None)
    assert warnings == [] and spot_zones(view) == set(ZONES)
    now = T0 + pd.Timedelta(hours=15.5)  # two rounds missed
    view, warnings = guard.apply(view_at(frame), frame, now, running_key=None)
    (line,) = warnings
    assert "10 h old in every zone" in line and "its rows are 5 h apart" in line
    assert spot_zones(view) == set()


def test_a_probe_dag_that_ran_once_is_not_late_yet_but_old_data_is_not_trusted_for_spot():
    frame = market_rows([0.0])
    guard = StaleGuard()
    now = T0 + pd.Timedelta(hours=3.5)
    view, warnings = guard.apply(view_at(frame), frame, now, running_key=None)
    assert warnings == [] and spot_zones(view) == set()


def test_a_ten_minute_probe_dag_stopped_six_hours_ago_is_said_once():
    frame = market_rows([h / 6 for h in range(0, 6 * 42)])  # 42 h of 10-minute rounds
    guard = StaleGuard()
    said = []
    for hours in (47.0, 47.5, 48.0):
        now = T0 + pd.Timedelta(hours=hours)
        said += guard.apply(view_at(frame), frame, now, running_key="gcp/us-central1-a/a3-highgpu-1g")[1]
    (line,) = said
    assert "market data is 5 h old in every zone" in line and "its rows are 0.17 h apart" in line


def recipe_rows() -> pd.DataFrame:
    """The standalone recipe at 300x: probe rounds 5 cloud hours apart, the last of which refreshed
    only half the markets (the probe planner skips those not yet due), and a job's own launch row."""
    rounds = [market_rows([0.0, 5.0]), market_rows([10.0]).iloc[:4]]
    own = market_rows([7.1]).iloc[[5]]  # the job's launch in us-east4-b, between two rounds
    return pd.concat([*rounds, own]).sort_values("observed_at", kind="stable", ignore_index=True)


def test_data_the_probe_dags_schedule_keeps_is_trusted_and_what_it_let_age_is_not():
    """Before, in the recipe: "market data is 6 h old in every zone ... has missed its rounds" from a
    job whose probe DAG ran every minute, and the planner shown no spot capacity anywhere else."""
    frame = recipe_rows()
    now = T0 + pd.Timedelta(hours=16.5)  # 6.5 h after the last round (the next one is due)
    guard = StaleGuard.for_config(simulated(300.0), environ={})
    view, warnings = guard.apply(view_at(frame), frame, now, running_key=None)
    assert warnings == []
    # Probed 6.5 h ago, or launched in 9.4 h ago: trusted; last probed 11.5 h ago: no spot shown.
    assert spot_zones(view) == set(ZONES[:4]) | {"us-east4-b"}


def test_a_slow_probe_run_keeps_its_markets_in_view_while_its_rounds_keep_their_pace():
    """A busy box: one probe run 23 cloud hours long, its first zones probed at its start. The rows'
    ages alone would hide every market but the last ones probed; the completed rounds keep them."""
    from airflow_provider_skynomad.market.freshness import CompletedRound

    hours = [23.0 * i / (len(ZONES) - 1) for i in range(len(ZONES))]  # zone i probed at hour hours[i]
    frame = pd.concat([market_rows([h]).iloc[[i]] for i, h in enumerate(hours)], ignore_index=True)
    ended = T0 + pd.Timedelta(hours=23.0)

    def completed(markets, now):
        return [CompletedRound("gcp", z.rsplit("-", 1)[0], z, t, T0.to_pydatetime(), ended) for z, t in markets]

    now = ended + pd.Timedelta(hours=11)  # a job's step 2 min 12 s of wall time later at 300x
    rows_only = StaleGuard(after_hours=10.0, late_after_hours=10.0)
    view, _ = rows_only.apply(view_at(frame), frame, now, running_key=None)
    assert spot_zones(view) == set()  # every row is over 10 h old
    guard = StaleGuard(after_hours=10.0, late_after_hours=10.0, rounds=completed)
    view, warnings = guard.apply(view_at(frame), frame, now, running_key=None)
    assert warnings == [] and spot_zones(view) == set(ZONES)
    # two of the DAG's 23 h paces after its last round, nothing came: hidden, and said
    later = ended + pd.Timedelta(hours=47)
    view, warnings = guard.apply(view_at(frame), frame, later, running_key=None)
    assert spot_zones(view) == set() and len(warnings) == 1
