"""Lifetime forecasts: how much longer will a spot group in each market last (docs/planner.md)?

Every forecaster has the same two methods — `fit(usable, seen, step_hours, spot_prices=None,
start_time=None)` and `expected_remaining_hours(ages_hours)` — so the planner can take any of them
by name from `FORECASTERS`. `DEFAULT_FORECASTER` is the one the planner uses unless told otherwise
(see benchmarks/bench_forecasts.py for why).
"""

from airflow_provider_skynomad.forecasts.base import (
    DEFAULT_CAP_HOURS,
    DEFAULT_PRIOR_MEAN_HOURS,
    AgeTable,
    ConstantForecaster,
    LifetimeForecaster,
    history_from_view,
    prior_expected_hours,
)
from airflow_provider_skynomad.forecasts.learned import LearnedForecaster
from airflow_provider_skynomad.forecasts.nelson_aalen import NelsonAalenForecaster
from airflow_provider_skynomad.forecasts.runs import Runs, Samples, extract_runs, in_progress_samples, run_age_ticks

FORECASTERS = {
    "nelson-aalen": NelsonAalenForecaster,
    "learned": LearnedForecaster,
    "constant": ConstantForecaster,
}
DEFAULT_FORECASTER = "nelson-aalen"


def make_forecaster(name: str = DEFAULT_FORECASTER, **params) -> LifetimeForecaster:
    """A forecaster by name, e.g. make_forecaster("learned", cap_hours=2.0)."""
    try:
        cls = FORECASTERS[name]
    except KeyError:
        raise ValueError(f"unknown forecaster {name!r}; choose one of {sorted(FORECASTERS)}") from None
    return cls(**params)


__all__ = [
    "DEFAULT_CAP_HOURS",
    "DEFAULT_FORECASTER",
    "DEFAULT_PRIOR_MEAN_HOURS",
    "FORECASTERS",
    "AgeTable",
    "ConstantForecaster",
    "LearnedForecaster",
    "LifetimeForecaster",
    "NelsonAalenForecaster",
    "Runs",
    "Samples",
    "extract_runs",
    "history_from_view",
    "in_progress_samples",
    "make_forecaster",
    "prior_expected_hours",
    "run_age_ticks",
]
