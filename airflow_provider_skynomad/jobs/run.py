"""One job as both sides act on it: its record, store, cloud, markets and policy, and the acts they share.

Why a shared object: the worker (`jobs.worker`: validate, first launch, hand over, report) and the
trigger (`jobs.steps`: the controller's steps) are separate objects, but both decide, carry a
decision out, say what happened and publish where the job stands in one way. `JobRun` is that one
way, over one typed `JobRecord` and one `store.RecordStore` (the worker's or the controller's).
The policy is built once per job and asked through its public interface only.
"""

from __future__ import annotations

import logging

from airflow_provider_skynomad.clouds.base import Cloud
from airflow_provider_skynomad.clouds.tags import job_tags
from airflow_provider_skynomad.jobs.carry_out import Carried, Workload, carry_out, on_demand_by_price
from airflow_provider_skynomad.jobs.contract import TaskIdentity
from airflow_provider_skynomad.jobs.errors import SkyNomadInputError, SkyNomadJobFailed
from airflow_provider_skynomad.jobs.markets import JobMarkets
from airflow_provider_skynomad.jobs.narrate import say, status_line, why_move
from airflow_provider_skynomad.jobs.params import JobParams
from airflow_provider_skynomad.jobs.publish import LiveStatus
from airflow_provider_skynomad.jobs.record import JobRecord
from airflow_provider_skynomad.jobs.stale import StaleGuard
from airflow_provider_skynomad.jobs.store import RecordStore
from airflow_provider_skynomad.jobs.words import decision_words, wanted_market
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision, Mode
from airflow_provider_skynomad.planner.job import JobState
from airflow_provider_skynomad.planner.safety import is_safe
from airflow_provider_skynomad.planner.timeline import NoteKind

WEIGHED_DECISIONS_KEPT = 8  # decisions whose weighed options the record keeps (the job page shows them)


