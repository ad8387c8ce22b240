"""A job's view of its deployment: the other jobs' holdings and claims from the live-status table."""

import pandas as pd
import pytest

from airflow_provider_skynomad.jobs.fleet import believed, planner_rows, with_fleet
from airflow_provider_skynomad.market.grid import Market, MarketGrid
from airflow_provider_skynomad.market.view import MarketView


def _view(available):
    markets = tuple(Market(z, "gcp", "r", z, "a3") for z in ("a", "b"))
    ticks = len(available)
    grid = MarketGrid(
        pd.Timestamp("2025-01-01", tz="UTC"),
        1.0,
        markets,
        pd.DataFrame(available).to_numpy(),
        pd.DataFrame([[1.0, 1.0]] * ticks).to_numpy(),
        pd.DataFrame([[5.0, 5.0]] * ticks).to_numpy(),
    )
    return MarketView(grid, ticks - 1, 4)


def test_live_rows_become_planner_rows_by_zone_and_an_idle_job_waiting_for_spot_is_a_claim():
    live = [
        {"job_id": "x", "market": "a:a3", "zone": "a", "mode": "spot", "instances": 4,
         "launched_at_cloud_hours": 3.0, "slack_hours": 2.0},
        {"job_id": "y", "market": None, "zone": None, "mode": None, "instances": 4,
         "launched_at_cloud_hours": None, "slack_hours": 0.5, "wants": "b"},
        {"job_id": "z", "market": "b", "zone": "b", "mode": "on-demand", "instances": 2,
         "launched_at_cloud_hours": 1.0, "slack_hours": 1.0},
    ]  # fmt: skip
    rows = planner_rows(live, ["a", "b"])
    assert rows[0] == {"job_id": "x", "market": "a", "mode": "spot", "count": 4, "since": 3.0, "slack_hours": 2.0}
    assert rows[1]["mode"] == "waiting" and rows[1]["market"] == "b" and rows[1]["slack_hours"] == 0.5
    assert rows[2]["mode"] == "on-demand"


def test_probed_capacity_after_a_launch_gets_the_groups_holding_back_and_the_fleet_is_attached():
    # The probe DAG saw 12 of 16 in market a after another job's group of 4 launched there at hour 1.
    view = _view([[16, 8], [16, 8], [12, 8], [12, 8]])
    rows = [{"job_id": "x", "market": "a", "mode": "spot", "count": 4, "since": 1.0, "slack_hours": 2.0}]
    now = view.now
    seen = with_fleet(view, rows, "me", None, now_hours=3.0, now=now)
    available, _ = seen.available_history(10.0)
    assert available[:, 0].tolist() == [16, 16, 16, 16]  # ticks after the launch tick: +4
    assert available[:, 1].tolist() == [8, 8, 8, 8]
    assert seen.fleet is not None and seen.fleet.held.tolist() == [4, 0]
    assert view.available_history(10.0)[0][:, 0].tolist() == [16, 16, 12, 12]  # the source view is untouched


def test_a_launch_in_the_views_last_tick_adds_nothing_back():
    view = _view([[16, 8], [16, 8]])
    rows = [{"job_id": "x", "market": "a", "mode": "spot", "count": 4, "since": 1.0, "slack_hours": 2.0}]
    seen = with_fleet(view, rows, "me", None, now_hours=1.0, now=view.now)
    assert seen.available_history(10.0)[0][:, 0].tolist() == [16, 16]


def test_a_row_the_planner_cannot_read_leaves_the_job_planning_alone():
    view = _view([[16, 8], [16, 8]])
    rows = [{"job_id": "x", "market": "a", "mode": "spot", "count": 0, "since": 1.0, "slack_hours": 2.0}]
    assert with_fleet(view, rows, "me", None, now_hours=1.0, now=view.now) is view


@pytest.mark.parametrize("fleet_aware", [True, False])
def test_the_second_job_of_a_deployment_sees_the_first_jobs_gang_where_it_fills_the_zone(started, cloud, fleet_aware):
    """Two jobs of 16 instances: the first takes a zone whose trace shows 16; the second, fleet-aware, does
    not even try it (a job planning alone tries it first and is refused on a real account)."""
    first = started(instances=16, run=1, fleet_aware=fleet_aware)
    taken = first.record().group
    assert taken is not None and taken.spot
    tries_before = len(cloud.launches)
    cloud.full.add(taken.zone)  # the cloud has no spot left there: the first job holds it all
    second = started(instances=16, run=2, fleet_aware=fleet_aware)
    tried = [r.zone for r in cloud.launches[tries_before:] if r.spot]
    assert (taken.zone not in tried) is fleet_aware, tried
    assert second.record().job_id != first.record().job_id


@pytest.mark.parametrize("since", [-1e9, 1e9, float("nan"), float("inf"), -float("inf"), "1.0", True, 5.0])
def test_break_3_a_row_whose_group_launched_at_no_possible_moment_is_left_out_alone(since):
    """One row with an impossible launch time (before any job started, after now, not a number)
    neither raises nor makes the job plan alone: the others still count."""
    view = _view([[16, 8], [16, 8], [12, 8], [12, 8]])
    good = {"job_id": "x", "market": "a", "mode": "spot", "count": 4, "since": 1.0, "slack_hours": 2.0}
    odd = {**good, "job_id": "odd", "market": "b", "since": since}
    seen = with_fleet(view, [good, odd], "me", None, now_hours=3.0, now=view.now)
    assert seen.fleet.held.tolist() == [4, 0]
    assert seen.available_history(10.0)[0][:, 0].tolist() == [16, 16, 16, 16]


def test_break_3_an_unreadable_or_oversized_row_is_left_out_and_the_rest_still_count():
    view = _view([[16, 8], [16, 8]])
    good = {"job_id": "x", "market": "a", "mode": "spot", "count": 4, "since": 1.0, "slack_hours": 2.0}
    rows = [
        good,
        {**good, "job_id": "huge", "count": 10**9},
        {**good, "job_id": "zero", "count": 0},
        {**good, "job_id": "nan-slack", "market": "b", "slack_hours": float("nan")},
        {**good, "market": "b"},  # the same job twice: its first row counts
    ]
    seen = with_fleet(view, rows, "me", None, now_hours=1.5, now=view.now)
    assert seen.fleet.held.tolist() == [4, 0]
    assert believed(rows, now_hours=1.5) == [good]
