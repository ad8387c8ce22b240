"""The markets page's data: the market table behind a connection, summarised by the database."""

from __future__ import annotations

import pandas as pd

from airflow_provider_skynomad.market.freshness import FORECAST_DAYS
from airflow_provider_skynomad.market.store import aggregate
from airflow_provider_skynomad.plugin.overview import (
    bucket_hours_for,
    forecast_lifetimes,
    heatmap_from_buckets,
    market_key,
    rows_from_latest,
)


def market_summary(table, since: pd.Timestamp, now: pd.Timestamp, max_age_hours: float):
    """(heatmap, price series, market rows) of the window from `since` to `now` (rows stamped later, a
    simulated cloud's trace ahead of its clock, are not observations yet)."""
    bounds = aggregate.time_bounds(table, since, now)
    if bounds is None:
        return heatmap_from_buckets(pd.DataFrame(), since, 0.0, 0), pd.DataFrame(), []
    first, last = bounds
    bucket_hours = bucket_hours_for(first, last)
    columns = int((last - first).total_seconds() / 3600.0 // bucket_hours) + 1
    counts = aggregate.buckets(table, first, bucket_hours, now)
    heat = heatmap_from_buckets(counts, first, bucket_hours, columns)
    multi_type = counts["instance_type"].nunique() > 1
    prices = pd.DataFrame(
        {
            "market": [
                market_key(z, t, multi_type) for z, t in zip(counts["zone"], counts["instance_type"], strict=True)
            ],
            "observed_at": first + pd.to_timedelta(counts["bucket"] * bucket_hours, unit="h"),
            "spot_price": counts["spot_price"],
            "on_demand_price": counts["on_demand_price"],
        }
    ).sort_values(["market", "observed_at"])
    prices["bucket_time"] = prices["observed_at"]
    # The window `skynomad market show` fits on by default, so the two show the same forecasts.
    recent = table.read(
        since=max(since, now - pd.Timedelta(days=FORECAST_DAYS)), until=now + pd.Timedelta(microseconds=1)
    )
    lifetimes = forecast_lifetimes(recent)
    rows = rows_from_latest(aggregate.latest_rows(table, since, now), now, max_age_hours, lifetimes)
    return heat, prices, rows


def daily_probe_spend(url: str, since: pd.Timestamp) -> list[tuple[str, float]] | None:
    """USD of paid probes per UTC day from the probe-spend record (market/store/signals.py), None when unreadable."""
    try:
        from airflow_provider_skynomad.market.store.signals import SignalTable
    except ImportError:
        return None
    try:
        signals = SignalTable.open_existing(url)  # a page view creates no table
        if signals is None:
            return []  # no probe has recorded its spend here
        try:
            daily = signals.daily_spend(since=since)
        finally:
            signals.close()
    except Exception:  # noqa: BLE001 - an older database without the record: say so, show the rest
        return None
    if daily.empty:
        return []
    return [(day, round(float(usd), 2)) for day, usd in daily.groupby("day", sort=True)["usd"].sum().items()]


def fleet_holdings(url: str, rows) -> dict[str, tuple[int, int]] | None:
    """Per market row: (instances, jobs) this deployment's running jobs hold there now, None when unreadable.

    A job's row names the market by its planner key; a key that is only a zone matches the zone's row.
    """
    try:
        from airflow_provider_skynomad.jobs.live import LiveStatusTable

        board = LiveStatusTable.open_existing(url)  # a page view creates no table
        if board is None:
            return {}  # no job has published here
        try:
            fleet = board.fleet()
        finally:
            board.close()
    except Exception:  # noqa: BLE001 - no live-status table yet (no job ran here): the page shows the rest
        return None
    held: dict[str, tuple[int, int]] = {}
    for row in rows:
        mine = [f for f in fleet if f["market"] == row.market or (f["market"] == f["zone"] == row.zone)]
        if mine:
            held[row.market] = (sum(int(f["instances"] or 0) for f in mine), len(mine))
    return held
