"""SkyNomadProbeOperator: keep one cloud region's markets known, for cents a day.

The ``skynomad_probe`` DAG maps one of these per cloud/region, so a region whose API is down
fails its own task while every other region's rows still land. Each run:

1. **Free signals first.** The cloud's free signals (AWS spot placement scores and spot price
   history; none on GCP and the simulated cloud) are stored in the signals table beside the market
   table (market/signals.py). They cost nothing.
2. **Then a plan.** The probe planner (market/probing.py) picks which zones are worth a paid launch
   probe this run: markets in use before they pass ``max_market_age``, uncertain ones more often,
   calm or dear ones less, never above the day's budget.
3. **Then the probes.** Each chosen zone is asked for the gang size (the target's ``count``, 1 by
   default: set it to your largest job's ``instances``), what was granted is released at once, the
   observation is appended to the market table and the probe's cost to the probe-spend record.
   Rows of the zones that answered are written first, then the task fails naming the zones that
   did not. Rows are stamped with the cloud's clock (the simulated cloud's replayed time).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pandas as pd
from airflow.sdk import BaseOperator

from airflow_provider_skynomad.hooks.skynomad import DEFAULT_CONN_ID, SkyNomadConfig, SkyNomadHook, make_cloud

DEFAULT_PROBE_COUNT = 1


class SkyNomadProbeError(RuntimeError):
    """Some zones could not be probed (the others' rows were written)."""


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
    targets = [_target(t, count) for t in _configured_targets(config)]
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
        return [_with_list_price(dict(t, cloud=t.get("cloud", config.cloud))) for t in targets]
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


def _target(target: dict, count: int | None) -> dict:
    out = dict(target)
    out["count"] = int(out.get("count") or count or DEFAULT_PROBE_COUNT)
    if out["count"] < 1:
        raise ValueError(f"probe target {out.get('region')}: count must be ≥ 1, got {out['count']}")
    return out


class SkyNomadProbeOperator(BaseOperator):
    """Store one region's free signals, then launch-probe the zones the probe planner picks.

    :param target: ``{cloud, region, zones, instance_type, accelerator, accelerator_count, count}``
        (see ``probe_targets``), optionally ``job_zones`` (zones jobs may use; default all),
        ``spot_usd_per_hour`` (a price to plan with before the first observation), and the part of
        the DAG's plan for it (``probe_zones``, ``probe_budget_usd``, ``budget_usd_per_day``: see
        ``plan_probes``); without a plan the operator plans its own markets.
    :param skynomad_conn_id: the `skynomad` connection (market table + cloud).
    :param probe_budget_usd_per_day: the most this task's markets may cost per UTC day when the
        DAG did not plan for it; default the connection's ``probe_budget_usd_per_day``, else 10 USD.
    :param max_market_age: markets in use are probed before their newest observation is this old
        (the jobs' own ``max_market_age``).
    :param probe_interval: how often the probe DAG runs (the next chance to probe).
    :return: the number of new observation rows written.
    """

    template_fields = ("target",)

    def __init__(
        self,
        *,
        target: dict,
        skynomad_conn_id: str = DEFAULT_CONN_ID,
        probe_budget_usd_per_day: float | None = None,
        max_market_age: timedelta = timedelta(hours=2),
        probe_interval: timedelta = timedelta(minutes=10),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.skynomad_conn_id = skynomad_conn_id
        self.probe_budget_usd_per_day = probe_budget_usd_per_day
        self.max_market_age = max_market_age
        self.probe_interval = probe_interval

    def execute(self, context) -> int:
        from airflow_provider_skynomad.market.signals import SignalTable
        from airflow_provider_skynomad.market.table import MarketTable

        config = SkyNomadHook(self.skynomad_conn_id).get_config()
        cloud = make_cloud(config)
        target = self.target = _target(self.target, None)
        budget = self._budget(config)
        with MarketTable(config.market_url) as table:
            records = SignalTable(market=table)
            self._store_signals(cloud, records)
            round_ = _Round(self, cloud, table, records)
            if "probe_zones" in target:  # planned by the DAG together with the other regions
                zones, allowed = list(target["probe_zones"]), float(target["probe_budget_usd"])
                allowed -= round_.spent_since(target.get("planned_at"))  # a retry: what the try before paid
            else:
                zones, allowed = round_.plan(budget)
            written, failures, probed = round_.run(zones, allowed, budget)
        self.log.info("wrote %d new observation(s) to %s", written, config.display_market_url)
        if failures:
            raise SkyNomadProbeError(
                f"probes failed in {sorted(failures)} ({failures}); the {probed} other zone(s) were recorded"
            )
        return written

    def _budget(self, config: SkyNomadConfig) -> float:
        from airflow_provider_skynomad.market.probing import DEFAULT_BUDGET_USD_PER_DAY

        for budget in (self.target.get("budget_usd_per_day"), self.probe_budget_usd_per_day):
            if budget is not None:
                return float(budget)
        if config.probe_budget_usd_per_day is not None:
            return float(config.probe_budget_usd_per_day)
        return DEFAULT_BUDGET_USD_PER_DAY

    def _store_signals(self, cloud, records) -> None:
        target = self.target
        try:
            signals = cloud.signals(target["region"], list(target["zones"]), target["instance_type"], target["count"])
            new = records.append_signals(signals)
        except Exception as exc:  # noqa: BLE001 - free signals are a bonus: never lose the probes for them
            self.log.warning("free signals of %s could not be read (%s); probing goes on", target["region"], exc)
            return
        if signals:
            self.log.info("stored %d free signal(s) of %s (placement scores, spot prices)", new, target["region"])


def plan_probes(
    config: SkyNomadConfig,
    targets: list[dict],
    *,
    budget_usd_per_day: float,
    max_market_age: timedelta = timedelta(hours=2),
    probe_interval: timedelta = timedelta(minutes=10),
    log=None,
) -> list[dict]:
    """Plan this run over every target at once and hand each target its part of the plan.

    Each returned target carries ``probe_zones`` (what to probe, with its reason in plain words and
    the most it may cost) and ``probe_budget_usd`` (the sum: the mapped task never spends more), so
    tasks running side by side together stay within ``budget_usd_per_day``.
    """
    from airflow_provider_skynomad.market.probe_state import plan_round
    from airflow_provider_skynomad.market.probing import ProbePlanner
    from airflow_provider_skynomad.market.signals import SignalTable
    from airflow_provider_skynomad.market.table import MarketTable

    cloud = make_cloud(config)
    planner = ProbePlanner(budget_usd_per_day, _hours(max_market_age), _hours(probe_interval))
    with MarketTable(config.market_url) as table:
        plan, markets = plan_round(targets, cloud, table, SignalTable(market=table), planner)
    out = []
    for target in targets:
        mine = [
            c
            for c in plan.probe
            if (c.market.cloud, c.market.region, c.market.instance_type)
            == (target["cloud"], target["region"], target["instance_type"])
            and c.market.zone in target["zones"]
        ]
        out.append(
            {
                **target,
                "probe_zones": [{"zone": c.market.zone, "reason": c.reason, "usd": c.expected_usd} for c in mine],
                "probe_budget_usd": sum(c.expected_usd for c in mine),
                "budget_usd_per_day": budget_usd_per_day,
                "planned_at": plan.now.isoformat(),
            }
        )
    if log is not None:
        for choice in plan.skip:
            log.debug("not probing %s: %s", choice.market.zone, choice.reason)
        for note in plan.notes:
            log.info("%s", note)
        log.info(
            "planned %d of %d markets this run, at most $%.2f; $%.2f spent today of a $%.2f budget",
            len(plan.probe),
            len(markets),
            plan.expected_usd,
            plan.spent_today_usd,
            budget_usd_per_day,
        )
    return out


def _hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600.0


class _Round:
    """One task's probes: carry out the zones planned for it, record each probe's cost and row."""

    def __init__(self, operator: SkyNomadProbeOperator, cloud, table, records):
        self.op, self.log, self.cloud, self.table, self.records = operator, operator.log, cloud, table, records
        self.target = operator.target

    def plan(self, budget: float) -> tuple[list[dict], float]:
        """The target's own plan, when the DAG did not plan for it (the operator used alone)."""
        from airflow_provider_skynomad.market.probe_state import plan_round
        from airflow_provider_skynomad.market.probing import ProbePlanner

        planner = ProbePlanner(budget, _hours(self.op.max_market_age), _hours(self.op.probe_interval))
        plan, _ = plan_round([self.target], self.cloud, self.table, self.records, planner)
        for choice in plan.skip:
            self.log.debug("not probing %s: %s", choice.market.zone, choice.reason)
        for note in plan.notes:
            self.log.info("%s", note)
        zones = [{"zone": c.market.zone, "reason": c.reason, "usd": c.expected_usd} for c in plan.probe]
        return zones, plan.expected_usd

    def spent_since(self, planned_at: str | None) -> float:
        """What probes of this target's markets cost since the plan (0 on a first try)."""
        if not planned_at:
            return 0.0
        spend = self.records.read_spend(zones=list(self.target["zones"]), since=pd.Timestamp(planned_at))
        return float(spend.loc[spend["instance_type"] == self.target["instance_type"], "usd"].sum())

    def run(self, zones: list[dict], allowed_usd: float, budget: float) -> tuple[int, dict[str, str], int]:
        target = self.target
        rows, failures, paid = [], {}, 0.0
        for planned in zones:
            zone = planned["zone"]
            if paid + float(planned["usd"]) > allowed_usd + 1e-9:  # the cloud billed more than planned
                self.log.info("not probing %s: it would pass the part of today's budget planned for it", zone)
                continue
            try:
                result = self.cloud.probe(target["region"], zone, target["instance_type"], int(target["count"]))
            except Exception as exc:  # noqa: BLE001 - one zone's failure must not lose the others
                failures[zone] = f"{type(exc).__name__}: {exc}"
                continue
            at = self.cloud.now_timestamp().floor("us")
            usd = self._usd(result)
            paid += usd
            self._record_spend(at, result, usd, planned["reason"])
            rows.append(self._row(at, result))
            self.log.info(
                "%s: %d of %d spot instance(s) granted and released, cost $%.2f (%s)",
                result.zone,
                result.available,
                result.requested,
                usd,
                planned["reason"],
            )
        written = 0
        if rows:
            written = self.table.append(pd.DataFrame(rows), source=f"probe of {target['cloud']}/{target['region']}")
        today = self.records.spent_usd(since=self.cloud.now_timestamp().floor("D"))
        self.log.info(
            "probed %d of %d markets in %s/%s for $%.2f; $%.2f today of a $%.2f budget",
            len(rows),
            len(target["zones"]),
            target["cloud"],
            target["region"],
            paid,
            today,
            budget,
        )
        return written, failures, len(rows)

    def _usd(self, result) -> float:
        """What the probe cost: the cloud's figure, or (a cloud that does not report one) what its
        granted instances cost for the cloud's minimum billed time."""
        from airflow_provider_skynomad.market.probing import min_billed_hours

        if result.usd > 0 or result.available == 0:
            return float(result.usd)
        return result.available * result.spot_usd_per_hour * min_billed_hours(self.target["cloud"])

    def _record_spend(self, at, result, usd: float, reason: str) -> None:
        from airflow_provider_skynomad.market.signals import ProbeSpend

        target = self.target
        spend = ProbeSpend(
            at,
            target["cloud"],
            target["region"],
            result.zone,
            result.instance_type,
            int(result.requested),
            int(result.available),
            usd,
            reason,
        )
        self.records.record_probes([spend])

    def _row(self, at, result) -> dict:
        target = self.target
        return {
            "observed_at": at,
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
