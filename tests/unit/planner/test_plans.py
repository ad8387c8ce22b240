"""The lookahead plans: what the rest of the job costs with each market as home, and whether it fits."""

from __future__ import annotations

import numpy as np
import pytest
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.forecasts.renewal import Spells
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.plans import spot_plans

# Market 0: cheap, down an hour every two hours. Market 1: dearer, never down.
SPELLS = Spells(up_hours=np.array([2.0, 1000.0]), down_hours=np.array([1.0, 1.0]))


def _view(spot=(1.0, 2.0), on_demand=10.0):
    grid = make_grid(np.ones((10, 2), bool), list(spot), on_demand)
    return MarketView(grid, 0, 1, None, flat_egress(2, 0.05))


def test_with_slack_the_cheap_flaky_home_wins_and_fits():
    job = JobSpec(work_hours=10.0, deadline_hours=40.0, cold_start_hours=0.2, checkpoint_gb=50)
    plans = spot_plans(job, JobState(), _view(), SPELLS, np.zeros(2))
    assert plans.fits.all()
    assert plans.cost_usd[0] < plans.cost_usd[1]
    # 10 h of work, 5 expected preemptions, each a billed cold start, plus the first launch.
    assert plans.cost_usd[0] == pytest.approx(1.0 * (0.2 + 10.0 + 5 * 0.2))


def test_without_slack_the_flaky_home_does_not_fit_and_pays_on_demand():
    job = JobSpec(work_hours=10.0, deadline_hours=11.0, cold_start_hours=0.2, checkpoint_gb=50)
    plans = spot_plans(job, JobState(), _view(), SPELLS, np.zeros(2))
    assert not plans.fits[0]
    assert plans.cost_usd[0] > plans.cost_usd[1]  # the rest on on-demand costs more than the dearer spot


def test_staying_home_pays_no_egress_or_cold_start_and_moving_pays_both():
    job = JobSpec(work_hours=10.0, deadline_hours=40.0, cold_start_hours=0.2, checkpoint_gb=50)
    state = JobState(1.0, 1.0, Option("us-central1-b", Mode.SPOT), 0.0, 0.0, "us-central1-b")
    spells = Spells(up_hours=np.array([1000.0, 1000.0]), down_hours=np.array([1.0, 1.0]))
    plans = spot_plans(job, state, _view(spot=(2.0, 2.0)), spells, np.zeros(2))
    assert plans.cost_usd[1] == pytest.approx(2.0 * 9.0, rel=1e-2)
    assert plans.cost_usd[0] - plans.cost_usd[1] == pytest.approx(50 * 0.05 + 2.0 * 0.2, rel=1e-2)


def test_a_long_wait_for_the_first_launch_can_make_a_plan_not_fit():
    job = JobSpec(work_hours=10.0, deadline_hours=14.0, cold_start_hours=0.2, checkpoint_gb=50)
    calm = Spells(up_hours=np.array([1000.0, 1000.0]), down_hours=np.array([1.0, 1.0]))
    plans = spot_plans(job, JobState(), _view(), calm, np.array([5.0, 0.0]))
    assert not plans.fits[0] and plans.fits[1]
