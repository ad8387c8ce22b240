"""Lifetime forecasts for the planner: which forecaster, and how often to refit it.

Fitting on the whole availability history every step would dominate decision latency,
so the fitted forecaster is reused until the history has grown by `refit_hours`.
"""

from __future__ import annotations

import numpy as np

from ...forecasts import make_forecaster
from ...forecasts.renewal import Spells, spell_means
from ...market.view import MarketView


class LifetimeCache:
    """Refits a forecaster on the view's history at most once per `refit_hours` of market time.

    :param forecaster: a name from `forecasts.FORECASTERS`, or a forecaster instance (cloned per fit).
    :param cap_hours: passed to a named forecaster: the longest stay the planner plans with.
    """

    def __init__(self, forecaster="nelson-aalen", refit_hours: float = 1.0, cap_hours: float | None = None):
        self.spec = forecaster
        self.refit_hours = refit_hours
        self.cap_hours = cap_hours
        self._key = None
        self._fitted = None
        self._spells_key = None
        self._spells = None

    def _new(self):
        if isinstance(self.spec, str):
            params = {} if self.cap_hours is None else {"cap_hours": self.cap_hours}
            return make_forecaster(self.spec, **params)
        from sklearn.base import clone

        return clone(self.spec, safe=False)

    def _bucket(self, view: MarketView) -> tuple:
        bucket = int(view.tick * view.step_hours // self.refit_hours) if self.refit_hours > 0 else view.tick
        return (view.source_id, view.gang_size, bucket)

    def spells(self, view: MarketView) -> Spells:
        """Mean up/down spell per market (forecasts.renewal), refitted as often as the forecaster."""
        key = self._bucket(view)
        if key != self._spells_key:
            self._spells = spell_means(*view.usable_history(), view.step_hours)
            self._spells_key = key
        return self._spells

    def expected_remaining_hours(self, view: MarketView, ages_hours: np.ndarray) -> np.ndarray:
        key = self._bucket(view)
        if key != self._key:
            usable, seen = view.usable_history()
            self._fitted = self._new().fit(
                usable,
                seen,
                view.step_hours,
                spot_prices=view.price_history((view.tick + 1) * view.step_hours),
                start_time=view.start,
            )
            self._key = key
        return self._fitted.expected_remaining_hours(ages_hours)
