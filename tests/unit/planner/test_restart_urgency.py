"""With restart_urgency, while slack is thin a job alone expects the rest of its work to need a cold start per
longest credited stay: the urgency of V no longer reads 'plenty of slack' after one long stay."""

from __future__ import annotations

import numpy as np
import pytest
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.fleet import Fleet
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from airflow_provider_skynomad.planner.progress import slack_urgency
from tests.support.forecasters import Stays

TICKS = 240


def view(fleet: bool = False) -> MarketView:
    up = np.ones(TICKS, dtype=int)
    grid = make_grid(np.stack([up, up], axis=1), spot=[1.0, 1.0], on_demand=[10.0, 10.0])
    others = Fleet(grid.keys, *[np.zeros(0)] * 5) if fleet else None
    return MarketView(grid, TICKS - 1, 1, None, flat_egress(2, 0.05), fleet=others)


JOB = JobSpec(work_hours=50.0, deadline_hours=52.5, cold_start_hours=0.5, checkpoint_gb=500.0)
AFTER_A_LONG_STAY = JobState(elapsed_hours=28.2, progress_hours=27.7, checkpoint_market="us-central1-a")  # slack 1.5 h
EARLY = JobState(elapsed_hours=0.5, progress_hours=0.3)  # slack 1.8 h, but 2.3 h of spare slack is not thin


def urgency(state: JobState, fleet: bool = False, **params) -> float:
    return SkyNomadPolicy(forecaster=Stays(2.0), **params)._urgency(JOB, state, view(fleet))


def test_after_a_long_stay_the_learnt_urgency_is_small_and_the_restarts_left_raise_it():
    plain = slack_urgency(JOB, AFTER_A_LONG_STAY)
    assert plain < 0.2
    assert urgency(AFTER_A_LONG_STAY, restart_urgency=False) == plain
    # the rest (22.3 h) needs 0.5 h per 4 h stay: 2.8 h of cold starts against 1.5 h of slack
    assert urgency(AFTER_A_LONG_STAY, restart_urgency=True) == pytest.approx(1.0)


def test_the_value_of_progress_rises_to_the_barrier_and_waiting_stops_paying():
    job_view = view()
    on = SkyNomadPolicy(forecaster=Stays(2.0), restart_urgency=True)
    off = SkyNomadPolicy(forecaster=Stays(2.0), restart_urgency=False)
    assert on.weigh(JOB, AFTER_A_LONG_STAY, job_view)[1] > off.weigh(JOB, AFTER_A_LONG_STAY, job_view)[1]


@pytest.mark.parametrize("fleet", [False, True])
def test_unchanged_where_slack_is_not_thin_or_in_a_fleet(fleet):
    assert urgency(EARLY, fleet, restart_urgency=True) == slack_urgency(JOB, EARLY)
    if fleet:
        assert urgency(AFTER_A_LONG_STAY, fleet, restart_urgency=True) == slack_urgency(JOB, AFTER_A_LONG_STAY)
