"""What the probe DAG costs per day, before (16 instances per zone every 10 minutes) and after (the
probe planner, 1 instance per probe, within the default $10/day budget), at real H100 and V100 prices.

The example configuration: the ``skynomad_probe`` DAG every 10 minutes over every zone of the trace,
every zone a job may use (``job_zones`` unset), ``max_market_age`` 2 h, no connection budget.

- **before, asked**: what the old DAG asked for, 16 × spot price × the minimum billed minute per
  zone per run, 144 runs a day: the bill if every instance were granted (AWS and GCP both bill a
  granted instance at least 60 s).
- **before, granted**: the same, billed only for what the trace says a probe of 16 got (GCP trace
  only: it was recorded with 16-instance probes; the AWS trace's probes asked for 1).
- **after, launch**: a day of the new DAG replayed on the simulated cloud over the same trace (the
  same planner, operator and tables as under Airflow; the clock stepped 10 minutes per run), every
  probe a launch probe: what the probes really cost (the simulated cloud bills what it granted
  for one minute), how many probes, and the oldest any zone's newest observation got before a run.
- **after, request-and-cancel**: the same day with every market probed by request (docs/probing.md:
  AWS a request fleet deleted while its instances are ``pending``, GCP a VM deleted at
  ``STAGING``), under the documented assumptions: a probe that saw capacity is billed a minute only
  when it lost the race (the instance ran before the delete), which the replay draws with the prior
  race share `REQUEST_FULFILLED_SHARE` (10 %); the planner plans with each cloud's measured share.
- **request, worst case**: the same probes if *every* one that saw capacity had been billed a
  minute (the GCP assumption that a VM deleted at STAGING is free wrong, every AWS delete late).

Run: ``python benchmarks/bench_probing.py`` (several minutes on 2 busy cores).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

OLD_COUNT = 16
RUNS_PER_DAY = 144
TRACES = {
    "H100 (GCP a3-highgpu-1g, 13 zones)": ("gcp-h100-2025-first-week.csv.gz", 60.0),
    "V100 (AWS p3.2xlarge, 9 zones)": ("aws-v100-2023.csv.gz", 240.0),
}


def before(frame: pd.DataFrame, start: pd.Timestamp) -> dict:
    """The old DAG's day: every zone, every 10 minutes, 16 instances for a minute each."""
    day = frame[(frame["observed_at"] >= start) & (frame["observed_at"] < start + pd.Timedelta(days=1))]
    spot = day.groupby("zone")["spot_price"].mean()
    asked = float(spot.sum() * OLD_COUNT / 60.0 * RUNS_PER_DAY)
    granted = None
    if (day["requested"] >= OLD_COUNT).all():
        grid = day.set_index("observed_at").groupby("zone").resample("10min")[["available", "spot_price"]].last()
        grid = grid.dropna()
        granted = float((grid["available"].clip(upper=OLD_COUNT) * grid["spot_price"] / 60.0).sum())
    return {"asked": asked, "granted": granted, "zones": int(spot.size)}


def after(trace: str, start_hours: float, home: Path, probe_kind: str | None) -> dict:
    """A day of the new DAG on the simulated cloud over `trace`; `probe_kind` None: each market's
    cloud default (request where the cloud allows it)."""
    from airflow_provider_skynomad.clouds.simulated.clock import SteppedClock
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadConfig, SkyNomadHook, bundled_trace
    from airflow_provider_skynomad.market.store.signals import SignalTable
    from airflow_provider_skynomad.market.store.table import MarketTable
    from airflow_provider_skynomad.operators import probe as probe_module
    from airflow_provider_skynomad.operators.probe import SkyNomadProbeOperator, plan_probes, probe_targets
    from airflow_provider_skynomad.probing import round as round_module
    from airflow_provider_skynomad.probing.plan import DEFAULT_BUDGET_USD_PER_DAY, race_shares
    from airflow_provider_skynomad.probing.targets import target_with_count

    path = bundled_trace(trace)
    cloud = SimulatedCloud(path, home / "cloud", speed=1.0, trace_start=start_hours)
    cloud.clock = SteppedClock(cloud.clock.now() - pd.Timedelta(hours=cloud.clock.now_hours()))
    probe_module.make_cloud = round_module.make_cloud = lambda config: cloud
    config = SkyNomadConfig(market_url=f"sqlite:///{home / 'probing.db'}", trace_path=path)
    SkyNomadHook.get_config = lambda self: config
    targets = [target_with_count(t, 1, probe_kind) for t in probe_targets(config, count=1)]
    zones = [z for t in targets for z in t["zones"]]
    log = logging.getLogger("bench")
    worst = pd.Timedelta(0)
    started = time.perf_counter()
    with MarketTable(config.market_url) as table:
        for run in range(RUNS_PER_DAY):
            cloud.clock.hours = run / 6.0
            now = cloud.now_timestamp()
            if run:
                latest = table.read(since=now - pd.Timedelta(hours=6)).groupby("zone")["observed_at"].max()
                worst = max(worst, max(now - latest.get(z, now - pd.Timedelta(days=1)) for z in zones))
            for target in plan_probes(config, targets, budget_usd_per_day=DEFAULT_BUDGET_USD_PER_DAY, log=log):
                if target["probe_zones"]:
                    SkyNomadProbeOperator(task_id=f"probe_{run}", target=target).execute({})
        spend = SignalTable(market=table).read_spend()
        kinds_frame = table.probe_kinds()
        kinds = kinds_frame["probe_kind"].value_counts().to_dict()
        rows = table.read()
    seen = spend.merge(
        rows.rename(columns={"observed_at": "probed_at"})[["probed_at", "zone", "instance_type", "spot_price"]],
        on=["probed_at", "zone", "instance_type"],
    )
    # every probe that saw capacity billed its instances a minute at the observed spot price
    worst_usd = float((seen["available"] * seen["spot_price"] / 60.0).sum())
    return {
        "usd": float(spend["usd"].sum()),
        "worst_usd": max(worst_usd, float(spend["usd"].sum())),
        "race_shares": race_shares(spend, kinds_frame),
        "probes": len(spend),
        "kinds": kinds,
        "billed": int((spend["usd"] > 0).sum()),
        "budget": DEFAULT_BUDGET_USD_PER_DAY,
        "worst_age": worst,
        "wall_seconds": time.perf_counter() - started,
        "start": cloud.clock.start,
    }


