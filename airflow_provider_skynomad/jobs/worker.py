"""What runs on the worker: validate, start the job (its first launch), hand it over, report its end.

Why apart from the trigger's steps (`jobs.steps`): a worker slot is held only for moments. `start`
validates everything (deadline, feasibility, zones, market freshness, the cloud) before anything is
written or launched, asks the planner and carries out the first decision, then hands the job to
its controller (`Defer`); `resume` is a retry after a worker crash (it finishes a launch left in
flight, found by its client token); `report` turns the controller's `Outcome` into the task's
result; `retire` and `on_kill` end what a job left.

Every record it resumes, reports, retires or ends must be a job of its own task instance
(`TaskIdentity.check_owns`, DESIGN.md §8): a job id found where others can write is a pointer
to check, and another task's job is refused before anything is terminated, launched or written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from airflow_provider_skynomad.jobs.carry_out import recover_pending
from airflow_provider_skynomad.jobs.contract import (
    ControllerArgs,
    Outcome,
    OutcomeKind,
    first_event_hold_seconds,
)
from airflow_provider_skynomad.jobs.errors import SkyNomadDeadlineMissed, SkyNomadInputError, SkyNomadJobFailed
from airflow_provider_skynomad.jobs.learn import guard_hours, too_thin_for_spot
from airflow_provider_skynomad.jobs.record import JobRecord
from airflow_provider_skynomad.jobs.run import JobRun
from airflow_provider_skynomad.jobs.usable_zones import leave_out_unusable
from airflow_provider_skynomad.jobs.words import where
from airflow_provider_skynomad.market.source import MarketInputError, select_markets
from airflow_provider_skynomad.planner.actions import Decision
from airflow_provider_skynomad.planner.job import JobSpec, JobSpecError, JobState
from airflow_provider_skynomad.planner.safety import cheapest_on_demand
from airflow_provider_skynomad.planner.timeline import NoteKind


@dataclass(frozen=True)
class Defer:
    """Hand the job to its controller (the trigger) with these arguments."""

    args: ControllerArgs

    @property
    def trigger_kwargs(self) -> dict:
        """The trigger's keyword arguments: exactly the `ControllerArgs`, as plain data."""
        return self.args.to_kwargs()


@dataclass(frozen=True)
class Finish:
    """The job has ended: its summary is the task's result."""

    summary: dict


