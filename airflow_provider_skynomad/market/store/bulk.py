"""Bulk moves in and out of the market table: many rows, bounded memory, no row ever in SQL text.

Why a module of its own: a probe round writes a few hundred rows, a trace import a million. The
small path (`MarketTable.append`) is one executemany with bound parameters. The large path streams
validated chunks into one transaction, so a bad row anywhere still leaves the table as it was:
- PostgreSQL: each chunk goes through COPY into a temporary staging table (the rows travel as
  COPY data, never as SQL), then one INSERT ... SELECT of the rows whose key is not stored yet,
  under a lock that holds other writers off until the commit; its row count is the number of new
  rows. COPY is ~10× faster than row-by-row inserts.
- SQLite: executemany of INSERT ... ON CONFLICT DO NOTHING with bound parameters; SQLite sums
  the changed rows over the batch.
Reads for `export` use a server-side cursor (PostgreSQL) and fetch in chunks, in key order.
"""

from __future__ import annotations

import contextlib
import io
import queue
import tempfile
import threading
from collections.abc import Iterable, Iterator

import pandas as pd
from sqlalchemy import Connection, column, exists, select
from sqlalchemy import table as sql_table
from sqlalchemy.exc import DBAPIError

from airflow_provider_skynomad.market.observations import COLUMNS, KEY, TIME_ORDER

COPY_MIN_ROWS = 5_000
"""Below this many rows, PostgreSQL inserts use executemany too: a staging table per probe round
would churn the catalog (pg_class, pg_attribute) for nothing."""
_STAGING = "skynomad_market_import"
SQLITE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
"""How SQLAlchemy's SQLite DateTime writes a time (and so how `UtcDateTime` stores one there)."""
_TEXT = ("cloud", "region", "zone", "instance_type", "accelerator")


STORED_EXTRA = ("probe_kind",)
"""Stored columns beyond the observation format, written when the rows carry them (a probe's)."""


def stored_columns(rows: pd.DataFrame) -> list[str]:
    """The format's columns, then the extra ones `rows` carries."""
    return [*COLUMNS, *(c for c in STORED_EXTRA if c in rows.columns)]


def records(rows: pd.DataFrame) -> list[dict]:
    """Plain Python values for the DB driver (numpy scalars and pandas Timestamps confuse some)."""
    names = stored_columns(rows)
    columns = {c: rows[c].tolist() for c in names}
    columns["observed_at"] = [t.to_pydatetime() for t in rows["observed_at"]]
    return [dict(zip(names, values, strict=True)) for values in zip(*(columns[c] for c in names), strict=True)]


SQLITE_IMPORT_CACHE_KB = 20_000
"""SQLite page cache while chunks are inserted. Rows in time order extend the time index at its end
and the key at each market's end, so the pages written stay few: 20 MB costs an import of 10⁶ rows
no more CPU than 100 MB (and 80 MB less memory), while SQLite's default 2 MB costs ~15 % more."""


@contextlib.contextmanager
def large_cache(conn: Connection, dialect: str) -> Iterator[None]:
    """A large SQLite page cache for the transaction, back to SQLite's default after it."""
    if dialect != "sqlite":
        yield
        return
    conn.exec_driver_sql(f"PRAGMA cache_size = -{SQLITE_IMPORT_CACHE_KB}")
    try:
        yield
    finally:
        conn.exec_driver_sql("PRAGMA cache_size = -2000")


def insert_rows(conn: Connection, table, dialect: str, rows: pd.DataFrame, insert_for) -> int:
    """Insert validated rows inside the caller's transaction; return how many were new."""
    if rows.empty:
        return 0
    if dialect == "postgresql" and len(rows) >= COPY_MIN_ROWS:
        return _copy_rows(conn, table, rows, insert_for)
    if dialect == "sqlite":
        return _sqlite_rows(conn, table, rows)
    statement = insert_for(table).on_conflict_do_nothing(index_elements=KEY)
    # psycopg2's executemany rowcount is the last batch's; RETURNING counts every new row.
    return len(conn.execute(statement.returning(table.c.zone), records(rows)).all())


