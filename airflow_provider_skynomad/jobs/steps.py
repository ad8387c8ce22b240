"""What runs in the trigger: the controller's steps on what each look found, carried out at once.

Why apart from the worker (`jobs.worker`): from the first deferral to its end the job is the
trigger's. `JobSteps.handle(event)` acts on what the look found (finished / preempted / failed /
replan / deadline pressure) the moment it was found, in the trigger's thread: no worker slot
stands between a preemption and its relaunch. What the look measured (lag, warm-up, pace) is
planned with (`jobs.learn`). Every effect is preceded by a write to the job table.
"""

from __future__ import annotations

import pandas as pd

from airflow_provider_skynomad.jobs.carry_out import Observation, recover_pending
from airflow_provider_skynomad.jobs.errors import SkyNomadDeadlineMissed, SkyNomadJobFailed
from airflow_provider_skynomad.jobs.events import EventKind, JobEvent
from airflow_provider_skynomad.jobs.learn import learn_lag, learn_pace, learn_warmup
from airflow_provider_skynomad.jobs.narrate import why_move
from airflow_provider_skynomad.jobs.record import JobRecord
from airflow_provider_skynomad.jobs.run import JobRun
from airflow_provider_skynomad.jobs.summary import deadline_line, format_timeline, job_bill, summarize
from airflow_provider_skynomad.jobs.words import percent_done
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision, Mode
from airflow_provider_skynomad.planner.job import JobState
from airflow_provider_skynomad.planner.safety import is_safe
from airflow_provider_skynomad.planner.timeline import NoteKind, SegmentEnd


