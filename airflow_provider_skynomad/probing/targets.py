"""What the probe DAG probes: one target per (cloud, region), its zones, instance type, gang size and probe kind.

The simulated cloud's catalog is its trace; real clouds list theirs in the connection
(``cloud_options["probe_targets"]``).
"""

from __future__ import annotations

from airflow_provider_skynomad.config import SkyNomadConfig

DEFAULT_PROBE_COUNT = 1


def probe_targets(
    config: SkyNomadConfig,
    regions: list[str] | None = None,
    count: int | None = None,
    *,
    job_zones: list[str] | None = None,
) -> list[dict]:
    """One probe target per (cloud, region): the zones and instance type to ask about.

    The simulated cloud's catalog is its trace; real clouds take ``cloud_options["probe_targets"]``
    from the connection (a list of the same dicts; every part of a several-cloud connection).

    :param count: instances per probe for targets that do not set their own (default 1).
    :param job_zones: zones SkyNomad jobs may use (kept fresher than ``max_market_age``); None:
        every probed zone.
    """
    targets = [target_with_count(t, count) for t in _configured_targets(config)]
    targets = [t for t in targets if not regions or t["region"] in regions]
    if job_zones is not None:
        for target in targets:
            target["job_zones"] = [z for z in target["zones"] if z in set(job_zones)]
    return targets


def _configured_targets(config: SkyNomadConfig) -> list[dict]:
    if config.cloud == "multi":
        return [dict(t, cloud=t.get("cloud", part.cloud)) for part in config.parts for t in _configured_targets(part)]
    if config.cloud != "simulated":
        targets = list(config.cloud_options.get("probe_targets", []))
        if not targets:
            raise ValueError(
                f"{config.cloud} cloud: list what to probe in the connection extra cloud_options.probe_targets "
                "([{cloud, region, zones, instance_type, accelerator, accelerator_count, count}])"
            )
        kind = config.cloud_options.get("probe_kind")
        return [
            _with_list_price(dict(t, cloud=t.get("cloud", config.cloud), probe_kind=t.get("probe_kind") or kind))
            for t in targets
        ]
    from airflow_provider_skynomad.market.observations import read_observations

    frame = read_observations(config.trace_path)
    out = []
    for (cloud, region, instance_type), rows in frame.groupby(["cloud", "region", "instance_type"], sort=True):
        first = rows.iloc[0]
        out.append(
            {
                "cloud": cloud,
                "region": region,
                "zones": sorted(set(rows["zone"])),
                "instance_type": instance_type,
                "accelerator": str(first["accelerator"]),
                "accelerator_count": int(first["accelerator_count"]),
                # the catalog is the trace: its dearest prices bound what a first probe can cost
                "spot_usd_per_hour": float(rows["spot_price"].max()),
                "on_demand_usd_per_hour": float(rows["on_demand_price"].max()),
            }
        )
    return out


def _with_list_price(target: dict) -> dict:
    """A real cloud's target gets its on-demand list price (the shipped price table) when it has
    none: a first probe, before any spot price is known, is planned at it (spot costs less)."""
    if target.get("on_demand_usd_per_hour") is None and target.get("cloud") in ("aws", "gcp"):
        try:
            from airflow_provider_skynomad.market.prices import load_prices

            price = load_prices(target["cloud"]).usd_per_hour(target["region"], target["instance_type"])
        except Exception:  # noqa: BLE001 - no table: the planner says it has no price
            price = None
        if price is not None:
            target = {**target, "on_demand_usd_per_hour": float(price)}
    return target


def target_with_count(target: dict, count: int | None, probe_kind: str | None = None) -> dict:
    """The target with its probe size and its probe kind (`probe_kind` overrides the target's;
    default: ``request`` where the cloud allows it, else ``launch``)."""
    from airflow_provider_skynomad.probing.plan import probe_kind_for

    out = dict(target)
    out["count"] = int(out.get("count") or count or DEFAULT_PROBE_COUNT)
    if out["count"] < 1:
        raise ValueError(f"probe target {out.get('region')}: count must be ≥ 1, got {out['count']}")
    out["probe_kind"] = probe_kind_for(out.get("cloud", ""), probe_kind or out.get("probe_kind"))
    return out
