"""What the market table says per market right now, and availability over time as a coarse grid.

Shared by the markets page of the plugin and `skynomad market show`, so the terminal and the UI
show the same figures: the latest capacity and prices, the lifetime forecast of a fresh spot
launch (the planner's own forecaster fitted on the table's history) and how old the last probe is
against the operator's ``max_market_age``. Pure: a frame in, plain rows out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from ..forecasts import DEFAULT_FORECASTER, make_forecaster
from ..forecasts.base import history_from_view
from .grid import build_grid, median_step_hours
from .view import MarketView

DEFAULT_MAX_AGE_HOURS = 2.0  # SkyNomadOperator's default max_market_age


@dataclass(frozen=True)
class MarketRow:
    """One market as the table shows it now."""

    market: str
    cloud: str
    zone: str
    instance_type: str
    available: int
    requested: int
    spot_usd_per_hour: float
    on_demand_usd_per_hour: float
    forecast_lifetime_hours: float | None  # expected stay of a spot launch now (None: too little history)
    last_probe_age_hours: float
    stale: bool  # older than max_market_age: a job would refuse to start on it

    def to_dict(self) -> dict:
        return asdict(self)


def market_rows(
    frame: pd.DataFrame,
    now: pd.Timestamp,
    max_age_hours: float = DEFAULT_MAX_AGE_HOURS,
    forecaster: str = DEFAULT_FORECASTER,
) -> list[MarketRow]:
    """Latest row per (zone, instance type), with its forecast lifetime and probe age; sorted by market."""
    if frame.empty:
        return []
    multi_type = frame["instance_type"].nunique() > 1
    latest = frame.sort_values("observed_at").groupby(["zone", "instance_type"], sort=True).tail(1)
    lifetimes = forecast_lifetimes(frame, forecaster)
    rows = []
    for r in latest.sort_values(["zone", "instance_type"]).itertuples():
        key = f"{r.zone}:{r.instance_type}" if multi_type else r.zone
        age = max(0.0, (now - r.observed_at).total_seconds() / 3600.0)
        rows.append(
            MarketRow(
                market=key,
                cloud=r.cloud,
                zone=r.zone,
                instance_type=r.instance_type,
                available=int(r.available),
                requested=int(r.requested),
                spot_usd_per_hour=float(r.spot_price),
                on_demand_usd_per_hour=float(r.on_demand_price),
                forecast_lifetime_hours=lifetimes.get(key),
                last_probe_age_hours=round(age, 3),
                stale=age > max_age_hours,
            )
        )
    return rows


def forecast_lifetimes(frame: pd.DataFrame, forecaster: str = DEFAULT_FORECASTER) -> dict[str, float]:
    """Expected hours a spot launch made now would last, per market key ({} when the history is too short)."""
    try:
        grid = build_grid(frame)
    except Exception:  # noqa: BLE001 - one row per market has no step: no forecast, the rest still shows
        return {}
    if grid.ticks < 2:
        return {}
    view = MarketView(grid, tick=grid.ticks - 1, gang_size=1)
    try:
        fitted = make_forecaster(forecaster).fit(**history_from_view(view))
        hours = fitted.expected_remaining_hours(np.zeros(len(grid.markets)))
    except (ValueError, FloatingPointError):
        return {}
    return {m.key: round(float(h), 2) for m, h in zip(grid.markets, np.asarray(hours, dtype=float), strict=True)}


@dataclass(frozen=True)
class Heatmap:
    """Share of probes that found capacity, per market (rows) and time bucket (columns); NaN = no probe."""

    markets: list[str]
    starts: list[pd.Timestamp]
    bucket_hours: float
    share: np.ndarray  # (markets × buckets) in [0, 1]


def availability_heatmap(frame: pd.DataFrame, buckets: int = 120) -> Heatmap:
    """Availability (available ≥ requested, or any capacity when nothing was requested) bucketed in time."""
    if frame.empty:
        return Heatmap([], [], 0.0, np.zeros((0, 0)))
    multi_type = frame["instance_type"].nunique() > 1
    keys = frame["zone"] + ":" + frame["instance_type"] if multi_type else frame["zone"]
    start, end = frame["observed_at"].min(), frame["observed_at"].max()
    span_hours = max((end - start).total_seconds() / 3600.0, 1e-9)
    try:
        step = median_step_hours(frame)
    except Exception:  # noqa: BLE001 - one row per market
        step = span_hours
    bucket_hours = max(span_hours / buckets, step, 1 / 60)
    n = int(span_hours // bucket_hours) + 1
    column = ((frame["observed_at"] - start).dt.total_seconds() / 3600.0 // bucket_hours).astype(int).clip(0, n - 1)
    need = frame["requested"].clip(lower=1)
    usable = (frame["available"] >= need).astype(float)
    markets = sorted(keys.unique())
    row = pd.Categorical(keys, categories=markets).codes
    sums = np.zeros((len(markets), n))
    counts = np.zeros((len(markets), n))
    np.add.at(sums, (row, column.to_numpy()), usable.to_numpy())
    np.add.at(counts, (row, column.to_numpy()), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(counts > 0, sums / counts, np.nan)
    starts = [start + pd.Timedelta(hours=i * bucket_hours) for i in range(n)]
    return Heatmap(markets, starts, bucket_hours, share)