class JobWorker:
    """One task instance's job on the worker (see the module docstring).

    :param run: the job (`jobs.run.JobRun`) over task state (`record.StateStore`).
    :param conn_id: the `skynomad` connection the controller reads its settings from.
    :param handoff: the job table (`jobs.table.JobTable`) every record is written to before task
        state: the record the controller acts on.
    """

    def __init__(self, *, run: JobRun, conn_id: str, handoff):
        self.run, self.conn_id, self.handoff, self.log = run, conn_id, handoff, run.log
        run.store.bind(handoff, run.task.key, owner=self._owner)

    params = property(lambda self: self.run.params, doc="The job's validated parameters.")
    config = property(lambda self: self.run.config, doc="The `skynomad` connection's settings.")
    cloud = property(lambda self: self.run.cloud, doc="The connection's cloud.")
    store = property(lambda self: self.run.store, doc="Task state (`record.StateStore`), bound to the job table.")
    task = property(lambda self: self.run.task, doc="The task instance the job belongs to.")
    record = property(lambda self: self.run.record, doc="The job's record once started or reconnected to.")

    @property
    def _owner(self) -> str:
        """Who the worker writes the job table as: this try, so a later try's take-over is visible."""
        return f"worker try {self.task.try_number}"

    def start(
        self, deadline_hours: float, dag_deadline_hours: float | None = None, retire: JobRecord | None = None
    ) -> Defer:
        """A new job. `retire`: a cleared task's last job, ended only once every check has passed."""
        if retire is not None:
            self.task.check_owns(retire.job_id, "the cleared task's last job record")
        begun = float(self.cloud.now_hours())
        run, job = self.run, self._job_spec(deadline_hours)
        record = self._new_record(job, deadline_hours, dag_deadline_hours)
        run.record = record
        view = run.view()
        record.on_demand_usd_per_hour = float(view.on_demand_usd_per_hour.min()) * job.instances
        record.all_on_demand_usd = record.on_demand_usd_per_hour * (job.work_hours + job.cold_start_hours)
        decision = run.policy.decide(job, JobState(), view, 0.0)
        hand_off = max(0.0, float(self.cloud.now_hours()) - begun)
        thin = too_thin_for_spot(job, view, decision, hand_off)
        if thin is not None:
            decision = Decision((cheapest_on_demand(job, JobState(), view),), reason=thin)
        started = record.note(
            0.0,
            NoteKind.START,
            work_h=job.work_hours,
            deadline_h=round(deadline_hours, 3),
            zones=len(record.zones),
            policy=self.params.policy,
        )
        run.say(started)
        if thin is not None:
            # Deadline pressure from the start: the job stays on on-demand (`Watch`), as after a rescue.
            run.say(record.note(0.0, NoteKind.DEADLINE_PRESSURE, why=thin, first_launch=True))
            record.on_safety_net = True
        run.decided(0.0, decision, view)
        if retire is not None:
            self.retire(retire)
        self.store.save(record)  # first write: only after every check above passed
        run.carry_out(view, decision, 0.0)
        return self._defer()

    def _new_record(self, job: JobSpec, deadline_hours: float, dag_deadline_hours: float | None) -> JobRecord:
        """The job's first record, over the markets it may use; fails the task (nothing written) when
        the markets, the policy or the cloud would stop it."""
        params, now = self.params, self.cloud.now_timestamp()
        try:
            selection, _ = select_markets(
                self.run.table,
                now,
                zones=params.zones,
                regions=params.regions,
                clouds=params.clouds,
                instance_types=params.instance_types,
                accelerator=params.accelerator,
                lookback_hours=params.market_lookback_hours,
                max_market_age=params.max_market_age,
                where=self.config.display_market_url,
                trace_end=getattr(self.cloud, "trace_end", None),  # the simulated cloud's: past it, say so
            )
        except MarketInputError as exc:
            raise SkyNomadInputError(str(exc)) from exc
        self.run.policy = params.policy  # an unknown policy or a bad parameter fails here
        if not params.zones:  # the market table's zones: leave out, and name, those the cloud cannot use
            zones = leave_out_unusable(self.cloud, selection.zones, self.config.cloud, self.log)
            selection = replace(selection, zones=zones)
        self._check_cloud(selection.zones, selection.instance_types)
        return JobRecord(
            job_id=self.task.job_id,
            job=job,
            job_start_hours=float(self.cloud.now_hours()),
            deadline_hours=deadline_hours,
            dag_deadline_hours=dag_deadline_hours,
            zones=selection.zones,
            instance_types=selection.instance_types,
            policy=params.policy,
            state=JobState(),
            all_on_demand_usd=0.0,
            market_since=(now - pd.Timedelta(hours=params.market_lookback_hours)).isoformat(),
            max_tries=self.task.max_tries,
        )

    def _check_cloud(self, zones: list[str], instance_types: list[str] | None) -> None:
        """What the cloud says would stop a launch in these zones fails the task now, naming the
        setting, before anything is launched or written (a zone with no subnet, a missing bucket)."""
        problems = []
        for instance_type in instance_types or [None]:
            problems += [p for p in self.cloud.check(zones, instance_type) if p not in problems]
        if problems:
            raise SkyNomadInputError(f"the {self.config.cloud} cloud cannot run this job yet: " + "; ".join(problems))

    def _job_spec(self, deadline_hours: float) -> JobSpec:
        """The planner's job, aimed a guard earlier than the deadline when it can be (`learn.guard_hours`)."""
        if deadline_hours <= 0:
            raise SkyNomadInputError(
                f"the deadline is already past ({-deadline_hours:.2f} cloud hours ago); nothing was launched"
            )
        params = self.params
        try:
            job = JobSpec(
                work_hours=float(params.work_hours),
                deadline_hours=deadline_hours,
                cold_start_hours=float(params.cold_start_hours),
                checkpoint_gb=float(params.checkpoint_gb),
                instances=int(params.instances),
                checkpoint_interval_hours=params.checkpoint_interval_hours,
                final_checkpoint_on_notice=params.final_checkpoint_on_notice,
            )
            job.require_feasible()
        except JobSpecError as exc:
            raise SkyNomadInputError(f"{exc}; nothing was launched") from exc
        guarded = replace(job, deadline_hours=deadline_hours - guard_hours(params.step_hours, 0.0))
        return guarded if guarded.feasible else job

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
        run = self.run
        run.record = record
        self.log.info(
            "Reconnecting to SkyNomad job %s (try %s): %s", record.job_id, self.task.try_number, where(record)
        )
        if record.finished:
            self.log.info("The job had already finished before this try; returning its summary.")
            return Finish(record.summary)
        if record.pending is not None:
            run.record_carried(recover_pending(record, self.cloud, run.view(), self.store, self.log))
        return self._defer()

    def report(self, record: JobRecord, outcome: Outcome) -> Finish:
        """The controller's outcome as the task's result: the summary, or the error that fails the task."""
        self.task.check_owns(record.job_id, "the ended job's record")
        self.run.record = record
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
            at = self.run.elapsed()
        except Exception:  # noqa: BLE001 - the cloud's clock unreadable: the last moment the record knows
            at = record.timeline[-1]["at_hours"] if record.timeline else 0.0
        if not noted:
            record.note(at, NoteKind.FAILED, reason=reason)
        try:
            self.run.publish(at, state="failed", reason=reason)
        except Exception as exc:  # noqa: BLE001 - the task's own error is the one to raise
            self.log.warning("could not publish why the job failed (%s)", exc)

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

    def close(self) -> None:
        """Give back the market table and the job table this worker opened."""
        self.run.close()
        self.handoff.close()

    def _defer(self) -> Defer:
        """Hand the job to its controller: the record to the job table first (`StateStore.bind`), the
        last status to the fleet's board as the holder of that version (`jobs.live`)."""
        record = self.record
        record.seq += 1
        version = self.store.save(record)
        if version is not None:
            self._tell_fleet(version)
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

    def _tell_fleet(self, version: int) -> None:
        """The deployment's other jobs see a launch when the record is handed over, not at the
        controller's first look. Only a holder of the record may publish (`jobs.live`), so it waits
        for that hand-over."""
        status, self.run.untold = self.run.untold, None
        if status is None or not self.params.fleet_aware:
            return
        fleet = self.run.markets.fleet
        try:
            fleet.board.publish(self.record.job_id, status, owner=self._owner, version=version)
        except Exception as exc:  # noqa: BLE001 - advice for other jobs; the trigger publishes again soon
            self.log.debug("could not publish the job's status for its fleet: %s", exc)
