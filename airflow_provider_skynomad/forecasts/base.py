"""What every lifetime forecaster shares: the interface, input checks, the age table, a baseline.

The planner asks "how much longer will a spot group here last, capped at `cap_hours`?" for every
market at every decision step, so answering must cost microseconds. Forecasters therefore do all
their work in `fit` and leave an `AgeTable` (expected capped remaining life on an age grid, per
market); `expected_remaining_hours` is one vectorised interpolation.

With no data at all every forecaster falls back to the same documented prior: an exponential
lifetime with mean `prior_mean_hours` (default 6 h, between the volatile and calm zones of the
shared traces), whose capped expectation is `m·(1 − exp(−cap/m))` (≈ 1.70 h for m = 6, cap = 2;
forecasters that work per tick integrate it per tick, within half a tick of that).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import pandas as pd

from airflow_provider_skynomad.forecasts.runs import in_progress_samples, validate_history

DEFAULT_CAP_HOURS = 2.0  # the artifact's cap on predicted lifetimes
DEFAULT_PRIOR_MEAN_HOURS = 6.0
# Markets change regime within a week: evidence this many hours old counts half as much as today's.
REGIME_HALF_LIFE_HOURS = 24.0


def recency_weights(age_hours, half_life_hours: float | None = REGIME_HALF_LIFE_HOURS) -> np.ndarray:
    """0.5^(age ÷ half-life): what evidence this old counts for (None: everything counts fully).

    One formula for every estimate that fades old evidence (Nelson–Aalen runs, renewal spells),
    so they forget at the same pace.
    """
    age_hours = np.asarray(age_hours, dtype=float)
    if half_life_hours is None:
        return np.ones_like(age_hours)
    return 0.5 ** (age_hours / half_life_hours)


class LifetimeForecaster(Protocol):
    """Interchangeable forecasters: the planner only uses these two methods."""

    cap_hours: float

    def fit(self, usable, seen, step_hours, spot_prices=None, start_time=None) -> LifetimeForecaster:
        """Learn from a (ticks × markets) history that ends at the current tick."""
        ...

    def expected_remaining_hours(self, ages_hours) -> np.ndarray:
        """Per market: E[min(L − a, cap) | L > a] for a run `a` hours old (a = 0: launching now)."""
        ...


def prior_expected_hours(prior_mean_hours: float, cap_hours: float) -> float:
    """Capped expectation of the exponential prior: ∫₀^cap exp(−u/m) du."""
    return float(prior_mean_hours * (1.0 - np.exp(-cap_hours / prior_mean_hours)))


def check_params(cap_hours: float, **positive: float) -> None:
    """Parameter checks shared by forecasters (run in fit, as scikit-learn does)."""
    for name, value in {"cap_hours": cap_hours, **positive}.items():
        if not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}")


def validate_fit_inputs(usable, seen, step_hours, spot_prices=None, start_time=None):
    """Validate fit's arguments at the boundary; returns typed copies."""
    usable, seen, step_hours = validate_history(usable, seen, step_hours)
    if spot_prices is not None:
        spot_prices = np.asarray(spot_prices, dtype=float)
        if spot_prices.shape != usable.shape:
            raise ValueError(
                f"spot_prices has shape {spot_prices.shape} but usable has shape {usable.shape}; "
                "pass one price per (tick, market) or None"
            )
    if start_time is not None:
        try:
            start_time = pd.Timestamp(start_time)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"start_time must be a timestamp of tick 0, got {start_time!r}") from exc
        if start_time.tzinfo is None:
            start_time = start_time.tz_localize("UTC")
    return usable, seen, step_hours, spot_prices, start_time


