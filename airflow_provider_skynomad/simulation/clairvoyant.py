"""Clairvoyant lifetimes: the forecaster no planner can have, to measure what forecasts are worth.

It answers from the trace itself: how long the run a market is in will still last (for a market
without capacity now, how long its next run will last), capped like every forecaster. Running
`skynomad` with it (benchmarks/bench_policies.py --only clairvoyant) bounds what a better
lifetime forecaster could buy the planner; the gap left is the policy's, not the forecast's.
Like the optimum, it belongs to evaluation only and must never reach a live planner.
"""

from __future__ import annotations

import copy

import numpy as np

from airflow_provider_skynomad.forecasts.base import check_params


def remaining_run_hours(usable: np.ndarray, step_hours: float) -> np.ndarray:
    """(ticks × markets): hours of capacity left in the run at each tick, or in the next run when down then.

    Counted in whole ticks, as the simulator counts them; a run still going at the trace's end
    counts only what the trace shows.
    """
    usable = np.asarray(usable, dtype=bool)
    out = np.zeros(usable.shape)
    run = np.zeros(usable.shape[1])  # length of the run starting at the tick after this one
    nxt = np.zeros(usable.shape[1])  # length of the next run after this tick
    for k in range(usable.shape[0] - 1, -1, -1):
        run = np.where(usable[k], run + 1.0, 0.0)
        nxt = np.where(usable[k], run, nxt)
        out[k] = nxt
    return out * step_hours


class ClairvoyantForecaster:
    """A forecaster that reads the future off `usable` (the whole trace, gang size applied).

    `fit` learns only where "now" is: the history it is given ends at the current tick.
    """

    def __init__(self, usable: np.ndarray, step_hours: float, cap_hours: float = 4.0):
        check_params(cap_hours, step_hours=step_hours)
        self.step_hours = step_hours
        self.cap_hours = cap_hours
        self._remaining = remaining_run_hours(usable, step_hours)

    def fit(self, usable, seen, step_hours, spot_prices=None, start_time=None) -> ClairvoyantForecaster:
        if np.shape(usable)[1] != self._remaining.shape[1] or step_hours != self.step_hours:
            raise ValueError("the history is not from the trace this clairvoyant forecaster was built on")
        self.tick_ = np.shape(usable)[0] - 1
        return self

    def expected_remaining_hours(self, ages_hours) -> np.ndarray:
        """The true remaining run, whatever the age: the running market's run is the one it is in."""
        return np.minimum(self._remaining[self.tick_], self.cap_hours)

    def __deepcopy__(self, memo):
        """The planner clones its forecaster at every refit; the trace is read-only, so share it."""
        return copy.copy(self)
