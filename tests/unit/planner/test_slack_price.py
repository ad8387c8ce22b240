"""An idle job prices the slack its wait burns (SkyNomadPolicy._slack_price): a move that pays egress once is
weighed fairly against waiting for the market that holds the checkpoint."""

from __future__ import annotations

import numpy as np
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import IDLE, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from tests.support.forecasters import Stays

TICKS = 240


def checkpoint_market_just_lost():
    """Market a (holds the checkpoint) up 20 ticks, down 4, and down at the last tick; market b always up. Both
    spot $1/h, on-demand $10/h; moving the 500 GB checkpoint costs $25."""
    a = np.resize(np.array([1] * 20 + [0] * 4), TICKS)
    a[-2], a[-1] = 1, 0
    grid = make_grid(np.stack([a, np.ones(TICKS, dtype=int)], axis=1), spot=[1.0, 1.0], on_demand=[10.0, 10.0])
    return grid, MarketView(grid, TICKS - 1, 1, None, flat_egress(2, 0.05))


def decide(deadline_hours: float, **params):
    grid, view = checkpoint_market_just_lost()
    job = JobSpec(work_hours=10.0, deadline_hours=deadline_hours, cold_start_hours=0.2, checkpoint_gb=500.0)
    state = JobState(elapsed_hours=2.0, progress_hours=1.9, checkpoint_market=grid.keys[0])
    tries = SkyNomadPolicy(forecaster=Stays(2.0), **params).decide(job, state, view, 2.0).try_in_order
    return grid, tries


def test_with_thin_slack_an_idle_job_moves_rather_than_waits_and_without_the_price_it_waits():
    grid, tries = decide(10.6, slack_price=True)
    move = Option(grid.keys[1], Mode.SPOT)
    assert move in tries and tries.index(move) < tries.index(IDLE)  # the wait's slack costs more than the egress
    _, unpriced = decide(10.6, residence=False)  # the default: off (and the residence would admit the move too)
    assert move not in unpriced  # its U alone (egress over a 2 h stay) is below waiting's 0


def test_with_slack_to_spare_the_wait_costs_little_and_the_job_still_waits():
    grid, tries = decide(20.0, slack_price=True)
    assert Option(grid.keys[1], Mode.SPOT) not in tries
