"""What a planner may know about the market at one moment, and nothing after it.

Prices are public (cloud price APIs cost nothing), so the view shows every market's
current prices. Availability is only known where someone looked: the job's own running
group, its launch attempts and probes, and the shared market table's history (what the
probe DAG collected). `seen` marks those grid cells; the simulator sets them as it goes,
the Airflow driver marks every row of the market table as seen.
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np
import pandas as pd

from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.market.fleet import Fleet
from airflow_provider_skynomad.market.grid import Market, MarketGrid


class MarketView:
    """The market as of grid tick `tick` (inclusive), for a gang of `gang_size`."""

    def __init__(
        self,
        grid: MarketGrid,
        tick: int,
        gang_size: int,
        seen: np.ndarray | None = None,
        egress_usd_per_gb: np.ndarray | None = None,
        table: np.ndarray | None = None,
        source_key: tuple | None = None,
        fleet: Fleet | None = None,
    ):
        """:param seen: cells someone observed (default: all); unseen cells mean nothing.
        :param table: availability the shared market table shows where `seen` is False (the probe
            DAG's rows, the last one holding until the next); with it every cell counts as seen.
        :param source_key: what the history is, by content (e.g. the market table window's origin,
            markets and step), for a history rebuilt from the same rows again and again; caches
            then survive the rebuilds. Default: the grid object's identity.
        :param fleet: what this deployment's other jobs hold and claim in each market now
            (market.fleet); None: the job plans as if it were alone.
        """
        if not 0 <= tick < grid.ticks:
            raise IndexError(f"tick {tick} outside the grid's {grid.ticks} ticks")
        self._grid = grid
        self.tick = tick
        self.gang_size = gang_size
        # (from × to) USD/GB; callers that build many views pass one precomputed matrix.
        self.egress_usd_per_gb = (
            egress_usd_per_gb if egress_usd_per_gb is not None else EgressModel().matrix(grid.markets)
        )
        # Only rows up to `tick` are ever sliced out of the grid: the view cannot see the future.
        self._seen = seen if seen is not None else np.ones(grid.available.shape, dtype=bool)
        self._table = table
        self.source_key = source_key
        self.fleet = fleet

    @property
    def markets(self) -> tuple[Market, ...]:
        return self._grid.markets

    @property
    def source_id(self) -> tuple | int:
        """Identity of the underlying history (caches key on it together with the tick)."""
        return self.source_key if self.source_key is not None else id(self._grid)

    @property
    def start(self) -> pd.Timestamp:
        """Time of tick 0 of the history."""
        return self._grid.start

    @property
    def keys(self) -> list[str]:
        return self._grid.keys

    @property
    def step_hours(self) -> float:
        return self._grid.step_hours

    @property
    def now(self) -> pd.Timestamp:
        return self._grid.time_at(self.tick)

    def index(self, key: str) -> int:
        return self._index_of[key]

    @cached_property
    def _index_of(self) -> dict[str, int]:
        return {key: i for i, key in enumerate(self._grid.keys)}

    @property
    def spot_usd_per_hour(self) -> np.ndarray:
        return self._grid.spot_usd_per_hour[self.tick]

    @property
    def on_demand_usd_per_hour(self) -> np.ndarray:
        return self._grid.on_demand_usd_per_hour[self.tick]

    def usable_history(self) -> tuple[np.ndarray, np.ndarray]:
        """(usable, seen) boolean matrices over ticks 0..tick × markets; unseen cells mean nothing."""
        return self._history(0)

    def _history(self, first: int) -> tuple[np.ndarray, np.ndarray]:
        stop = self.tick + 1
        available, seen = self._grid.available[first:stop], self._seen[first:stop]
        if self._table is not None:
            return np.where(seen, available, self._table[first:stop]) >= self.gang_size, np.ones_like(seen)
        return available >= self.gang_size, seen

    def available_history(self, hours: float) -> tuple[np.ndarray, np.ndarray]:
        """(available, seen) over the last `hours` (ticks × markets, this tick last): counts, and which were observed.

        What a fleet-aware planner needs beyond "usable": how many instances a market had, to
        subtract what the job's own deployment holds of them (market.fleet).
        """
        first = max(0, self.tick + 1 - max(1, int(round(hours / self.step_hours))))
        stop = self.tick + 1
        available, seen = self._grid.available[first:stop], self._seen[first:stop]
        if self._table is not None:
            return np.where(seen, available, self._table[first:stop]), np.ones_like(seen)
        return available, seen

    def price_history(self, hours: float) -> np.ndarray:
        """Spot prices over the last `hours` (ticks × markets), the current tick last."""
        first = max(0, self.tick + 1 - max(1, int(round(hours / self.step_hours))))
        return self._grid.spot_usd_per_hour[first : self.tick + 1]

    def usable_within(self, hours: float) -> np.ndarray:
        """Per market: seen with capacity at least once in the last `hours` (this tick included)."""
        first = max(0, self.tick + 1 - max(1, int(round(hours / self.step_hours)) + 1))
        usable, seen = self._history(first)
        return (usable & seen).any(axis=0)

    @cached_property
    def last_seen(self) -> tuple[np.ndarray, np.ndarray]:
        """Per market: ticks since the last observation (inf if never) and whether it was usable."""
        usable, seen = self.usable_history()
        any_seen = seen.any(axis=0)
        last = seen.shape[0] - 1 - np.argmax(seen[::-1], axis=0)
        age = np.where(any_seen, self.tick - last, np.inf)
        was_usable = np.where(any_seen, usable[last, np.arange(usable.shape[1])], False)
        return age, was_usable

    def extended(
        self, future_usable: np.ndarray, keep_ticks: int | None = None, every: int = 1
    ) -> tuple[MarketGrid, np.ndarray, int]:
        """A grid of this history followed by a sampled future, and which of its cells count as seen.

        `future_usable` is (steps × markets), step 0 being now (forecasts.scenarios). The future's
        rows hold today's prices and a gang's worth of capacity where usable; the history's rows
        and what was seen of them stay as they are, so a policy run on the result
        (planner.rollout.rollout) sees what it would see now, then observes as it goes.
        With `keep_ticks` only that many ticks of history come along, and with `every` > 1 only
        every so many ticks (ending at now) on a grid that many times coarser: a rollout's
        policies look back little, and weeks of 3-minute history per future dominated its cost.
        Returns the grid, its seen cells and the tick that is now in it.
        """
        first = 0 if keep_ticks is None else max(0, self.tick - keep_ticks)
        # History ticks on the coarse grid, ending one coarse step before now; enough of them to
        # cover the kept span (the first repeats tick 0 where the trace starts later than that).
        count = math.ceil((self.tick - first) / every)
        rows = np.maximum(self.tick - every * np.arange(count, 0, -1), 0)
        grid = self._grid
        future = np.asarray(future_usable, dtype=bool)[::every]
        steps, stop = future.shape[0], len(rows)
        available = np.concatenate(
            [grid.available[rows], np.where(future, self.gang_size, 0).astype(grid.available.dtype)]
        )
        spot = np.concatenate([grid.spot_usd_per_hour[rows], np.repeat(self.spot_usd_per_hour[None], steps, 0)])
        on_demand = np.concatenate(
            [grid.on_demand_usd_per_hour[rows], np.repeat(self.on_demand_usd_per_hour[None], steps, 0)]
        )
        seen = np.zeros(available.shape, dtype=bool)
        if self._table is not None:
            available[:stop] = np.where(self._seen[rows], available[:stop], self._table[rows])
            seen[:stop] = True
        else:
            seen[:stop] = self._seen[rows]
        start = grid.time_at(self.tick - stop * every)
        coarse = MarketGrid(start, grid.step_hours * every, grid.markets, available, spot, on_demand)
        return coarse, seen, stop
