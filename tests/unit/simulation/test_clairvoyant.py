"""Clairvoyant lifetimes: the true remaining run read off the trace, reached through the planner's own cache."""

from __future__ import annotations

import numpy as np
import pytest
from skynomad_synth import flat_egress, make_grid

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.policies.lifetimes import LifetimeCache
from airflow_provider_skynomad.simulation.clairvoyant import ClairvoyantForecaster, remaining_run_hours


def test_remaining_run_counts_this_run_or_the_next():
    usable = np.array([[1, 0], [1, 0], [0, 1], [0, 0], [1, 1]], dtype=bool)
    # market 0: a 2-tick run, a gap, a 1-tick run; market 1: runs of 1 tick at ticks 2 and 4.
    expected = np.array([[2, 1], [1, 1], [1, 1], [1, 1], [1, 1]]) * 0.5
    assert np.array_equal(remaining_run_hours(usable, 0.5), expected)


def test_no_next_run_means_zero():
    assert np.array_equal(remaining_run_hours(np.array([[1], [0], [0]], dtype=bool), 1.0), [[1.0], [0.0], [0.0]])


def test_planner_cache_sees_the_true_remaining_run_at_every_tick():
    available = np.array([[1, 0]] * 5 + [[0, 1]] * 7 + [[1, 1]] * 4, dtype=bool)
    grid = make_grid(available, 2.0, 10.0)
    truth = remaining_run_hours(grid.usable(1), grid.step_hours)
    clairvoyant = ClairvoyantForecaster(grid.usable(1), grid.step_hours, cap_hours=1.0)
    cache = LifetimeCache(clairvoyant, refit_hours=0)  # refit every step
    for tick in range(grid.ticks):
        view = MarketView(grid, tick, 1, egress_usd_per_gb=flat_egress(2))
        got = cache.expected_remaining_hours(view, np.zeros(2))
        assert np.allclose(got, np.minimum(truth[tick], 1.0)), tick
    first = cache.expected_remaining_hours(MarketView(grid, 0, 1, egress_usd_per_gb=flat_egress(2)), np.zeros(2))
    # market 0 is up for 5 steps; market 1, down now, comes back for 7 steps (70 min), capped at 1 h
    assert first[0] == pytest.approx(5 * grid.step_hours) and first[1] == pytest.approx(1.0)


def test_history_from_another_trace_is_refused():
    forecaster = ClairvoyantForecaster(np.ones((4, 2), dtype=bool), 0.5)
    with pytest.raises(ValueError, match="not from the trace"):
        forecaster.fit(np.ones((3, 3), dtype=bool), np.ones((3, 3), dtype=bool), 0.5)
