"""The market database: one URL, one engine, and a versioned schema per component.

Why a module of its own: the market table and the tables beside it (free signals, probe spend)
live in one database behind one URL. They share the engine settings (SQLite WAL and busy
timeout, PostgreSQL connect timeout and pre-ping), the UTC timestamp type, and the way a
component's tables are created: idempotently, under one PostgreSQL advisory lock, recorded with
their layout version in ``schema_version`` so that a newer layout is refused, not misread.
"""

from __future__ import annotations

import importlib.util
import os
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from sqlalchemy import (
    Column,
    Connection,
    DateTime,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    event,
    func,
    inspect,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.schema import CreateIndex, CreateTable
from sqlalchemy.types import TypeDecorator

from airflow_provider_skynomad.exceptions import MarketSchemaError
from airflow_provider_skynomad.utils.sqlite import use_wal

SQLITE_BUSY_TIMEOUT_SECONDS = 60.0
# pg_advisory_xact_lock key shared by every process creating a schema (any fixed int64).
PG_CREATE_LOCK = zlib.crc32(b"airflow-provider-skynomad market schema")
INSERT = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}
"""The dialect's INSERT, which has ON CONFLICT DO NOTHING (insert-or-ignore) on both backends."""


class UtcDateTime(TypeDecorator):
    """Timezone-aware UTC timestamps on every backend.

    PostgreSQL stores TIMESTAMPTZ natively. SQLite has no time zones, so values are stored as
    UTC wall-clock text (a fixed format, so the unique key and range filters still work) and
    marked UTC again on the way out. Naive datetimes are refused: guessing a zone is how a
    market view ends up hours off.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"market timestamps must be timezone-aware, got naive {value!r}")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


metadata = MetaData()

schema_version = Table(
    "schema_version",
    metadata,
    Column("component", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
)


def default_market_url() -> str:
    """The embedded default: sqlite:///$SKYNOMAD_HOME/market.db (SKYNOMAD_HOME defaults to ~/.skynomad)."""
    home = Path(os.environ.get("SKYNOMAD_HOME") or Path.home() / ".skynomad").expanduser()
    return URL.create("sqlite", database=str(home / "market.db")).render_as_string()


def parse_url(url: str | URL) -> URL:
    """A supported SQLAlchemy URL (sqlite or postgresql, with an installed driver), or ValueError."""
    parsed = make_url(url)
    if parsed.drivername.split("+")[0] == "postgres":
        # Airflow's Connection.get_uri() spells PostgreSQL "postgres://", which SQLAlchemy rejects.
        parsed = parsed.set(drivername=parsed.drivername.replace("postgres", "postgresql", 1))
    if parsed.drivername == "postgresql":
        # SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3; we depend on psycopg2 (the
        # `postgres` extra), so use whichever driver is actually installed.
        driver = "psycopg2" if importlib.util.find_spec("psycopg2") else "psycopg"
        parsed = parsed.set(drivername=f"postgresql+{driver}")
    if parsed.get_backend_name() not in INSERT:
        raise ValueError(
            f"market table supports sqlite and postgresql URLs, got {parsed.render_as_string(hide_password=True)}"
        )
    return parsed


def utc(value: datetime | str | pd.Timestamp) -> datetime:
    """A bound for range filters; naive values are taken as UTC (traces are written in UTC)."""
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return stamp.floor("us").to_pydatetime()  # the database keeps microseconds; no warning


def make_engine(url: URL) -> Engine:
    """The engine every table of the market database uses (see `_sqlite_pragmas` for SQLite's settings)."""
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    connect_args = {} if "connect_timeout" in url.query else {"connect_timeout": 10}
    return create_engine(url, connect_args=connect_args, pool_pre_ping=True)


