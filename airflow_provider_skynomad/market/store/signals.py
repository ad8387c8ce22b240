"""What the probe DAG learns for free and what it spends, kept beside the market table.

Two tables in the market table's database (same URL, engine settings, UTC times and versioned
schema, from `market/store/database.py`):

- ``market_signals``: free signals (`clouds.base.Signal`: AWS spot placement scores, spot price
  history), one row per (zone, instance type, kind, count, time). They cost nothing to read, so
  the probe DAG stores every one each run; the probe planner reads them before paying for a launch.
- ``probe_spend``: one row per launch probe the probe DAG paid for: where, when, how many it asked
  for and got, and what it cost in USD. The daily budget is enforced against it, `skynomad market
  spend` prints it, and a job's summary takes its share of it (`probing.plan.probe_cost_for`).

Both are insert-or-ignore on their key: a retried probe task writes the same rows again, and the
first write wins, exactly as for observations. Their layout is versioned under the component
``signals`` of the market database's ``schema_version`` table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import pandas as pd
from sqlalchemy import (
    Column,
    Double,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    func,
    select,
)
from sqlalchemy.engine import URL

from airflow_provider_skynomad.market.store.database import INSERT, MarketDatabase, UtcDateTime, utc
from airflow_provider_skynomad.market.store.table import MarketTable

SCHEMA_VERSION = 1
"""Bump when either table's layout changes, and teach `create()` to migrate from the old one."""

_COMPONENT = "signals"
SIGNAL_KINDS = ("placement_score", "spot_price")

metadata = MetaData()

market_signals = Table(
    "market_signals",
    metadata,
    Column("observed_at", UtcDateTime, nullable=False),
    Column("cloud", String, nullable=False),
    Column("region", String, nullable=False),
    Column("zone", String, nullable=False),
    Column("instance_type", String, nullable=False),
    Column("kind", String, nullable=False),
    Column("count", Integer, nullable=False),
    Column("value", Double, nullable=False),
    PrimaryKeyConstraint("zone", "instance_type", "kind", "count", "observed_at", name="pk_market_signals"),
    Index("ix_market_signals_observed_at", "observed_at"),
)

probe_spend = Table(
    "probe_spend",
    metadata,
    Column("probed_at", UtcDateTime, nullable=False),
    Column("cloud", String, nullable=False),
    Column("region", String, nullable=False),
    Column("zone", String, nullable=False),
    Column("instance_type", String, nullable=False),
    Column("requested", Integer, nullable=False),
    Column("available", Integer, nullable=False),
    Column("usd", Double, nullable=False),
    Column("reason", String, nullable=False),
    PrimaryKeyConstraint("zone", "instance_type", "probed_at", name="pk_probe_spend"),
    Index("ix_probe_spend_probed_at", "probed_at"),
)

SIGNAL_COLUMNS = [c.name for c in market_signals.columns]
SPEND_COLUMNS = [c.name for c in probe_spend.columns]


@dataclass(frozen=True)
class ProbeSpend:
    """One launch probe the probe DAG paid for (a row of ``probe_spend``)."""

    probed_at: datetime
    cloud: str
    region: str
    zone: str
    instance_type: str
    requested: int
    available: int
    usd: float
    reason: str = ""


