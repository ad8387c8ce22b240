"""Observations resampled onto the decision grid that every driver and the optimum share.

Tick k covers [start + k·step, start + (k+1)·step); its value is the last observation at or
before the tick's start ("between two rows the last one holds", docs/market.md). Keeping the
grid dense (ticks × markets numpy arrays) is what makes the optimum and the simulator fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from airflow_provider_skynomad.market.observations import TraceError


@dataclass(frozen=True)
class Market:
    """One place a gang can run: an instance type in a zone."""

    key: str
    cloud: str
    region: str
    zone: str
    instance_type: str


@dataclass(frozen=True)
class MarketGrid:
    """Dense (ticks × markets) availability and prices on a fixed step."""

    start: pd.Timestamp
    step_hours: float
    markets: tuple[Market, ...]
    available: np.ndarray  # int, instances a probe got
    spot_usd_per_hour: np.ndarray
    on_demand_usd_per_hour: np.ndarray

    @property
    def ticks(self) -> int:
        return self.available.shape[0]

    @cached_property
    def keys(self) -> list[str]:
        return [m.key for m in self.markets]

    def index(self, key: str) -> int:
        for i, market in enumerate(self.markets):
            if market.key == key:
                return i
        raise KeyError(f"unknown market {key!r}; known: {self.keys}")

    def time_at(self, tick: float) -> pd.Timestamp:
        return self.start + pd.Timedelta(hours=tick * self.step_hours)

    def window(self, first_tick: int, ticks: int) -> MarketGrid:
        """The sub-grid [first_tick, first_tick + ticks), clipped to the trace."""
        stop = min(first_tick + ticks, self.ticks)
        return MarketGrid(
            start=self.time_at(first_tick),
            step_hours=self.step_hours,
            markets=self.markets,
            available=self.available[first_tick:stop],
            spot_usd_per_hour=self.spot_usd_per_hour[first_tick:stop],
            on_demand_usd_per_hour=self.on_demand_usd_per_hour[first_tick:stop],
        )

    def usable(self, gang_size: int) -> np.ndarray:
        """Boolean (ticks × markets): a gang of `gang_size` would launch (available ≥ N)."""
        return self.available >= gang_size


def median_step_hours(frame: pd.DataFrame) -> float:
    """The trace's own probe interval: median gap between consecutive rows of one market."""
    gaps = (
        frame.sort_values("observed_at")
        .groupby(["zone", "instance_type"])["observed_at"]
        .diff()
        .dropna()
        .dt.total_seconds()
    )
    if gaps.empty:
        raise TraceError("trace has fewer than two observations per zone; cannot infer the probe step")
    return round(float(gaps.median())) / 3600.0


def default_step_hours(frame: pd.DataFrame) -> float:
    """The decision step `skynomad evaluate` uses by default: the probe interval in whole minutes (≥ 1)."""
    return max(1.0, round(median_step_hours(frame) * 60)) / 60


