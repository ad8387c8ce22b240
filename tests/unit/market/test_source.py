"""MarketSource's incremental reads: new rows, late rows inside the overlap hour, nothing new."""

from __future__ import annotations

import pandas as pd

from airflow_provider_skynomad.market.observations import COLUMNS
from airflow_provider_skynomad.market.source import MarketSource
from airflow_provider_skynomad.market.store.table import MarketTable

START = pd.Timestamp("2026-02-01T00:00:00Z")


def _rows(zone: str, minutes: list[int], available: int = 4) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "observed_at": [START + pd.Timedelta(minutes=m) for m in minutes],
            "cloud": "gcp",
            "region": zone[:-2],
            "zone": zone,
            "instance_type": "a3-highgpu-1g",
            "accelerator": "H100",
            "accelerator_count": 1,
            "requested": 16,
            "available": available,
            "spot_price": 2.0,
            "on_demand_price": 10.0,
        }
    )[COLUMNS]


def test_incremental_reads_pick_up_new_and_late_rows_in_order(tmp_path):
    with MarketTable(f"sqlite:///{tmp_path / 'm.db'}") as table:
        table.append(pd.concat([_rows("r1-a", [0, 10, 20]), _rows("r2-a", [0, 10])]))
        source = MarketSource(table, ["r1-a", "r2-a"], None, START, 1 / 6, 1)
        first = source.frame(START + pd.Timedelta(minutes=25))
        assert len(first) == 5
        assert source.frame(START + pd.Timedelta(minutes=25)) is first  # nothing new: the same frame
        table.append(_rows("r2-a", [20]))  # stamped at :20, committed after r1-a's :20 was read
        table.append(_rows("r1-a", [30]))
        later = source.frame(START + pd.Timedelta(minutes=35))
        expected = table.read(zones=["r1-a", "r2-a"], until=START + pd.Timedelta(minutes=35))
        pd.testing.assert_frame_equal(later, expected)
        table.append(_rows("r1-a", [40, 50]))
        pd.testing.assert_frame_equal(source.frame(START + pd.Timedelta(minutes=45)), expected.pipe(
            lambda f: pd.concat([f, table.read(zones=["r1-a"], since=START + pd.Timedelta(minutes=40),
                                              until=START + pd.Timedelta(minutes=45))], ignore_index=True)
        ))  # fmt: skip


def test_a_compaction_makes_the_source_read_its_window_again(market_url):
    """Rows a source holds can be deleted (compaction); the deletion counter makes it re-read them."""
    from airflow_provider_skynomad.market.store.retention import compact

    with MarketTable(market_url) as table:
        # Two days of one unchanging market every 10 minutes, then one more row.
        table.append(_rows("r1-a", list(range(0, 2 * 24 * 60, 10))))
        source = MarketSource(table, ["r1-a"], None, START, 1 / 6, 1)
        until = START + pd.Timedelta(days=3)
        assert len(source.frame(until)) == 288
        assert table.read_increment(["r1-a"], None, None)[1] == 0
        report = compact(table, keep_full_days=1)
        assert report.deleted > 0
        assert table.deletions() == report.deleted
        table.append(_rows("r1-a", [2 * 24 * 60]))
        pd.testing.assert_frame_equal(source.frame(until), table.read(zones=["r1-a"], until=until))
        assert len(source.frame(until)) == 288 - report.deleted + 1


def test_the_kept_connection_is_replaced_when_the_server_drops_it(postgres_url):
    """A PostgreSQL restart drops the reader's kept connection; the next read reconnects once and succeeds."""
    with MarketTable(postgres_url) as table:
        table.append(_rows("r1-a", [0, 10]))
        source = MarketSource(table, ["r1-a"], None, START, 1 / 6, 1)
        assert len(source.frame(START + pd.Timedelta(minutes=15))) == 2
        pid = table._held.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        with table.engine.connect() as admin:
            assert admin.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})").scalar_one()
        table.append(_rows("r1-a", [20]))
        assert len(source.frame(START + pd.Timedelta(minutes=25))) == 3
        assert table._held.exec_driver_sql("SELECT pg_backend_pid()").scalar_one() != pid


def test_a_read_with_nothing_late_fetches_only_the_newer_rows(tmp_path, monkeypatch):
    """The hour before the mark is counted, not fetched, unless a late commit landed in it."""
    with MarketTable(f"sqlite:///{tmp_path / 'm.db'}") as table:
        table.append(pd.concat([_rows("r1-a", [0, 10, 20]), _rows("r2-a", [0, 10, 20])]))
        source = MarketSource(table, ["r1-a", "r2-a"], None, START, 1 / 6, 1)
        source.frame(START + pd.Timedelta(minutes=25))
        fetched = []
        real_read = table.read
        monkeypatch.setattr(table, "read", lambda **kw: fetched.append(kw) or real_read(**kw))
        table.append(pd.concat([_rows("r1-a", [30]), _rows("r2-a", [30])]))
        assert len(source.frame(START + pd.Timedelta(minutes=35))) == 8
        assert fetched == []  # the count matched: only the two newer rows came back
        table.append(_rows("r1-a", [25]))  # stamped before the mark, committed after it was read
        frame = source.frame(START + pd.Timedelta(minutes=35))
        assert len(fetched) == 1
        pd.testing.assert_frame_equal(frame, real_read(zones=["r1-a", "r2-a"], until=START + pd.Timedelta(minutes=35)))