class JobRun:
    """One job's record and what acts on it (see the module docstring); `record` is set once known."""

    def __init__(
        self,
        *,
        params: JobParams,
        config,
        cloud: Cloud,
        store: RecordStore,
        task: TaskIdentity,
        log,
        table_factory,
    ):
        self.params, self.config, self.cloud, self.store, self.task, self.log = params, config, cloud, store, task, log
        self._table_factory = table_factory
        self._table = None
        self._markets: JobMarkets | None = None
        self._policy = None
        try:  # the thresholds the probe DAG's schedule keeps data within (jobs/probe_schedule.py)
            self.stale = StaleGuard.for_config(config)
        except ValueError as exc:  # a bad SKYNOMAD_PROBE_INTERVAL_MINUTES / SKYNOMAD_MAX_MARKET_AGE_HOURS
            raise SkyNomadInputError(str(exc)) from exc
        self.record: JobRecord | None = None
        self.status = LiveStatus(cloud, log)
        self.untold: dict | None = None  # the last status published, not yet on the fleet's board

    # == what the job reads ====================================================================

    @property
    def table(self):
        """The market table (opened on first use: a worker that only reports may never need it)."""
        if self._table is None:
            self._table = self._table_factory()
            self._table.create()
        return self._table

    @property
    def markets(self) -> JobMarkets:
        """The job's markets (`jobs.markets`): opened on first use, from the record."""
        if self._markets is None:
            self._markets = JobMarkets.open(
                self.table,
                self.record,
                step_hours=self.params.step_hours,
                stale=self.stale,
                fleet_aware=self.params.fleet_aware,
            )
        return self._markets

    @property
    def policy(self):
        """The job's planner, built once per job (its fitted forecasts are reused step after step)."""
        if self._policy is None:
            self.policy = self.params.policy if self.record is None else self.record.policy
        return self._policy

    @policy.setter
    def policy(self, name: str) -> None:
        from airflow_provider_skynomad.planner.registry import get_policy

        try:
            self._policy = get_policy(name, **self.params.policy_params)
        except (ValueError, TypeError) as exc:
            raise SkyNomadInputError(str(exc)) from exc

    def elapsed(self) -> float:
        """Cloud hours since the job started: every time in the record is on this clock."""
        return float(self.cloud.now_hours()) - self.record.job_start_hours

    def view(self) -> MarketView:
        """The planner's view now (`jobs.markets`); markets gone stale are said at WARNING."""
        record = self.record
        view, warnings = self.markets.view(
            self.cloud,
            state=record.state,
            group=record.group,
            start_hours=record.job_start_hours,
            instances=record.job.instances,
        )
        for words in warnings:
            self.log.warning("%s", words)
        return view

    # == deciding ==============================================================================

    def decide(self, view: MarketView, elapsed: float) -> Decision:
        """What the planner would run now, from the record as last acted on."""
        state = self.record.state.advance(elapsed_hours=elapsed)
        return self.policy.decide(self.record.job, state, view, elapsed)

    def decided(self, at: float, decision: Decision, view: MarketView | None = None) -> None:
        """Note the decision in the timeline, with the options it weighed (the job page shows why)."""
        first = str(decision.first) if decision.first else "idle"
        item = self.record.note(at, NoteKind.DECIDE, want=first, reason=decision.reason)
        options = self._weighed(view, at, decision) if view is not None else []
        if options:
            item["options"] = options
            explained = [t for t in self.record.timeline if "options" in t]
            for older in explained[:-WEIGHED_DECISIONS_KEPT]:  # the task state stays small
                del older["options"]
        self.log.debug("planner at %.2f h wants %s: %s", at, first, decision.reason)

    def _weighed(self, view: MarketView, at: float, decision: Decision) -> list[dict]:
        """The best few options the skynomad policy weighed now (for the job page), ranked by the order
        `decision` (the one carried out, maybe the trigger's) tries them; [] for other policies."""
        if self.record.policy != "skynomad":
            return []
        from airflow_provider_skynomad.planner.explain import weighed

        try:
            state = self.record.state.advance(elapsed_hours=at)
            return weighed(self.policy, self.record.job, state, view, at, decision=decision)
        except Exception as exc:  # noqa: BLE001 - an explanation must never stop the job
            self.log.debug("could not explain the decision at %.2f h: %s", at, exc)
            return []

    # == acting ================================================================================

    def carry_out(self, view: MarketView, decision: Decision, elapsed: float) -> None:
        """Carry `decision` out (`jobs.carry_out`), record what happened, say it, and publish.

        :raises SkyNomadJobFailed: the cloud API refused every launch and nothing runs.
        """
        record = self.record
        before, state = len(record.timeline), record.state
        self.record_carried(carry_out(record, self.cloud, view, decision, elapsed, self.store, self.workload()))
        record.wants = wanted_market(decision) if record.group is None else None
        words = decision_words(decision, view)
        self.tell(before, view, state, record.state.running, elapsed, words)
        self.publish(self._net_after_refusals(view, decision) or elapsed)

    def record_carried(self, carried: Carried) -> None:
        """Share what a carried-out decision taught of the markets; fail the job when it must stop."""
        self.markets.share(carried.observations, self.log)
        if carried.stopped is not None:
            raise SkyNomadJobFailed(carried.stopped)

    def _net_after_refusals(self, view: MarketView, decision: Decision) -> float | None:
        """Every spot try was refused, and asking took cloud time: if waiting idle for the next step is
        no longer safe *now*, start on-demand now rather than a step late.

        The planner judged idle safe at the decision's moment; refusals each cost an API round trip
        (many zones on a crowded account, a fast simulated clock), and the job must not pay for them
        with its deadline.
        """
        record = self.record
        if record.group is not None or not any(o is not None and o.mode is Mode.SPOT for o in decision.try_in_order):
            return None
        now = self.cloud.now_hours() - record.job_start_hours
        if is_safe(record.job, record.state.advance(elapsed_hours=now), view, None):
            return None
        rescue = Decision(on_demand_by_price(view)[:1], reason="no spot capacity where it asked")
        why = "no spot capacity in any zone it tried, and waiting for the next step would be too late"
        self.say(record.note(now, NoteKind.DEADLINE_PRESSURE, why=why))
        record.on_safety_net = True
        before = len(record.timeline)
        self.record_carried(carry_out(record, self.cloud, view, rescue, now, self.store, self.workload()))
        self.tell(before, view, record.state, record.state.running, now, why)
        return now

    def tell(self, before: int, view: MarketView, state: JobState, option, at: float, plain: str) -> None:
        """Say the timeline's items from index `before` on (but decisions and stays); a move from
        `state` to `option` says why, in `plain` words when the planner's terms name no reason."""
        for item in self.record.timeline[before:]:
            if item["event"] == NoteKind.MIGRATE:
                item["why"] = why_move(self.record, view, state, option, at) or plain
            elif item["event"] == NoteKind.RELEASE:
                item["why"] = why_move(self.record, view, state, None, at) or plain
            if not NoteKind(item["event"]).quiet:
                self.say(item)

    def workload(self) -> Workload:
        """What every group of the job runs, and how its instances are tagged."""
        from airflow_provider_skynomad.workload import default_workload

        # The declared work, never the planning bound: every group of the job runs the same
        # command, or a relaunch would not resume the checkpoints of the first.
        command = self.params.command or tuple(default_workload(self.params.work_hours))
        env = {**self.params.env, "SKYNOMAD_COLD_START_HOURS": repr(self.params.cold_start_hours)}
        return Workload(tuple(command), env, job_tags(self.task, self.record.job_id, user_tags=self.params.tags))

    # == telling ===============================================================================

    def publish(
        self, elapsed: float, summary: dict | None = None, state: str | None = None, reason: str | None = None
    ) -> dict:
        """The live status to the store (the trigger's board, or task state), and one line of it in the log."""
        status = self.status.of(self.record, elapsed, summary, state=state, reason=reason)
        self.store.save_status(status)
        self.untold = status  # the worker hands it to the fleet's board once it holds the record
        self.log.info("%s", status_line(status))
        return status

    def say(self, item: dict, level: int = logging.INFO) -> None:
        """A timeline item in plain words, in the task's log."""
        self.log.log(level, "%s", say(item))

    def close(self) -> None:
        """Give back the market table this job opened (the worker's own; the trigger's is shared)."""
        if self._table is not None:
            self._table.close()
            self._table = None
