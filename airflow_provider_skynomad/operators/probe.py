"""SkyNomadProbeOperator: keep one cloud region's markets known, for cents a day.

The ``skynomad_probe`` DAG plans a run over every region (`plan_probes`) and maps one of these per
cloud/region, so a region whose API is down fails its own task while every other region's rows
still land. The probing itself (targets, plan, the round's probes and their bills) is in
probing/; this module is the Airflow side: the connection, the task's arguments, its log.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_skynomad.clouds.factory import make_cloud
from airflow_provider_skynomad.config import DEFAULT_CONN_ID, SkyNomadConfig
from airflow_provider_skynomad.exceptions import SkyNomadProbeError
from airflow_provider_skynomad.hooks.skynomad import SkyNomadHook
from airflow_provider_skynomad.market.freshness import DEFAULT_MAX_MARKET_AGE
from airflow_provider_skynomad.probing.round import ProbeRound, plan_probes
from airflow_provider_skynomad.probing.targets import DEFAULT_PROBE_COUNT, probe_targets, target_with_count

# the probe DAG imports these from here
__all__ = ["DEFAULT_PROBE_COUNT", "SkyNomadProbeError", "SkyNomadProbeOperator", "plan_probes", "probe_targets"]


class SkyNomadProbeOperator(BaseOperator):
    """Store one region's free signals, then probe the zones the probe planner picks.

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
    :param probe_kind: ``request`` (given back the moment it is allocated: billed only if the
        instance ran before the delete) or ``launch`` (launch and terminate, billed the minimum);
        default the target's, else the connection's ``cloud_options.probe_kind``, else ``request``
        where the cloud allows it (AWS, GCP) and ``launch`` elsewhere. See docs/probing.md.
    :return: the number of new observation rows written.
    """

    template_fields = ("target",)

    def __init__(
        self,
        *,
        target: dict,
        skynomad_conn_id: str = DEFAULT_CONN_ID,
        probe_budget_usd_per_day: float | None = None,
        max_market_age: timedelta = DEFAULT_MAX_MARKET_AGE,
        probe_interval: timedelta = timedelta(minutes=10),
        probe_kind: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.skynomad_conn_id = skynomad_conn_id
        self.probe_budget_usd_per_day = probe_budget_usd_per_day
        self.max_market_age = max_market_age
        self.probe_interval = probe_interval
        self.probe_kind = probe_kind

    def execute(self, context) -> int:
        """Probe the target's region. Each step is said before it is taken, and a failure ends in
        one ERROR line naming the step and the cause, also kept in the task's state for the jobs
        dashboard (`plugin.facts.failure_reason`): a task that stops with a bare log helps nobody."""
        where = f"{_field(self.target, 'cloud')}/{_field(self.target, 'region')}"
        self.log.info("SkyNomad probe of %s: reading the %r connection", where, self.skynomad_conn_id)
        self._step, self._config = "reading the connection", None
        try:
            return self._probe(where)
        except Exception as exc:
            reason = _scrubbed(f"the probe of {where} failed while {self._step}: {_first_line(exc)}", self._config)
            self.log.error("%s", reason)
            _keep_failure(context, reason)
            raise

    def _probe(self, where: str) -> int:
        from airflow_provider_skynomad.market.store.signals import SignalTable
        from airflow_provider_skynomad.market.store.table import MarketTable

        config = self._config = SkyNomadHook(self.skynomad_conn_id).get_config()
        self._next(f"setting up the {config.cloud} cloud")
        cloud = make_cloud(config)
        started = cloud.now_timestamp()
        target = self.target = target_with_count(self.target, None, self.probe_kind)
        budget = self._budget(config)
        self._next(f"opening the market table {config.display_market_url}")
        with MarketTable(config.market_url) as table:
            records = SignalTable(market=table)
            self._store_signals(cloud, records)
            round_ = ProbeRound(target, cloud, table, records, self.log)
            self._next("planning which zones to probe")
            if "probe_zones" in target:  # planned by the DAG together with the other regions
                zones, allowed = list(target["probe_zones"]), float(target["probe_budget_usd"])
                allowed -= round_.spent_since(target.get("planned_at"))  # a retry: what the try before paid
            else:
                zones, allowed = round_.plan(budget, self.max_market_age, self.probe_interval)
            self._next(f"probing {len(zones)} zone(s) of {where}")
            written, failures, probed = round_.run(zones, allowed, budget)
            if not failures:
                round_.record_completed(target.get("planned_at") or started)
        self.log.info("wrote %d new observation(s) to %s", written, config.display_market_url)
        if failures:
            self._step = "probing"
            raise SkyNomadProbeError(
                f"probes failed in {sorted(failures)} ({failures}); the {probed} other zone(s) were recorded"
            )
        return written

    def _next(self, step: str) -> None:
        self._step = step
        self.log.info("%s", step[0].upper() + step[1:])

    def _budget(self, config: SkyNomadConfig) -> float:
        from airflow_provider_skynomad.probing.plan import DEFAULT_BUDGET_USD_PER_DAY

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


def _field(target, key: str) -> str:
    return str(target.get(key, "?")) if isinstance(target, dict) else "?"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else 'no message'}"[:500]


def _scrubbed(text: str, config: SkyNomadConfig | None) -> str:
    """`text` with the market database's password hidden (a driver's error can quote its URL)."""
    if config is None or not config.market_url:
        return text
    from sqlalchemy.engine import make_url

    text = text.replace(config.market_url, config.display_market_url)
    try:
        password = make_url(config.market_url).password
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: nothing more to hide
        return text
    return text.replace(password, "***") if password else text


def _keep_failure(context, reason: str) -> None:
    """The failure's reason in the task's state (where the jobs dashboard reads why a task failed)."""
    from airflow_provider_skynomad.jobs.record import StateStore

    try:
        StateStore.of(context).save_status({"state": "failed", "reason": reason})
    except Exception:  # noqa: BLE001 - the task's own error is the one to raise
        return
