"""The job runtime: start a job, reconnect to it after a crash, and act on what its controller sees.

`JobRunner` is one job's logic, run on both sides of Airflow's deferral:

- on the worker, `start()` validates everything (deadline, feasibility, zones, market freshness,
  the cloud) before anything is written or launched, asks the planner and carries out the first
  decision; `resume()` is a retry after a worker crash (it finishes a launch left in flight, found
  by its client token); `report()` turns the controller's outcome into the task's result;
- in the trigger (`jobs.controller`), `handle(event)` carries out what each look at the job found
  (finished / preempted / failed / replan / deadline pressure) the moment it was found: no worker
  slot stands between a preemption and its relaunch.

The controller's own lateness (a busy triggerer's loop, the database) is measured every step;
the slowest seen becomes the job's `reaction_hours`, which the planner's safety net plans with:
a change may start that late, a rescue two lags late.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import pandas as pd

from airflow_provider_skynomad.clouds.base import Cloud
from airflow_provider_skynomad.clouds.tags import job_tags
from airflow_provider_skynomad.jobs.carry_out import Workload, carry_out, on_demand_by_price, recover_pending
from airflow_provider_skynomad.jobs.contract import (
    ControllerArgs,
    Outcome,
    OutcomeKind,
    TaskIdentity,
    first_event_hold_seconds,
)
from airflow_provider_skynomad.jobs.deadline_risk import call_deadline_risk
from airflow_provider_skynomad.jobs.errors import SkyNomadDeadlineMissed, SkyNomadInputError, SkyNomadJobFailed
from airflow_provider_skynomad.jobs.events import EventKind, JobEvent
from airflow_provider_skynomad.jobs.fleet import FleetLens, own_row
from airflow_provider_skynomad.jobs.narrate import live_status, say, status_line, why_move
from airflow_provider_skynomad.jobs.params import JobParams
from airflow_provider_skynomad.jobs.record import JobRecord, StateStore
from airflow_provider_skynomad.jobs.stale import StaleGuard, held_rows
from airflow_provider_skynomad.jobs.summary import CLOUD_BILL, deadline_line, format_timeline, job_bill, summarize
from airflow_provider_skynomad.jobs.usable_zones import leave_out_unusable
from airflow_provider_skynomad.market.source import MarketInputError, MarketSource, select_markets
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision, Mode
from airflow_provider_skynomad.planner.job import JobSpec, JobSpecError, JobState
from airflow_provider_skynomad.planner.pace import Pace
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.planner.safety import is_safe
from airflow_provider_skynomad.planner.timeline import NoteKind, SegmentEnd

MAX_LAGS_KEPT = 50
PACE_NEWS = 0.1  # a measured pace is said again once it moved this much (10 %) from the last said
PACE_WARNING = 0.1  # a workload measured more than 10 % slower than declared is said at WARNING
NEWS_LAG_HOURS = 1.0 / 60.0  # a controller lag below a minute of cloud time is planned with, not told
WEIGHED_DECISIONS_KEPT = 8  # decisions whose weighed options the record keeps (the job page shows them)
GUARD_LAGS = 1.0  # the planner already lets a rescue come two lags late; one more lag of margin
# Half a step: a tenth to see a finished workload (the trigger polls faster then), the rest for a
# start-up beyond the declared cold start before the group's first checkpoint has measured it.
MARGIN_STEPS = 0.5


def guard_hours(step_hours: float, max_lag_hours: float) -> float:
    """How much earlier than the task's deadline the planner aims: Airflow's own lag, a few times over.

    The planner's safety net lets a change start one lag late and a rescue come two lags late;
    lags grow when the box gets busier, so the job plans against a deadline one more lag earlier,
    and by half a decision step (seeing the workload's end, and a slower start than declared).
    """
    return GUARD_LAGS * max_lag_hours + MARGIN_STEPS * step_hours


@dataclass(frozen=True)
class Defer:
    """Hand the job to its controller (the trigger) with these arguments."""

    args: ControllerArgs

    @property
    def trigger_kwargs(self) -> dict:
        return self.args.to_kwargs()


@dataclass(frozen=True)
class Finish:
    summary: dict


class JobRunner:
    """Runs one job for one task instance: see the module docstring.

    :param handoff: on the worker, the job table (`jobs.table`) every record is written to before
        task state (the record the runtime acts on); None in the controller, whose `store` is that table.

    Every record it resumes, reports, retires or ends must be a job of its own task instance
    (`TaskIdentity.check_owns`, DESIGN.md §8): a job id found where others can write is a pointer
    to check, and another task's job is refused before anything is terminated, launched or written.
    """

    def __init__(
        self,
        params: JobParams,
        config,
        cloud: Cloud,
        store: StateStore,
        task: TaskIdentity,
        conn_id: str,
        log,
        table_factory,
        handoff=None,
    ):
        self.params = params
        self.config = config
        self.cloud = cloud
        self.store = store
        self.task = task
        self.conn_id = conn_id
        self.log = log
        self._table_factory = table_factory
        self.handoff = handoff
        self._table = None
        self._source: MarketSource | None = None
        try:  # the thresholds the probe DAG's schedule keeps data within (jobs/probe_schedule.py)
            self._stale = StaleGuard.for_config(config)
        except ValueError as exc:  # a bad SKYNOMAD_PROBE_INTERVAL_MINUTES / SKYNOMAD_MAX_MARKET_AGE_HOURS
            raise SkyNomadInputError(str(exc)) from exc
        self._fleet: FleetLens | None = None
        self._untold: dict | None = None  # the worker's last status, published once it holds the record
        self.record: JobRecord | None = None
        self._live_spend: tuple[float, str] | None = None  # the last spend published and its basis
        if handoff is not None:
            store.bind(handoff, task.key, owner=self._worker_owner)

    @property
    def _worker_owner(self) -> str:
        """Who the worker writes the job table as: this try, so a later try's take-over is visible."""
        return f"worker try {self.task.try_number}"

    # == entry points =========================================================================

    def start(
        self, deadline_hours: float, dag_deadline_hours: float | None = None, retire: JobRecord | None = None
    ) -> Defer | Finish:
        """A new job. `retire`: a cleared task's last job, ended only once every check has passed."""
        if retire is not None:
            self.task.check_owns(retire.job_id, "the cleared task's last job record")
        job = self._job_spec(deadline_hours)
        now = self.cloud.now_timestamp()
        try:
            selection, _ = select_markets(
                self.table,
                now,
                zones=self.params.zones,
                regions=self.params.regions,
                clouds=self.params.clouds,
                instance_types=self.params.instance_types,
                accelerator=self.params.accelerator,
                lookback_hours=self.params.market_lookback_hours,
                max_market_age=self.params.max_market_age,
                where=self.config.display_market_url,
            )
        except MarketInputError as exc:
            raise SkyNomadInputError(str(exc)) from exc
        try:
            policy = get_policy(self.params.policy, **self.params.policy_params)
        except (ValueError, TypeError) as exc:
            raise SkyNomadInputError(str(exc)) from exc
        if not self.params.zones:  # the market table's zones: leave out, and name, those the cloud cannot use
            selection = replace(
                selection, zones=leave_out_unusable(self.cloud, selection.zones, self.config.cloud, self.log)
            )
        self._check_cloud(selection.zones, selection.instance_types)
        since = now - pd.Timedelta(hours=self.params.market_lookback_hours)
        record = JobRecord(
            job_id=self.task.job_id,
            job=job,
            job_start_hours=float(self.cloud.now_hours()),
            deadline_hours=deadline_hours,
            dag_deadline_hours=dag_deadline_hours,
            zones=selection.zones,
            instance_types=selection.instance_types,
            policy=self.params.policy,
            state=JobState(),
            all_on_demand_usd=0.0,
            market_since=since.isoformat(),
            max_tries=self.task.max_tries,
        )
        self.record = record
        view = self.view()
        record.on_demand_usd_per_hour = float(view.on_demand_usd_per_hour.min()) * job.instances
        record.all_on_demand_usd = record.on_demand_usd_per_hour * (job.work_hours + job.cold_start_hours)
        decision = policy.decide(job, JobState(), view, 0.0)
        self._say(
            record.note(
                0.0,
                NoteKind.START,
                work_h=job.work_hours,
                deadline_h=round(deadline_hours, 3),
                zones=len(selection.zones),
                policy=self.params.policy,
            )
        )
        self._decided(0.0, decision, view)
        if retire is not None:
            self.retire(retire)
        self.store.save(record)  # first write: only after every check above passed
        self._carry_out(view, decision, 0.0)
        return self._defer()

    def _check_cloud(self, zones: list[str], instance_types: list[str] | None) -> None:
        """What the cloud says would stop a launch in these zones fails the task now, naming the
        setting, before anything is launched or written (a zone with no subnet, a missing bucket)."""
        problems = []
        for instance_type in instance_types or [None]:
            problems += [p for p in self.cloud.check(zones, instance_type) if p not in problems]
        if problems:
            raise SkyNomadInputError(f"the {self.config.cloud} cloud cannot run this job yet: " + "; ".join(problems))

    def cleared_since(self, record: JobRecord) -> bool:
        """Whether the task was cleared after the job started: Airflow raises `max_tries` on a
        clear, never on a retry. A clear asks for the job to run again, not for its last result."""
        return None not in (record.max_tries, self.task.max_tries) and self.task.max_tries != record.max_tries

    def retire(self, record: JobRecord) -> None:
        """A cleared task's last job: end what it may have left before a new job starts."""
        self.task.check_owns(record.job_id, "the cleared task's last job record")
        self.log.info(
            "The task was cleared after job %s started: starting a new job with its own checkpoints", record.job_id
        )
        self.on_kill(record)

    def resume(self, record: JobRecord) -> Defer | Finish:
        """A retry of the task: reconnect to what the job already has."""
        self.task.check_owns(record.job_id, "the job record to reconnect to")
        self.record = record
        self.log.info(
            "Reconnecting to SkyNomad job %s (try %s): %s", record.job_id, self.task.try_number, _where(record)
        )
        if record.finished:
            self.log.info("The job had already finished before this try; returning its summary.")
            return Finish(record.summary)
        if record.pending is not None:
            recover_pending(record, self.cloud, self.view(), self.store, self._observe, self.log)
        return self._defer()

    def handle(self, record: JobRecord, event: JobEvent) -> Defer | Finish:
        """Act on what the controller's last look found, at once (in the trigger's thread)."""
        self.task.check_owns(record.job_id, "the controlled job record")
        self.record = record
        if event.seq != record.seq:
            self.log.debug("dropping a look at state %s: the job is at %s", event.seq, record.seq)
            return Finish(record.summary) if record.finished else self._defer(bump=False)
        if record.pending is not None:
            recover_pending(record, self.cloud, self.view(), self.store, self._observe, self.log)
        now = self.elapsed()
        at = event.elapsed_hours if event.elapsed_hours is not None else now
        self.learn_warmup(at, event.warmup_hours)
        bound = event.pace.planning_job(record.job).work_hours if event.pace is not None else record.job.work_hours
        done = event.progress_hours / bound if event.progress_hours is not None and bound else None
        self.learn_pace(at, event.pace, done)
        if event.progress_hours is not None:
            record.state = record.state.progressed(event.progress_hours)
        if event.kind is EventKind.PREEMPTED:
            self._preempted(at, event.progress_hours)
        if event.kind is EventKind.FINISHED:
            return self._finish(at)
        if event.kind is EventKind.FAILED:
            self._release(at, SegmentEnd.FAILED)
            detail = f"\nlast lines of the workload's output:\n{event.detail}" if event.detail else ""
            self._say(record.note(at, NoteKind.FAILED, reason=event.reason or event.status))
            self.store.save(record)  # the failure is in the record the worker reports from
            self._publish(at, state="failed", reason=f"the group failed: {event.reason or event.status}")
            raise SkyNomadJobFailed(f"SkyNomad job {record.job_id} failed: {event.reason or event.status}{detail}")
        view = self.view()
        decision = event.decision
        if decision is not None and event.kind is not EventKind.DEADLINE_PRESSURE and now - at > self.params.step_hours:
            # Acted on a step or more after the look (a stalled triggerer, a database restart): a
            # move that was safe then may not be now. Decide again (a decision under deadline
            # pressure is carried out as made: it is what keeps the deadline).
            self.log.info("[t=%.2f h] acting %.2f cloud h after the look that asked; deciding again", now, now - at)
            decision = None
        if decision is None:
            decision = self._decide(view, now)
        first = decision.first
        # The net: on-demand under deadline pressure, or on-demand after a preemption when waiting
        # idle is no longer safe. Once up, the job finishes on it (see `watch`).
        netted = first is not None and first.mode is Mode.ON_DEMAND
        if event.kind is EventKind.PREEMPTED and netted:
            netted = not is_safe(record.job, record.state.advance(elapsed_hours=now), view, None)
        if netted and event.kind in (EventKind.DEADLINE_PRESSURE, EventKind.PREEMPTED):
            risk = record.deadline_risk_told
            why = "the fastest way to finish" if risk else why_move(record, view, record.state, first, at)
            self._say(record.note(now, NoteKind.DEADLINE_PRESSURE, why=why))
            record.on_safety_net = True
        self._decided(now, decision, view)
        self._carry_out(view, decision, now)
        return self._defer()

    def report(self, record: JobRecord, outcome: Outcome) -> Finish:
        """The controller's outcome as the task's result: the summary, or the error that fails the task."""
        self.task.check_owns(record.job_id, "the ended job's record")
        self.record = record
        if outcome.kind is OutcomeKind.FINISHED and record.finished:
            self.store.save(record)
            return Finish(record.summary)
        message = outcome.message or f"SkyNomad job {record.job_id} ended without finishing"
        if not record.finished:
            self._say_failure(record, message)
        self.store.save(record)
        if outcome.kind is OutcomeKind.DEADLINE_MISSED:
            raise SkyNomadDeadlineMissed(outcome.message)
        raise SkyNomadJobFailed(message)

    def _say_failure(self, record: JobRecord, message: str) -> None:
        """Why the job ended unfinished, where the job page and the dashboard read it: a "failed"
        note in the record (unless the controller wrote one) and the reason in its live status."""
        reason = message.split("\n", 1)[0]
        noted = record.noted(NoteKind.FAILED)
        try:
            at = self.elapsed()
        except Exception:  # noqa: BLE001 - the cloud's clock unreadable: the last moment the record knows
            at = record.timeline[-1]["at_hours"] if record.timeline else 0.0
        if not noted:
            record.note(at, NoteKind.FAILED, reason=reason)
        try:
            self._publish(at, state="failed", reason=reason)
        except Exception as exc:  # noqa: BLE001 - the task's own error is the one to raise
            self.log.warning("could not publish why the job failed (%s)", exc)

    def _preempted(self, at: float, progress_hours: float | None) -> None:
        record = self.record
        lost = record.state.running
        record.preemptions += 1
        zone = record.group.zone if record.group else None
        self._say(record.note(at, NoteKind.PREEMPTED, zone=zone, progress=_pct(record, progress_hours)))
        if lost is not None:
            self._observe(lost.market, 0)
        self._release(at, SegmentEnd.PREEMPTED)
        record.state = record.state.advance(last_preempted_market=lost.market if lost else None)

    def on_kill(self, record: JobRecord) -> None:
        """Terminate what the job has: its group, and a launch in flight *if it exists* (never launch one)."""
        self.task.check_owns(record.job_id, "the job record to terminate")
        if record.group is not None:
            self.log.info("on_kill: terminating group %s in %s", list(record.group.instance_ids), record.group.zone)
            self.cloud.terminate(record.group)
        if record.pending is not None:
            handle = self.cloud.find(record.pending.request.client_token)
            if handle is not None:
                self.log.info("on_kill: terminating launch %s in flight", handle.client_token)
                self.cloud.terminate(handle)

    # == pieces ================================================================================

    @property
    def table(self):
        if self._table is None:
            self._table = self._table_factory()
            self._table.create()
        return self._table

    def close(self) -> None:
        if self._table is not None:
            self._table.close()
            self._table = None
        if self.handoff is not None:
            self.handoff.close()

    @property
    def stale(self):
        """The job's one stale-market guard (jobs/stale.py), shared with the controller's looks."""
        return self._stale

    @property
    def fleet(self) -> FleetLens | None:
        """The job's reading of its deployment's live-status table (jobs/fleet.py); None: it plans alone."""
        if self._fleet is None and self.params.fleet_aware and self.record is not None:
            from airflow_provider_skynomad.jobs.live import LiveStatusTable

            self._fleet = FleetLens(LiveStatusTable(market=self.table), self.record.job_id)
        return self._fleet

    @property
    def source(self) -> MarketSource:
        """The job's market source (opened by the first `view()`)."""
        if self._source is None:
            self.view()
        return self._source

    def elapsed(self) -> float:
        return float(self.cloud.now_hours()) - self.record.job_start_hours

    def view(self) -> MarketView:
        record = self.record
        if self._source is None:
            self._source = MarketSource(
                self.table,
                record.zones,
                record.instance_types,
                pd.Timestamp(record.market_since),
                self.params.step_hours,
                record.job.instances,
            )
        now = self.cloud.now_timestamp()
        try:
            view = self._source.view(now + pd.Timedelta(seconds=1))
        except MarketInputError as exc:
            raise SkyNomadJobFailed(str(exc)) from exc
        running = record.state.running.market if record.state.running else None
        view, warnings = self._stale.apply(view, held_rows(self._source), now, running)  # jobs/stale.py
        for words in warnings:
            self.log.warning("%s", words)
        if self.fleet is not None:
            own = own_row(record.job_id, record.state, record.group, record.job_start_hours, record.job.instances)
            view = self.fleet.apply(view, self.cloud, own)
        return view

    def _job_spec(self, deadline_hours: float) -> JobSpec:
        if deadline_hours <= 0:
            raise SkyNomadInputError(
                f"the deadline is already past ({-deadline_hours:.2f} cloud hours ago); nothing was launched"
            )
        try:
            job = JobSpec(
                work_hours=float(self.params.work_hours),
                deadline_hours=deadline_hours,
                cold_start_hours=float(self.params.cold_start_hours),
                checkpoint_gb=float(self.params.checkpoint_gb),
                instances=int(self.params.instances),
                checkpoint_interval_hours=self.params.checkpoint_interval_hours,
                final_checkpoint_on_notice=self.params.final_checkpoint_on_notice,
            )
            job.require_feasible()
        except JobSpecError as exc:
            raise SkyNomadInputError(f"{exc}; nothing was launched") from exc
        guarded = replace(job, deadline_hours=deadline_hours - guard_hours(self.params.step_hours, 0.0))
        return guarded if guarded.feasible else job

    def _decide(self, view: MarketView, elapsed: float) -> Decision:
        policy = get_policy(self.record.policy, **self.params.policy_params)
        state = self.record.state.advance(elapsed_hours=elapsed)
        return policy.decide(self.record.job, state, view, elapsed)

    def _decided(self, at: float, decision: Decision, view: MarketView | None = None) -> None:
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
            policy = get_policy(self.record.policy, **self.params.policy_params)
            state = self.record.state.advance(elapsed_hours=at)
            return weighed(policy, self.record.job, state, view, at, decision=decision)
        except Exception as exc:  # noqa: BLE001 - an explanation must never stop the job
            self.log.debug("could not explain the decision at %.2f h: %s", at, exc)
            return []

    def _carry_out(self, view: MarketView, decision: Decision, elapsed: float) -> None:
        record = self.record
        before, state = len(record.timeline), record.state
        carry_out(record, self.cloud, view, decision, elapsed, self.store, self._workload(), self._observe)
        record.wants = _wanted(decision) if record.group is None else None
        words = decision_words(decision, view)
        self._tell(before, view, state, record.state.running, elapsed, words, quiet=(NoteKind.DECIDE, NoteKind.STAY))
        self._publish(self._net_after_refusals(view, decision) or elapsed)

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
        self._say(record.note(now, NoteKind.DEADLINE_PRESSURE, why=why))
        record.on_safety_net = True
        before = len(record.timeline)
        carry_out(record, self.cloud, view, rescue, now, self.store, self._workload(), self._observe)
        self._tell(before, view, record.state, record.state.running, now, why, quiet=(NoteKind.DECIDE, NoteKind.STAY))
        return now

    def _tell(self, before: int, view: MarketView, state: JobState, option, at: float, plain: str, quiet=()) -> None:
        """Say the timeline's items from index `before` on (but the `quiet` events); a move from
        `state` to `option` says why, in `plain` words when the planner's terms name no reason."""
        for item in self.record.timeline[before:]:
            if item["event"] == NoteKind.MIGRATE:
                item["why"] = why_move(self.record, view, state, option, at) or plain
            elif item["event"] == NoteKind.RELEASE:
                item["why"] = why_move(self.record, view, state, None, at) or plain
            if item["event"] not in quiet:
                self._say(item)

    def _workload(self) -> Workload:
        return Workload(*self._workload_parts())

    def _workload_parts(self) -> tuple[tuple[str, ...], dict[str, str], dict[str, str]]:
        from airflow_provider_skynomad.workload import default_workload

        # The declared work, never the planning bound: every group of the job runs the same
        # command, or a relaunch would not resume the checkpoints of the first.
        command = self.params.command or tuple(default_workload(self.params.work_hours))
        env = {**self.params.env, "SKYNOMAD_COLD_START_HOURS": repr(self.params.cold_start_hours)}
        return tuple(command), env, self._tags()

    def _tags(self) -> dict[str, str]:
        return job_tags(self.task, self.record.job_id, user_tags=self.params.tags)

    def _observe(self, market_key: str, available: int) -> None:
        """Our own launch outcomes and preemptions are market observations: share them via the table."""
        try:
            self.view()
            view = self._source.view(self.cloud.now_timestamp() + pd.Timedelta(seconds=1))  # the prices as observed
            row = self._source.observation_row(view, market_key, available, self.cloud.now_timestamp().floor("us"))
            self.table.append(pd.DataFrame([row]), source=f"SkyNomad job {self.record.job_id}")
        except Exception as exc:  # noqa: BLE001 - sharing an observation must never fail the job
            self.log.warning("could not record an observation of %s: %s", market_key, exc)

    def learn_lag(self, lag_hours: float, wall_seconds: float) -> None:
        """The controller acted `lag_hours` after it meant to (a busy triggerer, a slow database):
        keep it, and plan with the slowest seen (see the module docstring). A lag is said (and the
        record written) only when it is news: a minute of cloud time or more, half again the last said."""
        record = self.record
        lag = max(0.0, float(lag_hours))
        record.lags_hours = [*record.lags_hours, round(lag, 5)][-MAX_LAGS_KEPT:]
        if lag <= record.job.reaction_hours:
            return
        aim = record.deadline_hours - guard_hours(self.params.step_hours, lag)
        # Aim earlier only while one on-demand run could still make that (a huge lag must not make
        # the spec itself impossible: the job keeps its last aim and plans with the lag).
        feasible = aim >= record.job.work_hours + record.job.cold_start_hours
        deadline = aim if feasible else record.job.deadline_hours
        record.job = replace(record.job, reaction_hours=lag, deadline_hours=deadline)
        said = max((n["hours"] for n in record.noted(NoteKind.REACTION_LAG)), default=0.0)
        if lag < max(NEWS_LAG_HOURS, 1.5 * said):
            return
        margin = 2 * lag + (record.deadline_hours - deadline)
        self._say(
            record.note(
                self.elapsed(),
                NoteKind.REACTION_LAG,
                hours=round(lag, 3),
                wall_seconds=round(wall_seconds, 2),
                planned_hours=round(margin, 3),
            )
        )
        self.store.save(record)

    def learn_pace(self, at: float, pace: Pace | None, done: float | None = None) -> bool:
        """Plan with what the checkpoints say of the real work (`planner.pace`), and say what is news:
        a pace slower (or faster) than declared, and at once when even on-demand now would be late.
        `done`: the share of the work checkpointed at `at` (the controller's last look; the record's
        state is the job as last acted on, which can be hours older). True when something was said."""
        record = self.record
        if pace is None or pace == record.pace:
            return False
        left = self._left_share(done)
        old_bound = record.job.work_hours
        record.pace = pace
        record.job = pace.planning_job(record.job)
        if record.job.work_hours != old_bound and old_bound > 0:
            share = record.state.progress_hours / old_bound  # the same checkpointed share, at the new bound
            record.state = record.state.progressed(share * record.job.work_hours)
        said = self._tell_pace(at, pace, left) | self._tell_deadline_risk(at, pace, left)
        if said:
            self.store.save(record)
        return said

    def _tell_pace(self, at: float, pace: Pace, left_share: float) -> bool:
        record = self.record
        ratio = pace.slower_than_declared() or pace.faster_than_declared()
        if ratio is None or abs(ratio - record.pace_told) < PACE_NEWS:
            return False
        record.pace_told = ratio
        # Said as measured (the point estimate), with the bound the planner plans with kept apart.
        planning = pace.work_hours_bound / pace.declared_work_hours
        item = record.note(
            at,
            NoteKind.PACE,
            ratio=round(ratio, 3),
            planning_ratio=round(planning, 3),
            left_h=round(left_share * pace.work_hours_estimate, 2),
            planned_left_h=round(left_share * pace.work_hours_bound, 2),
            declared_left_h=round(left_share * pace.declared_work_hours, 2),
        )
        # Work well beyond what was declared eats the slack the deadline was set with: a warning.
        self._say(item, logging.WARNING if ratio > 1.0 + PACE_WARNING else logging.INFO)
        return True

    def _left_share(self, done: float | None) -> float:
        """The share of the work the checkpoints do not prove yet: `done` seen at the last look, else the record's."""
        if done is not None:
            return max(0.0, 1.0 - done)
        job = self.record.job
        return max(0.0, 1.0 - self.record.state.progress_hours / job.work_hours) if job.work_hours else 0.0

    def _tell_deadline_risk(self, at: float, pace: Pace, left_share: float) -> bool:
        """Even on-demand from now, at the measured pace, would finish after the task's deadline."""
        record = self.record
        if record.deadline_risk_told:
            return False
        running = record.state.running
        start = 0.0 if running is not None and running.mode is Mode.ON_DEMAND else record.job.cold_start_hours
        finish = at + start + left_share * pace.work_hours_bound
        if finish <= record.deadline_hours:
            return False
        record.deadline_risk_told = True
        # Its cause in the user's words: the work measured is more than declared, or (the pace as
        # declared) the hours preemptions, relaunches and a late controller already cost.
        cause = "slower work" if pace.slower_than_declared() is not None else "time lost"
        item = record.note(
            at,
            NoteKind.DEADLINE_RISK,
            finish_h=round(finish, 2),
            deadline_h=round(record.deadline_hours, 2),
            cause=cause,
        )
        message = f"SkyNomad job {record.job_id}: {say(item)}"
        self.log.error("%s", message)
        call_deadline_risk(self.params.on_deadline_risk, record, self.task, message, self.log)
        return True

    def learn_warmup(self, at: float, warmup: float | None) -> None:
        """A group took `warmup` hours from launch to its first checkpoint: plan later launches with the slowest."""
        record = self.record
        if warmup is None or record.progress_at_launch is None:
            return
        record.progress_at_launch = None
        record.warmups_hours = [*record.warmups_hours, round(warmup, 5)][-MAX_LAGS_KEPT:]
        moved = record.segments[-1].launch_delay_hours - record.job.cold_start_hours if record.segments else 0.0
        cold_start = warmup - max(0.0, moved)  # a checkpoint transfer is planned for separately
        if cold_start > record.job.cold_start_hours + 1e-6:
            record.job = replace(record.job, cold_start_hours=cold_start)
            self._say(
                record.note(at, NoteKind.SLOW_START, hours=round(cold_start, 3), declared=self.params.cold_start_hours)
            )

    def _release(self, at: float, end: SegmentEnd) -> None:
        record = self.record
        if record.group is not None:
            self.cloud.terminate(record.group)
        record.close_segment(at, end)
        record.group = None
        record.state = record.state.advance(running=None, warmup_left_hours=0.0)
        self.store.save(record)

    def _finish(self, at: float) -> Finish:
        record = self.record
        if record.group is not None:
            self.cloud.terminate(record.group)
        record.close_segment(at, SegmentEnd.FINISHED)
        last_zone = record.group.zone if record.group else (record.segments[-1].zone if record.segments else None)
        record.group = None
        record.finished = True
        record.state = record.state.progressed(record.job.work_hours).advance(running=None)
        self._say(record.note(at, NoteKind.FINISHED))
        summary = summarize(record, at, job_bill(self.cloud, record.job_id, self.log))
        summary["fleet_aware"] = self.params.fleet_aware
        summary["probing_usd"] = self._probing_cost(record, at)
        output = self.cloud.output_location(record.job_id, last_zone) if last_zone else None
        if output:
            summary["output_dir"] = output  # where the workload's final files are
        self._tell_bill_below_live(record, at, summary)
        record.summary = summary
        self.store.save(record)
        self._publish(at, summary)
        self.log.info("%s", format_timeline(record, summary))
        if not summary["deadline_met"]:
            message = f"SkyNomad job {record.job_id} {deadline_line(summary)}"
            if self.params.on_deadline_miss == "fail":
                raise SkyNomadDeadlineMissed(message)
            self.log.warning("%s", message)
        return Finish(summary)

    def _probing_cost(self, record: JobRecord, elapsed: float) -> float:
        """What the probe DAG spent on the markets this job considered while it ran (shared
        infrastructure: reported beside the job's own cost, not in it)."""
        from airflow_provider_skynomad.probing.plan import probe_cost_for

        end = self.cloud.now_timestamp()
        try:
            usd = probe_cost_for(record.zones, end - pd.Timedelta(hours=elapsed), end, url=self.config.market_url)
        except Exception as exc:  # noqa: BLE001 - a finished job must not fail on its report
            self.log.warning("could not read the probe spend for job %s (%s)", record.job_id, exc)
            return 0.0
        return round(usd, 2)

    def _publish(
        self, elapsed: float, summary: dict | None = None, state: str | None = None, reason: str | None = None
    ) -> None:
        """The live status (the trigger's board, or the task state store), and one line of it in the log."""
        record = self.record
        if summary is not None:
            spend, basis = summary["cost_usd"]["total"], summary["cost_basis"]
        else:
            spend, basis = self._spend_so_far(record, elapsed)
            self._live_spend = (spend, basis)
        status = live_status(record, elapsed, spend)
        status["cost_basis"] = basis
        if summary is not None:
            status["deadline_met"] = summary["deadline_met"]
        if state is not None:
            status["state"] = state
        if reason is not None:
            status["reason"] = reason  # why it failed, for the dashboard's row
        self.store.save_status(status)
        self._tell_fleet(status)
        self.log.info("%s", status_line(status))

    def _spend_so_far(self, record: JobRecord, elapsed: float) -> tuple[float, str]:
        """(USD, basis) spent so far, from the prices the final figure comes from, so the live
        figure grows into it: where the cloud bills (the simulated cloud), its own cost so far of
        each of the job's groups (`describe`: one group's row, where the whole bill reads every
        probe the deployment ever made) plus the recorded egress and probes; elsewhere the
        estimate at launch-time prices, which is then the final figure's basis too."""
        estimate = summarize(record, elapsed)
        describe = getattr(self.cloud, "describe", None)
        if describe is None or not record.groups_used:
            return estimate["cost_usd"]["total"], estimate["cost_basis"]
        try:
            groups_usd = sum(float(describe(handle)["usd"]) for handle in record.groups_used)
        except Exception as exc:  # noqa: BLE001 - a status line must never fail the job
            self.log.debug("could not read the cloud's cost so far of job %s: %s", record.job_id, exc)
            return estimate["cost_usd"]["total"], estimate["cost_basis"]
        return round(groups_usd + record.egress_usd + record.probe_usd, 2), CLOUD_BILL

    def _tell_bill_below_live(self, record: JobRecord, at: float, summary: dict) -> None:
        """A final cost below the last figure said while the job ran is said, with why (their sources differ)."""
        if self._live_spend is None:
            return
        live_usd, live_basis = self._live_spend
        if summary["cost_usd"]["total"] >= live_usd - 0.005:
            return
        item = record.note(
            at,
            NoteKind.COST_REVISED,
            live_usd=round(live_usd, 2),
            live_basis=live_basis,
            final_usd=summary["cost_usd"]["total"],
            final_basis=summary["cost_basis"],
        )
        self._say(item)

    def _tell_fleet(self, status: dict) -> None:
        """On the worker, the status goes to the live-status table too (the trigger's store does that
        itself): the deployment's other jobs see a launch when the record is handed over, not at the
        controller's first look. Only a holder of the record may publish (`jobs.live`), so it waits
        for that hand-over (`_defer`)."""
        if self.handoff is not None and self.fleet is not None:
            self._untold = status

    def _told_fleet(self, owner: str, version: int) -> None:
        status, self._untold = self._untold, None
        if status is None:
            return
        try:
            self.fleet.board.publish(self.record.job_id, status, owner=owner, version=version)
        except Exception as exc:  # noqa: BLE001 - advice for other jobs; the trigger publishes again soon
            self.log.debug("could not publish the job's status for its fleet: %s", exc)

    def publish_between(self, state: JobState, elapsed: float) -> None:
        """The live status between two events: the record as last acted on, at the last look's progress."""
        saved = self.record.state
        try:
            self.record.state = state
            self._publish(elapsed)
        finally:
            self.record.state = saved

    def _defer(self, bump: bool = True) -> Defer:
        """Hand the job to its controller (on the worker) or go on controlling it (in the trigger)."""
        record = self.record
        if bump:
            record.seq += 1
            version = self.store.save(record)  # on the worker, the job table first (`StateStore.bind`)
        elif self.handoff is not None:
            version = self.handoff.put(record, owner=self._worker_owner, task_key=self.task.key)
        else:
            version = None
        if self.handoff is not None and version is not None:
            self._told_fleet(self._worker_owner, version)
        return Defer(
            ControllerArgs(
                job_id=record.job_id,
                conn_id=self.conn_id,
                params=self.params,
                task=self.task,
                # No answer before this deferral's own exit can have been recorded (an Airflow race,
                # jobs/contract.py), on this worker's supervisor's clock; longer on a retry.
                min_event_seconds=first_event_hold_seconds(self.task.try_number),
            )
        )

    def _say(self, item: dict, level: int = logging.INFO) -> None:
        self.log.log(level, "%s", say(item))


def decision_words(decision: Decision, view: MarketView | None = None) -> str:
    """The planner's choice in plain words (the log says it beside a move or a release)."""
    first = decision.first
    if first is None:
        wanted = decision.wants
        if wanted is not None and view is not None and wanted in view.keys:
            wanted = view.markets[view.index(wanted)].zone
        until = f"spot in {wanted} is worth taking" if wanted else "a market is worth its price"
        return f"spot here is not worth its price now: going idle until {until}"
    return "on-demand keeps the deadline safe" if first.mode is Mode.ON_DEMAND else "a better spot market"


def _pct(record: JobRecord, progress) -> str | None:
    if progress is None:
        return None
    return f"{100.0 * float(progress) / record.job.work_hours:.0f}%"


def _where(record: JobRecord) -> str:
    if record.group is not None:
        return f"group {list(record.group.instance_ids)} in {record.group.zone}"
    if record.pending is not None:
        return f"launch {record.pending.request.client_token} in {record.pending.request.zone} in flight"
    return "idle"


__all__ = ["Defer", "Finish", "JobParams", "JobRunner", "TaskIdentity"]


def _wanted(decision: Decision) -> str | None:
    """The spot market a job left idle waits for: the planner's claim, or its first spot choice refused."""
    if decision.wants is not None:
        return decision.wants
    first = decision.first
    return first.market if first is not None and first.mode is Mode.SPOT else None
