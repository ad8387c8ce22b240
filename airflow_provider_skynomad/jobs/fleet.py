"""What a running job sees of its own deployment: the other jobs' spot holdings and claims, in its view.

The trigger of every job publishes where it stands to the live-status table (`jobs.live`); this
module turns the other jobs' rows into the planner's `market.fleet.Fleet` and lays it on the view
the job plans with, so the fleet-aware planner prices the capacity left to *this* job (see
`planner.crowding`). Each job still decides alone, from those shared facts.

A probe sees the spot capacity the deployment's groups leave, so the market table's rows after a
group launched are short of what the zone has by what the group holds. The planner reads a
market's capacity as a total and subtracts the fleet itself; the view therefore adds back, from
the tick after each group's launch on, what that group holds (the job's own group included: a
probe of its own zone sees its instances as taken). Without it the fleet would be counted twice.

Another job's row is advice this job may ignore, never a reason to stop: one that the planner
cannot read, or whose group launched at a moment the cloud's clock cannot have shown (after now,
or before any job could have started), is left out alone (`believed`) and said at DEBUG.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace

import numpy as np
import pandas as pd

from airflow_provider_skynomad.jobs.live import LONGEST_HOURS
from airflow_provider_skynomad.jobs.params import MAX_INSTANCES
from airflow_provider_skynomad.market.fleet import Fleet, FleetRowError, claim_of
from airflow_provider_skynomad.market.view import MarketView

HOLDING = "spot"
LAUNCH_AHEAD_HOURS = 1.0
"""How far past this job's cloud clock another job's launch may be stamped: two triggerers' clocks
differ by seconds, but a simulated cloud's hours run faster than the wall's."""

log = logging.getLogger(__name__)


def planner_rows(live_rows: list[dict], keys: list[str]) -> list[dict]:
    """The live table's rows (`jobs.live.FLEET_FIELDS`) as `market.fleet` rows over the view's market keys.

    A job names its market by its own planner key; where this view keys markets by zone alone (one
    instance type) the zone matches. A row of a market outside the view is left out by `Fleet`.
    """
    rows = []
    for row in live_rows:
        market = row.get("market")
        if market not in keys and row.get("zone") in keys:
            market = row["zone"]
        mode = row.get("mode")
        if mode is None and row.get("wants"):
            mode, market = "waiting", row["wants"]  # idle, waiting for spot there: a claim
        elif mode not in ("spot", "on-demand"):
            continue
        rows.append(
            {
                "job_id": row["job_id"],
                "market": market,
                "mode": mode,
                "count": int(row.get("instances") or 1),
                "since": row.get("launched_at_cloud_hours"),
                "slack_hours": float(row.get("slack_hours") or 0.0),
            }
        )
    return rows


def with_fleet(
    view: MarketView, rows: list[dict], me: str, own: dict | None, now_hours: float, now: pd.Timestamp
) -> MarketView:
    """`view` with the other jobs' `rows` as its fleet and their (and this job's `own`) holdings added back.

    :param rows: `market.fleet` rows of the other jobs (`planner_rows`); `since` on the cloud's clock in hours.
    :param own: this job's row when its spot group runs (it is the fleet's `me`), else None.
    :param now_hours, now: the cloud's clock now, in hours and as the timestamp the grid's ticks use.
    """
    everyone = believed([*rows, *([own] if own else [])], now_hours)
    if not everyone:
        return view
    try:
        fleet = Fleet.from_rows(everyone, view.markets, me=me)
    except FleetRowError:
        return view  # a row the planner cannot read: plan alone rather than on a wrong fleet
    grid = view._grid  # noqa: SLF001 - a copy of the view's own grid, capacity added back
    available = grid.available.copy()
    for row in everyone:
        if row["mode"] != HOLDING or row["market"] not in view.keys or row.get("since") is None:
            continue
        launched = now - pd.Timedelta(hours=now_hours - float(row["since"]))
        first = math.floor((launched - grid.start) / pd.Timedelta(hours=grid.step_hours)) + 1
        if first <= view.tick:
            available[max(0, first) : view.tick + 1, view.index(row["market"])] += int(row["count"])
    changed = not np.array_equal(available, grid.available)
    added = tuple(sorted((r["market"], float(r["since"]), int(r["count"])) for r in everyone if r["mode"] == HOLDING))
    return MarketView(
        replace(grid, available=available) if changed else grid,
        view.tick,
        view.gang_size,
        seen=view._seen,  # noqa: SLF001
        egress_usd_per_gb=view.egress_usd_per_gb,
        table=view._table,  # noqa: SLF001
        source_key=(view.source_key, "fleet", added) if changed else view.source_key,
        fleet=fleet,
    )


def believed(rows: list[dict], now_hours: float) -> list[dict]:
    """The other jobs' `rows` this job can plan with; each other one is left out alone.

    A row is kept when the planner can read it (`market.fleet.claim_of`, counts up to the largest
    gang), it is the first of its job, and a group's launch (`since`, cloud hours) is a number no
    later than now (give or take `LAUNCH_AHEAD_HOURS`) and no earlier than any job could have
    started (`jobs.live.LONGEST_HOURS` ago).
    """
    kept, seen = [], set()
    for n, row in enumerate(rows):
        try:
            claim = claim_of(row, n, MAX_INSTANCES)
        except FleetRowError as exc:
            log.debug("Leaving another job's fleet row out: %s", exc)
            continue
        since = row.get("since")
        if since is not None and (
            isinstance(since, bool)
            or not isinstance(since, (int, float))
            or not now_hours - LONGEST_HOURS <= since <= now_hours + LAUNCH_AHEAD_HOURS
        ):
            log.debug("Leaving job %.64s's fleet row out: its group launched at %r cloud hours", claim.job_id, since)
            continue
        if claim.job_id in seen:
            log.debug("Leaving job %.64s's second fleet row out", claim.job_id)
            continue
        seen.add(claim.job_id)
        kept.append(row)
    return kept


class FleetLens:
    """One job's reading of its deployment's live-status table, laid on each view it plans with.

    :param board: the live-status table (`jobs.live.LiveStatusTable`) of the job's market database.
    :param job_id: the job (its own row is not the fleet's).
    """

    def __init__(self, board, job_id: str):
        self.board = board
        self.job_id = job_id

    def apply(self, view: MarketView, cloud, own: dict | None) -> MarketView:
        """`view` with the fleet as the table shows it now; the view unchanged if the table cannot be read."""
        try:
            live = self.board.fleet(exclude_job_id=self.job_id)
        except Exception:  # noqa: BLE001 - the fleet is advice: a job plans alone rather than not at all
            return view
        rows = planner_rows(live, view.keys)
        if not rows and own is None:
            return view
        return with_fleet(view, rows, self.job_id, own, float(cloud.now_hours()), cloud.now_timestamp())


def own_row(job_id: str, state, group, job_start_hours: float, count: int) -> dict | None:
    """This job's row when its spot group runs (its place in the youngest-first order), else None.

    `since` is the group's launch on the cloud's clock, as the other jobs publish theirs; the
    planner reads only `since` of its own row, so its slack is left at 0.
    """
    running = state.running if group is not None else None
    if running is None or not group.spot:
        return None
    return {
        "job_id": job_id,
        "market": running.market,
        "mode": HOLDING,
        "count": count,
        "since": job_start_hours + state.running_since_hours,
        "slack_hours": 0.0,
    }
