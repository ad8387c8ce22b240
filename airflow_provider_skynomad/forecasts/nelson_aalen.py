"""Nelson–Aalen lifetime forecaster: the survival estimate SkyNomad's planner was designed around.

Lifetimes are counted in ticks: a run of D ticks was usable D ticks and, if preempted, seen
unusable on tick D. A preempted run is at risk at ages 1..D and has its event at D; a censored run
of d ticks only proves D ≥ d, so it is at risk at ages 1..d−1 and has no event. The discrete
Nelson–Aalen hazard at age k is then events(k) / at_risk(k), and S(k) = exp(−H(k)).

Few markets have enough runs for a hazard of their own at every age, so each is shrunk toward
the pooled all-market hazard, rescaled to the market's own level (empirical Bayes, proportional
hazards):

    θ_m   = (events_m + prior_events) / (expected_m + prior_events)      expected under pooled hazard
    h_m(k) = (d_m(k) + prior_runs·θ_m·h_pool(k)) / (n_m(k) + prior_runs)

so a market with many runs keeps its own shape, a market that survived long without preemption
gets a low level even from a single run, and a market never seen gets the pooled hazard. The
pooled hazard is itself shrunk toward the exponential prior of `base` where it has few runs.

Recency: every run is weighted by 0.5^(hours since it ended ÷ `half_life_hours`), in the
counts above and in the level θ_m. Markets change regime within a week: a zone that has run
the job calmly for the last day should not be judged by its flaky week before (with equal
weights the planner left such a zone after one blip and settled on a dearer one for 33 h;
docs/planner.md). Old evidence fading also pulls a market nobody looked at lately back
toward the pooled hazard.

Volatility: if a market was preempted more often in the last `recent_hours` than its fitted
hazard predicts for the exposure observed there, its hazard is multiplied by

    r_m = clip((observed + s) / (expected + s), 1, max_volatility_ratio)      (s = volatility_smoothing)

Scaling the hazard (not the capped expectation) is the ratio applied where it means something:
for lifetimes well under the cap the expected lifetime shrinks by r_m, while a market whose
lifetimes far exceed the cap only loses what the extra hazard really costs within the cap.
"""

from __future__ import annotations

import math

import numpy as np

from airflow_provider_skynomad.forecasts.base import (
    DEFAULT_CAP_HOURS,
    DEFAULT_PRIOR_MEAN_HOURS,
    REGIME_HALF_LIFE_HOURS,
    AgeTable,
    check_params,
    recency_weights,
    validate_fit_inputs,
)
from airflow_provider_skynomad.forecasts.runs import extract_runs


def _hazard(events: np.ndarray, at_risk: np.ndarray, prior: np.ndarray, weight: float) -> np.ndarray:
    """(events + weight·prior) / (at_risk + weight), and `prior` where nothing is at risk."""
    denominator = at_risk + weight
    safe = np.where(denominator > 0, denominator, 1.0)
    return np.where(denominator > 0, (events + weight * prior) / safe, prior)


