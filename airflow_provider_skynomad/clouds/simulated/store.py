"""The simulated cloud's state in a database: one row per group, probe and checkpoint copy.

The operator launches in a worker, the trigger polls in the triggerer (whose blocking calls run
in threads), a retried task and a test in another process reconnect: all of them share one
cloud. Each group is its own row, changed in a short transaction that locks only that row
(PostgreSQL: ``SELECT ... FOR UPDATE``; SQLite: ``BEGIN IMMEDIATE``, one writer at a time but
readers beside it in WAL mode), so hundreds of jobs polling their groups don't queue behind
one lock, and a poll that changes nothing writes nothing.

The default is a SQLite file in the state directory (``state.db``); a ``state_url`` (any
SQLAlchemy URL, e.g. PostgreSQL) puts the rows in a real server. Every row carries its cloud's
id (made once with the clock, `clock.py`), so clouds of different state directories
can share one database without seeing each other's groups.

A group's row holds its whole record (plain JSON, see `groups.py`) beside the columns
it is looked up by; a client token is unique per cloud, which is what makes a launch
idempotent across processes (one launcher per token at a time is the token's lock file, see
`SimulatedCloud.launch`).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import (
    JSON,
    Column,
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    create_engine,
    delete,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import make_url

from airflow_provider_skynomad.utils.sqlite import use_wal

SQLITE_BUSY_TIMEOUT_SECONDS = 60.0
STATE_DB_FILE = "state.db"
# pg_advisory_xact_lock key of every process creating these tables (any fixed int64).
_PG_CREATE_LOCK = 0x534B4E53494D

metadata = MetaData()
groups = Table(
    "skynomad_sim_groups",
    metadata,
    Column("cloud_id", String(64), primary_key=True),
    Column("group_id", String(32), primary_key=True),
    Column("client_token", String(512), nullable=False),
    Column("job_id", String(128), nullable=False),
    Column("launched_at_hours", Float, nullable=False),
    Column("record", JSON, nullable=False),
    UniqueConstraint("cloud_id", "client_token", name="skynomad_sim_groups_token"),
    Index("skynomad_sim_groups_job", "cloud_id", "job_id"),
)
probes = Table(
    "skynomad_sim_probes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cloud_id", String(64), nullable=False, index=True),
    Column("entry", JSON, nullable=False),
)
egress = Table(
    "skynomad_sim_egress",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cloud_id", String(64), nullable=False, index=True),
    Column("entry", JSON, nullable=False),
)
_LINES = {"probes": probes, "egress": egress}


def default_state_url(state_dir: Path) -> str:
    return f"sqlite:///{state_dir / STATE_DB_FILE}"


def display_url(url: str | None) -> str | None:
    """`url` with its password masked: what may go in logs, messages and `cloud.json`."""
    if url is None:
        return None
    return make_url(url).render_as_string(hide_password=True)


@contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `lock_path` for the duration of the block (files, not rows)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class StateStore:
    """Groups, probes and checkpoint copies of one cloud (`cloud_id`) in the database at `url`."""

    def __init__(self, url: str, cloud_id: str):
        self.url = url
        self.cloud_id = cloud_id
        self.engine = open_database(url)
        self._sqlite = self.engine.dialect.name == "sqlite"

    # -- groups ------------------------------------------------------------------------------

    def group(self, group_id: str) -> dict | None:
        with self.engine.connect() as conn:
            return conn.execute(select(groups.c.record).where(self._is(group_id))).scalar_one_or_none()

    def group_of_token(self, client_token: str) -> dict | None:
        query = select(groups.c.record).where(groups.c.cloud_id == self.cloud_id, groups.c.client_token == client_token)
        with self.engine.connect() as conn:
            return conn.execute(query).scalar_one_or_none()

    def records(self, job_id: str | None = None) -> list[dict]:
        """Every group's record (of `job_id`, if given), oldest launch first."""
        query = select(groups.c.record).where(groups.c.cloud_id == self.cloud_id)
        if job_id is not None:
            query = query.where(groups.c.job_id == job_id)
        query = query.order_by(groups.c.launched_at_hours, groups.c.group_id)
        with self.engine.connect() as conn:
            return list(conn.execute(query).scalars())

    def insert(self, record: dict) -> None:
        """Record a new group; a second group for one client token is refused by the database."""
        with self._write() as conn:
            conn.execute(self._group_row(record))

    def _group_row(self, record: dict):
        return insert(groups).values(
            cloud_id=self.cloud_id,
            group_id=record["group_id"],
            client_token=record["client_token"],
            job_id=record.get("job_id", ""),
            launched_at_hours=record["launched_at_hours"],
            record=record,
        )

    @contextmanager
    def changing(self, group_id: str) -> Iterator[dict | None]:
        """Yield the group's record with its row locked; write it back if the block changed it.

        None when there is no such group. Keep the block short: it holds the row (on SQLite, the
        database's one write lock).
        """
        with self._write() as conn:
            record = conn.execute(
                select(groups.c.record).where(self._is(group_id)).with_for_update()
            ).scalar_one_or_none()
            if record is None:
                yield None
                return
            before = _frozen(record)
            yield record
            if _frozen(record) != before:
                conn.execute(update(groups).where(self._is(group_id)).values(record=record))

    def delete(self, group_id: str) -> None:
        with self._write() as conn:
            conn.execute(delete(groups).where(self._is(group_id)))

    # -- bill lines ----------------------------------------------------------------------------

    def add_line(self, kind: str, entry: dict) -> None:
        """Append a probe (`kind` ``probes``) or a checkpoint copy (``egress``) to the bill."""
        with self._write() as conn:
            conn.execute(insert(_LINES[kind]).values(cloud_id=self.cloud_id, entry=entry))

    def lines(self, kind: str) -> list[dict]:
        table = _LINES[kind]
        with self.engine.connect() as conn:
            query = select(table.c.entry).where(table.c.cloud_id == self.cloud_id).order_by(table.c.id)
            return list(conn.execute(query).scalars())

    def import_legacy(self, path: Path) -> None:
        """Take over the JSON document an earlier version kept (groups, probes, copies), once.

        Its groups may still be running: without this they would be nobody's. The file is renamed
        (``.imported``) after the rows are committed; a cloud that has rows already imported it (an
        opener died before the rename). Callers hold the state directory's lock.
        """
        if not path.exists():
            return
        state = json.loads(path.read_text())
        with self._write() as conn:
            mine = [
                select(t.c.cloud_id).where(t.c.cloud_id == self.cloud_id).limit(1) for t in (groups, probes, egress)
            ]
            if any(conn.execute(query).first() for query in mine):
                state = {}
            for record in state.get("groups", {}).values():
                conn.execute(self._group_row(record))
            for kind, table in _LINES.items():
                for entry in state.get(kind, []):
                    conn.execute(insert(table).values(cloud_id=self.cloud_id, entry=entry))
        os.replace(path, path.with_name(path.name + ".imported"))

    # -- internals -----------------------------------------------------------------------------

    def _is(self, group_id: str):
        return (groups.c.cloud_id == self.cloud_id) & (groups.c.group_id == group_id)

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction; on SQLite it takes the write lock at BEGIN, so a read-modify-write
        never upgrades a read lock (which SQLite answers with 'database is locked', not a wait)."""
        with self.engine.connect() as conn:
            if self._sqlite:
                conn.execution_options(sqlite_begin="BEGIN IMMEDIATE")
            with conn.begin():
                yield conn


def _frozen(record: dict) -> str:
    return json.dumps(record, sort_keys=True)


_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def open_database(url: str) -> Engine:
    """One engine (and pool) per database per process, its tables created once.

    Many SimulatedCloud objects open one state (each trigger of a triggerer makes its own);
    sharing the engine keeps them to one pool of connections.
    """
    with _engines_lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _make_engine(url)
            _create(engine)
            _engines[url] = engine
        return engine


def _make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS}, pool_size=8)
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    connect_args = {} if "connect_timeout" in parsed.query else {"connect_timeout": 10}
    return create_engine(parsed, connect_args=connect_args, pool_size=8, pool_pre_ping=True)


def _create(engine: Engine) -> None:
    """Create the tables if missing; PostgreSQL creators queue on an advisory lock (CREATE ...
    IF NOT EXISTS alone can still collide in the catalog), SQLite ones on its write lock."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.execution_options(sqlite_begin="BEGIN IMMEDIATE")
        with conn.begin():
            if engine.dialect.name == "postgresql":
                conn.execute(select(func.pg_advisory_xact_lock(_PG_CREATE_LOCK)))
            metadata.create_all(conn, checkfirst=True)


def _sqlite_connect(dbapi_connection, _record) -> None:
    """WAL and a busy timeout (`airflow_provider_skynomad.utils.sqlite`), and no transaction handling of the
    driver's own (isolation_level None), so that `_sqlite_begin` says how each transaction begins."""
    dbapi_connection.isolation_level = None
    use_wal(dbapi_connection, SQLITE_BUSY_TIMEOUT_SECONDS)


def _sqlite_begin(conn: Connection) -> None:
    conn.exec_driver_sql(conn.get_execution_options().get("sqlite_begin", "BEGIN"))


def _forget_engines_after_fork() -> None:
    """A forked child (a Celery worker, a test's subprocess) must not use its parent's connections."""
    for engine in _engines.values():
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_forget_engines_after_fork)