def build_grid(frame: pd.DataFrame, step_hours: float | None = None) -> MarketGrid:
    """Resample validated observations onto a grid starting at the first row."""
    if step_hours is None:
        step_hours = median_step_hours(frame)
    if step_hours <= 0:
        raise TraceError(f"decision step must be positive, got {step_hours} h")
    multi_type = frame["instance_type"].nunique() > 1
    meta = frame.drop_duplicates(["zone", "instance_type"]).sort_values(["zone", "instance_type"])
    markets = tuple(
        Market(
            key=f"{r.zone}:{r.instance_type}" if multi_type else r.zone,
            cloud=r.cloud,
            region=r.region,
            zone=r.zone,
            instance_type=r.instance_type,
        )
        for r in meta.itertuples()
    )
    start = frame["observed_at"].min()
    end = frame["observed_at"].max()
    step = pd.Timedelta(hours=step_hours)
    ticks = int((end - start) / step) + 1
    grid_ns = start.as_unit("ns").value + step.as_unit("ns").value * np.arange(ticks, dtype=np.int64)

    # Vectorised "last row at or before each tick's start": a row first counts at the first tick
    # at or after its time; of the rows of one market landing on one tick, the last (the newest,
    # as rows of a market are in time order) wins; the ticks after it hold it until the next row.
    # Ticks before a market's first row see none (-1).
    times_ns = pd.DatetimeIndex(frame["observed_at"]).as_unit("ns").asi8
    first_tick = np.searchsorted(grid_ns, times_ns, side="left")
    market_of = frame.groupby(["zone", "instance_type"], sort=True).ngroup().to_numpy()
    inside = first_tick < ticks
    row_at = np.full((ticks, len(markets)), -1, dtype=np.int64)
    np.maximum.at(row_at, (first_tick[inside], market_of[inside]), np.flatnonzero(inside))
    row_at = np.maximum.accumulate(row_at, axis=0)
    seen = row_at >= 0
    at = np.where(seen, row_at, 0)
    available = np.where(seen, frame["available"].to_numpy(dtype=np.int64)[at], 0)
    spot = np.where(seen, frame["spot_price"].to_numpy(dtype=float)[at], np.nan)
    on_demand = np.where(seen, frame["on_demand_price"].to_numpy(dtype=float)[at], np.nan)
    # Before a market's first observation nothing is known: no capacity and an infinite price, so
    # no policy (nor the optimum) can use it, and no view shows a price that was observed later.
    spot = np.where(np.isnan(spot), np.inf, spot)
    on_demand = np.where(np.isnan(on_demand), np.inf, on_demand)
    return MarketGrid(start, step_hours, markets, available, spot, on_demand)


def extend_grid(grid: MarketGrid, frame: pd.DataFrame, built_rows: int) -> MarketGrid | None:
    """What `build_grid(frame, grid.step_hours)` gives, computed from `grid` and only the newest rows.

    `grid` was built from ``frame.iloc[:built_rows]``, and every later row of `frame` is newer
    than all of those (rows appended in time order, as a job's incremental reads append them).
    Then the ticks the grid has keep their values, and only the new ticks are computed, from the
    rows after the grid's last tick. None when a later row names a market the grid lacks (the
    caller builds the grid again).
    """
    times_ns = pd.DatetimeIndex(frame["observed_at"]).as_unit("ns").asi8
    step_ns = pd.Timedelta(hours=grid.step_hours).as_unit("ns").value
    start_ns = grid.start.as_unit("ns").value
    ticks = int((times_ns[-1] - start_ns) // step_ns) + 1
    if ticks == grid.ticks:
        return grid
    column = {(m.zone, m.instance_type): j for j, m in enumerate(grid.markets)}
    newer = frame.iloc[built_rows:]
    if any(key not in column for key in zip(newer["zone"], newer["instance_type"], strict=True)):
        return None
    grid_ns = start_ns + step_ns * np.arange(grid.ticks, ticks, dtype=np.int64)
    last_ns = start_ns + step_ns * (grid.ticks - 1)
    # Rows after the last old tick (old rows among them too) are the only ones a new tick can take.
    first = int(np.searchsorted(times_ns, last_ns, side="right"))
    tail = frame.iloc[first:]
    market_of = np.array([column[key] for key in zip(tail["zone"], tail["instance_type"], strict=True)], dtype=np.int64)
    tick_of = np.searchsorted(grid_ns, times_ns[first:], side="left")
    inside = tick_of < len(grid_ns)
    row_at = np.full((len(grid_ns), len(grid.markets)), -1, dtype=np.int64)
    np.maximum.at(row_at, (tick_of[inside], market_of[inside]), np.flatnonzero(inside))
    row_at = np.maximum.accumulate(row_at, axis=0)
    seen = row_at >= 0
    at = np.where(seen, row_at, 0)

    def block(values: np.ndarray, old: np.ndarray) -> np.ndarray:
        # A market with no row since the last old tick holds that tick's value.
        new = np.where(seen, values[at] if len(values) else 0, old[-1])
        return np.concatenate([old, new.astype(old.dtype)])

    return MarketGrid(
        grid.start,
        grid.step_hours,
        grid.markets,
        block(tail["available"].to_numpy(dtype=np.int64), grid.available),
        block(tail["spot_price"].to_numpy(dtype=float), grid.spot_usd_per_hour),
        block(tail["on_demand_price"].to_numpy(dtype=float), grid.on_demand_usd_per_hour),
    )