def _sqlite_rows(conn: Connection, table, rows: pd.DataFrame) -> int:
    """executemany with `?` parameters and plain tuples: SQLAlchemy's per-row parameter processing
    costs more than SQLite's insert. Times go in as `UtcDateTime` stores them on SQLite (UTC text,
    microseconds always written), so keys and range filters compare the same."""
    names = stored_columns(rows)
    columns = {c: rows[c].tolist() for c in names}
    columns["observed_at"] = rows["observed_at"].dt.tz_convert("UTC").dt.strftime(SQLITE_TIME_FORMAT).tolist()
    values = list(zip(*(columns[c] for c in names), strict=True))
    # The table and column names are this module's constants; every value is a bound parameter.
    statement = (
        f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)}) "
        f"ON CONFLICT ({', '.join(KEY)}) DO NOTHING"
    )
    return conn.exec_driver_sql(statement, values).rowcount


def _copy_rows(conn: Connection, table, rows: pd.DataFrame, insert_for) -> int:
    """COPY into a per-transaction staging table, then insert the rows whose key is new.

    The insert is a plain INSERT ... SELECT of the staged rows not in the table, in time order,
    under a lock that keeps other writers out until the import commits (readers go on): an
    ON CONFLICT insert costs the server a speculative insertion per row (over twice the time),
    and in time order the time index only grows at its end and the key at each market's end (an
    insert in key order costs the time index random page writes: 60 % more). Probe tasks wait for
    the lock, as they wait for SQLite's write lock during an import. A role that may not take
    the lock (INSERT without UPDATE, DELETE or TRUNCATE) gets the ON CONFLICT insert instead.
    """
    # Both names are constants of this module; the rows themselves travel as COPY data.
    conn.exec_driver_sql(
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {_STAGING} (LIKE {table.name} INCLUDING DEFAULTS) ON COMMIT DROP"
    )
    conn.exec_driver_sql(f"TRUNCATE {_STAGING}")
    columns = ", ".join(COLUMNS)
    # FORCE_NOT_NULL: an empty text field (e.g. accelerator) is '', not NULL.
    copy = f"COPY {_STAGING} ({columns}) FROM STDIN WITH (FORMAT csv, FORCE_NOT_NULL ({', '.join(_TEXT)}))"
    cursor = conn.connection.dbapi_connection.cursor()
    try:
        payload = copy_payload(rows)
        if hasattr(cursor, "copy_expert"):  # psycopg2
            cursor.copy_expert(copy, io.BytesIO(payload))
        else:  # psycopg 3
            with cursor.copy(copy) as stream:
                stream.write(payload)
    finally:
        cursor.close()
    staging = sql_table(_STAGING, *(column(c) for c in COLUMNS))
    in_order = select(*staging.c).order_by(*(staging.c[c] for c in TIME_ORDER))
    if not _lock_writers_out(conn, table):  # a role that may only insert: ON CONFLICT keeps it safe
        moved = insert_for(table).from_select(COLUMNS, in_order).on_conflict_do_nothing(index_elements=KEY)
        return conn.execute(moved).rowcount
    stored = table.alias("stored")
    # The chunk's time range bounds the stored rows to compare with (through the time index); without
    # it the planner hashes the whole table for every chunk, and each chunk costs more than the last.
    times = rows["observed_at"]
    window = stored.c.observed_at.between(times.min().to_pydatetime(), times.max().to_pydatetime())
    new = in_order.where(~exists().where(window, *(stored.c[c] == staging.c[c] for c in KEY)))
    return conn.execute(insert_for(table).from_select(COLUMNS, new)).rowcount


_INSUFFICIENT_PRIVILEGE = "42501"


def _lock_writers_out(conn: Connection, table) -> bool:
    """Hold other writers off the table until the commit (readers go on); False if the role may not.

    PostgreSQL grants this lock mode only to roles with UPDATE, DELETE or TRUNCATE on the table;
    a savepoint keeps the transaction usable when it is refused. A lock taken under a released
    savepoint is held until the transaction ends.
    """
    try:
        with conn.begin_nested():
            conn.exec_driver_sql(f"LOCK TABLE {table.name} IN SHARE ROW EXCLUSIVE MODE")
    except DBAPIError as exc:
        code = getattr(exc.orig, "pgcode", None) or getattr(exc.orig, "sqlstate", None)
        if code == _INSUFFICIENT_PRIVILEGE:
            return False
        raise
    return True


