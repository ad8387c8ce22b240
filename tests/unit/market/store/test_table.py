"""The market table on SQLite and PostgreSQL: schema, idempotent appends, concurrency, reads.

Writer processes at once: tests/integration/market/test_table_processes.py."""

from __future__ import annotations

import sys
import threading

import pandas as pd
import pytest
from sqlalchemy import inspect, select, update

from airflow_provider_skynomad.market.observations import COLUMNS, TraceError, read_observations
from airflow_provider_skynomad.market.store.table import (
    SCHEMA_VERSION,
    MarketSchemaError,
    MarketTable,
    default_market_url,
    release_shared,
    schema_version,
    shared_table,
)
from tests.support.market_rows import CONCURRENT_ZONES, TRACE, append_in_batches, expected_concurrent, first_rows


@pytest.fixture(scope="module")
def trace() -> pd.DataFrame:
    return read_observations(TRACE)


@pytest.fixture
def table(market_url):
    with MarketTable(market_url) as t:
        yield t


# -- schema ----------------------------------------------------------------------------------


def test_schema_has_exactly_the_trace_columns_key_and_index(table):
    table.create()
    table.create()  # idempotent
    found = inspect(table.engine)
    columns = found.get_columns("market_observations")
    # The trace's columns, then which kind of probe saw the row (nullable: imports have none).
    assert [c["name"] for c in columns] == [*COLUMNS, "probe_kind"]
    assert columns[-1]["nullable"] and not any(c["nullable"] for c in columns[:-1])
    observed_at = columns[0]["type"]
    if table.dialect == "postgresql":
        assert observed_at.timezone, "observed_at must be TIMESTAMP WITH TIME ZONE"
    # A job's reads (zones × a time range) are a range of the key, so no other index serves them.
    assert found.get_pk_constraint("market_observations")["constrained_columns"] == [
        "zone",
        "observed_at",
        "instance_type",
    ]
    indexes = {i["name"]: i["column_names"] for i in found.get_indexes("market_observations")}
    assert indexes == {"ix_market_observations_observed_at": ["observed_at", "zone", "instance_type"]}


def test_newer_schema_version_is_refused_clearly(market_url):
    with MarketTable(market_url) as t:
        t.create()
        with t.engine.begin() as conn:
            conn.execute(update(schema_version).values(version=SCHEMA_VERSION + 1))
    with (
        MarketTable(market_url) as t,
        pytest.raises(
            MarketSchemaError, match=rf"schema version {SCHEMA_VERSION + 1}.*only knows version {SCHEMA_VERSION}"
        ),
    ):
        t.read()


def test_concurrent_create_from_threads(market_url):
    tables = [MarketTable(market_url) for _ in range(6)]
    barrier = threading.Barrier(len(tables))
    errors = []

    def create(t):
        barrier.wait()
        try:
            t.create()
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(t,)) for t in tables]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for t in tables:
        t.close()
    assert errors == []


