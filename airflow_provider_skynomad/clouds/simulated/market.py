"""What the simulated cloud knows about its trace: capacity and prices at any simulated instant.

Built on the same `MarketGrid` as the evaluation simulator (last observation holds until the
next, resampled to the trace's own probe step), so a job on the simulated cloud sees exactly
the market the planner and the optimum are scored on. Times here are *grid hours*: hours
since the trace's first observation. Past the trace's end the last observation holds.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from airflow_provider_skynomad.market.grid import Market, MarketGrid, build_grid
from airflow_provider_skynomad.market.observations import read_observations

_EPSILON_TICKS = 1e-9  # a time exactly on a tick boundary belongs to that tick despite float rounding


@dataclass(frozen=True)
class TraceMarket:
    grid: MarketGrid
    cumulative_spot_usd: np.ndarray  # (ticks + 1, markets): USD per instance from grid hour 0 to each tick
    cumulative_on_demand_usd: np.ndarray

    @classmethod
    def load(cls, trace_path: str | Path) -> TraceMarket:
        """Read (and cache per file version) a trace; every process replays the same one."""
        path = Path(trace_path).resolve()
        stat = os.stat(path)
        return _load_cached(str(path), stat.st_mtime_ns, stat.st_size)

    @property
    def step_hours(self) -> float:
        return self.grid.step_hours

    @property
    def end_hours(self) -> float:
        """Grid hour at which the last tick ends."""
        return self.grid.ticks * self.grid.step_hours

    def hours_of(self, timestamp: pd.Timestamp) -> float:
        return (timestamp - self.grid.start) / pd.Timedelta(hours=1)

    def index(self, zone: str, instance_type: str) -> int:
        for j, market in enumerate(self.grid.markets):
            if market.zone == zone and market.instance_type == instance_type:
                return j
        known = sorted({f"{m.zone}:{m.instance_type}" for m in self.grid.markets})
        raise ValueError(f"the trace has no market {zone}:{instance_type}; known zone:instance_type pairs: {known}")

    def zone(self, zone: str) -> Market:
        """A market in `zone` (for its region and cloud)."""
        for market in self.grid.markets:
            if market.zone == zone:
                return market
        raise ValueError(f"the trace has no zone {zone!r}; known zones: {sorted({m.zone for m in self.grid.markets})}")

    def tick(self, hours: float) -> int:
        return int(min(max(math.floor(hours / self.step_hours + _EPSILON_TICKS), 0), self.grid.ticks - 1))

    def available(self, j: int, hours: float) -> int:
        return int(self.grid.available[self.tick(hours), j])

    def spot_usd_per_hour(self, j: int, hours: float) -> float:
        return float(self.grid.spot_usd_per_hour[self.tick(hours), j])

    def on_demand_usd_per_hour(self, j: int, hours: float) -> float:
        return float(self.grid.on_demand_usd_per_hour[self.tick(hours), j])

    def cost_usd(self, j: int, spot: bool, from_hours: float, to_hours: float) -> float:
        """USD per instance for running in market `j` over [from, to], following price changes."""
        if to_hours <= from_hours:
            return 0.0
        return self._cumulative(j, spot, to_hours) - self._cumulative(j, spot, from_hours)

    def first_shortfall_hours(self, j: int, count: int, after_hours: float) -> float | None:
        """First grid hour ≥ `after_hours` at which market `j` has fewer than `count` instances, if any."""
        first = self.tick(after_hours)
        short = np.flatnonzero(self.grid.available[first:, j] < count)
        if short.size == 0:
            return None
        return max(after_hours, (first + int(short[0])) * self.step_hours)

    def _cumulative(self, j: int, spot: bool, hours: float) -> float:
        cumulative = self.cumulative_spot_usd if spot else self.cumulative_on_demand_usd
        prices = self.grid.spot_usd_per_hour if spot else self.grid.on_demand_usd_per_hour
        hours = max(hours, 0.0)
        k = min(math.floor(hours / self.step_hours + _EPSILON_TICKS), self.grid.ticks)
        price = prices[min(k, self.grid.ticks - 1), j]  # past the end the last price holds
        return float(cumulative[k, j] + price * (hours - k * self.step_hours))


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, size: int) -> TraceMarket:
    grid = build_grid(read_observations(path))
    zero = np.zeros((1, len(grid.markets)))
    cumulative = lambda prices: np.vstack([zero, np.cumsum(prices * grid.step_hours, axis=0)])  # noqa: E731
    return TraceMarket(grid, cumulative(grid.spot_usd_per_hour), cumulative(grid.on_demand_usd_per_hour))
