"""Learned lifetime forecaster: gradient-boosted trees on market-state features.

Nelson–Aalen only knows a run's age and the market's long-run hazard. Spot capacity also has
moods — a zone that flapped all afternoon, a price that just rose, the hour of day — so this
forecaster regresses the capped remaining lifetime on such features, pooled over all markets
(which is also how a market with no runs of its own gets a prediction: from its features, with
the pooled model).

Training samples are the (tick, market) cells inside runs whose capped remaining life the
history determines (`runs.in_progress_samples`); cells of runs censored before the cap are
dropped rather than guessed. Every feature at tick t uses ticks ≤ t only. At prediction time
the market-state features are those of the last fitted tick and only the age varies, so `fit`
tabulates the model on an age grid per market and `expected_remaining_hours` interpolates.
Between fits that state is frozen, so this forecaster wants frequent refits (the benchmark
shows it losing ground at 6-hour refits and close to Nelson–Aalen at hourly ones).
With fewer than `min_samples` samples the model would be noise; the forecaster then answers
with a Nelson–Aalen fit of the same history (and, with no data at all, its prior).
"""

from __future__ import annotations

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor
from threadpoolctl import ThreadpoolController

from airflow_provider_skynomad.forecasts.base import (
    DEFAULT_CAP_HOURS,
    DEFAULT_PRIOR_MEAN_HOURS,
    AgeTable,
    check_params,
    validate_fit_inputs,
)
from airflow_provider_skynomad.forecasts.nelson_aalen import NelsonAalenForecaster
from airflow_provider_skynomad.forecasts.runs import in_progress_samples, run_age_ticks

_threadpools: ThreadpoolController | None = None


def _thread_limit(n_threads: int | None):
    """Cap OpenMP threads while training: on a busy worker (Airflow, the simulator beside other
    jobs) multi-threaded boosting spins against other processes and a 0.1 s fit can take seconds."""
    global _threadpools
    if _threadpools is None:
        _threadpools = ThreadpoolController()  # ~30 ms once; limit() itself is ~50 µs
    return _threadpools.limit(limits=n_threads, user_api="openmp")


def _trailing_sum(values: np.ndarray, window: int) -> np.ndarray:
    """Sum over the last `window` ticks (inclusive), per market."""
    cumulative = np.cumsum(values, axis=0, dtype=float)
    out = cumulative.copy()
    out[window:] -= cumulative[:-window]
    return out


def market_features(usable, seen, step_hours, spot_prices, start_time, recent_hours, max_age_hours, prior_mean_hours):
    """Feature tensor (ticks × markets × features) and names; column 0 is the run age in hours.

    Features: age; usable share of seen ticks over the last `recent_hours` and 4× that; seen
    preemptions in the last `recent_hours` and 4× that; hours since the last preemption; the market's
    long-run preemption rate per usable hour (shrunk toward 1/prior_mean_hours); and, when given,
    hour of day (sin, cos) and the spot price relative to its recent mean.
    """
    ok = usable & seen
    ticks, markets = ok.shape
    window = max(1, int(round(recent_hours / step_hours)))
    preemption = np.zeros_like(ok)
    preemption[1:] = ok[:-1] & seen[1:] & ~usable[1:]

    age = np.minimum(np.maximum(run_age_ticks(usable, seen), 0) * step_hours, max_age_hours)
    columns = {"age_hours": age}
    for name, span in (("usable_share_recent", window), ("usable_share_long", 4 * window)):
        seen_count = _trailing_sum(seen, span)
        with np.errstate(invalid="ignore", divide="ignore"):
            columns[name] = np.where(seen_count > 0, _trailing_sum(ok, span) / seen_count, np.nan)
    columns["preemptions_recent"] = _trailing_sum(preemption, window)
    columns["preemptions_long"] = _trailing_sum(preemption, 4 * window)
    index = np.arange(ticks)[:, None]
    last = np.maximum.accumulate(np.where(preemption, index, -1), axis=0)
    columns["hours_since_preemption"] = np.where(
        last >= 0, np.minimum((index - last) * step_hours, max_age_hours), max_age_hours
    )
    exposure_hours = np.cumsum(ok, axis=0) * step_hours
    columns["preemptions_per_hour"] = (np.cumsum(preemption, axis=0) + 1.0) / (exposure_hours + prior_mean_hours)
    if start_time is not None:
        hours = start_time.hour + start_time.minute / 60 + np.arange(ticks) * step_hours
        phase = 2 * np.pi * (hours % 24) / 24
        columns["hour_sin"] = np.broadcast_to(np.sin(phase)[:, None], (ticks, markets))
        columns["hour_cos"] = np.broadcast_to(np.cos(phase)[:, None], (ticks, markets))
    if spot_prices is not None:
        prices = np.where(np.isfinite(spot_prices), spot_prices, np.nan)
        filled = np.nan_to_num(prices)
        count = _trailing_sum(np.isfinite(prices), window)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = _trailing_sum(filled, window) / count
            columns["price_vs_recent"] = prices / mean - 1.0
    names = list(columns)
    return np.stack([columns[n] for n in names], axis=-1), names


