"""Zone, region, instance-type and accelerator names reach SQL only as bound parameters (or COPY data).

SQL written into those names goes in through the table's writes (both the small path and the bulk
COPY path; `skynomad market import` refuses a zone that is not a zone name, so the names come
from a trace file read as the import reads it), comes back through `read`, `latest_observed_at`,
`select_markets`, `export` and `compact` as the same text, and the tables stay as they were: on
SQLite and on PostgreSQL.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import inspect, select

from airflow_provider_skynomad.cli.market import add_market_commands
from airflow_provider_skynomad.market.observations import (
    COLUMNS,
    iter_observations,
    read_observations,
    write_observations,
)
from airflow_provider_skynomad.market.source import select_markets
from airflow_provider_skynomad.market.store.retention import compact
from airflow_provider_skynomad.market.store.table import MarketTable, schema_version

INJECTIONS = [
    "'; DROP TABLE market_observations; --",
    "x' OR '1'='1",
    '"; DROP TABLE schema_version; --',
    "us-central1-a') OR 1=1 --",
    "a'); DELETE FROM market_observations WHERE ('1'='1",
    "%(zone)s %s ? $1 :zone",
    "\\'; TRUNCATE market_observations; --",
    "zone'||(SELECT version())||'",
    "é'; --",
]
START = pd.Timestamp("2026-03-01T00:00:00Z")


def skynomad(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="skynomad")
    add_market_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def _frame(name: str, steps: int, clean_zones: int = 1) -> pd.DataFrame:
    """`steps` rows of a market named `name` everywhere, and of `clean_zones` ordinary ones."""
    frames = []
    for zone, text in [(name, name), *((f"clean-{k}", f"clean-{k}") for k in range(clean_zones))]:
        frames.append(
            pd.DataFrame(
                {
                    "observed_at": START + pd.Timedelta(minutes=10) * pd.RangeIndex(steps),
                    "cloud": "gcp",
                    "region": text,
                    "zone": zone,
                    "instance_type": text,
                    "accelerator": text,
                    "accelerator_count": 1,
                    "requested": 16,
                    "available": 16,
                    "spot_price": 2.5,
                    "on_demand_price": 10.0,
                }
            )[COLUMNS]
        )
    return pd.concat(frames).sort_values(["observed_at", "zone"]).reset_index(drop=True)


def _intact(table: MarketTable, rows: int) -> None:
    names = set(inspect(table.engine).get_table_names())
    assert {"market_observations", "schema_version"} <= names
    assert table.count() == rows
    with table.engine.connect() as conn:
        assert conn.execute(select(schema_version.c.version)).scalars().all()


@pytest.mark.parametrize(
    ("steps", "name"),
    # 3000 steps × 2 markets go through the bulk path (COPY on PostgreSQL); a few names suffice there.
    [(6, name) for name in INJECTIONS] + [(3000, name) for name in INJECTIONS[:3]],
)
def test_sql_in_names_is_stored_and_read_back_as_text(market_url, tmp_path, capsys, name, steps):
    trace = tmp_path / "trace.csv"
    frame = _frame(name, steps)
    write_observations(frame, trace)
    assert skynomad("market", "import", "--trace", str(trace), "--url", market_url) == 2
    assert "is not a zone name" in capsys.readouterr().err
    with MarketTable(market_url) as table:
        assert table.append_chunks(iter_observations(trace), source=str(trace), validated=True) == len(frame)
        _intact(table, len(frame))
        assert table.zones() == sorted([name, "clean-0"])
        mine = table.read(zones=[name])
        assert len(mine) == steps and set(mine["zone"]) == {name} and set(mine["instance_type"]) == {name}
        assert len(table.read(instance_types=[name])) == steps
        assert table.latest_observed_at(zones=[name]) == frame["observed_at"].max()
        now = frame["observed_at"].max() + pd.Timedelta(minutes=1)
        selection, rows = select_markets(
            table,
            now,
            zones=[name],
            regions=[name],
            clouds=["gcp"],
            instance_types=[name],
            accelerator=name,
            lookback_hours=1000,
            max_market_age=timedelta(hours=2),
            where="test",
        )
        assert selection.zones == [name] and selection.instance_types == [name]
        newest = frame["observed_at"].max()
        assert rows.to_dict("records") == [{"zone": name, "instance_type": name, "newest": newest}]
        compact(table, keep_full_days=1, now=now + pd.Timedelta(days=30))
        _intact(table, table.count())
    out = tmp_path / "out.csv"
    assert skynomad("market", "export", "--output", str(out), "--url", market_url, "--zones", name) == 0
    assert set(read_observations(out)["zone"]) == {name}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), min_size=1, max_size=40))
def test_any_printable_name_round_trips_through_the_table(market_url, name):
    if not name.strip():
        return  # empty names are refused by validation (tested in test_observations)
    frame = _frame(name, 2, clean_zones=0)
    with MarketTable(market_url) as table:
        table.create()
        with table.engine.begin() as conn:
            conn.execute(table_delete())
        assert table.append(frame) == 2
        back = table.read(zones=[name], instance_types=[name])
        pd.testing.assert_frame_equal(back, frame)
        assert table.zones() == [name]


def table_delete():
    from sqlalchemy import delete

    from airflow_provider_skynomad.market.store.table import market_observations

    return delete(market_observations)