class SignalTable(MarketDatabase):
    """Free signals and the probe-spend record, in the market table's database.

    :param url: SQLAlchemy URL of the market database (`default_market_url()` when omitted).
    :param market: an open `MarketTable` whose engine to share instead of opening another.
    """

    component = _COMPONENT
    layout_version = SCHEMA_VERSION
    tables = (market_signals, probe_spend)
    label = "signal and probe-spend tables"

    def __init__(self, url: str | URL | None = None, *, market: MarketTable | None = None):
        super().__init__(url, share=market)

    # -- free signals ------------------------------------------------------------------------

    def append_signals(self, signals: Iterable) -> int:
        """Insert `clouds.base.Signal`s (or dicts of the same fields); return how many were new.

        Every value is checked first: a known kind, a finite value ≥ 0, a count ≥ 1, a
        timezone-aware time. Nothing is written when one is wrong.
        """
        records = [_signal_record(s) for s in signals]
        if not records:
            return 0
        self._ensure()
        return self._insert(market_signals, records, ["zone", "instance_type", "kind", "count", "observed_at"])

    def read_signals(self, zones: list[str] | None = None, since=None, until=None) -> pd.DataFrame:
        """Signal rows sorted by (observed_at, zone, kind); `since` inclusive, `until` exclusive."""
        self._ensure()
        table = market_signals
        statement = select(*(table.c[c] for c in SIGNAL_COLUMNS)).order_by(
            table.c.observed_at, table.c.zone, table.c.kind
        )
        statement = statement.where(*_filters(table, table.c.observed_at, zones, since, until))
        return self._frame(statement, SIGNAL_COLUMNS, "observed_at")

    # -- probe spend -------------------------------------------------------------------------

    def record_probes(self, probes: Iterable[ProbeSpend]) -> int:
        """Insert paid probes; return how many were new (a retried task's rows are kept as stored)."""
        records = [_spend_record(p) for p in probes]
        if not records:
            return 0
        self._ensure()
        return self._insert(probe_spend, records, ["zone", "instance_type", "probed_at"])

    def read_spend(self, zones: list[str] | None = None, since=None, until=None) -> pd.DataFrame:
        """Paid probes sorted by (probed_at, zone); `since` inclusive, `until` exclusive."""
        self._ensure()
        table = probe_spend
        statement = select(*(table.c[c] for c in SPEND_COLUMNS)).order_by(table.c.probed_at, table.c.zone)
        statement = statement.where(*_filters(table, table.c.probed_at, zones, since, until))
        return self._frame(statement, SPEND_COLUMNS, "probed_at")

    def spent_usd(self, since, until=None) -> float:
        """Total USD of the probes in [since, until)."""
        self._ensure()
        table = probe_spend
        statement = select(func.coalesce(func.sum(table.c.usd), 0.0)).where(
            *_filters(table, table.c.probed_at, None, since, until)
        )
        with self.engine.connect() as conn:
            return float(conn.execute(statement).scalar_one())

    def daily_spend(self, since=None, until=None) -> pd.DataFrame:
        """USD and probe counts per UTC day per market: columns day, cloud, zone, instance_type,
        probes, usd; sorted by day then zone."""
        frame = self.read_spend(since=since, until=until)
        columns = ["day", "cloud", "zone", "instance_type", "probes", "usd"]
        if frame.empty:
            return pd.DataFrame(columns=columns)
        frame["day"] = frame["probed_at"].dt.strftime("%Y-%m-%d")
        grouped = frame.groupby(["day", "cloud", "zone", "instance_type"], sort=True).agg(
            probes=("usd", "size"), usd=("usd", "sum")
        )
        return grouped.reset_index()[columns]

    # -- helpers -----------------------------------------------------------------------------

    def _insert(self, table: Table, records: list[dict], key: list[str]) -> int:
        statement = INSERT[self.dialect](table).on_conflict_do_nothing(index_elements=key).returning(table.c.zone)
        with self.engine.begin() as conn:
            return len(conn.execute(statement, records).all())

    def _frame(self, statement, columns: list[str], time_column: str) -> pd.DataFrame:
        with self.engine.connect() as conn:
            rows = conn.execute(statement).all()
        frame = pd.DataFrame(rows, columns=columns)
        frame[time_column] = pd.to_datetime(frame[time_column], utc=True)
        return frame


def _filters(table: Table, time_column, zones, since, until) -> list:
    clauses = []
    if zones is not None:
        clauses.append(table.c.zone.in_(list(zones)))
    if since is not None:
        clauses.append(time_column >= utc(since))
    if until is not None:
        clauses.append(time_column < utc(until))
    return clauses


def _aware(value, what: str) -> datetime:
    stamp = pd.Timestamp(value)
    if stamp.tzinfo is None:
        raise ValueError(f"{what}: times must be timezone-aware (UTC), got naive {value!r}")
    return stamp.tz_convert("UTC").floor("us").to_pydatetime()


def _number(value, what: str, minimum: float = 0.0) -> float:
    number = float(value)
    if not (number == number and abs(number) != float("inf")) or number < minimum:
        raise ValueError(f"{what}: expected a finite number ≥ {minimum:g}, got {value!r}")
    return number


def _signal_record(signal) -> dict:
    data = signal if isinstance(signal, dict) else signal.__dict__
    where = f"signal {data.get('kind')!r} for {data.get('zone')!r}"
    if data.get("kind") not in SIGNAL_KINDS:
        raise ValueError(f"{where}: kind must be one of {SIGNAL_KINDS}")
    count = int(data.get("count", 1))
    if count < 1:
        raise ValueError(f"{where}: count must be ≥ 1, got {count}")
    for name in ("cloud", "region", "zone", "instance_type"):
        if not str(data.get(name) or ""):
            raise ValueError(f"{where}: {name} is empty")
    return {
        "observed_at": _aware(data["observed_at"], where),
        "cloud": str(data["cloud"]),
        "region": str(data["region"]),
        "zone": str(data["zone"]),
        "instance_type": str(data["instance_type"]),
        "kind": str(data["kind"]),
        "count": count,
        "value": _number(data["value"], where),
    }


def _spend_record(probe: ProbeSpend) -> dict:
    where = f"probe of {probe.zone} {probe.instance_type}"
    if not 0 <= int(probe.available) <= int(probe.requested) or int(probe.requested) < 1:
        raise ValueError(f"{where}: need 0 ≤ available ≤ requested and requested ≥ 1, got {probe}")
    return {
        "probed_at": _aware(probe.probed_at, where),
        "cloud": probe.cloud,
        "region": probe.region,
        "zone": probe.zone,
        "instance_type": probe.instance_type,
        "requested": int(probe.requested),
        "available": int(probe.available),
        "usd": _number(probe.usd, where),
        "reason": probe.reason or "",
    }
