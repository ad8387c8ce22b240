"""While slack is thin, a job alone on on-demand leaves it only for a spot stay expected to last
min(THIN_HOP_STAY_HOURS, the rest of the job), and never for a launch its utility ranks below a shorter one
(SkyNomadPolicy(thin_hops=True), the default; E70 in benchmarks/results/planner-experiments.md)."""

from __future__ import annotations

import numpy as np
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.fleet import Fleet
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.skynomad import THIN_HOP_SLACK_HOURS, THIN_HOP_STARTS, SkyNomadPolicy
from airflow_provider_skynomad.planner.safety import spare_slack_hours
from tests.support.forecasters import MarketStays

TICKS = 240
OFF = dict(thin_hops=False)


def view(fleet: bool = False):
    """Three markets up. a: spot $2/h (on-demand runs there), b: spot $1/h, c: spot $3/h; on-demand $10/h."""
    up = np.ones(TICKS, dtype=int)
    grid = make_grid(np.stack([up, up, up], axis=1), spot=[2.0, 1.0, 3.0], on_demand=[10.0, 10.0, 10.0])
    others = Fleet(grid.keys, *[np.zeros(0)] * 5) if fleet else None
    return grid, MarketView(grid, TICKS - 1, 1, None, flat_egress(3, 0.0), fleet=others)


def job(deadline_hours: float) -> JobSpec:
    return JobSpec(work_hours=10.0, deadline_hours=deadline_hours, cold_start_hours=0.2, checkpoint_gb=0.0)


def on_demand(grid, progress_hours: float = 5.0) -> JobState:
    a = grid.keys[0]
    return JobState(
        elapsed_hours=progress_hours + 0.2,
        progress_hours=progress_hours,
        running=Option(a, Mode.ON_DEMAND),
        running_since_hours=1.0,
        checkpoint_market=a,
    )


def spot_tried(deadline_hours: float, stays: list[float], fleet: bool = False, progress_hours: float = 5.0, **params):
    """The spot markets the job tries, in order, before what comes last (on-demand)."""
    grid, v = view(fleet)
    policy = SkyNomadPolicy(forecaster=MarketStays(stays), **params)
    state = on_demand(grid, progress_hours)
    tries = policy.decide(job(deadline_hours), state, v, state.elapsed_hours).try_in_order
    return [o.market for o in tries if o is not None and o.mode is Mode.SPOT]


def test_the_slack_is_thin_at_the_deadline_used_and_not_at_the_other():
    grid, v = view()
    thin = min(THIN_HOP_STARTS * 0.2, THIN_HOP_SLACK_HOURS)
    assert spare_slack_hours(job(11.0), on_demand(grid), v) < thin
    assert spare_slack_hours(job(13.0), on_demand(grid), v) > thin


def test_with_thin_slack_a_short_stay_no_longer_takes_the_job_off_on_demand():
    grid, _ = view()
    b = grid.keys[1]
    assert b in spot_tried(11.0, [1.0, 1.0, 1.0], **OFF)  # every spot market beats on-demand per hour
    assert spot_tried(11.0, [1.0, 1.0, 1.0]) == []
    assert spot_tried(11.0, [1.0, 3.0, 3.0])[0] == b  # long enough: hops as before


def test_no_detour_to_a_long_stay_ranked_below_a_short_one():
    grid, _ = view()
    # b ($1/h) is short, a ($2/h) long but ranked below it: leaving b out alone would send the job to a.
    assert grid.keys[0] in spot_tried(11.0, [3.0, 1.0, 1.0], **OFF)
    assert spot_tried(11.0, [3.0, 1.0, 1.0]) == []


def test_near_the_end_a_stay_that_finishes_the_job_is_enough():
    grid, _ = view()
    # 0.6 h of work left: with the 0.2 h cold start a stay of 0.8 h finishes the job.
    assert spot_tried(11.0, [0.9, 0.9, 0.9], progress_hours=9.4)[0] == grid.keys[1]
    assert spot_tried(11.0, [0.7, 0.7, 0.7], progress_hours=9.4) == []
    assert spot_tried(11.0, [0.7, 0.7, 0.7], progress_hours=9.4, **OFF) != []


def test_with_slack_for_many_restarts_or_in_a_fleet_nothing_changes():
    assert SkyNomadPolicy().thin_hops
    assert spot_tried(13.0, [1.0, 1.0, 1.0]) == spot_tried(13.0, [1.0, 1.0, 1.0], **OFF) != []
    assert spot_tried(11.0, [1.0, 1.0, 1.0], fleet=True) == spot_tried(11.0, [1.0, 1.0, 1.0], fleet=True, **OFF)


def test_with_slack_for_few_slow_starts_but_over_the_hours_cap_nothing_changes():
    # d = 0.5 h: 2.1 h of spare slack pays for fewer than THIN_HOP_STARTS starts but is over THIN_HOP_SLACK_HOURS.
    grid, v = view()
    slow = JobSpec(work_hours=10.0, deadline_hours=13.0, cold_start_hours=0.5, checkpoint_gb=0.0)
    state = on_demand(grid)
    assert THIN_HOP_SLACK_HOURS < spare_slack_hours(slow, state, v) < THIN_HOP_STARTS * 0.5
    on, off = (SkyNomadPolicy(forecaster=MarketStays([1.0] * 3), **p) for p in ({}, OFF))
    assert on.decide(slow, state, v, state.elapsed_hours) == off.decide(slow, state, v, state.elapsed_hours)
    assert on.decide(slow, state, v, state.elapsed_hours).first.mode is Mode.SPOT