class MarketDatabase:
    """A component's tables in the market database: its engine (own or shared) and versioned schema.

    Subclasses name their `component`, `layout_version` and `tables`; `create()` makes the schema
    on first use. Make one instance per process: engines must not cross a fork.

    :param url: SQLAlchemy URL; `default_market_url()` when omitted. The password is never
        shown in messages (`display_url`).
    :param share: another open store of the same database whose engine to use (and not close).
    """

    component: str
    layout_version: int
    tables: tuple[Table, ...] = ()
    migrates_from: tuple[int, ...] = ()
    label = "market tables"
    """How messages name the component's tables."""

    def __init__(self, url: str | URL | None = None, *, share: MarketDatabase | None = None):
        if share is not None:
            self.url, self.engine, self._owns = share.url, share.engine, False
        else:
            self.url = parse_url(url if url is not None else default_market_url())
            self.engine, self._owns = make_engine(self.url), True
        self.display_url = self.url.render_as_string(hide_password=True)
        self.dialect = self.url.get_backend_name()
        self._ready = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.display_url!r})"

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release pooled connections (PostgreSQL servers count them); a shared engine is left to its owner."""
        if self._owns:
            self.engine.dispose()

    def create(self) -> None:
        """Create the component's tables if missing and check their version; idempotent, concurrency-safe."""
        create_schema(
            self.engine,
            self.dialect,
            self.component,
            self.layout_version,
            self.tables,
            migrates_from=self.migrates_from,
            message=self._version_message,
            migrate=self.migrate,
        )
        self._ready = True

    def migrate(self, conn: Connection, found: int) -> None:
        """Change what an older layout (version `found`) has that the current one has not.

        Runs inside `create_schema`'s transaction, holding its lock, before the missing tables and
        indexes are created. The default has nothing to change: older layouts only lacked things.
        """

    def _ensure(self) -> None:
        if not self._ready:
            self.create()

    @classmethod
    def open_existing(cls, url: str | URL):
        """The component's tables to read, or None when they do not exist at this layout: nothing is
        created, not even an SQLite file. For readers that must leave a database as they found it
        (a page view)."""
        parsed = parse_url(url)
        if parsed.get_backend_name() == "sqlite":
            path = parsed.database
            if not path or path == ":memory:" or not Path(path).expanduser().is_file():
                return None
        store = cls(parsed)
        try:
            with store.engine.connect() as conn:
                found = current_version(conn, store.component)
        except BaseException:
            store.close()
            raise
        if found != store.layout_version:
            store.close()
            return None
        store._ready = True
        return store

    def _version_message(self, found: int | None) -> str:
        if found is not None and found > self.layout_version:
            return (
                f"{self.label} at {self.display_url}: schema version {found}, but this "
                f"airflow-provider-skynomad only knows version {self.layout_version}; upgrade the package "
                "or point the URL at another database"
            )
        return (
            f"{self.label} at {self.display_url}: schema version {found}, which this code "
            f"(version {self.layout_version}) cannot migrate; export it with the release that wrote it"
        )


def create_schema(
    engine: Engine,
    dialect: str,
    component: str,
    version: int,
    tables: tuple[Table, ...],
    *,
    migrates_from: tuple[int, ...] = (),
    message: Callable[[int | None], str],
    migrate: Callable[[Connection, int], None] | None = None,
) -> None:
    """Create `tables` and record `component` at `version`; refuse versions it cannot use.

    A layout at a version in `migrates_from` is brought up to date by `migrate` (what changed,
    e.g. a key), then by creating what is missing, all in one transaction. Concurrent creators
    are serialised: PostgreSQL with a transaction-scoped advisory lock (CREATE ... IF NOT EXISTS
    alone can still collide in the catalog), SQLite by taking the write lock up front (BEGIN
    IMMEDIATE, queued by the busy timeout), so a second creator sees the first one's result. The
    fast path runs no DDL and takes no lock, so read-only database users work too.
    """
    with engine.begin() as conn:
        found = current_version(conn, component)
        if found == version:
            return
        if found is not None and found not in migrates_from:
            raise MarketSchemaError(message(found))
        if dialect == "postgresql":
            conn.execute(select(func.pg_advisory_xact_lock(PG_CREATE_LOCK)))
        elif not conn.connection.dbapi_connection.in_transaction:
            # pysqlite has not begun a transaction for the reads above; DDL would otherwise autocommit.
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        conn.execute(CreateTable(schema_version, if_not_exists=True))
        found = current_version(conn, component)
        if found == version:
            return  # another process created it while this one waited for the lock
        if found is not None and found not in migrates_from:
            raise MarketSchemaError(message(found))
        if found is not None and migrate is not None:
            migrate(conn, found)
        for table in tables:
            conn.execute(CreateTable(table, if_not_exists=True))
            for index in table.indexes:
                conn.execute(CreateIndex(index, if_not_exists=True))
        insert = INSERT[dialect](schema_version).values(component=component, version=version)
        conn.execute(insert.on_conflict_do_nothing(index_elements=["component"]))
        conn.execute(
            update(schema_version)
            .where(schema_version.c.component == component, schema_version.c.version.in_(migrates_from))
            .values(version=version)
        )
        found = current_version(conn, component)
        if found != version:
            raise MarketSchemaError(message(found))


def current_version(conn: Connection, component: str) -> int | None:
    """The layout version recorded for `component`, None when it was never created."""
    if not inspect(conn).has_table(schema_version.name):
        return None
    return conn.execute(
        select(schema_version.c.version).where(schema_version.c.component == component)
    ).scalar_one_or_none()


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    """WAL and a busy timeout (`airflow_provider_skynomad.utils.sqlite`): readers beside the one writer."""
    use_wal(dbapi_connection, SQLITE_BUSY_TIMEOUT_SECONDS)
