"""Market-table summaries computed by the database: time buckets per market and the latest row per market.

The markets page shows weeks of probes for dozens of markets (30 days × 50 markets every 10
minutes is 216,000 rows). Fetching every row into pandas to draw ~120 columns costs seconds per
page; GROUP BY in SQLite or PostgreSQL returns a few thousand rows instead. Same table and
columns as market/store/table.py (read-only), SQLAlchemy Core on both backends.
"""

from __future__ import annotations

import pandas as pd
from sqlalchemy import Float, Integer, and_, case, cast, func, select

from airflow_provider_skynomad.market.store.table import MarketTable, market_observations

T = market_observations


def _epoch_seconds(table: MarketTable):
    if table.dialect == "sqlite":  # stored as UTC wall-clock text (market/store/table.py's UtcDateTime)
        return cast(func.strftime("%s", T.c.observed_at), Integer)
    return cast(func.extract("epoch", T.c.observed_at), Float)


def _window(since: pd.Timestamp, until: pd.Timestamp | None):
    """`since` inclusive, `until` (None: no end) inclusive: a simulated cloud's imported trace also
    holds rows after its clock's now, which no page may show as observed."""
    condition = T.c.observed_at >= since.to_pydatetime()
    return condition if until is None else and_(condition, T.c.observed_at <= until.to_pydatetime())


def time_bounds(
    table: MarketTable, since: pd.Timestamp, until: pd.Timestamp | None = None
) -> tuple[pd.Timestamp, pd.Timestamp] | None:
    """(first, last) observation time from `since` to `until`, None when there is none."""
    table._ensure()  # noqa: SLF001 - the table's own schema check before any read
    statement = select(func.min(T.c.observed_at), func.max(T.c.observed_at)).where(_window(since, until))
    with table.engine.connect() as conn:
        first, last = conn.execute(statement).one()
    if first is None:
        return None
    return pd.Timestamp(first).tz_convert("UTC"), pd.Timestamp(last).tz_convert("UTC")


def buckets(
    table: MarketTable, start: pd.Timestamp, bucket_hours: float, until: pd.Timestamp | None = None
) -> pd.DataFrame:
    """Per (zone, instance_type, bucket ≥ 0 from `start`, up to `until`): probes, probes that found
    capacity, mean spot price, cheapest on-demand price."""
    seconds = bucket_hours * 3600.0
    bucket = cast(func.floor((_epoch_seconds(table) - start.timestamp()) / seconds), Integer).label("bucket")
    usable = case((T.c.available >= case((T.c.requested > 1, T.c.requested), else_=1), 1), else_=0)
    statement = (
        select(
            T.c.zone,
            T.c.instance_type,
            bucket,
            func.count().label("probes"),
            func.sum(usable).label("usable"),
            func.avg(T.c.spot_price).label("spot_price"),
            func.min(T.c.on_demand_price).label("on_demand_price"),
        )
        .where(_window(start, until))
        .group_by(T.c.zone, T.c.instance_type, bucket)
    )
    with table.engine.connect() as conn:
        rows = conn.execute(statement).all()
    frame = pd.DataFrame(
        [tuple(r) for r in rows],
        columns=["zone", "instance_type", "bucket", "probes", "usable", "spot_price", "on_demand_price"],
    )
    return frame.astype({"bucket": int, "probes": int, "usable": int, "spot_price": float, "on_demand_price": float})


def latest_rows(table: MarketTable, since: pd.Timestamp, until: pd.Timestamp | None = None) -> pd.DataFrame:
    """The newest observation (up to `until`) of every market seen since `since`, in the
    market-observation columns."""
    from airflow_provider_skynomad.market.observations import COLUMNS

    newest = (
        select(T.c.zone, T.c.instance_type, func.max(T.c.observed_at).label("last"))
        .where(_window(since, until))
        .group_by(T.c.zone, T.c.instance_type)
        .subquery()
    )
    statement = select(*(T.c[c] for c in COLUMNS)).join(
        newest,
        and_(T.c.zone == newest.c.zone, T.c.instance_type == newest.c.instance_type, T.c.observed_at == newest.c.last),
    )
    with table.engine.connect() as conn:
        rows = conn.execute(statement).all()
    frame = pd.DataFrame([tuple(r) for r in rows], columns=COLUMNS)
    frame["observed_at"] = pd.to_datetime(frame["observed_at"], utc=True)
    return frame
