"""While slack is thin, a job alone on spot moves only to a market expected to stay at least as long as its
running group (SkyNomadPolicy(thin_moves=True))."""

from __future__ import annotations

import numpy as np
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.fleet import Fleet
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from airflow_provider_skynomad.planner.safety import spare_slack_hours
from tests.support.forecasters import MarketStays

TICKS = 240


def view(fleet: bool = False):
    """Both markets up. a: spot $6/h (the job runs there); b: spot $1/h. On-demand $10/h; a 50 GB move costs $0.5."""
    up = np.ones(TICKS, dtype=int)
    grid = make_grid(np.stack([up, up], axis=1), spot=[6.0, 1.0], on_demand=[10.0, 10.0])
    nobody = np.zeros(0)
    others = Fleet(grid.keys, *[nobody] * 5) if fleet else None
    return grid, MarketView(grid, TICKS - 1, 1, None, flat_egress(2, 0.01), fleet=others)


def job(deadline_hours: float) -> JobSpec:
    return JobSpec(work_hours=10.0, deadline_hours=deadline_hours, cold_start_hours=0.2, checkpoint_gb=50.0)


def on_spot(grid) -> JobState:
    a = grid.keys[0]
    return JobState(
        elapsed_hours=2.0,
        progress_hours=1.9,
        running=Option(a, Mode.SPOT),
        running_since_hours=1.0,
        checkpoint_market=a,
    )


def tries(deadline_hours: float, stays: list[float], fleet: bool = False, **params):
    grid, v = view(fleet)
    policy = SkyNomadPolicy(forecaster=MarketStays(stays), **params)
    return policy.decide(job(deadline_hours), on_spot(grid), v, 2.0).try_in_order


def move():
    grid, _ = view()
    return Option(grid.keys[1], Mode.SPOT)


def test_the_slack_is_thin_at_the_deadline_used_and_not_at_the_other():
    grid, v = view()
    assert spare_slack_hours(job(10.6), on_spot(grid), v) < 3 * 0.2
    assert spare_slack_hours(job(12.0), on_spot(grid), v) > 3 * 0.2


def test_with_thin_slack_the_job_stays_rather_than_move_to_a_cheaper_market_that_ends_sooner():
    assert move() in tries(10.6, [3.5, 1.0], thin_moves=False)  # $5/h cheaper: the per-hour utility moves
    assert move() not in tries(10.6, [3.5, 1.0], thin_moves=True)


def test_a_cheaper_market_expected_to_stay_as_long_is_still_a_move():
    assert move() in tries(10.6, [3.5, 3.5], thin_moves=True)


def test_with_slack_for_many_restarts_nothing_changes():
    assert tries(12.0, [3.5, 1.0], thin_moves=True) == tries(12.0, [3.5, 1.0], thin_moves=False)
    assert move() in tries(12.0, [3.5, 1.0], thin_moves=True)


def test_in_a_fleet_the_rule_leaves_moves_alone():
    assert not SkyNomadPolicy().thin_moves  # off by default: the cost table's GCP 6 zones T/P 1.05 cell rose
    on = tries(10.6, [3.5, 1.0], fleet=True, thin_moves=True)
    assert on == tries(10.6, [3.5, 1.0], fleet=True, thin_moves=False)
