"""MarketSource's incremental reads: new rows, late rows inside the overlap hour, nothing new."""

from __future__ import annotations

import pandas as pd

from airflow_provider_skynomad.market.observations import COLUMNS
from airflow_provider_skynomad.market.source import MarketSource
from airflow_provider_skynomad.market.table import MarketTable

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
