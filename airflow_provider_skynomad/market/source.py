"""One market source for every Airflow-side reader: the worker, the trigger and the probe DAG.

A job reads the market table many times (every decision step, on every worker visit), so reads
are windowed and incremental: the first read takes the job's lookback window, later reads only
rows newer than the newest one already held (plus a count of the hour before it, which tells a
late commit). The window is anchored at the job's start (it
grows, it does not slide), so the decision grid keeps its origin across reads and the planner's
forecasts are cached by *content* — the grid's origin, markets and step, and the refit bucket —
not by the identity of a Python object that is rebuilt every poll. A view is rebuilt only when
the table's watermark (newest row) or the window moved.

`select_markets` is the start-of-job check (a fresh, non-empty table that holds the job's zones),
and `observation_row` the one way a job writes what it saw back (its own launch outcomes and
preemptions), always under the exact market (zone + instance type) it concerns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pandas as pd

from airflow_provider_skynomad.exceptions import MarketInputError
from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.market.grid import Market, MarketGrid, build_grid, extend_grid
from airflow_provider_skynomad.market.view import MarketView

KEY = ["zone", "instance_type", "observed_at"]
# Later reads go back this far before the newest row held: a probe task that stamped its rows at
# probe time but committed them after another region's rows are still read (duplicates dropped).
OVERLAP = pd.Timedelta(hours=1)
# The table's time resolution: `newest + _TICK` is the first time after `newest` (an inclusive bound).
_TICK = pd.Timedelta(microseconds=1)


@dataclass(frozen=True)
class MarketSelection:
    """The markets a job may use, as plain names (stored in the job record and trigger kwargs)."""

    zones: list[str]
    instance_types: list[str] | None


class MarketSource:
    """The job's window of the market table, read incrementally, and planner views over it.

    :param table: a `MarketTable` (this source does not close it).
    :param zones: zones the job may use.
    :param instance_types: instance types it may use (None: any).
    :param since: the window's fixed start (the job's start minus its lookback).
    :param step_hours: the decision step.
    :param gang_size: N; a market is usable when available ≥ N.
    """

    def __init__(
        self,
        table,
        zones: list[str],
        instance_types: list[str] | None,
        since: pd.Timestamp,
        step_hours: float,
        gang_size: int,
    ):
        self.table = table
        self.zones = list(zones)
        self.instance_types = list(instance_types) if instance_types else None
        self.since = pd.Timestamp(since)
        self.step_hours = float(step_hours)
        self.gang_size = int(gang_size)
        self._frame: pd.DataFrame | None = None
        self._view: MarketView | None = None
        self._view_key: tuple | None = None
        self._deleted = 0
        # The grid of the frame's first `_grid_rows` rows: while reads only append rows, the next
        # view extends it by the new ticks instead of building it again.
        self._grid: MarketGrid | None = None
        self._grid_rows = 0
        self._egress: tuple | None = None  # (markets, their egress matrix): the same markets step after step

    def frame(self, until: pd.Timestamp) -> pd.DataFrame:
        """Rows in [since, until): the first call reads the window, later calls only what is newer.

        A later call fetches the rows newer than the newest one held, and counts, in the same
        statement, the rows of the hour before it. Only when that count differs from the rows held
        there (a probe task committed rows stamped earlier than another's) are that hour's rows
        fetched and the missing ones merged in. Every read also returns the table's deletion
        counter: when it moved (compaction ran), rows held may be gone from the table, and the
        whole window is read again.
        """
        held = self._frame
        if held is None or held.empty:
            return self._read_window(until)
        newest = held["observed_at"].iloc[-1]  # sorted by time: the last row is the newest
        after = newest + _TICK
        increment = self.table.read_increment(
            self.zones, after, until, self.instance_types, count_between=(newest - OVERLAP, after)
        )
        if increment.deleted != self._deleted:
            return self._read_window(until)
        later = increment.rows
        late = later.iloc[:0]
        first = int(held["observed_at"].searchsorted(newest - OVERLAP, side="left"))
        if increment.counted != len(held) - first:
            # Some rows of that hour are not held yet (a late commit): fetch the hour, and compare
            # keys with the held rows of that hour only, not the whole window.
            overlap = self.table.read(
                zones=self.zones, since=newest - OVERLAP, until=after, instance_types=self.instance_types
            )
            tail = held.iloc[first:]
            known = set(zip(tail["zone"], tail["instance_type"], tail["observed_at"], strict=True))
            fresh = [
                key not in known
                for key in zip(overlap["zone"], overlap["instance_type"], overlap["observed_at"], strict=True)
            ]
            if any(fresh):
                late = overlap[fresh]
        if late.empty and later.empty:
            return held  # nothing new: the same object, so the view is not rebuilt
        frame = pd.concat([held, late, later] if len(late) else [held, later], ignore_index=True)
        if len(late):  # a late row lands inside the held range: restore the order
            frame = frame.sort_values(["observed_at", "zone", "instance_type"], kind="stable", ignore_index=True)
            self._grid = None  # and the grid cannot just be extended
        self._frame = frame
        return self._frame

    def _read_window(self, until: pd.Timestamp) -> pd.DataFrame:
        self._frame, self._deleted, _ = self.table.read_increment(self.zones, self.since, until, self.instance_types)
        self._grid = None
        return self._frame

    def view(self, until: pd.Timestamp) -> MarketView:
        """The planner's view of the job's markets as of `until` (exclusive); nothing later is read."""
        frame = self.frame(until)
        if frame.empty:
            raise MarketInputError(
                f"the market table at {getattr(self.table, 'display_url', 'the market database')} has no rows "
                f"for the job's zones {self.zones} since {self.since.isoformat()}"
            )
        key = (frame["observed_at"].iloc[-1], len(frame))
        if key != self._view_key:
            grid = None
            if self._grid is not None and self._grid_rows < len(frame):  # rows were only appended
                grid = extend_grid(self._grid, frame, self._grid_rows)
            if grid is None:
                grid = build_grid(frame, step_hours=self.step_hours)
            self._grid, self._grid_rows = grid, len(frame)
            if self._egress is None or self._egress[0] != grid.markets:
                self._egress = (grid.markets, EgressModel().matrix(grid.markets))
            content = (grid.start.isoformat(), grid.step_hours, tuple(grid.keys))
            self._view = MarketView(
                grid,
                tick=grid.ticks - 1,
                gang_size=self.gang_size,
                egress_usd_per_gb=self._egress[1],
                source_key=content,
            )
            self._view_key = key
        return self._view

    def accelerator_of(self, market: Market) -> tuple[str, int]:
        """(accelerator, count) of a market as the table's rows name it, so the job's own rows match its filters."""
        frame = self._frame
        if frame is not None and not frame.empty:
            rows = frame[(frame["zone"] == market.zone) & (frame["instance_type"] == market.instance_type)]
            if not rows.empty:
                return str(rows["accelerator"].iloc[-1]), int(rows["accelerator_count"].iloc[-1])
        return "unknown", 1

    def observation_row(self, view: MarketView, market_key: str, available: int, at: pd.Timestamp) -> dict:
        """A market-table row for what the job itself saw in one exact market (zone + instance type)."""
        market = view.markets[view.index(market_key)]
        accelerator, count = self.accelerator_of(market)
        return observation_row(view, market_key, available, self.gang_size, at, accelerator, count)


def observation_row(
    view: MarketView,
    market_key: str,
    available: int,
    requested: int,
    at: pd.Timestamp,
    accelerator: str,
    accelerator_count: int,
) -> dict:
    """A market-table row for what someone saw in one exact market (zone + instance type)."""
    j = view.index(market_key)
    market = view.markets[j]
    return {
        "observed_at": at,
        "cloud": market.cloud,
        "region": market.region,
        "zone": market.zone,
        "instance_type": market.instance_type,
        "accelerator": accelerator,
        "accelerator_count": int(accelerator_count),
        "requested": int(requested),
        "available": int(available),
        "spot_price": float(view.spot_usd_per_hour[j]),
        "on_demand_price": float(view.on_demand_usd_per_hour[j]),
    }


def select_markets(
    table,
    now: pd.Timestamp,
    *,
    zones: list[str] | None,
    regions: list[str] | None,
    clouds: list[str] | None,
    instance_types,
    accelerator: str | None,
    lookback_hours: float,
    max_market_age: timedelta,
    where: str,
    trace_end: pd.Timestamp | None = None,
) -> tuple[MarketSelection, pd.DataFrame]:
    """The zones and instance types a job may use, checked against a fresh, non-empty table.

    Returns the selection and one row per matching market (zone, instance_type, newest): the
    filters and the grouping run in the database, so a job's start does not read every zone's
    window (86k rows for 200 markets and 72 h).

    :param where: how to name the table in messages (never with a password).
    :param trace_end: a simulated cloud's end of trace (`SimulatedCloud.trace_end`): once its clock is
        past it no probe can write a row, and a stale or empty window is refused for that reason.
    :raises MarketInputError: empty or stale table, unknown zones, no matching rows.
    """
    latest = table.latest_observed_at()
    if latest is None:
        raise MarketInputError(
            f"the market table at {where} is empty: run the skynomad_probe DAG "
            "(or `skynomad market import --trace FILE`) first; nothing was launched"
        )
    types = instance_type_list(instance_types)
    since = now - pd.Timedelta(hours=lookback_hours)
    until = now + pd.Timedelta(seconds=1)
    if zones:
        seen = set(table.zones_seen(since, until, zones=list(zones)))
        unknown = [z for z in zones if z not in seen]
        if unknown:
            known = table.zones_seen(since, until)  # the whole list, only to say what there is
            raise MarketInputError(
                f"unknown zone(s) {unknown}: the market table has no recent observation of them; known zones: "
                f"{known}; nothing was launched"
            )
    frame = table.markets(
        since,
        until,
        zones=list(zones) if zones else None,
        instance_types=types,
        clouds=list(clouds) if clouds else None,
        regions=list(regions) if regions else None,
        accelerator=accelerator or None,
    )
    ended = trace_ended(now, trace_end)
    if frame.empty:
        if ended:
            raise MarketInputError(f"no market rows in the last {lookback_hours:g} h: {ended}; nothing was launched")
        raise MarketInputError(
            f"no market rows match the job (zones={zones}, regions={regions}, clouds={clouds}, "
            f"instance_types={types}, accelerator={accelerator}) within the last "
            f"{lookback_hours:g} h before {now.isoformat()}; newest row in the table: {latest}; "
            "nothing was launched"
        )
    newest = frame["newest"].max()
    age = now - newest
    if age > pd.Timedelta(max_market_age):
        refusal = stale_refusal(table, frame, now, max_market_age, ended)
        if refusal is not None:
            raise MarketInputError(refusal)
    selection = MarketSelection(
        zones=sorted(set(frame["zone"])),
        instance_types=sorted(set(frame["instance_type"])) if types or accelerator else None,
    )
    return selection, frame.reset_index(drop=True)


def trace_ended(now: pd.Timestamp, trace_end: pd.Timestamp | None) -> str | None:
    """Why no probe can refresh the table on a simulated cloud whose clock is past its trace, and the
    fix (None when there is no such end or the clock is before it). The probe DAG's runs then fail
    with TraceEndedError in its own log; unpausing it would not help, so the job's refusal says this."""
    if trace_end is None or now < trace_end:
        return None
    return (
        f"the simulated cloud's clock ({now.isoformat()}) is past the end of its trace ({trace_end.isoformat()}), "
        "so no probe can observe a market any more (the skynomad_probe DAG's runs fail with TraceEndedError): "
        "restart the recipe (a fresh simulated-cloud state directory starts the clock again) or set the "
        "connection's trace_start to an earlier instant of the trace"
    )


def stale_refusal(
    table, frame: pd.DataFrame, now: pd.Timestamp, max_market_age: timedelta, ended: str | None = None
) -> str | None:
    """Why a job whose newest matching row is older than `max_market_age` must not start, naming the
    one thing that would fix it; None when the probe DAG's completed rounds still vouch for its
    markets (market/freshness.py, `rounds_verdict`: a slow box makes rounds long on the cloud's clock).

    :param frame: the job's markets (zone, instance_type, newest), as `select_markets` found them.
    :param ended: why no probe can refresh the table any more (`trace_ended`): the refusal then says so.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from airflow_provider_skynomad.market.freshness import rounds_verdict
    from airflow_provider_skynomad.market.store.database import MarketDatabase
    from airflow_provider_skynomad.market.store.rounds import ProbeRoundTable

    max_hours = pd.Timedelta(max_market_age).total_seconds() / 3600.0
    newest = frame["newest"].max()
    head = (
        f"the market table is stale: the newest matching observation ({newest.isoformat()}) is "
        f"{(now - newest).total_seconds() / 3600:.2f} h older than the cloud's now ({now.isoformat()}), over the "
        f"{max_hours:g} h limit (max_market_age)"
    )
    tail = "; nothing was launched"
    if ended:
        return f"{head}: {ended}{tail}"
    if not isinstance(table, MarketDatabase):
        return f"{head}; run the skynomad_probe DAG{tail}"
    try:
        rounds = ProbeRoundTable(market=table)
        verdict = rounds_verdict(
            rounds.recent(now, zip(frame["zone"], frame["instance_type"], strict=True)), now, max_hours
        )
        if verdict.fresh:
            return None
        anywhere = rounds.newest(now)
    except SQLAlchemyError:  # a database user that may not create the round table: the rows decide
        return f"{head}; run the skynomad_probe DAG{tail}"
    zones = sorted(set(frame["zone"]))
    named = ", ".join(zones[:3]) + (f" and {len(zones) - 3} more" if len(zones) > 3 else "")
    if anywhere is None:
        return f"{head}, and no probe round has completed yet: unpause and run the skynomad_probe DAG{tail}"
    recent = anywhere.ended_at >= now - pd.Timedelta(hours=max(verdict.allowed_hours, max_hours))
    if verdict.last is None:
        if recent:
            return (
                f"{head}: the skynomad_probe DAG completes rounds (last {anywhere.ended_at.isoformat()}) but never "
                f"probes the job's zones ({named}): add them to its regions / job_zones params{tail}"
            )
        return (
            f"{head}, and the skynomad_probe DAG has completed no round since {anywhere.ended_at.isoformat()}: "
            f"unpause it or see why its runs fail{tail}"
        )
    last = verdict.last
    if recent and anywhere.ended_at > last.ended_at:
        return (
            f"{head}: the skynomad_probe DAG completes rounds elsewhere (last {anywhere.ended_at.isoformat()}) but its "
            f"probe task for {last.cloud}/{last.region} has not completed one since {last.ended_at.isoformat()}: "
            f"its log says why{tail}"
        )
    return (
        f"{head}: the skynomad_probe DAG's last completed round of these markets ended {verdict.age_hours:.1f} h ago "
        f"({last.ended_at.isoformat()}; its rounds come {verdict.pace_hours:.2g} h apart): unpause it or see why its "
        f"runs fail{tail}"
    )


def instance_type_list(value) -> list[str] | None:
    """``instance_types`` as a flat list (a ``{cloud: [types]}`` mapping is merged), None for all."""
    if not value:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        out: list[str] = []
        for types in value.values():
            out.extend([types] if isinstance(types, str) else list(types))
        return out
    return list(value)