class NelsonAalenForecaster:
    """Per-market Nelson–Aalen survival with censoring, pooled shrinkage and a volatility multiplier.

    :param cap_hours: cap on the predicted remaining lifetime (the artifact used 2 h).
    :param recent_hours: window for the volatility multiplier.
    :param prior_runs: pseudo-runs at risk, per age, that pull a market's hazard toward the
        pooled hazard at its own level (0 = plain per-market Nelson–Aalen where there is data).
    :param prior_events: pseudo-events of the gamma prior on a market's hazard level θ_m.
    :param prior_mean_hours: mean of the exponential prior used where no run is at risk at all.
    :param volatility_smoothing: pseudo-events added to both sides of the volatility ratio, so one
        unlucky preemption does not halve a calm market's lifetime.
    :param max_volatility_ratio: upper bound on the hazard multiplier (1 disables the multiplier).
    :param max_age_hours: ages past this use the prediction at this age.
    :param half_life_hours: age at which a finished run counts half (None: every run counts fully).
    """

    def __init__(
        self,
        cap_hours: float = DEFAULT_CAP_HOURS,
        recent_hours: float = 6.0,
        prior_runs: float = 5.0,
        prior_events: float = 1.0,
        prior_mean_hours: float = DEFAULT_PRIOR_MEAN_HOURS,
        volatility_smoothing: float = 1.0,
        max_volatility_ratio: float = 4.0,
        max_age_hours: float = 72.0,
        half_life_hours: float | None = REGIME_HALF_LIFE_HOURS,
    ):
        self.cap_hours = cap_hours
        self.recent_hours = recent_hours
        self.prior_runs = prior_runs
        self.prior_events = prior_events
        self.prior_mean_hours = prior_mean_hours
        self.volatility_smoothing = volatility_smoothing
        self.max_volatility_ratio = max_volatility_ratio
        self.max_age_hours = max_age_hours
        self.half_life_hours = half_life_hours

    def _check_params(self) -> None:
        check_params(
            self.cap_hours,
            recent_hours=self.recent_hours,
            prior_mean_hours=self.prior_mean_hours,
            max_age_hours=self.max_age_hours,
            **({} if self.half_life_hours is None else {"half_life_hours": self.half_life_hours}),
        )
        for name in ("prior_runs", "prior_events", "volatility_smoothing"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0):
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")
        if not (isinstance(self.max_volatility_ratio, (int, float)) and self.max_volatility_ratio >= 1):
            raise ValueError(f"max_volatility_ratio must be ≥ 1 (1 disables it), got {self.max_volatility_ratio!r}")

    def fit(self, usable, seen, step_hours, spot_prices=None, start_time=None) -> NelsonAalenForecaster:
        """Estimate hazards from the runs in the history; prices and start time are not used."""
        self._check_params()
        usable, seen, step, _, _ = validate_fit_inputs(usable, seen, step_hours, spot_prices, start_time)
        ticks, markets = usable.shape
        runs = extract_runs(usable, seen, step)
        cap_ticks = self.cap_hours / step
        whole = int(math.floor(cap_ticks + 1e-9))
        part = cap_ticks - whole if cap_ticks - whole > 1e-9 else 0.0
        ages = int(math.ceil(self.max_age_hours / step - 1e-9))  # age grid 0..ages ticks
        horizon = ages + whole + 1  # hazard needed at ages 1..horizon

        duration = runs.duration_ticks
        event = runs.preempted
        weight = recency_weights((ticks - runs.end_tick) * step, self.half_life_hours)
        # Last age at which a run's fate was observed (a censored run of d ticks only proves D ≥ d).
        last_at_risk = np.where(event, duration, duration - 1)
        prior_h = step / self.prior_mean_hours

        # Pooled hazard over every age some run reached: the shape markets are shrunk toward.
        longest = max(int(last_at_risk.max(initial=0)), horizon)
        at_risk = np.bincount(last_at_risk, weights=weight, minlength=longest + 1)[::-1].cumsum()[::-1]
        events = np.bincount(duration[event], weights=weight[event], minlength=longest + 1)
        pooled = _hazard(events, at_risk, np.full(longest + 1, prior_h), self.prior_runs)
        pooled[0] = 0.0
        pooled_cum = np.cumsum(pooled)

        # Market level θ: observed events over those the pooled hazard expects for its exposure.
        expected = np.bincount(runs.market, weights=weight * pooled_cum[last_at_risk], minlength=markets)
        observed = np.bincount(runs.market[event], weights=weight[event], minlength=markets)
        level = _hazard(observed, expected, np.ones(markets), self.prior_events)  # same shrunk ratio, prior 1

        # Per-market counts on ages 0..horizon (longer runs are simply at risk throughout).
        width = horizon + 2
        clipped = np.minimum(last_at_risk, horizon + 1)
        cells = runs.market * width + clipped
        at_risk_m = np.bincount(cells, weights=weight, minlength=markets * width).reshape(markets, width)
        at_risk_m = at_risk_m[:, ::-1].cumsum(axis=1)[:, ::-1][:, : horizon + 1]
        early = event & (duration <= horizon)
        events_m = np.bincount(
            runs.market[early] * width + duration[early], weights=weight[early], minlength=markets * width
        ).reshape(markets, width)[:, : horizon + 1]
        hazard = _hazard(events_m, at_risk_m, level[:, None] * pooled[None, : horizon + 1], self.prior_runs)
        hazard[:, 0] = 0.0
        cumulative = np.cumsum(hazard, axis=1)

        ratio = self._volatility_ratio(runs, ticks, markets, step, hazard, cumulative)

        self.step_hours_ = step
        self.n_markets_ = markets
        self.runs_ = runs
        self.pooled_hazard_ = pooled[: horizon + 1]
        self.market_level_ = level
        self.hazard_ = hazard  # markets × ages (ticks), before the volatility multiplier
        self.cumulative_hazard_ = cumulative
        self.volatility_ratio_ = ratio
        self.table_ = AgeTable(
            np.arange(ages + 1) * step,
            self._capped_expectation(cumulative * ratio[:, None], ages, whole, part, step).T,
        )
        return self

    def _volatility_ratio(self, runs, ticks, markets, step, hazard, cumulative) -> np.ndarray:
        """Hazard multiplier per market from preemptions in the last `recent_hours` vs. expected."""
        if self.max_volatility_ratio <= 1:
            return np.ones(markets)
        window_start = max(ticks - max(1, int(round(self.recent_hours / step))), 0)
        inside = runs.end_tick > window_start
        market = runs.market[inside]
        start = runs.start_tick[inside]
        event = runs.preempted[inside]
        duration = runs.duration_ticks[inside]
        # Ages whose outcome was observed inside the window: from entry into it to the last at risk.
        first = np.maximum(window_start - start, 1)
        last = np.where(event, duration, duration - 1)
        horizon = cumulative.shape[1] - 1

        def cum_at(age):  # cumulative hazard, extended past the table with its last hazard
            clipped = np.minimum(age, horizon)
            return cumulative[market, clipped] + (age - clipped) * hazard[market, horizon]

        exposure = np.where(last >= first, cum_at(last) - cum_at(first - 1), 0.0)
        expected = np.bincount(market, weights=exposure, minlength=markets)
        observed = np.bincount(market[event], minlength=markets).astype(float)
        s = self.volatility_smoothing
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = (observed + s) / (expected + s)
        ratio = np.where(np.isfinite(ratio), ratio, np.where(observed > 0, np.inf, 1.0))
        return np.clip(ratio, 1.0, self.max_volatility_ratio)

    @staticmethod
    def _capped_expectation(cumulative, ages, whole, part, step) -> np.ndarray:
        """E[min(D − i, cap) | D > i]·step = Σ_{j<cap} S(i+j)/S(i) for i = 0..ages, per market.

        S(i+j)/S(i) is built one tick at a time, times e^(−hazard): one exp for the whole table
        instead of one per tick of the cap (this runs on the planner's decision path at every refit).
        """
        survive = np.exp(-np.diff(cumulative, axis=1))  # S(k + 1) / S(k)
        ratio = np.ones((cumulative.shape[0], ages + 1))
        total = np.zeros_like(ratio)
        for j in range(whole):
            total += ratio
            ratio *= survive[:, j : j + ages + 1]
        if part:
            total += part * ratio
        return total * step

    def expected_remaining_hours(self, ages_hours) -> np.ndarray:
        """Per market (column order of the fit history): capped expected remaining lifetime."""
        if not hasattr(self, "table_"):
            raise RuntimeError("NelsonAalenForecaster is not fitted; call fit(usable, seen, step_hours) first")
        return self.table_(ages_hours)
