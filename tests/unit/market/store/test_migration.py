"""An older market table (version 3: key (zone, instance_type, observed_at) and a (zone, observed_at)
index) opened by this code is migrated in place: same rows, the new key, one index fewer, a log line."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    create_engine,
    event,
    inspect,
    select,
)

from airflow_provider_skynomad.market.observations import read_observations
from airflow_provider_skynomad.market.store import bulk
from airflow_provider_skynomad.market.store.table import (
    SCHEMA_VERSION,
    STORED_KEY,
    MarketTable,
    market_observations,
    schema_version,
)

TRACE = Path(__file__).parents[4] / "airflow_provider_skynomad" / "data" / "gcp-h100-2025-first-week.csv.gz"


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    """Two days of every zone of the bundled trace, in file order."""
    trace = read_observations(TRACE)
    return trace[trace["observed_at"] < trace["observed_at"].min() + pd.Timedelta(days=2)].reset_index(drop=True)


def _make_v3(url: str, rows: pd.DataFrame, deleted: int = 7, version: int = 3) -> None:
    """The version-3 layout as that release created it, holding `rows` and a deletion counter
    (`version=1`: the first layout, without the time index and `market_changes`)."""
    meta = MetaData()
    old = Table(
        "market_observations",
        meta,
        *(Column(c.name, c.type, nullable=False) for c in market_observations.columns if c.name != "probe_kind"),
        PrimaryKeyConstraint("zone", "instance_type", "observed_at", name="pk_market_observations"),
        Index("ix_market_observations_zone_observed_at", "zone", "observed_at"),
    )
    if version >= 2:
        Index("ix_market_observations_observed_at", old.c.observed_at, old.c.zone, old.c.instance_type)
    changes = Table("market_changes", meta, Column("kind", String(32), primary_key=True), Column("count", BigInteger))
    if version < 3:
        meta.remove(changes)
    versions = Table(
        "schema_version", meta, Column("component", String(64), primary_key=True), Column("version", Integer)
    )
    engine = create_engine(url)
    try:
        meta.create_all(engine)
        with engine.begin() as conn:
            conn.execute(versions.insert(), [{"component": "market", "version": version}])
            if version >= 3:
                conn.execute(changes.insert(), [{"kind": "deleted", "count": deleted}])
            conn.execute(old.insert(), bulk.records(rows))
        with engine.connect() as conn:
            assert inspect(conn).get_pk_constraint("market_observations")["constrained_columns"] == [
                "zone",
                "instance_type",
                "observed_at",
            ]
    finally:
        engine.dispose()


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["observed_at", "zone", "instance_type"], ignore_index=True)


def test_a_version_3_table_is_migrated_in_place_with_every_row(market_url, rows, caplog):
    _make_v3(market_url, rows)
    with (
        caplog.at_level(logging.WARNING, logger="airflow_provider_skynomad.market.store.migration"),
        MarketTable(market_url) as table,
    ):
        back = table.read()
        assert table.deletions() == 7  # the counter a running job's reader compares with is kept
        found = inspect(table.engine)
        assert found.get_pk_constraint("market_observations")["constrained_columns"] == [
            "zone",
            "observed_at",
            "instance_type",
        ]
        indexes = {i["name"] for i in found.get_indexes("market_observations")}
        assert indexes == {"ix_market_observations_observed_at"}
        with table.engine.connect() as conn:
            assert conn.execute(select(schema_version.c.version)).scalar_one() == SCHEMA_VERSION
            if table.dialect == "sqlite":
                ddl = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = 'market_observations'")
                assert "WITHOUT ROWID" in ddl.scalar_one()
        # The migrated table takes new rows and still refuses a stored key.
        later = rows.assign(observed_at=rows["observed_at"] + pd.Timedelta(days=2))
        assert table.append(later) == len(later)
        assert table.append(rows.iloc[:50]) == 0
        assert table.count() == 2 * len(rows)
    pd.testing.assert_frame_equal(back, _sorted(rows))
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert f"migrating the schema from version 3 to {SCHEMA_VERSION}" in said[0]
    assert "(zone, instance_type, observed_at) becomes (zone, observed_at, instance_type)" in said[0]
    assert f"migrated from version 3 to {SCHEMA_VERSION}, {len(rows)} rows kept" in said[1]
    assert said[0].startswith(f"market table at {table.display_url}: ")  # the URL as messages show it

    caplog.clear()
    with MarketTable(market_url) as again:  # a migrated table is opened without any DDL or log line
        assert again.count() == 2 * len(rows)
    assert caplog.records == []


def test_a_version_1_table_gets_the_new_key_and_everything_added_since(market_url, rows):
    _make_v3(market_url, rows, version=1)
    with MarketTable(market_url) as table:
        pd.testing.assert_frame_equal(table.read(), _sorted(rows))
        assert table.deletions() == 0
        found = inspect(table.engine)
        assert found.get_pk_constraint("market_observations")["constrained_columns"] == list(STORED_KEY)
        assert {i["name"] for i in found.get_indexes("market_observations")} == {"ix_market_observations_observed_at"}
        assert "market_changes" in found.get_table_names()


def test_processes_opening_a_version_3_table_at_once_migrate_it_once(market_url, rows, caplog):
    _make_v3(market_url, rows)
    tables = [MarketTable(market_url) for _ in range(4)]
    barrier = threading.Barrier(len(tables))
    counts, errors = [], []

    def open_and_count(table):
        barrier.wait()
        try:
            counts.append(table.count())
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    with caplog.at_level(logging.WARNING, logger="airflow_provider_skynomad.market.store.migration"):
        threads = [threading.Thread(target=open_and_count, args=(t,)) for t in tables]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for table in tables:
        table.close()
    assert errors == []
    assert counts == [len(rows)] * len(tables)
    assert sum("migrating the schema" in r.getMessage() for r in caplog.records) == 1


def test_a_migration_that_fails_leaves_the_version_3_table_as_it_was(market_url, rows, monkeypatch):
    from airflow_provider_skynomad.market.store import migration

    _make_v3(market_url, rows)

    def broken(conn, names):
        raise RuntimeError("disk full")

    monkeypatch.setattr(migration, "drop_indexes", broken)
    with MarketTable(market_url) as table, pytest.raises(RuntimeError, match="disk full"):
        table.count()
    engine = create_engine(market_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(select(schema_version.c.version)).scalar_one() == 3
            assert inspect(conn).get_pk_constraint("market_observations")["constrained_columns"] == [
                "zone",
                "instance_type",
                "observed_at",
            ]
            assert {i["name"] for i in inspect(conn).get_indexes("market_observations")} == {
                "ix_market_observations_zone_observed_at",
                "ix_market_observations_observed_at",
            }
    finally:
        engine.dispose()
    monkeypatch.undo()
    with MarketTable(market_url) as table:
        pd.testing.assert_frame_equal(table.read(), _sorted(rows))


def test_a_decision_read_is_answered_from_an_index(market_url, rows):
    """The incremental read (a job's zones, a time range, the counter joined in) must not scan the table."""
    statements = []
    with MarketTable(market_url) as table:
        table.append(rows)
        if table.dialect == "postgresql":
            with table.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE market_observations")

        def keep(conn, cursor, statement, parameters, context, executemany):
            if "market_observations" in statement and "FROM market_changes" in statement:
                statements.append((statement, parameters))

        event.listen(table.engine, "before_cursor_execute", keep)
        since = rows["observed_at"].max() - pd.Timedelta(hours=1)
        zones = sorted(rows["zone"].unique())[:2]
        table.read_increment(zones, since, None, count_between=(since - pd.Timedelta(hours=1), since))
        event.remove(table.engine, "before_cursor_execute", keep)
        statement, parameters = statements[-1]
        with table.engine.connect() as conn:
            if table.dialect == "postgresql":
                conn.exec_driver_sql("SET enable_seqscan = off")  # a scan is then chosen only if no index fits
                plan = "\n".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN {statement}", parameters))
                assert "Seq Scan on market_observations" not in plan, plan
                # The rows and the count: each found through an index on the zones and the time range.
                conditions = [line for line in plan.splitlines() if "Index Cond" in line and "observed_at" in line]
                assert len(conditions) == 2 and all("zone" in line for line in conditions), plan
            else:
                plan = "\n".join(r[-1] for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters))
                assert "SCAN market_observations" not in plan, plan
                assert "market_observations USING PRIMARY KEY (zone=? AND observed_at>? AND observed_at<?)" in plan or (
                    "market_observations USING PRIMARY KEY (zone=? AND observed_at>?)" in plan
                ), plan


