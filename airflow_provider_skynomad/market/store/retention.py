"""Retention for the market table: full resolution for recent days, changes and hourly rows before.

A probe DAG on 200 markets every 10 minutes writes ~29k rows a day. Most of them repeat the
previous row of their market: under "between two rows the last one holds" (docs/market.md) such a
row adds nothing to any grid built from the table. `compact` deletes exactly those rows, and only
before a cutoff (`keep_full_days` before the newest row by default), so that:

- every value a grid reads at any instant is unchanged: a row is kept when any of its values
  (cloud, region, accelerator, counts, prices) differs from the previous row of its market;
- probe gaps stay visible: the first row of each market in each UTC clock hour is kept, so at
  most ~24 rows per market per day survive even when nothing changed;
- each market's newest row before the cutoff is kept, so a market's last-observed time (what the
  freshness checks and the probe planner look at) never moves;
- rows after the cutoff, where running jobs' recent windows and the freshness checks live, are
  never touched.

So a job whose window reaches back before the cutoff sees the same grid, forecasts and plan as
before (tested); it only loses repeated observations. The statement is a single DELETE with
window functions (LAG/LEAD per market), run in one transaction; it is idempotent. The same
transaction adds what it deleted to the `market_changes` counter, which incremental readers
(`MarketSource`) check on every read: a job holding rows that are gone reads its window again.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from sqlalchemy import String, delete, func, select, tuple_

from airflow_provider_skynomad.market.store.database import INSERT
from airflow_provider_skynomad.market.store.table import DELETED, MarketTable, _utc, market_changes, market_observations

DEFAULT_KEEP_FULL_DAYS = 7.0
"""Full resolution for a week: twice the default 72 h lookback, so a default job never reads a compacted row."""
MIN_KEEP_FULL_DAYS = 1.0
_VALUES = (
    "cloud",
    "region",
    "accelerator",
    "accelerator_count",
    "requested",
    "available",
    "spot_price",
    "on_demand_price",
)


@dataclass(frozen=True)
class CompactReport:
    """What `compact` did (or would do, with ``dry_run``)."""

    cutoff: pd.Timestamp | None
    examined: int
    deleted: int
    dry_run: bool = False


def compact(
    table: MarketTable,
    keep_full_days: float = DEFAULT_KEEP_FULL_DAYS,
    now: pd.Timestamp | None = None,
    dry_run: bool = False,
) -> CompactReport:
    """Delete rows before ``now - keep_full_days`` that repeat their market's previous row.

    :param now: the reference time (default: the table's newest row, so an idle table is never
        emptied by the clock moving on).
    :raises ValueError: ``keep_full_days`` below `MIN_KEEP_FULL_DAYS` or not a number.
    """
    keep = float(keep_full_days)
    if not keep >= MIN_KEEP_FULL_DAYS or keep == float("inf"):
        raise ValueError(f"keep_full_days must be a number of days ≥ {MIN_KEEP_FULL_DAYS:g}, got {keep_full_days!r}")
    reference = table.latest_observed_at() if now is None else pd.Timestamp(_utc(now))
    if reference is None:
        return CompactReport(cutoff=None, examined=0, deleted=0, dry_run=dry_run)
    cutoff = reference - pd.Timedelta(days=keep)
    t = market_observations
    bound = _utc(cutoff)
    redundant = _redundant(table.dialect, bound)
    examined = select(func.count()).select_from(t).where(t.c.observed_at < bound)
    with table.engine.begin() as conn:
        before = conn.execute(examined).scalar_one()
        if dry_run:
            found = conn.execute(select(func.count()).select_from(redundant.subquery())).scalar_one()
            return CompactReport(cutoff=cutoff, examined=before, deleted=found, dry_run=True)
        key = tuple_(t.c.zone, t.c.instance_type, t.c.observed_at)
        deleted = conn.execute(delete(t).where(t.c.observed_at < bound, key.in_(redundant))).rowcount
        if deleted:
            _count_deletions(conn, table.dialect, deleted)
    return CompactReport(cutoff=cutoff, examined=before, deleted=deleted)


def _count_deletions(conn, dialect: str, deleted: int) -> None:
    """Add to the deletion counter in the same transaction, so incremental readers re-read their window."""
    insert = INSERT[dialect](market_changes).values(kind=DELETED, count=deleted)
    conn.execute(
        insert.on_conflict_do_update(
            index_elements=["kind"], set_={"count": market_changes.c.count + insert.excluded.count}
        )
    )


def _redundant(dialect: str, bound):
    """Keys of rows before `bound` that repeat the previous row, are not first in their hour, and are not last."""
    t = market_observations
    window = {"partition_by": [t.c.zone, t.c.instance_type], "order_by": t.c.observed_at}
    if dialect == "postgresql":
        hour = func.date_trunc("hour", func.timezone("UTC", t.c.observed_at))
    else:  # SQLite stores UTC text 'YYYY-MM-DD HH:MM:SS...'; its first 13 characters are the hour
        hour = func.substr(t.c.observed_at, 1, 13, type_=String)
    ranked = (
        select(
            t.c.zone,
            t.c.instance_type,
            t.c.observed_at,
            hour.label("hour"),
            func.lag(hour).over(**window).label("previous_hour"),
            func.lead(t.c.observed_at).over(**window).label("next_at"),
            *(t.c[c] for c in _VALUES),
            *(func.lag(t.c[c]).over(**window).label(f"previous_{c}") for c in _VALUES),
        )
        .where(t.c.observed_at < bound)
        .subquery()
    )
    # The first row of a market has no previous row: the NULL comparisons below are not true, so it stays.
    return select(ranked.c.zone, ranked.c.instance_type, ranked.c.observed_at).where(
        ranked.c.next_at.is_not(None),
        ranked.c.hour == ranked.c.previous_hour,
        *(ranked.c[c] == ranked.c[f"previous_{c}"] for c in _VALUES),
    )
