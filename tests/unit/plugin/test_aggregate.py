"""The markets page's database summaries agree with the rows they summarise, on SQLite and PostgreSQL."""

from __future__ import annotations

import numpy as np
import pandas as pd

from airflow_provider_skynomad.market.store import aggregate
from airflow_provider_skynomad.market.store.table import MarketTable
from airflow_provider_skynomad.plugin.overview import bucket_hours_for, heatmap_from_buckets
from tests.support.plugin_seed import market_frame


def test_buckets_latest_rows_and_bounds_match_the_rows(market_url):
    frame = market_frame(markets=4, days=1.0)
    table = MarketTable(market_url)
    table.create()
    table.append(frame)
    since = frame["observed_at"].min() - pd.Timedelta(minutes=1)
    first, last = aggregate.time_bounds(table, since)
    assert (first, last) == (frame["observed_at"].min(), frame["observed_at"].max())
    bucket_hours = bucket_hours_for(first, last, columns=12)
    counts = aggregate.buckets(table, first, bucket_hours)
    assert counts["probes"].sum() == len(frame)
    heat = heatmap_from_buckets(counts, first, bucket_hours, 13)

    expected_column = ((frame["observed_at"] - first).dt.total_seconds() // (bucket_hours * 3600)).astype(int)
    usable = (frame["available"] >= frame["requested"].clip(lower=1)).astype(float)
    expected = usable.groupby([frame["zone"], expected_column]).mean()
    for (zone, column), share in expected.items():
        assert np.isclose(heat.share[heat.markets.index(zone), column], share)
    spot = frame.groupby([frame["zone"], expected_column])["spot_price"].mean()
    got = counts.set_index(["zone", "bucket"])["spot_price"]
    for key, value in spot.items():
        assert np.isclose(got[key], value)

    latest = aggregate.latest_rows(table, since).set_index("zone")
    newest = frame.sort_values("observed_at").groupby("zone").tail(1).set_index("zone")
    assert set(latest.index) == set(newest.index)
    for zone in newest.index:
        assert latest.loc[zone, "observed_at"] == newest.loc[zone, "observed_at"]
        assert latest.loc[zone, "available"] == newest.loc[zone, "available"]
    assert aggregate.time_bounds(table, last + pd.Timedelta(hours=1)) is None
    table.close()
