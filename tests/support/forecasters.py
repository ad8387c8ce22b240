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