def _make_v4(url: str, rows: pd.DataFrame) -> None:
    """The version-4 layout (today's key, no `probe_kind` column) holding `rows`."""
    meta = MetaData()
    old = Table(
        "market_observations",
        meta,
        *(Column(c.name, c.type, nullable=False) for c in market_observations.columns if c.name != "probe_kind"),
        PrimaryKeyConstraint(*STORED_KEY, name="pk_market_observations"),
    )
    Index("ix_market_observations_observed_at", old.c.observed_at, old.c.zone, old.c.instance_type)
    Table("market_changes", meta, Column("kind", String(32), primary_key=True), Column("count", BigInteger))
    versions = Table(
        "schema_version", meta, Column("component", String(64), primary_key=True), Column("version", Integer)
    )
    engine = create_engine(url)
    try:
        meta.create_all(engine)
        with engine.begin() as conn:
            conn.execute(versions.insert(), [{"component": "market", "version": 4}])
            conn.execute(old.insert(), bulk.records(rows))
    finally:
        engine.dispose()


def test_a_version_4_table_gets_the_probe_kind_column_and_keeps_every_row(market_url, rows, caplog):
    _make_v4(market_url, rows)
    with (
        caplog.at_level(logging.INFO, logger="airflow_provider_skynomad.market.store.migration"),
        MarketTable(market_url) as table,
    ):
        pd.testing.assert_frame_equal(table.read(), _sorted(rows))  # the format's columns, as before
        kinds = table.probe_kinds()
        assert len(kinds) == len(rows) and kinds["probe_kind"].isna().all()  # no probe is claimed for them
        with table.engine.connect() as conn:
            assert conn.execute(select(schema_version.c.version)).scalar_one() == SCHEMA_VERSION
        later = rows.iloc[:3].assign(
            observed_at=rows["observed_at"].iloc[:3] + pd.Timedelta(days=3), probe_kind=["request", "launch", "request"]
        )
        assert table.append(later) == 3
        seen = table.probe_kinds(since=later["observed_at"].min())
        assert sorted(seen["probe_kind"]) == ["launch", "request", "request"]
        assert table.count() == len(rows) + 3
    said = [r.getMessage() for r in caplog.records]
    assert any(f"4 to {SCHEMA_VERSION}: added the column probe_kind; every row kept" in line for line in said), said
    assert not any("primary key" in line for line in said)  # the key was already right: not rebuilt
