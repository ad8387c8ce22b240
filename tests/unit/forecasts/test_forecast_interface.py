"""What every forecaster shares: the age table, the registry, no look-ahead through a MarketView, speed."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from airflow_provider_skynomad.forecasts import (
    DEFAULT_FORECASTER,
    FORECASTERS,
    AgeTable,
    ConstantForecaster,
    NelsonAalenForecaster,
    history_from_view,
    make_forecaster,
)
from airflow_provider_skynomad.market.grid import Market, MarketGrid
from airflow_provider_skynomad.market.view import MarketView


def test_age_table_interpolates_and_clamps():
    table = AgeTable(np.array([0.0, 1.0, 3.0]), np.array([[0.5, 1.0], [1.5, 2.0], [2.0, 2.0]]))
    np.testing.assert_allclose(table(np.array([0.5, 2.0])), [1.0, 2.0])
    np.testing.assert_allclose(table(np.array([10.0, 0.0])), [2.0, 1.0])
    np.testing.assert_allclose(table(1.0), [1.5, 2.0])  # a scalar age applies to every market
    uniform = AgeTable(np.array([0.0, 0.5, 1.0]), np.array([[0.0], [1.0], [1.5]]))
    np.testing.assert_allclose(uniform(np.array([0.75])), [1.25])


def test_registry():
    assert DEFAULT_FORECASTER in FORECASTERS
    assert isinstance(make_forecaster("nelson-aalen", cap_hours=1.0), NelsonAalenForecaster)
    message = r"unknown forecaster 'oracle'; choose one of \['constant', 'learned', 'nelson-aalen'\]"
    with pytest.raises(ValueError, match=message):
        make_forecaster("oracle")


def test_constant_forecaster_is_the_mean_capped_remaining_life():
    usable = np.array([[True, True, False, True]]).T  # run of 2 (remaining 2, 1 ticks), then a censored 1-tick run
    fitted = ConstantForecaster(cap_hours=5.0).fit(usable, np.ones_like(usable), 1.0)
    np.testing.assert_allclose(fitted.expected_remaining_hours([0.0]), [1.5])


def grid(available: np.ndarray) -> MarketGrid:
    markets = tuple(Market(f"z{i}", "gcp", "r", f"z{i}", "a3") for i in range(available.shape[1]))
    rng = np.random.default_rng(1)
    spot = 2.0 + rng.random(available.shape)
    return MarketGrid(pd.Timestamp("2025-10-04T00:00Z"), 1 / 6, markets, available, spot, spot * 4)


@pytest.mark.parametrize("name", sorted(FORECASTERS))
def test_predictions_never_use_data_after_the_fit_history(name):
    rng = np.random.default_rng(0)
    now = 699
    past = (rng.random((now + 1, 3)) < np.array([0.7, 0.9, 0.97])).astype(int) * 16
    futures = [rng.integers(0, 2, (300, 3)) * 16, np.zeros((300, 3), int), np.full((300, 3), 16)]
    answers = []
    for future in futures:
        view = MarketView(grid(np.vstack([past, future])), tick=now, gang_size=1)
        forecaster = make_forecaster(name).fit(**history_from_view(view))
        answers.append(forecaster.expected_remaining_hours(np.array([0.0, 0.5, 3.0])))
    for other in answers[1:]:
        np.testing.assert_array_equal(answers[0], other)
    # ... and the view hands the forecaster exactly the history up to now.
    kwargs = history_from_view(MarketView(grid(np.vstack([past, futures[0]])), tick=now, gang_size=1))
    assert kwargs["usable"].shape == kwargs["spot_prices"].shape == (now + 1, 3)
    assert kwargs["start_time"] == pd.Timestamp("2025-10-04T00:00Z")


def test_prediction_is_fast_at_200_markets():
    rng = np.random.default_rng(0)
    usable = rng.random((2000, 200)) < 0.9
    forecaster = NelsonAalenForecaster().fit(usable, np.ones_like(usable), 1 / 6)
    ages = rng.uniform(0, 10, 200)
    samples = []
    for _ in range(200):
        started = time.perf_counter()
        forecaster.expected_remaining_hours(ages)
        samples.append(time.perf_counter() - started)
    assert np.median(samples) < 0.5e-3  # requirement: < 2 ms at 200 markets; typical ≈ 20 µs
