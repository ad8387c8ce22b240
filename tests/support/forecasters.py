"""Stand-in lifetime forecasters for planner tests: the planner's only lifetime input, made exact."""

from __future__ import annotations

import numpy as np


class Stays:
    """A forecaster that expects every spot group to stay `hours`."""

    def __init__(self, hours: float, cap_hours: float = 4.0):
        self.hours, self.cap_hours = hours, cap_hours

    def fit(self, usable, seen, step_hours, spot_prices=None, start_time=None):
        self.markets_ = usable.shape[1]
        return self

    def expected_remaining_hours(self, ages_hours):
        return np.full(self.markets_, self.hours)


class MarketStays:
    """A forecaster that expects a spot group in each market to stay a fixed number of hours (one per market)."""

    def __init__(self, hours: list[float], cap_hours: float = 4.0):
        self.hours, self.cap_hours = np.asarray(hours, dtype=float), cap_hours

    def fit(self, usable, seen, step_hours, spot_prices=None, start_time=None):
        return self

    def expected_remaining_hours(self, ages_hours):
        return self.hours.copy()
