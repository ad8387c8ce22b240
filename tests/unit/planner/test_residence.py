"""A move's egress is spread over the checkpoint's expected residence in the new market
(SkyNomadPolicy(residence=True)): the remaining work shared among the placements the slack still pays for."""

from __future__ import annotations

import numpy as np
import pytest
from skynomad_synth import flat_egress, make_grid
from test_payback import Stays

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import IDLE, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from airflow_provider_skynomad.planner.safety import spare_slack_hours

TICKS = 240


def checkpoint_market_down():
    """Market a (holds the checkpoint) down at the last tick; market b up. Both spot $1/h, on-demand $10/h;
    moving the 500 GB checkpoint costs $25."""
    a = np.resize(np.array([1] * 20 + [0] * 4), TICKS)
    a[-2], a[-1] = 1, 0
    grid = make_grid(np.stack([a, np.ones(TICKS, dtype=int)], axis=1), spot=[1.0, 1.0], on_demand=[10.0, 10.0])
    return grid, MarketView(grid, TICKS - 1, 1, None, flat_egress(2, 0.05))


def job(deadline_hours: float) -> JobSpec:
    return JobSpec(work_hours=10.0, deadline_hours=deadline_hours, cold_start_hours=0.2, checkpoint_gb=500.0)


STATE = JobState(elapsed_hours=2.0, progress_hours=1.9, checkpoint_market="us-central1-a")


def decide(deadline_hours: float, **params):
    _, view = checkpoint_market_down()
    return SkyNomadPolicy(forecaster=Stays(2.0), **params).decide(job(deadline_hours), STATE, view, 2.0).try_in_order


def test_with_slack_for_few_restarts_the_egress_is_paid_over_several_stays_and_the_job_moves():
    grid, _ = checkpoint_market_down()
    move = Option(grid.keys[1], Mode.SPOT)
    tries = decide(10.6, residence=True)
    assert move in tries and tries.index(move) < tries.index(IDLE)
    assert move not in decide(10.6)  # off: $25 over one 2 h stay is more than the stay gains


def test_with_slack_for_many_restarts_nothing_changes():
    assert decide(20.0, residence=True) == decide(20.0)


@pytest.mark.parametrize("deadline_hours", [10.6, 11.5, 14.0, 20.0])
def test_the_residence_is_the_remaining_work_shared_among_the_placements_left(deadline_hours):
    _, view = checkpoint_market_down()
    policy = SkyNomadPolicy(forecaster=Stays(2.0), residence=True)
    restarts = spare_slack_hours(job(deadline_hours), STATE, view) / 0.2
    assert policy._residence(job(deadline_hours), STATE, view) == pytest.approx(8.1 / (1.0 + restarts))
