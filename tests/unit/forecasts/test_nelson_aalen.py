"""Nelson–Aalen forecaster: the estimate itself, censoring, shrinkage, volatility, bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_skynomad.forecasts import NelsonAalenForecaster, prior_expected_hours

# One character per tick: U = seen usable, D = seen not usable, . = not seen.
TINY = "UUDUUU.UDUUUUD"  # runs: 2 ticks preempted, 3 censored (unseen next), 1 preempted, 4 preempted


def history(*columns: str) -> tuple[np.ndarray, np.ndarray]:
    usable = np.array([[c == "U" for c in col] for col in columns]).T
    seen = np.array([[c != "." for c in col] for col in columns]).T
    return usable, seen


def plain(**params) -> NelsonAalenForecaster:
    """Textbook Nelson–Aalen: no shrinkage, no volatility multiplier, every run counts fully."""
    return NelsonAalenForecaster(
        prior_runs=0.0, prior_events=0.0, max_volatility_ratio=1.0, max_age_hours=6.0, half_life_hours=None, **params
    )


def test_hazard_matches_a_hand_computed_nelson_aalen():
    usable, seen = history(TINY)
    fitted = plain().fit(usable, seen, step_hours=1.0)
    # Age 1: 4 at risk, 1 event. Age 2: 3 at risk (the censored 3-tick run only proves D ≥ 3,
    # so it is at risk at ages 1 and 2), 1 event. Age 3: 1 at risk, none. Age 4: 1 at risk, 1 event.
    np.testing.assert_allclose(fitted.hazard_[0, :5], [0, 1 / 4, 1 / 3, 0, 1])
    np.testing.assert_allclose(fitted.cumulative_hazard_[0, :5], [0, 0.25, 0.25 + 1 / 3, 0.25 + 1 / 3, 1.25 + 1 / 3])
    # E[min(L − a, 2 h) | L > a] = Σ_{j<2} S(a+j)/S(a), S = exp(−H).
    at0 = 1 + math.exp(-0.25)
    at1 = 1 + math.exp(-1 / 3)
    assert fitted.expected_remaining_hours(0.0)[0] == pytest.approx(at0)
    assert fitted.expected_remaining_hours(1.0)[0] == pytest.approx(at1)
    assert fitted.expected_remaining_hours(0.5)[0] == pytest.approx((at0 + at1) / 2)  # linear between ticks


def test_fractional_cap_integrates_the_step_survival():
    usable, seen = history(TINY)
    fitted = plain(cap_hours=1.5).fit(usable, seen, step_hours=1.0)
    assert fitted.expected_remaining_hours(0.0)[0] == pytest.approx(1 + 0.5 * math.exp(-0.25))


def test_censored_runs_lower_the_hazard_compared_with_preemptions():
    usable, seen = history(TINY)
    as_preempted = history(TINY.replace(".", "D"))
    censored = plain().fit(usable, seen, 1.0)
    preempted = plain().fit(*as_preempted, 1.0)
    assert (censored.cumulative_hazard_[0] <= preempted.cumulative_hazard_[0] + 1e-12).all()
    assert censored.cumulative_hazard_[0, 3] < preempted.cumulative_hazard_[0, 3]
    # A run 2 h old: its next hour is where the two readings differ.
    assert censored.expected_remaining_hours(2.0)[0] > preempted.expected_remaining_hours(2.0)[0]


def flapping(ticks: int, up: int, down: int = 1) -> str:
    return ("U" * up + "D" * down) * (ticks // (up + down)) + "U" * (ticks % (up + down))


def test_a_market_never_preempted_predicts_the_cap():
    week = 1008  # 10-minute ticks
    alone = NelsonAalenForecaster().fit(*history("U" * week), step_hours=1 / 6)
    assert alone.expected_remaining_hours(0.0)[0] == pytest.approx(2.0, rel=0.02)
    # Beside volatile markets (which make the pooled hazard high) it still keeps (nearly) the cap.
    mixed = NelsonAalenForecaster().fit(*history("U" * week, flapping(week, 3), flapping(week, 12)), 1 / 6)
    predicted = mixed.expected_remaining_hours(np.zeros(3))
    assert predicted[0] >= 0.95 * 2.0
    assert predicted[1] < predicted[2] < predicted[0]


def test_volatility_multiplier_lowers_predictions_after_a_burst_of_preemptions():
    step = 1 / 6
    calm = flapping(600, 47)  # one preemption every 8 h for 100 h
    burst = calm[:-36] + flapping(36, 3)  # then, in the last 6 h, one every 40 minutes
    usable, seen = history(burst, calm)
    with_volatility = NelsonAalenForecaster().fit(usable, seen, step)
    without = NelsonAalenForecaster(max_volatility_ratio=1.0).fit(usable, seen, step)
    assert with_volatility.volatility_ratio_[0] > 1.5
    # The calm market saw about the one preemption its hazard expects: (1 + 1) / (≈1 + 1) ≈ 1.
    assert with_volatility.volatility_ratio_[1] == pytest.approx(1.0, abs=0.05)
    assert with_volatility.volatility_ratio_[0] <= with_volatility.max_volatility_ratio
    ages = np.array([0.0, 0.0])
    lowered = with_volatility.expected_remaining_hours(ages)
    plain_prediction = without.expected_remaining_hours(ages)
    assert lowered[0] < 0.85 * plain_prediction[0]
    assert lowered[1] == pytest.approx(plain_prediction[1], rel=0.02)


def test_old_runs_count_less_than_recent_ones():
    """Two markets with the same runs in opposite order: the one that calmed down lately lasts longer."""
    step, half = 1 / 6, 300
    flaky, calm = flapping(half, 3), flapping(half, 47)
    usable, seen = history(flaky + calm, calm + flaky)
    weighted = NelsonAalenForecaster(max_volatility_ratio=1.0).fit(usable, seen, step)
    unweighted = NelsonAalenForecaster(max_volatility_ratio=1.0, half_life_hours=None).fit(usable, seen, step)
    calmed, worsened = weighted.expected_remaining_hours(np.zeros(2))
    same = unweighted.expected_remaining_hours(np.zeros(2))
    assert same[0] == pytest.approx(same[1], rel=0.01)  # every run counting fully, the order is invisible
    assert worsened < 0.97 * same[1] and calmed > 1.1 * same[0]


def test_a_market_without_runs_falls_back_to_the_pooled_estimate():
    week = 1008
    usable, seen = history(flapping(week, 3), flapping(week, 30), "." * week)
    fitted = NelsonAalenForecaster().fit(usable, seen, 1 / 6)
    np.testing.assert_allclose(fitted.hazard_[2], fitted.pooled_hazard_)
    predicted = fitted.expected_remaining_hours(np.zeros(3))
    assert predicted[0] < predicted[2] < predicted[1]


def test_no_data_at_all_gives_the_documented_prior():
    step = 1 / 6
    fitted = NelsonAalenForecaster(prior_mean_hours=6.0).fit(np.zeros((50, 2), bool), np.zeros((50, 2), bool), step)
    expected = prior_expected_hours(6.0, 2.0)  # ≈ 1.70 h; the forecaster integrates it per tick
    np.testing.assert_allclose(fitted.expected_remaining_hours(np.zeros(2)), expected, atol=step / 2)


def test_older_ages_past_the_grid_use_the_last_age():
    usable, seen = history(TINY)
    fitted = plain().fit(usable, seen, 1.0)
    assert fitted.expected_remaining_hours(1e6)[0] == pytest.approx(fitted.expected_remaining_hours(6.0)[0])
    assert fitted.expected_remaining_hours(np.inf)[0] == pytest.approx(fitted.expected_remaining_hours(6.0)[0])


@settings(max_examples=60, deadline=None)
@given(
    cells=st.lists(st.sampled_from("UUUD."), min_size=1, max_size=120),
    markets=st.integers(1, 4),
    step=st.sampled_from([0.05, 1 / 6, 0.5, 1.0]),
    age=st.floats(0, 100),
)
def test_predictions_are_finite_and_within_zero_and_cap(cells, markets, step, age):
    columns = ["".join(np.roll(cells, 7 * m)) for m in range(markets)]
    fitted = NelsonAalenForecaster().fit(*history(*columns), step_hours=step)
    predicted = fitted.expected_remaining_hours(np.full(markets, age))
    assert np.isfinite(predicted).all()
    assert (predicted > 0).all() and (predicted <= 2.0 + 1e-9).all()


def test_input_validation_messages():
    usable, seen = history(TINY)
    forecaster = NelsonAalenForecaster()
    with pytest.raises(RuntimeError, match="not fitted"):
        forecaster.expected_remaining_hours([0.0])
    with pytest.raises(ValueError, match=r"seen has shape \(14, 2\) but usable has shape \(14, 1\)"):
        forecaster.fit(usable, np.hstack([seen, seen]), 1.0)
    with pytest.raises(ValueError, match="step_hours must be a positive number of hours, got -1"):
        forecaster.fit(usable, seen, -1.0)
    with pytest.raises(ValueError, match=r"spot_prices has shape \(3, 1\)"):
        forecaster.fit(usable, seen, 1.0, spot_prices=np.ones((3, 1)))
    with pytest.raises(ValueError, match="start_time must be a timestamp"):
        forecaster.fit(usable, seen, 1.0, start_time="not a time")
    forecaster.fit(usable, seen, 1.0)
    with pytest.raises(ValueError, match=r"one age per market \(1\), got shape \(2,\)"):
        forecaster.expected_remaining_hours([0.0, 1.0])
    with pytest.raises(ValueError, match="non-negative hours"):
        forecaster.expected_remaining_hours([-1.0])
    with pytest.raises(ValueError, match="non-negative hours"):
        forecaster.expected_remaining_hours([np.nan])
    with pytest.raises(ValueError, match="cap_hours must be a positive number"):
        NelsonAalenForecaster(cap_hours=0).fit(usable, seen, 1.0)
    with pytest.raises(ValueError, match="max_volatility_ratio must be ≥ 1"):
        NelsonAalenForecaster(max_volatility_ratio=0.5).fit(usable, seen, 1.0)
    with pytest.raises(ValueError, match="prior_runs must be a non-negative number"):
        NelsonAalenForecaster(prior_runs=-1).fit(usable, seen, 1.0)
    with pytest.raises(ValueError, match="half_life_hours must be a positive number"):
        NelsonAalenForecaster(half_life_hours=0).fit(usable, seen, 1.0)


def test_constructor_only_stores_parameters():
    forecaster = NelsonAalenForecaster(cap_hours=-5)  # invalid, but only fit validates (scikit-learn style)
    assert forecaster.cap_hours == -5
    assert not [name for name in vars(forecaster) if name.endswith("_")]
