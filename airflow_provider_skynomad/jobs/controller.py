"""The job's one controller: every decision, launch, move, rescue and release after the first deferral.

Why in the trigger: a deferred task's worker comes back only when a worker slot is free, which on
a busy box or a full pool takes seconds to minutes (1.2–1.56 cloud hours at 300×), and a job that
must wait that long after a preemption, or to put up its on-demand safety net, pays for it in
slack or in money. The triggerer runs all the time, so the trigger runs the job: each decision
step it looks (`Watch`), and when the look finds something to act on, the job's `JobSteps` act
at once, in this thread (cloud calls block; the trigger runs this with `asyncio.to_thread`).

The record lives in the job table (`jobs.table`), written with compare-and-swap: a second copy of
this trigger (a triggerer failover) takes control by writing first, and the copy that finds its
version gone stops (`ControlLost`). A database that does not answer leaves the job as it is
(`jobs.unanswered`): the record is read again at the next step, and what was written before an
effect (a launch request and its client token) makes the effect safe to repeat.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy.exc import DBAPIError

from airflow_provider_skynomad.jobs.clock import StepClock
from airflow_provider_skynomad.jobs.contract import ControllerArgs, Outcome, OutcomeKind
from airflow_provider_skynomad.jobs.errors import ControlLost, SkyNomadDeadlineMissed, SkyNomadJobFailed
from airflow_provider_skynomad.jobs.run import JobRun
from airflow_provider_skynomad.jobs.steps import JobSteps
from airflow_provider_skynomad.jobs.table import JobTable, TableStore
from airflow_provider_skynomad.jobs.unanswered import MAX_DB_STEPS, Patience, first_line
from airflow_provider_skynomad.jobs.watch import Watch

__all__ = ["MAX_DB_STEPS", "Controller", "Look", "first_line"]


@dataclass
class Look:
    """What one step of the controller did: the outcome when the job ended, words for the log, the next look."""

    outcome: Outcome | None = None
    words: str = ""
    at_hours: float | None = None  # the look's time on the job's clock: its words are stamped with it
    sleep_seconds: float = 0.0  # wall seconds until the next look (when the step was given the clock)


class Controller:
    """Controls one job from its first deferral to its end (see the module docstring)."""

    def __init__(self, *, args: ControllerArgs, steps: JobSteps, store: TableStore, log):
        self.args, self.steps, self.store, self.log = args, steps, store, log
        self.watch = Watch.of(steps.record)
        self.database = Patience(MAX_DB_STEPS)
        self._said = ""

    @classmethod
    def open(cls, args: ControllerArgs, config, cloud, table, log) -> Controller:
        """Take control of the job: its record from the job table, its steps, its first watch.

        `table` is the market table (shared by every trigger of one triggerer); the job table and
        the live-status board use its engine.
        """
        from airflow_provider_skynomad.jobs.live import LiveStatusTable

        # The job must be the task's own (its arguments name both): another task's is never taken over.
        args.task.check_owns(args.job_id, "the trigger's arguments")
        jobs = JobTable(market=table)
        owner = f"trigger-{uuid.uuid4().hex[:12]}"
        board = LiveStatusTable(market=table)
        store, record = TableStore.take(jobs, args.job_id, owner, board=board, task_key=args.task.key)
        run = JobRun(
            params=args.params, config=config, cloud=cloud, store=store, task=args.task, log=log,
            table_factory=lambda: table,
        )  # fmt: skip
        run.record = record
        run.view()  # opens the job's market source, which every look shares
        run.policy = record.policy  # built once per job: the watch and the steps ask the same one
        return cls(args=args, steps=JobSteps(run=run), store=store, log=log)

    @property
    def finished(self) -> bool:
        """Whether the job has finished (the trigger stops looking)."""
        return self.steps.record.finished

    def step(
        self,
        late_hours: float = 0.0,
        late_seconds: float = 0.0,
        *,
        publish: bool = False,
        clock: StepClock | None = None,
    ) -> Look:
        """One decision step: look (`Watch.step`), act on what it found at once (`JobSteps.handle`), say it.

        `late_hours` and `late_seconds`: how late this step started (`jobs.clock.Tick`), planned with;
        `publish`: the live status is due; `clock`: the trigger's, to tell when to look next
        (`Look.sleep_seconds`). Everything here blocks: the trigger runs it in a thread.
        """
        steps, run = self.steps, self.steps.run
        try:
            if late_hours > 0:
                steps.learn_lag(late_hours, late_seconds)
            event, words = self.watch.step(run.cloud, run.markets, run.policy)
            seen = self.watch.seen
            if seen is not None:  # what the look measured is said at once, in time order
                steps.learn_warmup(seen[0], self.watch.warmup_hours)
                work = self.watch.job.work_hours
                steps.learn_pace(seen[0], self.watch.pace, seen[1] / work if work else None)
            look = Look(words=self._new(words), at_hours=seen[0] if seen else None)
            if event is not None:
                self.store.check()  # still in control, just before any effect
                job_id = steps.record.job_id
                try:
                    if steps.handle(steps.record, event):
                        look.outcome = Outcome(OutcomeKind.FINISHED, job_id)
                    else:
                        self.watch = Watch.of(steps.record)
                except SkyNomadDeadlineMissed as exc:
                    look.outcome = Outcome(OutcomeKind.DEADLINE_MISSED, job_id, str(exc))
                except SkyNomadJobFailed as exc:
                    look.outcome = Outcome(OutcomeKind.FAILED, job_id, str(exc))
            self.database.answered()
        except ControlLost:
            raise
        except DBAPIError as exc:
            look = self._database_down(exc)
        self._tell(look, publish, clock)
        return look

    def publish(self) -> None:
        """Where the job stands at the last look, for the job page (and one line of the log)."""
        if self.watch.seen is None or self.finished:
            return
        elapsed, progress = self.watch.seen
        try:
            self.steps.publish_between(self.watch.state_now(elapsed, progress), elapsed)
        except DBAPIError as exc:
            self.log.warning("could not publish the job's live status (%s); the next step tries again", first_line(exc))

    def _tell(self, look: Look, publish: bool, clock: StepClock | None) -> None:
        """After a step: its words in the log (a trigger's log is the task's), the live status when due,
        and when the job's group should be looked at next (sooner when its workload should end first)."""
        run = self.steps.run
        if look.words:
            at = look.at_hours if look.at_hours is not None else run.elapsed()
            self.log.info("[t=%.2f h] %s", round(at, 3), look.words)
        if look.outcome is not None:
            return
        if publish:
            self.publish()
        if clock is not None:
            now_hours = run.cloud.now_hours()
            look.sleep_seconds = self.watch.sleep_seconds(clock.step_wall, clock.wall_per_hour, now_hours)

    def _database_down(self, exc: DBAPIError) -> Look:
        """The job table did not answer: read the record again next step; fail after MAX_DB_STEPS."""
        words = f"the job's database did not answer ({first_line(exc)})"
        if self.database.missed():
            steps_down = self.database.misses
            message = f"SkyNomad job {self.args.job_id} stopped: {words} for {steps_down} decision steps in a row"
            return Look(Outcome(OutcomeKind.FAILED, self.args.job_id, message), message)
        try:
            stored = self.store.table.load(self.args.job_id)
        except DBAPIError:
            return Look(words=f"{words}; the job's group is left as it is and the record read again next step")
        if stored is not None and stored.version != self.store.version:
            if stored.owner != self.store.owner:
                raise ControlLost(f"SkyNomad job {self.args.job_id} is controlled by {stored.owner} now") from exc
            self.store.version = stored.version
        if stored is not None:
            self.steps.record = stored.record
            self.watch = Watch.of(stored.record)
        return Look(words=f"{words}; the job's group is left as it is and the record read again")

    def _new(self, words: str) -> str:
        """`words` unless the last step said the same (a quiet job's log is not one line per step)."""
        if words == self._said:
            return ""
        self._said = words
        return words
