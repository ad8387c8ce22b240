"""What the market table says per market right now, and availability over time as a coarse grid.

Shared by the markets page of the plugin and `skynomad market show`, so the terminal and the UI
show the same figures: the latest capacity and prices, the lifetime forecast of a fresh spot
launch (the planner's own forecaster fitted on the table's history) and how old the last probe is
against the age the connection's probe DAG keeps markets within (`expected_max_age_hours`). Pure
but for that: a frame in, plain rows out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from airflow_provider_skynomad.forecasts import DEFAULT_CAP_HOURS, DEFAULT_FORECASTER, extract_runs, make_forecaster
from airflow_provider_skynomad.forecasts.base import history_from_view
from airflow_provider_skynomad.market.freshness import DEFAULT_MAX_AGE_HOURS
from airflow_provider_skynomad.market.grid import build_grid, median_step_hours
from airflow_provider_skynomad.market.view import MarketView


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
    stale: bool  # older than the probe DAG keeps markets: a job would not trust its spot capacity
    forecast_runs: int | None = None  # availability runs the forecast saw in this market (None: not fitted)

    def to_dict(self) -> dict:
        return asdict(self)

    def forecast_text(self) -> str:
        """The forecast as the page and `skynomad market show` print it: a market with too few runs of
        its own shows the prior it was shrunk to, and says so."""
        if self.forecast_lifetime_hours is None:
            return "–"
        if self.forecast_runs is not None and self.forecast_runs < MIN_FITTED_RUNS:
            return f"too few runs seen: prior {self.forecast_lifetime_hours:.2f} h"
        return f"{self.forecast_lifetime_hours:.2f} h"


# A market with fewer availability runs than this has a forecast that is mostly the forecaster's
# prior (Nelson–Aalen shrinks toward all markets' hazard with five pseudo-runs): the page says so.
MIN_FITTED_RUNS = 2
# The forecast grid resolves this many steps within the forecaster's cap. Probes on a fast simulated
# clock are hours apart; on a grid as coarse as they are every run lasts at least one step, i.e.
# past the cap, and every market's capped forecast is the cap itself.
FORECAST_STEPS_PER_CAP = 12


@dataclass(frozen=True)
class Forecast:
    """A market's forecast lifetime of a launch now and the availability runs it was fitted on."""

    hours: float
    runs: int


def expected_max_age_hours(config) -> float:
    """How old a market's last probe may be before it is called stale: what the probe DAG of the
    `skynomad` connection `config` keeps markets within and the job runtime trusts (the connection's
    `ProbeSchedule`): the operators' 2 h on a real cloud, two of the DAG's rounds on a fast simulated
    clock (10 h at 300x, where a 2 h rule would call every market stale between punctual rounds)."""
    from airflow_provider_skynomad.jobs.probe_schedule import ProbeSchedule

    try:
        return ProbeSchedule.of(config).max_market_age_hours
    except ValueError:  # a bad SKYNOMAD_* setting is the DAG's and the job's error to report, not the page's
        return DEFAULT_MAX_AGE_HOURS


def market_rows(
    frame: pd.DataFrame,
    now: pd.Timestamp,
    max_age_hours: float = DEFAULT_MAX_AGE_HOURS,
    forecaster: str = DEFAULT_FORECASTER,
) -> list[MarketRow]:
    """Latest row per (zone, instance type) of `frame`, with its forecast lifetime (fitted on `frame`) and
    probe age; sorted by market."""
    if frame.empty:
        return []
    latest = frame.sort_values("observed_at").groupby(["zone", "instance_type"], sort=True).tail(1)
    return rows_from_latest(latest, now, max_age_hours, forecast_lifetimes(frame, forecaster))


def market_key(zone: str, instance_type: str, multi_type: bool) -> str:
    """The planner's market key (market/grid.py): the zone, or zone:instance_type when types are mixed."""
    return f"{zone}:{instance_type}" if multi_type else zone


