"""What the probe planner knows at a run, read from the market table, the signals and probe-spend
tables, and the cloud: the I/O side of `probing.plan` (which stays pure).

A *target* is one cloud region's probe description (``operators.probe.probe_targets``): cloud,
region, zones, instance type, ``count`` (instances per probe), optionally ``job_zones`` (zones jobs
may use; default all), ``spot_usd_per_hour`` / ``on_demand_usd_per_hour`` (prices to plan with
before the first observation; a market with no spot price at all is planned at on-demand) and
``probe_kind`` (``request`` or ``launch``; default by cloud, `probing.default_probe_kind`).
"""

from __future__ import annotations

import pandas as pd

from airflow_provider_skynomad.probing.plan import (
    ProbeMarket,
    ProbePlan,
    ProbePlanner,
    observation_stats,
    probe_kind_for,
    race_shares,
)

LAST_PROBE_LOOKBACK = pd.Timedelta(days=7)  # how far back a market's last paid probe is looked up
HISTORY = pd.Timedelta(hours=24)  # market rows read to judge each market


def running_job_zones(cloud) -> set[str]:
    """Zones where a job's instances run now (a market in use whatever the DAG lists); {} when the
    cloud cannot list them."""
    try:
        resources = cloud.resources()
    except Exception:  # noqa: BLE001 - planning goes on without it
        return set()
    return {r.zone for r in resources if r.kind == "instance" and r.job_id}


def gather_markets(target: dict, known: dict, now: pd.Timestamp, running: set[str]) -> list[ProbeMarket]:
    """The target's markets as the planner sees them at `now`; `known` is `read_known`'s."""
    zones, instance_type, count = list(target["zones"]), target["instance_type"], int(target["count"])
    rows = known["rows"]
    rows = rows[rows["zone"].isin(zones) & (rows["instance_type"] == instance_type)]
    stats = observation_stats(rows, count, now)
    spend = known["spend"]
    spend = spend[spend["instance_type"] == instance_type]
    last_probe = spend.groupby("zone")["probed_at"].max().to_dict() if len(spend) else {}
    signals = known["signals"]
    prices = signals[(signals["kind"] == "spot_price") & (signals["instance_type"] == instance_type)]
    prices = prices.groupby("zone")["value"].last().to_dict() if len(prices) else {}
    used = set(target.get("job_zones", zones)) | (running & set(zones))
    kind = probe_kind_for(target["cloud"], target.get("probe_kind"))
    race_share = known.get("race_shares", {}).get(target["cloud"])
    out = []
    for zone in zones:
        seen = stats.get((zone, instance_type))
        if seen is None:  # nothing in the last HISTORY: an older row, or none at all
            seen = {"last_observed_at": known["latest"](zone)}
        on_demand = seen.get("on_demand_usd_per_hour", target.get("on_demand_usd_per_hour"))
        # newest free signal, newest observation, the target's own figure, else on-demand (spot costs less)
        spot = prices.get(zone, seen.get("spot_usd_per_hour", target.get("spot_usd_per_hour", on_demand)))
        out.append(
            ProbeMarket(
                cloud=target["cloud"],
                region=target["region"],
                zone=zone,
                instance_type=instance_type,
                count=count,
                spot_usd_per_hour=None if spot is None else float(spot),
                on_demand_usd_per_hour=None if on_demand is None else float(on_demand),
                used=zone in used,
                last_observed_at=seen.get("last_observed_at"),
                last_probed_at=last_probe.get(zone),
                observations=int(seen.get("observations", 0)),
                flips=int(seen.get("flips", 0)),
                up=seen.get("up"),
                probe_kind=kind,
                race_share=race_share,
            )
        )
    return out


def read_known(targets: list[dict], table, records, now: pd.Timestamp) -> dict:
    """One read of each table for all the targets' zones (a run reads each table once)."""
    zones = sorted({z for t in targets for z in t["zones"]})
    spend = records.read_spend(zones=zones, since=now - LAST_PROBE_LOOKBACK)
    kinds = table.probe_kinds(zones=zones, since=now - LAST_PROBE_LOOKBACK)
    return {
        "rows": table.read(zones=zones, since=now - HISTORY),
        "spend": spend,
        "race_shares": race_shares(spend, kinds),  # each cloud's, from its request probes here
        "signals": records.read_signals(zones=zones, since=now - HISTORY),
        "latest": lambda zone: table.latest_observed_at([zone]),
    }


def spent_today(spend: pd.DataFrame, targets: list[dict], now: pd.Timestamp) -> float:
    """USD the probes of the targets' markets cost since midnight UTC (on the cloud's clock)."""
    markets = {(z, t["instance_type"]) for t in targets for z in t["zones"]}
    today = spend[spend["probed_at"] >= now.floor("D")]
    mine = [(z, i) in markets for z, i in zip(today["zone"], today["instance_type"], strict=True)]
    return float(today.loc[mine, "usd"].sum()) if len(today) else 0.0


def plan_round(
    targets: list[dict], cloud, table, records, planner: ProbePlanner
) -> tuple[ProbePlan, list[ProbeMarket]]:
    """One plan over every target's markets (so the budget goes where it buys the most)."""
    now = cloud.now_timestamp().floor("us")
    running = running_job_zones(cloud)
    known = read_known(targets, table, records, now)
    markets = [m for target in targets for m in gather_markets(target, known, now, running)]
    return planner.plan(markets, now, spent_today(known["spend"], targets, now)), markets
