"""SkyNomadProbeOperator: probe spot capacity in one cloud region and write it to the market table.

The ``skynomad_probe`` DAG maps one of these per cloud/region, so a region whose API is down
fails its own task while every other region's rows still land. Inside one task each zone is
probed on its own as well: rows of the zones that answered are written first, then the task
fails naming the zones that did not. Rows are stamped with the cloud's clock (the simulated
cloud's replayed time), in the market-observation format.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from airflow.sdk import BaseOperator

from ..hooks.skynomad import DEFAULT_CONN_ID, SkyNomadConfig, SkyNomadHook, make_cloud


class SkyNomadProbeError(RuntimeError):
    """Some zones could not be probed (the others' rows were written)."""


def probe_targets(config: SkyNomadConfig, regions: list[str] | None = None, count: int = 16) -> list[dict]:
    """One probe target per (cloud, region): the zones and instance types to ask for.

    The simulated cloud's catalog is its trace; real clouds take ``cloud_options["probe_targets"]``
    from the connection (a list of the same dicts).
    """
    if config.cloud != "simulated":
        targets = list(config.cloud_options.get("probe_targets", []))
        if not targets:
            raise ValueError(
                f"{config.cloud} cloud: list what to probe in the connection extra cloud_options.probe_targets "
                "([{cloud, region, zones, instance_type, accelerator, accelerator_count, count}])"
            )
        return [t for t in targets if not regions or t["region"] in regions]
    from ..market.observations import read_observations

    frame = read_observations(config.trace_path)
    meta = frame.drop_duplicates(["cloud", "region", "zone", "instance_type"])
    out = []
    for (cloud, region, instance_type), rows in meta.groupby(["cloud", "region", "instance_type"], sort=True):
        if regions and region not in regions:
            continue
        first = rows.iloc[0]
        out.append(
            {
                "cloud": cloud,
                "region": region,
                "zones": sorted(rows["zone"]),
                "instance_type": instance_type,
                "accelerator": str(first["accelerator"]),
                "accelerator_count": int(first["accelerator_count"]),
                "count": int(count),
            }
        )
    return out


class SkyNomadProbeOperator(BaseOperator):
    """Probe every zone of one region (launch spot, release at once) and append the observations.

    :param target: ``{cloud, region, zones, instance_type, accelerator, accelerator_count, count}``
        (see ``probe_targets``); mapped over by the probe DAG.
    :param skynomad_conn_id: the `skynomad` connection (market table + cloud).
    :return: the number of new rows written.
    """

    template_fields = ("target",)

    def __init__(self, *, target: dict, skynomad_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.skynomad_conn_id = skynomad_conn_id

    def execute(self, context) -> int:
        from ..market.table import MarketTable

        target = self.target
        hook = SkyNomadHook(self.skynomad_conn_id)
        config = hook.get_config()
        cloud = make_cloud(config)
        rows, failures = [], {}
        for zone in target["zones"]:
            try:
                result = cloud.probe(target["region"], zone, target["instance_type"], int(target["count"]))
            except Exception as exc:  # noqa: BLE001 - one zone's failure must not lose the others
                failures[zone] = f"{type(exc).__name__}: {exc}"
                continue
            rows.append(
                {
                    "observed_at": cloud.now_timestamp().floor("us"),
                    "cloud": target["cloud"],
                    "region": target["region"],
                    "zone": result.zone,
                    "instance_type": result.instance_type,
                    "accelerator": target.get("accelerator", "unknown"),
                    "accelerator_count": int(target.get("accelerator_count", 1)),
                    "requested": int(result.requested),
                    "available": int(result.available),
                    "spot_price": float(result.spot_usd_per_hour),
                    "on_demand_price": float(result.on_demand_usd_per_hour),
                }
            )
        written = 0
        if rows:
            table = MarketTable(config.market_url)
            try:
                written = table.append(pd.DataFrame(rows), source=f"probe of {target['cloud']}/{target['region']}")
            finally:
                table.close()
        for row in rows:
            self.log.info(
                "probe %s %s: %d/%d available, spot $%.4f/h, on-demand $%.4f/h",
                row["zone"],
                row["instance_type"],
                row["available"],
                row["requested"],
                row["spot_price"],
                row["on_demand_price"],
            )
        self.log.info("wrote %d new observation(s) to %s", written, config.display_market_url)
        if failures:
            raise SkyNomadProbeError(
                f"probes failed in {sorted(failures)} ({failures}); the {len(rows)} other zone(s) were recorded"
            )
        return written
