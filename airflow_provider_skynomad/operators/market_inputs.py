"""What a SkyNomad job reads from and adds to the market table.

- `market_rows`: at the start, the zones and instance types the job may use, checked against a
  fresh, non-empty market table (nothing is launched when the check fails);
- `job_view`: on every later worker visit, the planner's view of those markets up to the cloud's now;
- `record_observation`: the job's own launch outcomes and preemptions, shared as market observations.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from ..clouds.base import Cloud
from ..clouds.driver import cloud_now
from ..hooks.skynomad import SkyNomadConfig, SkyNomadHook, market_view, read_market_frame
from ..market.view import MarketView
from .errors import SkyNomadInputError
from .record import JobRecord


def market_rows(
    config: SkyNomadConfig,
    cloud: Cloud,
    *,
    zones: list[str] | None,
    regions: list[str] | None,
    clouds: list[str] | None,
    instance_types: list[str] | dict[str, list[str] | str] | None,
    accelerator: str | None,
    lookback_hours: float,
    max_market_age: timedelta,
) -> tuple[list[str], list[str] | None, pd.DataFrame]:
    """Allowed zones and instance types, checked against a fresh, non-empty market table."""
    from ..market.table import MarketTable

    table = MarketTable(config.market_url)
    try:
        table.create()
        latest = table.latest_observed_at()
        if latest is None:
            raise SkyNomadInputError(
                f"the market table at {config.display_market_url} is empty: run the skynomad_probe DAG "
                "(or `skynomad market import --trace FILE`) first; nothing was launched"
            )
        now = cloud_now(cloud)
        since = now - pd.Timedelta(hours=lookback_hours)
        frame = table.read(since=since, until=now + pd.Timedelta(seconds=1))
    finally:
        table.close()
    known = sorted(set(frame["zone"])) if not frame.empty else []
    types = instance_type_list(instance_types)
    if clouds:
        frame = frame[frame["cloud"].isin(clouds)]
    if regions:
        frame = frame[frame["region"].isin(regions)]
    if accelerator:
        frame = frame[frame["accelerator"].str.lower() == str(accelerator).lower()]
    if types:
        frame = frame[frame["instance_type"].isin(types)]
    if zones:
        unknown = [z for z in zones if z not in known]
        if unknown:
            raise SkyNomadInputError(
                f"unknown zone(s) {unknown}: the market table has no recent observation of them; known zones: "
                f"{known}; nothing was launched"
            )
        frame = frame[frame["zone"].isin(zones)]
    if frame.empty:
        raise SkyNomadInputError(
            f"no market rows match the job (zones={zones}, regions={regions}, clouds={clouds}, "
            f"instance_types={types}, accelerator={accelerator}) within the last "
            f"{lookback_hours:g} h before {now.isoformat()}; newest row in the table: {latest}; "
            "nothing was launched"
        )
    newest = frame["observed_at"].max()
    age = now - newest
    if age > pd.Timedelta(max_market_age):
        raise SkyNomadInputError(
            f"the market table is stale: the newest matching observation ({newest.isoformat()}) is "
            f"{age.total_seconds() / 3600:.2f} h older than the cloud's now ({now.isoformat()}), over the "
            f"{pd.Timedelta(max_market_age).total_seconds() / 3600:g} h limit (max_market_age); run the "
            "skynomad_probe DAG; nothing was launched"
        )
    allowed = sorted(set(frame["zone"]))
    return (
        allowed,
        (sorted(set(frame["instance_type"])) if types or accelerator else None),
        frame.reset_index(drop=True),
    )


def instance_type_list(value) -> list[str] | None:
    """``instance_types`` as a flat list (a ``{cloud: [types]}`` mapping is merged), None for all."""
    if not value:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        out: list[str] = []
        for types in value.values():
            out.extend([types] if isinstance(types, str) else list(types))
        return out
    return list(value)


def job_view(
    record: JobRecord, config: SkyNomadConfig, cloud: Cloud, step_hours: float, lookback_hours: float
) -> MarketView:
    """The planner's view of the job's markets, cut at the cloud's now."""
    from ..market.table import MarketTable

    table = MarketTable(config.market_url)
    try:
        frame = read_market_frame(
            table,
            record.zones,
            record.instance_types,
            cloud_now(cloud) + pd.Timedelta(seconds=1),
            lookback_hours,
        )
    finally:
        table.close()
    if frame.empty:
        raise RuntimeError(f"the market table at {config.display_market_url} has no rows for the job's zones any more")
    return market_view(frame, step_hours, int(record.job["instances"]))


def record_observation(
    record: JobRecord,
    view: MarketView,
    zone: str,
    available: int,
    *,
    cloud: Cloud | None,
    skynomad_conn_id: str,
    accelerator: str | None,
    log,
) -> None:
    """Our own launch outcomes and preemptions are market observations: share them via the table."""
    if cloud is None:
        return
    try:
        from ..market.table import MarketTable

        market = next(m for m in view.markets if m.zone == zone)
        j = view.index(market.key)
        rows = pd.DataFrame(
            [
                {
                    "observed_at": cloud_now(cloud),
                    "cloud": market.cloud,
                    "region": market.region,
                    "zone": market.zone,
                    "instance_type": market.instance_type,
                    "accelerator": accelerator or "unknown",
                    "accelerator_count": 1,
                    "requested": int(record.job["instances"]),
                    "available": int(available),
                    "spot_price": float(view.spot_usd_per_hour[j]),
                    "on_demand_price": float(view.on_demand_usd_per_hour[j]),
                }
            ]
        )
        table = MarketTable(SkyNomadHook(skynomad_conn_id).get_config().market_url)
        try:
            table.append(rows, source=f"SkyNomad job {record.job_id}")
        finally:
            table.close()
    except Exception as exc:  # noqa: BLE001 - sharing an observation must never fail the job
        log.warning("could not record observation of %s: %s", zone, exc)