class JobSteps:
    """The controller's acts on one job's record (see the module docstring)."""

    def __init__(self, *, run: JobRun):
        self.run = run

    @property
    def record(self) -> JobRecord:
        """The job's record as last acted on."""
        return self.run.record

    @record.setter
    def record(self, record: JobRecord) -> None:
        self.run.record = record

    def learn_lag(self, lag_hours: float, wall_seconds: float) -> None:
        """The controller's lateness this step, planned with from now on (`learn.learn_lag`)."""
        learn_lag(self.run, lag_hours, wall_seconds)

    def learn_warmup(self, at: float, warmup: float | None) -> None:
        """A group's measured warm-up, planned with from now on (`learn.learn_warmup`)."""
        learn_warmup(self.run, at, warmup)

    def learn_pace(self, at: float, pace, done: float | None = None) -> bool:
        """The workload's measured pace, planned with from now on (`learn.learn_pace`)."""
        return learn_pace(self.run, at, pace, done)

    def handle(self, record: JobRecord, event: JobEvent) -> bool:
        """Act on what the controller's last look found, at once; True when the job has finished.

        A preemption is recorded (its note, its segment's end) and its group released; then the
        decision is carried out (`JobRun.carry_out`: a relaunch elsewhere) and the record saved.

        :raises SkyNomadJobFailed: the group failed, or the job cannot go on.
        :raises SkyNomadDeadlineMissed: it finished late and the task must fail.
        """
        run = self.run
        run.task.check_owns(record.job_id, "the controlled job record")
        run.record = record
        if event.seq != record.seq:
            run.log.debug("dropping a look at state %s: the job is at %s", event.seq, record.seq)
            return record.finished
        now = self._catch_up(event)
        at = event.elapsed_hours if event.elapsed_hours is not None else now
        if event.kind is EventKind.PREEMPTED:  # say it, share it as a market observation, release the group
            lost = record.state.running
            record.preemptions += 1
            zone = record.group.zone if record.group else None
            run.say(record.note(at, NoteKind.PREEMPTED, zone=zone, progress=percent_done(record, event.progress_hours)))
            if lost is not None:
                run.markets.share([Observation(lost.market, 0, run.cloud.now_timestamp())], run.log)
            self._release(at, SegmentEnd.PREEMPTED)
            record.state = record.state.advance(last_preempted_market=lost.market if lost else None)
        if event.kind is EventKind.FINISHED:
            self.finish(at)
            return True
        if event.kind is EventKind.FAILED:
            self._failed(at, event)
        view = run.view()
        decision = self._decision(event, view, now, at)
        run.decided(now, decision, view)
        run.carry_out(view, decision, now)
        record.seq += 1
        run.store.save(record)
        return False

    def _catch_up(self, event: JobEvent) -> float:
        """Finish a launch left in flight, and take in what the look measured; the job's clock now."""
        run, record = self.run, self.run.record
        if record.pending is not None:
            run.record_carried(recover_pending(record, run.cloud, run.view(), run.store, run.log))
        now = run.elapsed()
        at = event.elapsed_hours if event.elapsed_hours is not None else now
        self.learn_warmup(at, event.warmup_hours)
        bound = event.pace.planning_job(record.job).work_hours if event.pace is not None else record.job.work_hours
        done = event.progress_hours / bound if event.progress_hours is not None and bound else None
        self.learn_pace(at, event.pace, done)
        if event.progress_hours is not None:
            record.state = record.state.progressed(event.progress_hours)
        return now

    def _decision(self, event: JobEvent, view: MarketView, now: float, at: float) -> Decision:
        """The decision to carry out: the look's, unless it is a step old; under pressure, the net's."""
        run, record = self.run, self.run.record
        decision = event.decision
        if decision is not None and event.kind is not EventKind.DEADLINE_PRESSURE and now - at > run.params.step_hours:
            # Acted on a step or more after the look (a stalled triggerer, a database restart): a
            # move that was safe then may not be now. Decide again (a decision under deadline
            # pressure is carried out as made: it is what keeps the deadline).
            run.log.info("[t=%.2f h] acting %.2f cloud h after the look that asked; deciding again", now, now - at)
            decision = None
        if decision is None:
            decision = run.decide(view, now)
        first = decision.first
        # The net: on-demand under deadline pressure, or on-demand after a preemption when waiting
        # idle is no longer safe. Once up, the job finishes on it (see `watch`).
        netted = first is not None and first.mode is Mode.ON_DEMAND
        if event.kind is EventKind.PREEMPTED and netted:
            netted = not is_safe(record.job, record.state.advance(elapsed_hours=now), view, None)
        if netted and event.kind in (EventKind.DEADLINE_PRESSURE, EventKind.PREEMPTED):
            risk = record.deadline_risk_told
            why = "the fastest way to finish" if risk else why_move(record, view, record.state, first, at)
            run.say(record.note(now, NoteKind.DEADLINE_PRESSURE, why=why))
            record.on_safety_net = True
        return decision

    def _failed(self, at: float, event: JobEvent) -> None:
        """The group failed: release it, say why where the page and the worker read it, and fail."""
        run, record = self.run, self.run.record
        self._release(at, SegmentEnd.FAILED)
        detail = f"\nlast lines of the workload's output:\n{event.detail}" if event.detail else ""
        run.say(record.note(at, NoteKind.FAILED, reason=event.reason or event.status))
        run.store.save(record)  # the failure is in the record the worker reports from
        run.publish(at, state="failed", reason=f"the group failed: {event.reason or event.status}")
        raise SkyNomadJobFailed(f"SkyNomad job {record.job_id} failed: {event.reason or event.status}{detail}")

    def _release(self, at: float, end: SegmentEnd) -> None:
        """End the job's group (if any) and its segment, with how it ended."""
        run, record = self.run, self.run.record
        if record.group is not None:
            run.cloud.terminate(record.group)
        record.close_segment(at, end)
        record.group = None
        record.state = record.state.advance(running=None, warmup_left_hours=0.0)
        run.store.save(record)

    def finish(self, at: float) -> dict:
        """The workload finished: end its group, write the summary the task returns, and publish it.

        :raises SkyNomadDeadlineMissed: it finished late and ``on_deadline_miss`` is "fail".
        """
        run, record = self.run, self.run.record
        if record.group is not None:
            run.cloud.terminate(record.group)
        record.close_segment(at, SegmentEnd.FINISHED)
        last_zone = record.group.zone if record.group else (record.segments[-1].zone if record.segments else None)
        record.group = None
        record.finished = True
        record.state = record.state.progressed(record.job.work_hours).advance(running=None)
        run.say(record.note(at, NoteKind.FINISHED))
        summary = self._summary(at, last_zone)
        revised = run.status.bill_below_live(record, at, summary)
        if revised is not None:
            run.say(revised)
        record.summary = summary
        run.store.save(record)
        run.publish(at, summary)
        run.log.info("%s", format_timeline(record, summary))
        if not summary["deadline_met"]:
            message = f"SkyNomad job {record.job_id} {deadline_line(summary)}"
            if run.params.on_deadline_miss == "fail":
                raise SkyNomadDeadlineMissed(message)
            run.log.warning("%s", message)
        return summary

    def _summary(self, at: float, last_zone: str | None) -> dict:
        """The finished job's summary: its bill, what probing its markets cost, where its output is."""
        run, record = self.run, self.run.record
        summary = summarize(record, at, job_bill(run.cloud, record.job_id, run.log))
        summary["fleet_aware"] = run.params.fleet_aware
        summary["probing_usd"] = self._probing_cost(at)
        output = run.cloud.output_location(record.job_id, last_zone) if last_zone else None
        if output:
            summary["output_dir"] = output  # where the workload's final files are
        return summary

    def _probing_cost(self, elapsed: float) -> float:
        """What the probe DAG spent on the markets this job considered while it ran (shared
        infrastructure: reported beside the job's own cost, not in it)."""
        from airflow_provider_skynomad.probing.plan import probe_cost_for

        run, record = self.run, self.run.record
        end = run.cloud.now_timestamp()
        try:
            usd = probe_cost_for(record.zones, end - pd.Timedelta(hours=elapsed), end, url=run.config.market_url)
        except Exception as exc:  # noqa: BLE001 - a finished job must not fail on its report
            run.log.warning("could not read the probe spend for job %s (%s)", record.job_id, exc)
            return 0.0
        return round(usd, 2)

    def publish_between(self, state: JobState, elapsed: float) -> None:
        """The live status between two events: the record as last acted on, at the last look's progress."""
        record = self.run.record
        saved = record.state
        try:
            record.state = state
            self.run.publish(elapsed)
        finally:
            record.state = saved
