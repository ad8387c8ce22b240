"""The market table: Market observations kept in their own database, never Airflow's.

Why a table and not files: parallel probe tasks append while operators read, and a trace
is just a dump of it. SQLite (one file, WAL + busy timeout so parallel writers queue instead
of failing) is the embedded default; PostgreSQL is used when the URL says so. Rows are keyed
on (zone, instance_type, observed_at) and inserted with ON CONFLICT DO NOTHING, because probe
retries are at-least-once: a repeated observation is a no-op and the first write wins.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import NamedTuple

import pandas as pd
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    DateTime,
    Double,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    and_,
    func,
    select,
    true,
    type_coerce,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from airflow_provider_skynomad.market.observations import COLUMNS, TIME_ORDER, validate_observations
from airflow_provider_skynomad.market.store import bulk, migration
from airflow_provider_skynomad.market.store.database import (
    INSERT,
    SQLITE_BUSY_TIMEOUT_SECONDS,
    MarketDatabase,
    MarketSchemaError,
    UtcDateTime,
    default_market_url,
    metadata,
    schema_version,
)
from airflow_provider_skynomad.market.store.database import utc as _utc

__all__ = [
    "SCHEMA_VERSION",
    "SQLITE_BUSY_TIMEOUT_SECONDS",
    "MarketSchemaError",
    "MarketTable",
    "UtcDateTime",
    "default_market_url",
    "market_changes",
    "market_observations",
    "schema_version",
]

SCHEMA_VERSION = 5
"""Bump when the table layout changes, and teach `create()` to migrate from the old one.
Version 2 added the index on (observed_at, zone, instance_type), version 3 the `market_changes`
table, version 4 put the primary key in the order (zone, observed_at, instance_type) and dropped
the (zone, observed_at) index it replaces (on SQLite the table is also stored in its key, WITHOUT
ROWID), version 5 the `probe_kind` column; `create()` migrates a version-1 to -4 database in place
(`MarketTable.migrate`)."""

PROBE_KIND = "probe_kind"
"""The column that says which kind of probe saw a row (``launch`` or ``request``, docs/probing.md);
NULL for rows that no probe of this package wrote (imported traces, rows stored before version 5).
It is not part of the observation format (`observations.COLUMNS`): traces and reads leave it out,
`MarketTable.probe_kinds` reads it."""

STORED_KEY = ("zone", "observed_at", "instance_type")
"""The primary key's column order: a job's reads (its zones over a time range, any instance type)
are a range of it, so no other index serves them. The logical key (`observations.KEY`) is the same
set of columns."""

market_observations = Table(
    "market_observations",
    metadata,
    Column("observed_at", UtcDateTime, nullable=False),
    Column("cloud", String, nullable=False),
    Column("region", String, nullable=False),
    Column("zone", String, nullable=False),
    Column("instance_type", String, nullable=False),
    Column("accelerator", String, nullable=False),
    Column("accelerator_count", Integer, nullable=False),
    Column("requested", Integer, nullable=False),
    Column("available", Integer, nullable=False),
    Column("spot_price", Double, nullable=False),
    Column("on_demand_price", Double, nullable=False),
    Column(PROBE_KIND, String(16), nullable=True),
    # The unique key the upsert relies on, and the index of a job's reads (`STORED_KEY`).
    PrimaryKeyConstraint(*STORED_KEY, name="pk_market_observations"),
    # Reads across all zones by time (the start-of-job check, the newest row, export in key order,
    # compaction's cutoff): without it PostgreSQL scans and sorts the whole table for each.
    Index("ix_market_observations_observed_at", *TIME_ORDER),
    # SQLite stores the rows in the primary key's B-tree instead of a rowid table beside it: one
    # B-tree fewer to write, and a job's range read is one contiguous run of the key.
    sqlite_with_rowid=False,
)

_OLD_INDEXES = ("ix_market_observations_zone_observed_at",)
"""Indexes of older layouts that the current key replaces."""

market_changes = Table(
    "market_changes",
    metadata,
    Column("kind", String(32), primary_key=True),
    Column("count", BigInteger, nullable=False),
)
"""Counters of what incremental readers cannot see in new rows: ``deleted`` counts the rows ever
deleted (compaction). A reader that held rows compares it with the figure it last saw, one
primary-key lookup per read, and reads its window again when it moved."""

_INSERT = INSERT
DELETED = "deleted"
"""The `market_changes` counter of deleted rows."""
_MIGRATES_FROM = (1, 2, 3, 4)


def _empty_frame() -> pd.DataFrame:
    """Zero rows with the dtypes validate_observations produces, so callers need no special case."""
    frame = pd.DataFrame({c: pd.Series(dtype=str) for c in COLUMNS})
    frame["observed_at"] = pd.Series(dtype="datetime64[us, UTC]")
    for column in ("accelerator_count", "requested", "available"):
        frame[column] = frame[column].astype("int64")
    for column in ("spot_price", "on_demand_price"):
        frame[column] = frame[column].astype(float)
    return frame


@functools.cache
def _read_dtypes() -> dict:
    """The dtypes of a validated frame, per column (what every read returns)."""
    return dict(_empty_frame().dtypes)


class Increment(NamedTuple):
    """What `MarketTable.read_increment` returns."""

    rows: pd.DataFrame
    deleted: int
    """The `market_changes` counter of rows ever deleted."""
    counted: int | None
    """Rows in `count_between`, when asked."""


class MarketTable(MarketDatabase):
    """Market observations in a SQLite or PostgreSQL database given by a SQLAlchemy URL.

    The schema is created on first use (`create()` is idempotent and safe to run from several
    processes at once). Make one instance per process: engines must not cross a fork.

    :param url: SQLAlchemy URL; `default_market_url()` when omitted. The password is never
        shown in messages (`display_url`).
    """

    component = "market"
    layout_version = SCHEMA_VERSION
    tables = (market_observations, market_changes)
    migrates_from = _MIGRATES_FROM
    label = "market table"

    def __init__(self, url: str | URL | None = None):
        super().__init__(url)
        self._held: Connection | None = None
        self._held_lock = threading.Lock()

    def migrate(self, conn: Connection, found: int) -> None:
        """Versions 1 to 4 lack the `probe_kind` column: it is added (stored rows read NULL there).
        Versions 1 to 3 keyed the rows (zone, instance_type, observed_at), with a (zone, observed_at)
        index for a job's reads; the key becomes `STORED_KEY` and that index goes (see `migration`)."""
        where = f"{self.label} at {self.display_url}"
        versions = f"{found} to {self.layout_version}"
        migration.add_column(conn, market_observations, PROBE_KIND, where=where, versions=versions)
        migration.move_primary_key(
            conn, market_observations, STORED_KEY, where=where, versions=f"{found} to {self.layout_version}"
        )
        migration.drop_indexes(conn, _OLD_INDEXES)

    def close(self) -> None:
        """Release the reader's kept connection and the pooled ones (PostgreSQL servers count them)."""
        with self._held_lock:
            self._drop_kept()
        super().close()

    # -- writes ------------------------------------------------------------------------------

    def append(self, frame: pd.DataFrame, source: str = "appended rows") -> int:
        """Validate and insert observations in one transaction; return how many rows were new.

        Bad rows raise TraceError before anything is written. Rows whose key is already
        present are skipped (a retried probe is a no-op; the stored observation wins).
        """
        if len(frame) == 0 and set(COLUMNS) <= set(frame.columns):
            return 0  # e.g. a probe round where every launch failed: nothing to record, not an error
        rows = validate_observations(frame, source=source)
        if PROBE_KIND in frame.columns:  # validation keeps the format's columns, in the frame's order
            rows[PROBE_KIND] = frame[PROBE_KIND].to_numpy()
        return self.append_chunks([rows], validated=True)

    def append_chunks(self, chunks: Iterable[pd.DataFrame], source: str = "appended rows", validated=False) -> int:
        """Insert chunks of observations in one transaction; return how many rows were new.

        Built for streams (`iter_observations`): each chunk is inserted as it comes, and if any
        chunk raises (a bad row, a database error), the whole transaction is rolled back, so
        nothing is written. `validated`: the chunks come from `validate_observations` already.
        A stream (not a list) is read one chunk ahead in a thread (`bulk.read_ahead`), so reading
        and validating the next chunk overlaps the database's insert of this one.
        """
        self._ensure()
        inserted = 0
        insert_for = _INSERT[self.dialect]
        with self.engine.begin() as conn, bulk.large_cache(conn, self.dialect):
            for chunk in chunks if isinstance(chunks, list | tuple) else bulk.read_ahead(chunks):
                if len(chunk) == 0:
                    continue
                rows = chunk if validated else validate_observations(chunk, source=source)
                inserted += bulk.insert_rows(conn, market_observations, self.dialect, rows, insert_for)
        return inserted

    # -- reads -------------------------------------------------------------------------------

    def read(
        self,
        zones: list[str] | None = None,
        since: datetime | str | pd.Timestamp | None = None,
        until: datetime | str | pd.Timestamp | None = None,
        instance_types: list[str] | None = None,
    ) -> pd.DataFrame:
        """Rows in the market-observation format, sorted by (observed_at, zone), typed.

        Rows are validated on their way in (`append`), and the schema holds their types and the
        key, so reads only type the columns: a job reads its window at every decision step.
        Filters combine: `since` is inclusive, `until` exclusive (so consecutive ranges never
        repeat a row); naive times are UTC. No matching rows → an empty, correctly typed frame.
        """
        self._ensure()
        table = market_observations
        statement = select(*self._columns()).order_by(table.c.observed_at, table.c.zone, table.c.instance_type)
        statement = statement.where(*self._filters(zones, since, until, instance_types))
        with self.engine.connect() as conn:
            rows = conn.execute(statement).all()
        return self._frame(rows)

    def read_increment(
        self,
        zones: list[str] | None,
        since: datetime | str | pd.Timestamp | None,
        until: datetime | str | pd.Timestamp | None,
        instance_types: list[str] | None = None,
        *,
        count_between: tuple | None = None,
    ) -> Increment:
        """`read`'s rows and the table's deletion counter (`market_changes`), in one round trip.

        For readers that hold rows and then read only newer ones (`MarketSource`): when the counter
        moved, rows they hold may be gone (compaction), so they read their window again. The counter
        is the outer side of a LEFT JOIN, so it comes back even when no row matches.

        :param count_between: (first, end): also count the matching rows (same zones and instance
            types) with first ≤ observed_at < end, in the same statement. A reader compares the
            count with what it holds there to learn whether a late commit landed, without fetching
            those rows.

        On PostgreSQL the statement runs on a connection this table keeps between calls, in
        autocommit (no transaction stays open): a pooled checkout pings the server first, a second
        round trip, and on a busy machine every round trip waits for a CPU. A connection the server
        dropped (a restart) is replaced and the read tried once more.
        """
        self._ensure()
        t, changes = market_observations, market_changes
        outer = [func.coalesce(func.max(changes.c.count), 0).label("deleted")]
        if count_between is not None:
            first, end = count_between
            counted = select(func.count()).where(*self._filters(zones, first, end, instance_types))
            outer.append(counted.scalar_subquery().label("counted"))
        deleted = select(*outer).where(changes.c.kind == DELETED).subquery()
        matching = and_(true(), *self._filters(zones, since, until, instance_types))
        extra = 1 if count_between is None else 2
        statement = (
            select(*deleted.c, *self._columns())
            .select_from(deleted.outerjoin(t, matching))
            .order_by(t.c.observed_at, t.c.zone, t.c.instance_type)
        )
        rows = self._read_kept(statement)
        counter = int(rows[0][0])
        counted_rows = int(rows[0][1]) if count_between is not None else None
        if rows[0][extra] is None:  # the join's one row without an observation: nothing matched
            return Increment(_empty_frame(), counter, counted_rows)
        return Increment(self._frame([row[extra:] for row in rows]), counter, counted_rows)

    def _read_kept(self, statement) -> list:
        """All rows of a read-only statement, on the kept connection where there is one (PostgreSQL)."""
        if self.dialect != "postgresql":
            with self.engine.connect() as conn:
                return conn.execute(statement).all()
        with self._held_lock:  # a SQLAlchemy connection is not for two threads at once
            try:
                return self._kept().execute(statement).all()
            except DBAPIError as exc:
                self._drop_kept()
                if not exc.connection_invalidated:
                    raise
            try:  # the server dropped the connection (e.g. it restarted): once more on a new one
                return self._kept().execute(statement).all()
            except DBAPIError:
                self._drop_kept()
                raise

    def _kept(self) -> Connection:
        if self._held is None:
            self._held = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        return self._held

    def _drop_kept(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None

    def probe_kinds(
        self, zones: list[str] | None = None, since: datetime | str | pd.Timestamp | None = None
    ) -> pd.DataFrame:
        """Which kind of probe saw each row: ``observed_at, zone, instance_type, probe_kind``
        (None where no probe of this package wrote the row), in time order."""
        self._ensure()
        t = market_observations
        statement = (
            select(t.c.observed_at, t.c.zone, t.c.instance_type, t.c[PROBE_KIND])
            .where(*self._filters(zones, since))
            .order_by(*(t.c[c] for c in TIME_ORDER))
        )
        with self.engine.connect() as conn:
            rows = conn.execute(statement).all()
        return pd.DataFrame(rows, columns=["observed_at", "zone", "instance_type", PROBE_KIND])

    def deletions(self) -> int:
        """How many rows were ever deleted from the table (by compaction); 0 for a new table."""
        self._ensure()
        statement = select(market_changes.c.count).where(market_changes.c.kind == DELETED)
        with self.engine.connect() as conn:
            return int(conn.execute(statement).scalar_one_or_none() or 0)

    def _columns(self) -> list:
        """The eleven columns, `observed_at` without `UtcDateTime`'s per-row processing (a window of
        200 markets is 86k rows): PostgreSQL's driver already returns aware datetimes, and SQLite's
        UTC text is parsed in one vectorised call by `_frame`."""
        table = market_observations
        raw = String() if self.dialect == "sqlite" else DateTime(timezone=True)
        return [type_coerce(table.c.observed_at, raw).label("observed_at"), *(table.c[c] for c in COLUMNS[1:])]

    @staticmethod
    def _frame(rows) -> pd.DataFrame:
        """Rows as `validate_observations` would type them (same dtypes), without re-checking them."""
        if not rows:
            return _empty_frame()
        # Column by column, letting pandas infer (the cheapest way, ~1 ms for a step's rows), then
        # cast only what came out otherwise than `validate_observations` types it.
        frame = pd.DataFrame(dict(zip(COLUMNS, zip(*rows, strict=True), strict=True)))
        wanted = _read_dtypes()
        wrong = {c: t for c, t in wanted.items() if frame[c].dtype != t}
        if "observed_at" in wrong:
            times = frame["observed_at"]
            if times.dtype == object or pd.api.types.is_string_dtype(times):  # SQLite's stored UTC text
                parsed = pd.to_datetime(times, format=bulk.SQLITE_TIME_FORMAT, utc=True)
            else:
                parsed = pd.to_datetime(times, utc=True)
            frame["observed_at"] = parsed.astype("datetime64[us, UTC]")
            del wrong["observed_at"]
        return frame.astype(wrong) if wrong else frame

    def markets(
        self,
        since: datetime | str | pd.Timestamp,
        until: datetime | str | pd.Timestamp,
        zones: list[str] | None = None,
        instance_types: list[str] | None = None,
        clouds: list[str] | None = None,
        regions: list[str] | None = None,
        accelerator: str | None = None,
    ) -> pd.DataFrame:
        """One row per market with rows in [since, until) that match: zone, instance_type, newest.

        The start-of-job check asks this instead of reading the whole window across every zone:
        the filters and the grouping run in the database (`accelerator` case-insensitively).
        """
        self._ensure()
        t = market_observations
        clauses = self._filters(zones, since, until, instance_types)
        if clouds is not None:
            clauses.append(t.c.cloud.in_(list(clouds)))
        if regions is not None:
            clauses.append(t.c.region.in_(list(regions)))
        if accelerator is not None:
            clauses.append(func.lower(t.c.accelerator) == str(accelerator).lower())
        statement = (
            select(t.c.zone, t.c.instance_type, func.max(t.c.observed_at).label("newest"))
            .where(*clauses)
            .group_by(t.c.zone, t.c.instance_type)
            .order_by(t.c.zone, t.c.instance_type)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(statement).all()
        frame = pd.DataFrame(rows, columns=["zone", "instance_type", "newest"])
        frame["newest"] = pd.to_datetime(frame["newest"], utc=True)
        return frame

    def zones_seen(
        self,
        since: datetime | str | pd.Timestamp,
        until: datetime | str | pd.Timestamp,
        zones: list[str] | None = None,
    ) -> list[str]:
        """Zones (among `zones`, if given) with at least one row in [since, until), sorted."""
        self._ensure()
        t = market_observations
        statement = select(t.c.zone).distinct().where(*self._filters(zones, since, until)).order_by(t.c.zone)
        with self.engine.connect() as conn:
            return list(conn.execute(statement).scalars())

    def iter_read(
        self,
        zones: list[str] | None = None,
        since: datetime | str | pd.Timestamp | None = None,
        until: datetime | str | pd.Timestamp | None = None,
        chunk_rows: int = 50_000,
    ) -> Iterator[pd.DataFrame]:
        """The rows `read` would return, as typed frames of at most `chunk_rows`, in the same order.

        For dumps of the whole table (`export`): COPY on PostgreSQL (`bulk.copy_out_chunks`), so
        memory stays bounded by one chunk whatever the table's size.
        """
        self._ensure()
        table = market_observations
        statement = select(*self._columns()).order_by(table.c.observed_at, table.c.zone, table.c.instance_type)
        statement = statement.where(*self._filters(zones, since, until))
        with self.engine.connect() as conn:
            copied = bulk.copy_out_chunks(conn, statement, chunk_rows) if self.dialect == "postgresql" else None
            if copied is not None:
                yield from copied
                return
            for rows in bulk.fetch_chunks(conn, statement, chunk_rows):
                yield self._frame(rows)

    def latest_observed_at(self, zones: list[str] | None = None) -> pd.Timestamp | None:
        """The newest observation time (optionally among `zones`), None for an empty table."""
        self._ensure()
        statement = select(func.max(market_observations.c.observed_at)).where(*self._filters(zones))
        with self.engine.connect() as conn:
            latest = conn.execute(statement).scalar_one_or_none()
        return None if latest is None else pd.Timestamp(_utc(latest))

    def count(self) -> int:
        """How many observations the table holds."""
        self._ensure()
        with self.engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(market_observations)).scalar_one()

    def zones(self) -> list[str]:
        """Zones with at least one observation, sorted."""
        self._ensure()
        statement = select(market_observations.c.zone).distinct().order_by(market_observations.c.zone)
        with self.engine.connect() as conn:
            return list(conn.execute(statement).scalars())

    @staticmethod
    def _filters(zones=None, since=None, until=None, instance_types=None) -> list:
        table = market_observations
        clauses = []
        if zones is not None:
            clauses.append(table.c.zone.in_(list(zones)))
        if instance_types is not None:
            clauses.append(table.c.instance_type.in_(list(instance_types)))
        if since is not None:
            clauses.append(table.c.observed_at >= _utc(since))
        if until is not None:
            clauses.append(table.c.observed_at < _utc(until))
        return clauses


_shared: dict[tuple[int, str], list] = {}
_shared_lock = threading.Lock()


def shared_table(url: str | URL | None = None) -> MarketTable:
    """The one `MarketTable` on `url` of this process, counted out to each user.

    A triggerer runs hundreds of triggers in one process; a table each would hold a PostgreSQL
    connection each (the reader's kept one), past the server's `max_connections` (100 by default).
    Reads are stateless and the kept connection is lock-guarded, so the triggers share one table
    and one connection. Keyed by process as well: a table must not cross a fork.
    """
    key = (os.getpid(), str(url) if url is not None else "")
    with _shared_lock:
        entry = _shared.get(key)
        if entry is None:
            entry = _shared[key] = [MarketTable(url), 0]
        entry[1] += 1
        return entry[0]


def release_shared(table: MarketTable) -> None:
    """Give back a table from `shared_table`; the last user closes it."""
    with _shared_lock:
        for key, entry in list(_shared.items()):
            if entry[0] is table:
                entry[1] -= 1
                if entry[1] <= 0:
                    del _shared[key]
                    table.close()
                return
    table.close()  # not a shared one