def rows_from_latest(
    latest: pd.DataFrame, now: pd.Timestamp, max_age_hours: float, lifetimes: dict[str, Forecast]
) -> list[MarketRow]:
    """MarketRows from the newest observation of each market and the forecast lifetimes by market key."""
    multi_type = latest["instance_type"].nunique() > 1
    rows = []
    for r in latest.sort_values(["zone", "instance_type"]).itertuples():
        key = market_key(r.zone, r.instance_type, multi_type)
        age = max(0.0, (now - r.observed_at).total_seconds() / 3600.0)
        forecast = lifetimes.get(key)
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
                forecast_lifetime_hours=None if forecast is None else forecast.hours,
                last_probe_age_hours=round(age, 3),
                stale=age > max_age_hours,
                forecast_runs=None if forecast is None else forecast.runs,
            )
        )
    return rows


def forecast_lifetimes(frame: pd.DataFrame, forecaster: str = DEFAULT_FORECASTER) -> dict[str, Forecast]:
    """Expected hours a spot launch made now would last, per market key ({} when the history is too short).

    Fitted on a grid no coarser than a twelfth of the forecaster's cap (rows hold until the next
    probe, as the planner's grid does), so runs shorter or longer than the cap stay apart even when
    the probes are hours apart.
    """
    try:
        step_hours = min(median_step_hours(frame), DEFAULT_CAP_HOURS / FORECAST_STEPS_PER_CAP)
        grid = build_grid(frame, step_hours)
    except Exception:  # noqa: BLE001 - one row per market has no step: no forecast, the rest still shows
        return {}
    if grid.ticks < 2:
        return {}
    view = MarketView(grid, tick=grid.ticks - 1, gang_size=1)
    try:
        history = history_from_view(view)
        fitted = make_forecaster(forecaster, cap_hours=DEFAULT_CAP_HOURS).fit(**history)
        hours = fitted.expected_remaining_hours(np.zeros(len(grid.markets)))
        runs = extract_runs(history["usable"], history["seen"], history["step_hours"])
    except (ValueError, FloatingPointError):
        return {}
    counts = np.bincount(runs.market, minlength=len(grid.markets))
    return {
        m.key: Forecast(round(float(h), 2), int(n))
        for m, h, n in zip(grid.markets, np.asarray(hours, dtype=float), counts, strict=True)
    }


@dataclass(frozen=True)
class Heatmap:
    """Share of probes that found capacity, per market (rows) and time bucket (columns); NaN = no probe."""

    markets: list[str]
    starts: list[pd.Timestamp]
    bucket_hours: float
    share: np.ndarray  # (markets × buckets) in [0, 1]


def bucket_hours_for(first: pd.Timestamp, last: pd.Timestamp, columns: int = 120) -> float:
    """A bucket width that shows the window in about `columns` cells, never under 10 minutes."""
    span_hours = (last - first).total_seconds() / 3600.0
    return max(span_hours / columns, 1 / 6)


def heatmap_from_buckets(counts: pd.DataFrame, start: pd.Timestamp, bucket_hours: float, columns: int) -> Heatmap:
    """A Heatmap from per-bucket probe counts (market/store/aggregate.py's `buckets`)."""
    if counts.empty:
        return Heatmap([], [], bucket_hours, np.zeros((0, 0)))
    multi_type = counts["instance_type"].nunique() > 1
    keys = [market_key(z, t, multi_type) for z, t in zip(counts["zone"], counts["instance_type"], strict=True)]
    markets = sorted(set(keys))
    row = pd.Categorical(keys, categories=markets).codes
    column = counts["bucket"].clip(0, columns - 1).to_numpy()
    share = np.full((len(markets), columns), np.nan)
    probes = np.zeros((len(markets), columns))
    usable = np.zeros((len(markets), columns))
    np.add.at(probes, (row, column), counts["probes"].to_numpy(dtype=float))
    np.add.at(usable, (row, column), counts["usable"].to_numpy(dtype=float))
    np.divide(usable, probes, out=share, where=probes > 0)
    starts = [start + pd.Timedelta(hours=i * bucket_hours) for i in range(columns)]
    return Heatmap(markets, starts, bucket_hours, share)