def main() -> int:
    logging.disable(logging.WARNING)  # also Airflow's "execute cannot be called outside of the Task Runner"
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # the operators' own lines
    from airflow_provider_skynomad.hooks.skynomad import bundled_trace
    from airflow_provider_skynomad.market.observations import read_observations
    from airflow_provider_skynomad.probing.plan import REQUEST_FULFILLED_SHARE

    heads = ["before, asked", "before, granted", "after, launch", "after, request", "request, worst"]
    print(f"{'GPU':<36} {heads[0]:>14} {heads[1]:>16} {heads[2]:>14} {heads[3]:>15} {heads[4]:>15}")
    totals = {"before": 0.0, "launch": 0.0, "request": 0.0, "worst": 0.0}
    details = []
    for label, (trace, start_hours) in TRACES.items():
        runs = {}
        for kind, name in (("launch", "launch"), (None, "request")):
            with tempfile.TemporaryDirectory(prefix="bench-probing-") as tmp:
                home = Path(tmp)
                os.environ["SKYNOMAD_HOME"] = str(home)  # an empty market table: the DAG's first day
                runs[name] = after(trace, start_hours, home, kind)
        old = before(read_observations(bundled_trace(trace)), runs["launch"]["start"])
        granted = "-" if old["granted"] is None else f"${old['granted']:,.2f}"
        cells = [
            f"${old['asked']:,.2f}",
            granted,
            f"${runs['launch']['usd']:.2f}",
            f"${runs['request']['usd']:.2f}",
            f"${runs['request']['worst_usd']:.2f}",
        ]
        print(f"{label:<36} {cells[0]:>14} {cells[1]:>16} {cells[2]:>14} {cells[3]:>15} {cells[4]:>15}")
        totals["worst"] += runs["request"]["worst_usd"]
        totals["before"] += old["granted"] if old["granted"] is not None else old["asked"]
        totals["launch"] += runs["launch"]["usd"]
        totals["request"] += runs["request"]["usd"]
        for name, new in runs.items():
            details.append(
                f"  {label}, after {name}: {new['probes']} probes (of {old['zones'] * RUNS_PER_DAY} before), "
                f"{new['billed']} billed, kinds {new['kinds']}, oldest zone {new['worst_age']}, "
                f"race share planned with at the end {new['race_shares'] or '-'}, "
                f"budget ${new['budget']:.0f}/day ({new['wall_seconds']:.0f} s)"
            )
    print(
        f"{'both (13 GCP + 9 AWS markets)':<36} {'':>14} {'$' + format(totals['before'], ',.2f'):>16} "
        f"{'$' + format(totals['launch'], '.2f'):>14} {'$' + format(totals['request'], '.2f'):>15} "
        f"{'$' + format(totals['worst'], '.2f'):>15}"
    )
    print("\n".join(details))
    print(
        f"per day; before = {OLD_COUNT} instances per zone every 10 min, each billed a minimum minute (granted where "
        f"the trace says, else asked); after request: every market by request, {REQUEST_FULFILLED_SHARE:.0%} of the "
        "probes that saw capacity drawn as losing the race (billed a minute); worst case: all of them billed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
