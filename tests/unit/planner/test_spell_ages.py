"""A new group's stay is forecast at its market's current up-spell age (planner.policies.lifetimes.spell_ages_hours)."""

from __future__ import annotations

import numpy as np
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.lifetimes import spell_ages_hours
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy

STEP = 1 / 6


def test_a_markets_age_is_how_long_it_has_been_up_without_a_break_as_observed():
    available = np.ones((30, 3), dtype=int)
    available[-4, 1] = 0  # b came back three steps ago
    available[-1, 2] = 0  # c is down now
    grid = make_grid(available, spot=1.0, on_demand=10.0)
    ages = spell_ages_hours(MarketView(grid, 29, 1, None, flat_egress(3)))
    assert np.allclose(ages, [29 * STEP, 2 * STEP, 0.0])
    seen = np.ones((30, 3), dtype=bool)
    seen[-6, 0] = False  # a step the job did not observe: the spell is traced back only to it
    assert np.allclose(spell_ages_hours(MarketView(grid, 29, 1, seen, flat_egress(3))), [4 * STEP, 2 * STEP, 0.0])
    gang = spell_ages_hours(MarketView(grid, 29, 2, None, flat_egress(3)))  # one instance is no room for a gang of 2
    assert np.allclose(gang, 0.0)


class AgedStays:
    """A forecaster whose stay grows with age: 0.5 h for a group just launched, 4 h after an hour."""

    cap_hours = 4.0

    def fit(self, usable, seen, step_hours, spot_prices=None, start_time=None):
        return self

    def expected_remaining_hours(self, ages_hours):
        return np.where(np.asarray(ages_hours) >= 1.0, 4.0, 0.5)


def test_a_market_up_for_hours_is_preferred_to_a_slightly_cheaper_one_just_back():
    available = np.ones((60, 2), dtype=int)
    available[-2, 0] = 0  # a, the cheaper, came back this step; b has been up for ten hours
    grid = make_grid(available, spot=[1.0, 1.1], on_demand=10.0)
    view = MarketView(grid, 59, 1, None, flat_egress(2))
    job = JobSpec(work_hours=10.0, deadline_hours=12.0, cold_start_hours=0.2, checkpoint_gb=0.0)
    state = JobState(elapsed_hours=0.0)
    b = Option(grid.keys[1], Mode.SPOT)
    assert SkyNomadPolicy(forecaster=AgedStays(), spell_ages=True).decide(job, state, view, 0.0).first == b
    assert SkyNomadPolicy(forecaster=AgedStays(), spell_ages=False).decide(job, state, view, 0.0).first != b