class LearnedForecaster:
    """HistGradientBoostingRegressor on market-state features, tabulated over age per market.

    :param cap_hours: cap on the predicted remaining lifetime (the training target is capped too).
    :param recent_hours: window of the "recent" features.
    :param max_age_hours: ages past this use the prediction at this age.
    :param prior_mean_hours: exponential prior of the Nelson–Aalen fallback and rate shrinkage.
    :param max_samples: training cells kept (uniform random subsample) to bound fit time.
    :param min_samples: below this many training cells, fall back to Nelson–Aalen.
    :param max_iter: boosting iterations.
    :param max_leaf_nodes: leaves per tree.
    :param learning_rate: boosting learning rate.
    :param age_grid_points: ages tabulated per market (denser at young ages).
    :param random_state: seed of the subsample and the model (fits are deterministic).
    :param n_threads: OpenMP threads for training (None = scikit-learn's default, all cores).
    """

    def __init__(
        self,
        cap_hours: float = DEFAULT_CAP_HOURS,
        recent_hours: float = 6.0,
        max_age_hours: float = 72.0,
        prior_mean_hours: float = DEFAULT_PRIOR_MEAN_HOURS,
        max_samples: int = 20000,
        min_samples: int = 200,
        max_iter: int = 60,
        max_leaf_nodes: int = 15,
        learning_rate: float = 0.1,
        age_grid_points: int = 48,
        random_state: int = 0,
        n_threads: int | None = 1,
        features: tuple[str, ...] | None = None,
    ):
        self.cap_hours = cap_hours
        self.recent_hours = recent_hours
        self.max_age_hours = max_age_hours
        self.prior_mean_hours = prior_mean_hours
        self.max_samples = max_samples
        self.min_samples = min_samples
        self.max_iter = max_iter
        self.max_leaf_nodes = max_leaf_nodes
        self.learning_rate = learning_rate
        self.age_grid_points = age_grid_points
        self.random_state = random_state
        self.n_threads = n_threads
        self.features = features

    def fit(self, usable, seen, step_hours, spot_prices=None, start_time=None) -> LearnedForecaster:
        """Train on every run cell of the history with a known capped remaining life."""
        check_params(
            self.cap_hours,
            recent_hours=self.recent_hours,
            max_age_hours=self.max_age_hours,
            prior_mean_hours=self.prior_mean_hours,
            max_samples=self.max_samples,
            learning_rate=self.learning_rate,
        )
        if not (isinstance(self.age_grid_points, int) and self.age_grid_points >= 2):
            raise ValueError(f"age_grid_points must be an integer ≥ 2, got {self.age_grid_points!r}")
        usable, seen, step, prices, start = validate_fit_inputs(usable, seen, step_hours, spot_prices, start_time)
        markets = usable.shape[1]
        self.step_hours_ = step
        self.n_markets_ = markets
        ages = self.max_age_hours * np.linspace(0.0, 1.0, self.age_grid_points) ** 2

        samples = in_progress_samples(usable, seen, step, self.cap_hours)
        self.n_samples_ = int(samples.tick.size)
        if self.n_samples_ < self.min_samples:
            self.model_ = None
            self.fallback_ = NelsonAalenForecaster(
                cap_hours=self.cap_hours,
                recent_hours=self.recent_hours,
                prior_mean_hours=self.prior_mean_hours,
                max_age_hours=self.max_age_hours,
            ).fit(usable, seen, step)
            self.feature_names_ = []
            self.table_ = self.fallback_.table_
            return self

        features, names = market_features(
            usable, seen, step, prices, start, self.recent_hours, self.max_age_hours, self.prior_mean_hours
        )
        if self.features is not None:
            unknown = sorted(set(self.features) - set(names))
            if unknown:
                raise ValueError(f"unknown features {unknown}; available with these inputs: {names}")
            chosen = [0] + [names.index(n) for n in self.features if n != "age_hours"]
            features, names = features[..., chosen], [names[i] for i in chosen]
        rng = np.random.default_rng(self.random_state)
        keep = np.arange(self.n_samples_)
        if keep.size > self.max_samples:
            keep = np.sort(rng.choice(keep, size=self.max_samples, replace=False))
        x = features[samples.tick[keep], samples.market[keep]]
        y = samples.remaining_hours[keep]
        self.model_ = HistGradientBoostingRegressor(
            max_iter=self.max_iter,
            max_leaf_nodes=self.max_leaf_nodes,
            learning_rate=self.learning_rate,
            early_stopping=False,
            random_state=self.random_state,
        )
        with _thread_limit(self.n_threads):
            self.model_.fit(x, y)
        self.fallback_ = None
        self.feature_names_ = names

        # Today's state of every market, with the age swept over the grid.
        state = np.repeat(features[-1][None, :, :], ages.size, axis=0)  # grid × markets × features
        state[:, :, 0] = ages[:, None]
        with _thread_limit(self.n_threads):
            predicted = self.model_.predict(state.reshape(-1, len(names))).reshape(ages.size, markets)
        self.table_ = AgeTable(ages, np.clip(predicted, 0.0, self.cap_hours))
        return self

    def expected_remaining_hours(self, ages_hours) -> np.ndarray:
        """Per market (column order of the fit history): capped expected remaining lifetime."""
        if not hasattr(self, "table_"):
            raise RuntimeError("LearnedForecaster is not fitted; call fit(usable, seen, step_hours) first")
        return self.table_(ages_hours)
