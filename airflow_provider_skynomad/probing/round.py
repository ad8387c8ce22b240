"""One probe run: plan it over every target (`plan_probes`), then each region's round (`ProbeRound`).

The ``skynomad_probe`` DAG plans once over every cloud region (so tasks side by side stay within the
day's budget) and maps one `SkyNomadProbeOperator` (operators/probe.py) per region; each runs a
round:

1. **Free signals first.** The cloud's free signals (AWS spot placement scores and spot price
   history; none on GCP and the simulated cloud) are stored in the signals table beside the market
   table (market/store/signals.py). They cost nothing.
2. **Then a plan.** The probe planner (probing/plan.py) picks which zones are worth a paid
   probe this run: markets in use before they pass ``max_market_age``, uncertain ones more often,
   calm or dear ones less, never above the day's budget.
3. **Then the probes.** Each chosen zone is asked for the gang size (the target's ``count``, 1 by
   default: set it to your largest job's ``instances``), by request (AWS and GCP: the capacity
   is given back the moment it is allocated, before it runs) or by launch-and-terminate, what was
   granted is released at once, the observation is appended to the market table with the kind of
   probe that saw it, and the probe's real cost to the probe-spend record (docs/probing.md).
   Rows of the zones that answered are written first, then the task fails naming the zones that
   did not. Rows are stamped with the cloud's clock (the simulated cloud's replayed time).
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from airflow_provider_skynomad.clouds.factory import make_cloud
from airflow_provider_skynomad.config import SkyNomadConfig
from airflow_provider_skynomad.market.freshness import DEFAULT_MAX_MARKET_AGE


def plan_probes(
    config: SkyNomadConfig,
    targets: list[dict],
    *,
    budget_usd_per_day: float,
    max_market_age: timedelta = DEFAULT_MAX_MARKET_AGE,
    probe_interval: timedelta = timedelta(minutes=10),
    log=None,
) -> list[dict]:
    """Plan this run over every target at once and hand each target its part of the plan.

    Each returned target carries ``probe_zones`` (what to probe, with its reason in plain words and
    the most it may cost) and ``probe_budget_usd`` (the sum: the mapped task never spends more), so
    tasks running side by side together stay within ``budget_usd_per_day``.
    """
    from airflow_provider_skynomad.market.store.signals import SignalTable
    from airflow_provider_skynomad.market.store.table import MarketTable
    from airflow_provider_skynomad.probing.plan import ProbePlanner
    from airflow_provider_skynomad.probing.state import plan_round

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
                "probe_zones": [_planned(c) for c in mine],
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


def _planned(choice) -> dict:
    """One planned probe: its zone, why, what it is planned at (`usd`) and the most it can cost
    (`most_usd`: a request probe whose instances were all launched before the cancel)."""
    from airflow_provider_skynomad.probing.plan import PROBE_LAUNCH, expected_probe_usd

    m = choice.market
    most = expected_probe_usd(m.count, m.spot_usd_per_hour or 0.0, m.cloud, PROBE_LAUNCH)
    return {
        "zone": m.zone,
        "reason": choice.reason,
        "usd": choice.expected_usd,
        "most_usd": max(most, choice.expected_usd),
    }


class ProbeRound:
    """One task's probes of one target: carry out the zones planned for it, record each probe's cost and row.

    :param target: a target of ``probe_targets`` (with its ``count``).
    :param cloud: the cloud to probe; ``table``, ``records``: the market table and its signals/spend tables.
    :param log: where to say what was probed, skipped and spent (the task's log).
    """

    def __init__(self, target: dict, cloud, table, records, log):
        self.target, self.cloud, self.table, self.records, self.log = target, cloud, table, records, log

    def plan(self, budget: float, max_market_age: timedelta, probe_interval: timedelta) -> tuple[list[dict], float]:
        """The target's own plan, when the DAG did not plan for it (the operator used alone)."""
        from airflow_provider_skynomad.probing.plan import ProbePlanner
        from airflow_provider_skynomad.probing.state import plan_round

        planner = ProbePlanner(budget, _hours(max_market_age), _hours(probe_interval))
        plan, _ = plan_round([self.target], self.cloud, self.table, self.records, planner)
        for choice in plan.skip:
            self.log.debug("not probing %s: %s", choice.market.zone, choice.reason)
        for note in plan.notes:
            self.log.info("%s", note)
        zones = [_planned(c) for c in plan.probe]
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
        kind = target["probe_kind"]
        # A request probe is planned at its expected cost; one that lost the race to fulfilment
        # costs up to `most_usd`. One such loss per run is allowed for before probes are dropped.
        race = max((float(z.get("most_usd", z["usd"])) - float(z["usd"]) for z in zones), default=0.0)
        for planned in zones:
            zone = planned["zone"]
            if paid + float(planned["usd"]) > allowed_usd + race + 1e-9:  # the cloud billed more than planned
                self.log.info("not probing %s: it would pass the part of today's budget planned for it", zone)
                continue
            try:
                result = self.cloud.probe(
                    target["region"], zone, target["instance_type"], int(target["count"]), kind=kind
                )
            except Exception as exc:  # noqa: BLE001 - one zone's failure must not lose the others
                failures[zone] = f"{type(exc).__name__}: {exc}"
                continue
            at = self.cloud.now_timestamp().floor("us")
            usd = self._usd(result)
            paid += usd
            self._record_spend(at, result, usd, planned["reason"])
            rows.append(self._row(at, result))
            self.log.info(
                "%s: %s probe saw %d of %d spot instance(s), %d billed, cost $%.4f (%s)",
                result.zone,
                result.kind,
                result.available,
                result.requested,
                result.billed_instances,
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

    def record_completed(self, planned_at) -> int:
        """Stamp the round as completed for the markets the plan keeps fresh (the target's
        ``job_zones``, else all its zones): a job's freshness check follows these stamps
        (market/store/rounds.py). Called only when every planned probe answered."""
        from airflow_provider_skynomad.market.freshness import CompletedRound
        from airflow_provider_skynomad.market.store.rounds import ProbeRoundTable

        target = self.target
        ended = self.cloud.now_timestamp().floor("us").to_pydatetime()
        planned = min(pd.Timestamp(planned_at).tz_convert("UTC").to_pydatetime(), ended)
        zones = target.get("job_zones")
        zones = target["zones"] if zones is None else zones
        done = [
            CompletedRound(target["cloud"], target["region"], zone, target["instance_type"], planned, ended)
            for zone in zones
        ]
        return ProbeRoundTable(market=self.table).record(done)

    def _usd(self, result) -> float:
        """What the probe cost: the cloud's figure, or (a cloud that does not report one) what its
        billed instances cost for the cloud's minimum billed time."""
        from airflow_provider_skynomad.probing.plan import min_billed_hours

        if result.usd > 0 or result.billed_instances == 0:
            return float(result.usd)
        return result.billed_instances * result.spot_usd_per_hour * min_billed_hours(self.target["cloud"])

    def _record_spend(self, at, result, usd: float, reason: str) -> None:
        from airflow_provider_skynomad.market.store.signals import ProbeSpend

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
            "probe_kind": result.kind,
        }
