"""Lifetime forecasts for the planner: which forecaster, and how often to refit it.

Fitting on the whole availability history every step would dominate decision latency,
so the fitted forecaster is reused until the history has grown by `refit_hours`.
"""

from __future__ import annotations

from importlib import import_module

import numpy as np

from ...market.view import MarketView

FORECASTERS = {
    "nelson-aalen": "airflow_provider_skynomad.forecasts.nelson_aalen:NelsonAalenForecaster",
    "learned": "airflow_provider_skynomad.forecasts.learned:LearnedForecaster",
}


class ConstantLifetime:
    """Every spot run is expected to last `hours` more: the no-information prior, and a test double."""

    def __init__(self, hours: float = 2.0):
        self.hours = hours

    def fit(self, usable, seen, step_hours, spot_prices=None, start_time=None) -> "ConstantLifetime":
        self.n_markets_ = usable.shape[1]
        return self

    def expected_remaining_hours(self, ages_hours: np.ndarray) -> np.ndarray:
        return np.full(len(ages_hours), self.hours)


def make_forecaster(spec):
    """A forecaster from a registered name ("nelson-aalen", "learned", "constant") or an instance."""
    if not isinstance(spec, str):
        return spec
    if spec == "constant":
        return ConstantLifetime()
    if spec not in FORECASTERS:
        raise ValueError(f"unknown forecaster {spec!r}; choose one of {sorted([*FORECASTERS, 'constant'])}")
    module, _, cls = FORECASTERS[spec].partition(":")
    return getattr(import_module(module), cls)()


class LifetimeCache:
    """Refits a forecaster on the view's history at most once per `refit_hours` of market time."""

    def __init__(self, forecaster="nelson-aalen", refit_hours: float = 1.0):
        self.spec = forecaster
        self.refit_hours = refit_hours
        self._key = None
        self._fitted = None

    def expected_remaining_hours(self, view: MarketView, ages_hours: np.ndarray) -> np.ndarray:
        bucket = int(view.tick * view.step_hours // self.refit_hours) if self.refit_hours > 0 else view.tick
        key = (view.source_id, view.gang_size, bucket)
        if key != self._key:
            usable, seen = view.usable_history()
            self._fitted = make_forecaster(self.spec).fit(
                usable,
                seen,
                view.step_hours,
                spot_prices=view.price_history(view.tick * view.step_hours + view.step_hours),
                start_time=view.start,
            )
            self._key = key
        return self._fitted.expected_remaining_hours(ages_hours)
