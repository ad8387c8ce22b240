"""Lifetime forecasts for the planner: which forecaster, and how often to refit it.

Fitting on the whole availability history every step would dominate decision latency,
so the fitted forecaster is reused until the history has grown by `refit_hours`. A view whose
history is named by content (`MarketView.source_key`, as the Airflow runtime's market source
gives) shares its fit with every policy object in the process: the triggerer builds a new
policy per deferral and a new view per poll, and must still fit once per refit interval.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from airflow_provider_skynomad.forecasts import make_forecaster
from airflow_provider_skynomad.forecasts.renewal import Spells, spell_means
from airflow_provider_skynomad.market.view import MarketView

_SHARED: OrderedDict = OrderedDict()  # (forecaster spec, cap, source key, gang, bucket) -> fitted
_SHARED_SIZE = 256
FITS = {"count": 0}  # forecaster fits in this process (tests and benchmarks read it)


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
            shared = (repr(self.spec), self.cap_hours, *key) if view.source_key is not None else None
            fitted = _SHARED.get(shared) if shared is not None else None
            if fitted is None:
                fitted = self._fit(view)
                if shared is not None:
                    _SHARED[shared] = fitted
                    while len(_SHARED) > _SHARED_SIZE:
                        _SHARED.popitem(last=False)
            self._fitted, self._key = fitted, key
        return self._fitted.expected_remaining_hours(ages_hours)

    def _fit(self, view: MarketView):
        FITS["count"] += 1
        usable, seen = view.usable_history()
        return self._new().fit(
            usable,
            seen,
            view.step_hours,
            spot_prices=view.price_history((view.tick + 1) * view.step_hours),
            start_time=view.start,
        )

    def frozen(self, view: MarketView) -> _Frozen:
        """This view's fit and spells, answered for every later view: a rollout on a sampled future plans with them.

        Refitting inside each of K rollouts would cost K × the fits of the real run and learn
        only from rows the sampler made up.
        """
        spells = self.spells(view)
        self.expected_remaining_hours(view, np.zeros(len(view.keys)))
        return _Frozen(self._fitted, spells, self.cap_hours)


class _Frozen:
    """A `LifetimeCache` that never refits (see `LifetimeCache.frozen`)."""

    def __init__(self, fitted, spells: Spells, cap_hours: float | None):
        self._fitted = fitted
        self._spells = spells
        self.cap_hours = cap_hours

    def spells(self, view: MarketView) -> Spells:
        return self._spells

    def expected_remaining_hours(self, view: MarketView, ages_hours: np.ndarray) -> np.ndarray:
        return self._fitted.expected_remaining_hours(ages_hours)