class AgeTable:
    """Expected capped remaining life per market on a shared, increasing age grid (hours).

    Ages between grid points interpolate linearly; ages past the grid use its last point (the
    hazard far out is estimated from too few runs to say more).
    """

    def __init__(self, ages_hours: np.ndarray, values_hours: np.ndarray):
        self.ages_hours = np.asarray(ages_hours, dtype=float)
        self.values_hours = np.asarray(values_hours, dtype=float)  # (grid × markets)
        if self.ages_hours.ndim != 1 or self.ages_hours.shape[0] < 2:
            raise ValueError("age grid needs at least two points")
        if self.values_hours.shape[0] != self.ages_hours.shape[0]:
            raise ValueError("age table rows must match the age grid")
        self._columns = np.arange(self.values_hours.shape[1])
        self._last = self.ages_hours.shape[0] - 2
        self._uniform_step = None
        spacing = np.diff(self.ages_hours)
        if np.allclose(spacing, spacing[0]):
            self._uniform_step = float(spacing[0])

    @property
    def n_markets(self) -> int:
        return self.values_hours.shape[1]

    def __call__(self, ages_hours) -> np.ndarray:
        ages = np.asarray(ages_hours, dtype=float)
        if ages.ndim == 0:
            ages = np.full(self.n_markets, float(ages))
        elif ages.shape != (self.n_markets,):
            raise ValueError(f"ages_hours must have one age per market ({self.n_markets}), got shape {ages.shape}")
        if not (ages >= 0).all():  # also catches NaN
            raise ValueError(f"ages_hours must be non-negative hours, got {ages}")
        ages = np.minimum(ages, self.ages_hours[-1])
        if self._uniform_step is not None:
            x = (ages - self.ages_hours[0]) / self._uniform_step
            i = np.minimum(x.astype(np.int64), self._last)
        else:
            i = np.clip(np.searchsorted(self.ages_hours, ages, side="right") - 1, 0, self._last)
            x = i + (ages - self.ages_hours[i]) / (self.ages_hours[i + 1] - self.ages_hours[i])
        w = np.minimum(x - i, 1.0)
        v = self.values_hours
        c = self._columns
        return v[i, c] * (1.0 - w) + v[i + 1, c] * w


class ConstantForecaster:
    """Naive baseline: the mean capped remaining life of every run cell in the history, everywhere.

    :param cap_hours: cap on predicted remaining lifetime.
    :param prior_mean_hours: exponential prior used when the history holds no usable sample.
    """

    def __init__(self, cap_hours: float = DEFAULT_CAP_HOURS, prior_mean_hours: float = DEFAULT_PRIOR_MEAN_HOURS):
        self.cap_hours = cap_hours
        self.prior_mean_hours = prior_mean_hours

    def fit(self, usable, seen, step_hours, spot_prices=None, start_time=None) -> ConstantForecaster:
        check_params(self.cap_hours, prior_mean_hours=self.prior_mean_hours)
        usable, seen, step_hours, _, _ = validate_fit_inputs(usable, seen, step_hours, spot_prices, start_time)
        samples = in_progress_samples(usable, seen, step_hours, self.cap_hours)
        if samples.remaining_hours.size:
            self.mean_hours_ = float(samples.remaining_hours.mean())
        else:
            self.mean_hours_ = prior_expected_hours(self.prior_mean_hours, self.cap_hours)
        self.n_markets_ = usable.shape[1]
        self.step_hours_ = step_hours
        return self

    def expected_remaining_hours(self, ages_hours) -> np.ndarray:
        ages = np.asarray(ages_hours, dtype=float)
        if ages.ndim and ages.shape != (self.n_markets_,):
            raise ValueError(f"ages_hours must have one age per market ({self.n_markets_}), got shape {ages.shape}")
        return np.full(self.n_markets_, self.mean_hours_)


def history_from_view(view) -> dict:
    """fit() keyword arguments from a MarketView: everything up to its tick, nothing after."""
    usable, seen = view.usable_history()
    ticks = usable.shape[0]
    prices = view.price_history(hours=ticks * view.step_hours)
    start = view.now - pd.Timedelta(hours=(ticks - 1) * view.step_hours)
    return {
        "usable": usable,
        "seen": seen,
        "step_hours": view.step_hours,
        "spot_prices": prices,
        "start_time": start,
    }
