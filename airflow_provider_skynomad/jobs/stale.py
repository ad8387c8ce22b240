"""Stale market data: say so, and plan as if nobody knew there was spot capacity.

The planner sees a market's last observation hold until the next one (docs/market.md), which
is right between two probe rounds and wrong when the probe DAG has stopped: hours later the
view still shows the capacity of then, and a plan built on it is a silent guess. So before the
runtime (the worker's `JobRunner` and the trigger's `Watch`) hands a view to the planner, every
market whose newest row is older than `STALE_AFTER_HOURS` is shown as a market before its first
observation is (no spot capacity and no spot price *now*; on-demand prices are public and stay):
the planner then moves only to markets someone has looked at lately, or to on-demand (which
always launches), and its safety net keeps the deadline. The job's own rows (launch outcomes)
are written with the prices as observed, never from this view. The market the job runs on is exempt:
its own group, polled every step, is a fresher observation than any probe. Each stale market is
named in a warning, in words a user can act on.

The threshold is one constant for the worker and the trigger (both must plan alike); it is above
the default `max_market_age` at which a job refuses to *start* (2 h), so a job that starts on
fresh data keeps its plan through an ordinary gap between probe rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from ..market.view import MarketView

STALE_AFTER_HOURS = 3.0


@dataclass(frozen=True)
class StaleMarket:
    key: str
    zone: str
    newest: pd.Timestamp
    age_hours: float

    def words(self) -> str:
        return (
            f"market data for {self.zone} is {self.age_hours:.0f} h old: the newest observation is from "
            f"{self.newest.isoformat()} (is the skynomad_probe DAG paused?); planning as if {self.zone} had "
            "no spot capacity until a probe or a launch there looks again"
        )


def newest_rows(frame: pd.DataFrame) -> pd.Series:
    """(zone, instance_type) → the newest observed_at in `frame`."""
    return frame.groupby(["zone", "instance_type"], sort=False)["observed_at"].max()


def stale_markets(
    view: MarketView,
    frame: pd.DataFrame,
    now: pd.Timestamp,
    after_hours: float = STALE_AFTER_HOURS,
    newest: pd.Series | None = None,
) -> list[StaleMarket]:
    """Markets of `view` whose newest row in `frame` (the job's window of the table) is older than `after_hours`."""
    if frame.empty:
        return []
    newest = newest_rows(frame) if newest is None else newest
    out = []
    for market in view.markets:
        at = newest.get((market.zone, market.instance_type))
        if at is None:
            continue
        age = (now - at).total_seconds() / 3600.0
        if age > after_hours:
            out.append(StaleMarket(market.key, market.zone, at, age))
    return out


def without_spot(view: MarketView, keys: list[str]) -> MarketView:
    """`view` with nothing known about spot now in the markets `keys`: no capacity and an infinite
    price at its current tick, as a grid shows a market before its first observation (market/grid.py),
    so no policy chooses spot there; their history and on-demand prices are unchanged."""
    if not keys:
        return view
    grid = view._grid  # noqa: SLF001 - a copy of the view's own grid, one tick changed
    available, spot = grid.available.copy(), grid.spot_usd_per_hour.copy()
    for key in keys:
        available[view.tick, view.index(key)] = 0
        spot[view.tick, view.index(key)] = float("inf")
    source_key = (view.source_key, "no spot now", tuple(sorted(keys)))
    return MarketView(
        replace(grid, available=available, spot_usd_per_hour=spot),
        view.tick,
        view.gang_size,
        egress_usd_per_gb=view.egress_usd_per_gb,
        source_key=source_key,
    )


def held_rows(source) -> pd.DataFrame:
    """The rows a `MarketSource` holds after its last view (no new read of the table)."""
    frame = getattr(source, "_frame", None)
    return frame if frame is not None else pd.DataFrame(columns=["zone", "instance_type", "observed_at"])


@dataclass
class StaleGuard:
    """Applies the rule above to each view; says each stale market once (until it is fresh again)."""

    after_hours: float = STALE_AFTER_HOURS
    warned: dict[str, pd.Timestamp] = field(default_factory=dict)  # market key -> newest row when warned
    _newest: tuple | None = None  # (frame identity, rows, newest per market): one groupby per new read

    def apply(
        self, view: MarketView, frame: pd.DataFrame, now: pd.Timestamp, running_key: str | None
    ) -> tuple[MarketView, list[str]]:
        """(the view the planner gets, new warnings in plain words)."""
        key = (id(frame), len(frame))
        if self._newest is None or self._newest[:2] != key:
            self._newest = (*key, newest_rows(frame) if len(frame) else None)
        found = stale_markets(view, frame, now, self.after_hours, self._newest[2])
        stale = [m for m in found if m.key != running_key]
        keys = {m.key for m in stale}
        for key in [k for k in self.warned if k not in keys]:
            del self.warned[key]  # fresh again: a later stale spell is said again
        words = [m.words() for m in stale if self.warned.get(m.key) != m.newest]
        self.warned.update({m.key: m.newest for m in stale})
        return without_spot(view, sorted(keys)), words
