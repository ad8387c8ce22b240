"""Learned forecaster: it learns a pattern a constant cannot, never looks ahead, and falls back."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from airflow_provider_skynomad.forecasts import (
    ConstantForecaster,
    LearnedForecaster,
    NelsonAalenForecaster,
    in_progress_samples,
    run_age_ticks,
)
from airflow_provider_skynomad.forecasts.learned import market_features

STEP = 1 / 6
START = pd.Timestamp("2025-10-04T00:00:00Z")


def periodic(ticks: int, up: int, down: int, offset: int = 0) -> np.ndarray:
    return ((np.arange(ticks) + offset) % (up + down)) < up


def synthetic(ticks: int = 1500) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Markets with very different but regular lifetimes: 30 min, 2 h, 5 h and never preempted."""
    usable = np.stack(
        [periodic(ticks, 3, 1), periodic(ticks, 12, 2, 5), periodic(ticks, 30, 3, 11), np.ones(ticks, bool)], axis=1
    )
    prices = np.tile([2.0, 2.2, 2.4, 3.0], (ticks, 1))
    return usable, np.ones_like(usable), prices


def held_out_error(forecaster, usable, seen, prices, first):
    forecaster.fit(usable[:first], seen[:first], STEP, spot_prices=prices[:first], start_time=START)
    truth = in_progress_samples(usable, seen, STEP, forecaster.cap_hours)
    later = truth.tick >= first
    ages = run_age_ticks(usable, seen) * STEP
    errors = []
    for t, m, y in zip(truth.tick[later], truth.market[later], truth.remaining_hours[later], strict=True):
        errors.append(forecaster.expected_remaining_hours(np.maximum(ages[t], 0))[m] - y)
    return np.abs(errors).mean()


def test_learned_model_beats_a_constant_on_a_synthetic_pattern():
    usable, seen, prices = synthetic()
    first = 1000
    learned = held_out_error(LearnedForecaster(), usable, seen, prices, first)
    constant = held_out_error(ConstantForecaster(), usable, seen, prices, first)
    assert learned < 0.5 * constant
    assert learned < 0.2  # hours; the pattern is deterministic


def test_features_at_a_tick_only_use_the_past():
    usable, seen, prices = synthetic(400)
    changed = usable.copy()
    changed[250:] = ~changed[250:]
    args = (STEP, prices, START, 6.0, 72.0, 6.0)
    before, names = market_features(usable, seen, *args)
    after, _ = market_features(changed, seen, *args)
    np.testing.assert_array_equal(before[:250], after[:250])
    assert names[0] == "age_hours" and "hour_sin" in names and "price_vs_recent" in names


def test_hour_and_price_features_need_their_inputs():
    usable, seen, _ = synthetic(400)
    _, names = market_features(usable, seen, STEP, None, None, 6.0, 72.0, 6.0)
    assert "hour_sin" not in names and "price_vs_recent" not in names


def test_fit_is_deterministic_and_bounded():
    usable, seen, prices = synthetic(800)
    one = LearnedForecaster().fit(usable, seen, STEP, prices, START)
    two = LearnedForecaster().fit(usable, seen, STEP, prices, START)
    ages = np.array([0.0, 0.3, 1.0, 30.0])
    np.testing.assert_array_equal(one.expected_remaining_hours(ages), two.expected_remaining_hours(ages))
    predicted = one.expected_remaining_hours(ages)
    assert ((predicted >= 0) & (predicted <= 2.0)).all()
    assert one.model_ is not None and one.feature_names_[0] == "age_hours"


def test_too_little_data_falls_back_to_nelson_aalen():
    usable, seen, prices = synthetic(30)
    learned = LearnedForecaster().fit(usable, seen, STEP, prices, START)
    assert learned.model_ is None and learned.n_samples_ < learned.min_samples
    reference = NelsonAalenForecaster().fit(usable, seen, STEP)
    for age in (0.0, 1.0, 5.0):
        ages = np.full(4, age)
        np.testing.assert_array_equal(learned.expected_remaining_hours(ages), reference.expected_remaining_hours(ages))


def test_feature_selection():
    usable, seen, prices = synthetic(800)
    fitted = LearnedForecaster(features=("preemptions_per_hour",)).fit(usable, seen, STEP, prices, START)
    assert fitted.feature_names_ == ["age_hours", "preemptions_per_hour"]
    with pytest.raises(ValueError, match=r"unknown features \['moon_phase'\]"):
        LearnedForecaster(features=("moon_phase",)).fit(usable, seen, STEP, prices, START)


def test_input_validation_messages():
    usable, seen, prices = synthetic(300)
    with pytest.raises(RuntimeError, match="not fitted"):
        LearnedForecaster().expected_remaining_hours(np.zeros(4))
    with pytest.raises(ValueError, match=r"seen has shape \(300, 3\) but usable has shape \(300, 4\)"):
        LearnedForecaster().fit(usable, seen[:, :3], STEP)
    with pytest.raises(ValueError, match="step_hours must be a positive number of hours, got -0.1"):
        LearnedForecaster().fit(usable, seen, -0.1)
    with pytest.raises(ValueError, match="age_grid_points must be an integer ≥ 2"):
        LearnedForecaster(age_grid_points=1).fit(usable, seen, STEP)