def copy_payload(rows: pd.DataFrame) -> bytes:
    """Validated rows as COPY's CSV: times in UTC, floats written exactly (shortest round trip).

    pyarrow's CSV writer, where installed (pandas' string columns use it), formats in C++; pandas'
    `to_csv` is the fallback and costs several seconds more per 10⁶ rows.
    """
    out = rows[COLUMNS]
    try:
        import pyarrow as pa
        import pyarrow.csv as pa_csv
    except ImportError:
        out = out.copy()
        out["observed_at"] = out["observed_at"].dt.strftime("%Y-%m-%d %H:%M:%S.%f+00")
        return out.to_csv(index=False, header=False).encode()
    buffer = io.BytesIO()
    options = pa_csv.WriteOptions(include_header=False)
    pa_csv.write_csv(pa.Table.from_pandas(out, preserve_index=False), buffer, options)
    return buffer.getvalue()


def copy_out_chunks(conn: Connection, statement, chunk_rows: int) -> Iterator[pd.DataFrame] | None:
    """The rows of `statement` as typed frames, through PostgreSQL's COPY ... TO STDOUT (psycopg2).

    For dumps (`export`): the server formats the rows as CSV, spooled to a temporary file (memory
    stays bounded), and pandas' C parser reads them back in chunks: no Python object per value
    on the way, which is what a cursor costs. COPY takes no bound parameters, so the statement's
    parameters are quoted by psycopg2's own `mogrify`, the escaping psycopg2 applies to every
    parameter it sends. None when the driver has no `copy_expert` (psycopg 3): use a cursor.
    """
    cursor = conn.connection.dbapi_connection.cursor()
    if not hasattr(cursor, "copy_expert"):
        cursor.close()
        return None
    compiled = statement.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    query = cursor.mogrify(str(compiled), compiled.params).decode()
    # Times in UTC, ISO order; floats in their shortest exact form (PostgreSQL 12 and later).
    for setting in ("TimeZone = 'UTC'", "DateStyle = 'ISO, YMD'", "extra_float_digits = 1"):
        conn.exec_driver_sql(f"SET LOCAL {setting}")
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed by _parse_copied, or below on an error
    try:
        cursor.copy_expert(f"COPY ({query}) TO STDOUT WITH (FORMAT csv)", spool)
    except BaseException:
        spool.close()
        raise
    finally:
        cursor.close()
    spool.seek(0)
    return _parse_copied(spool, chunk_rows)


def _parse_copied(spool, chunk_rows: int) -> Iterator[pd.DataFrame]:
    dtypes = {c: str for c in _TEXT} | {c: "int64" for c in ("accelerator_count", "requested", "available")}
    dtypes |= {"spot_price": "float64", "on_demand_price": "float64", "observed_at": str}
    with spool:
        reader = pd.read_csv(
            spool,
            header=None,
            names=COLUMNS,
            dtype=dtypes,
            keep_default_na=False,
            chunksize=chunk_rows,
        )
        for chunk in reader:
            times = pd.to_datetime(chunk["observed_at"], utc=True, format="ISO8601")
            chunk["observed_at"] = times.astype("datetime64[us, UTC]")
            yield chunk


def read_ahead(chunks: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """The chunks, each produced by a thread while the database inserts the one before.

    An import alternates reading and validating a chunk (this process's CPU) with inserting it
    (the server's, or SQLite's with the GIL released): with one chunk read ahead, the two
    overlap. Memory holds at most one chunk more. An error while producing is raised here, in
    the caller's thread, so its transaction rolls back as before; when the caller stops early,
    the thread ends after the chunk it is reading.
    """
    handoff: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for chunk in chunks:
                if not put((chunk, None)):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consuming thread, raised there
            put((_END, exc))
            return
        put((_END, None))

    thread = threading.Thread(target=produce, name="skynomad-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            chunk, error = handoff.get()
            if chunk is _END:
                if error is not None:
                    raise error
                return
            yield chunk
    finally:
        stop.set()
        thread.join()


_END = object()


def fetch_chunks(conn: Connection, statement, chunk_rows: int) -> Iterator[list]:
    """Rows of `statement` in lists of at most `chunk_rows`, from a server-side cursor where the driver has one."""
    result = conn.execution_options(stream_results=True, yield_per=chunk_rows).execute(statement)
    yield from result.partitions(chunk_rows)