def test_default_url_is_a_sqlite_file_under_skynomad_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SKYNOMAD_HOME", str(tmp_path / "home"))
    assert default_market_url() == f"sqlite:///{tmp_path / 'home' / 'market.db'}"
    with MarketTable() as t:
        assert t.zones() == []
    assert (tmp_path / "home" / "market.db").exists()
    monkeypatch.delenv("SKYNOMAD_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_market_url() == f"sqlite:///{tmp_path / '.skynomad' / 'market.db'}"


def test_unsupported_backend_is_refused_without_showing_the_password():
    with pytest.raises(ValueError, match="sqlite and postgresql") as info:
        MarketTable("mysql://user:s3cret@db.example/market")
    assert "s3cret" not in str(info.value)


def test_password_never_appears_in_repr():
    t = MarketTable("postgresql://user:s3cret@127.0.0.1:1/market")
    assert "s3cret" not in repr(t) and "s3cret" not in t.display_url
    assert t.url.password == "s3cret"
    t.close()


def test_airflow_style_postgres_scheme_is_accepted():
    t = MarketTable("postgres://user@127.0.0.1:1/market")
    assert t.dialect == "postgresql"
    t.close()


# -- append ----------------------------------------------------------------------------------


def test_append_then_read_returns_the_rows_typed_and_sorted(table, trace):
    rows = first_rows(trace, ["us-central1-a", "europe-west1-c"])
    assert table.append(rows) == len(rows)
    back = table.read()
    expected = rows.sort_values(["observed_at", "zone"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(back, expected)
    assert str(back["observed_at"].dt.tz) == "UTC"


def test_reappending_identical_rows_is_a_noop(table, trace):
    rows = first_rows(trace, ["us-central1-a"])
    assert table.append(rows) == len(rows)
    assert table.append(rows) == 0
    assert table.append(pd.concat([rows, first_rows(trace, ["us-west1-a"])])) == len(first_rows(trace, ["us-west1-a"]))
    assert len(table.read()) == 2 * len(rows)


def test_bad_rows_raise_and_write_nothing(table, trace):
    kept = first_rows(trace, ["us-central1-a"])
    table.append(kept)
    bad = first_rows(trace, ["us-west1-a"]).astype({"available": object})
    bad.loc[5, "available"] = "lots"
    with pytest.raises(TraceError, match=r"line 7, column 'available'"):
        table.append(bad)
    pd.testing.assert_frame_equal(table.read(), kept)


def test_appending_no_rows_is_a_noop_but_missing_columns_are_not(table, trace):
    assert table.append(trace.head(0)) == 0
    with pytest.raises(TraceError, match="missing columns"):
        table.append(trace.head(0).drop(columns=["zone"]))
    assert table.zones() == []


def test_non_utc_offsets_are_stored_as_utc(table, trace):
    row = trace.head(1).copy()
    row["observed_at"] = ["2025-10-04T02:10:00+02:00"]
    table.append(row)
    assert table.read()["observed_at"].tolist() == [pd.Timestamp("2025-10-04T00:10:00Z")]
    assert table.latest_observed_at() == pd.Timestamp("2025-10-04T00:10:00Z")


# -- concurrency -----------------------------------------------------------------------------


def test_concurrent_writer_threads_lose_no_row(market_url, trace):
    barrier = threading.Barrier(len(CONCURRENT_ZONES))
    counts: list[int] = []
    threads = [
        threading.Thread(target=lambda z=z: counts.append(append_in_batches(market_url, z, barrier)))
        for z in CONCURRENT_ZONES
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = expected_concurrent(trace)
    assert sum(counts) == len(expected)
    with MarketTable(market_url) as t:
        pd.testing.assert_frame_equal(t.read(), expected)


# -- reads -----------------------------------------------------------------------------------


def test_read_filters_combine(table, trace):
    rows = first_rows(trace, ["us-central1-a", "us-west1-a", "europe-west1-c"], hours=3)
    table.append(rows)
    since, until = pd.Timestamp("2025-10-04T01:00:00Z"), pd.Timestamp("2025-10-04T02:00:00Z")
    got = table.read(zones=["us-west1-a", "europe-west1-c"], since=since, until=until, instance_types=["a3-highgpu-1g"])
    keep = rows["zone"].isin(["us-west1-a", "europe-west1-c"]) & (rows["observed_at"] >= since)
    keep &= rows["observed_at"] < until
    pd.testing.assert_frame_equal(got, rows[keep].reset_index(drop=True))
    # naive bounds are UTC; an unknown instance type or zone gives an empty, typed frame
    assert len(table.read(since="2025-10-04 01:00", until="2025-10-04 02:00")) == 3 * 6
    empty = table.read(instance_types=["n1-standard-1"])
    assert empty.empty and list(empty.columns) == COLUMNS
    assert empty.dtypes.equals(rows.dtypes)


def test_latest_and_zones(table, trace):
    assert table.latest_observed_at() is None and table.zones() == []
    rows = first_rows(trace, ["us-west1-a", "europe-west1-c"], hours=2)
    table.append(rows)
    assert table.zones() == ["europe-west1-c", "us-west1-a"]
    assert table.latest_observed_at() == rows["observed_at"].max()
    assert table.latest_observed_at(zones=["nowhere"]) is None


def test_an_older_layout_is_brought_up_to_date_and_keeps_its_rows(market_url, trace):
    """A version-2 database (no `market_changes`, one index fewer) is migrated by `create()` in place."""
    with MarketTable(market_url) as t:
        t.append(first_rows(trace, ["us-central1-a"], hours=1))
        with t.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE market_changes")
            conn.exec_driver_sql("DROP INDEX ix_market_observations_observed_at")
            conn.execute(update(schema_version).where(schema_version.c.component == "market").values(version=2))
    with MarketTable(market_url) as t:
        assert len(t.read()) == 6
        found = inspect(t.engine)
        assert "market_changes" in found.get_table_names()
        assert "ix_market_observations_observed_at" in {i["name"] for i in found.get_indexes("market_observations")}
        with t.engine.connect() as conn:
            version = conn.execute(select(schema_version.c.version).where(schema_version.c.component == "market"))
            assert version.scalar_one() == SCHEMA_VERSION


@pytest.mark.parametrize("writer", ["pyarrow", "pandas"])
def test_bulk_insert_keeps_stored_rows_counts_new_ones_and_stores_exact_floats(table, trace, writer, monkeypatch):
    """The bulk path (COPY and a keyed INSERT on PostgreSQL): stored keys win, floats round-trip exactly,
    whether pyarrow or pandas writes the COPY data."""
    if writer == "pandas":
        monkeypatch.setitem(sys.modules, "pyarrow.csv", None)  # `import pyarrow.csv` now raises ImportError
    rows = trace.iloc[:11_000].reset_index(drop=True)
    rows["spot_price"] = rows["spot_price"] + 0.1 + 0.2  # floats with 17 significant digits
    early = rows.iloc[:1_000].assign(available=0)
    assert table.append(early) == 1_000
    assert table.append_chunks([rows.iloc[:5_500], rows.iloc[5_500:]]) == 10_000  # two chunks over COPY_MIN_ROWS
    back = table.read()
    assert len(back) == 11_000
    stored = back.set_index(["zone", "instance_type", "observed_at"])
    wanted = rows.set_index(["zone", "instance_type", "observed_at"])
    first = early.set_index(["zone", "instance_type", "observed_at"]).index
    assert (stored.loc[first, "available"] == 0).all()
    assert stored["spot_price"].to_dict() == wanted["spot_price"].to_dict()
    # The export path (COPY out on PostgreSQL) gives the same typed rows, exact floats included.
    dumped = pd.concat(list(table.iter_read(chunk_rows=4_000)), ignore_index=True)
    pd.testing.assert_frame_equal(dumped, back)


def test_a_role_that_may_only_insert_still_bulk_imports(postgres_url, trace, monkeypatch):
    """The bulk path's writers' lock needs UPDATE, DELETE or TRUNCATE; without them it falls back to ON CONFLICT."""
    import uuid

    from sqlalchemy import create_engine, make_url

    from airflow_provider_skynomad.market.store import bulk

    locked = []
    real_lock = bulk._lock_writers_out
    monkeypatch.setattr(
        bulk, "_lock_writers_out", lambda conn, table: locked.append(real_lock(conn, table)) or locked[-1]
    )

    url = make_url(postgres_url)
    schema = url.query["options"].split("=", 1)[1]
    role = f"skynomad_insert_only_{uuid.uuid4().hex[:8]}"
    with MarketTable(postgres_url) as owner:
        owner.append(first_rows(trace, ["us-central1-a"], hours=1))
    admin = create_engine(url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN')
        conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        conn.exec_driver_sql(f'GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
    try:
        rows = trace.iloc[:6_000]
        with MarketTable(url.set(username=role)) as limited:
            assert limited.append_chunks([rows]) == 6_000 - 6  # the stored hour of us-central1-a is kept
            assert limited.count() == 6_000
        assert locked == [False]
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP OWNED BY "{role}"')
            conn.exec_driver_sql(f'DROP ROLE "{role}"')
        admin.dispose()


# -- one table per process for the triggers of a triggerer --------------------------------------


def test_the_triggers_of_one_process_share_one_table_and_one_connection(market_url, trace):
    rows = first_rows(trace, ["us-central1-a", "us-west1-a"], hours=2)
    with MarketTable(market_url) as writer:
        writer.append(rows)
    tables = [shared_table(market_url) for _ in range(40)]
    assert all(t is tables[0] for t in tables)
    table = tables[0]
    results, errors = [], []

    def read():
        try:
            increment = table.read_increment(["us-central1-a", "us-west1-a"], None, None)
            results.append(len(increment.rows))
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in tables]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and results == [len(rows)] * len(tables)
    # 40 readers at once held at most one connection of the pool (a PostgreSQL server counts them).
    assert table.engine.pool.checkedout() <= 1
    for t in tables[:-1]:
        release_shared(t)
    assert shared_table(market_url) is table  # still in use: the same one
    release_shared(table)
    release_shared(table)  # the last user closes it; the next caller gets a new one
    fresh = shared_table(market_url)
    assert fresh is not table
    release_shared(fresh)
