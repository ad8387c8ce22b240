"""The job's one controller: every decision, launch, move, rescue and release after the first deferral.

Why in the trigger: a deferred task's worker comes back only when a worker slot is free, which on
a busy box or a full pool takes seconds to minutes (1.2–1.56 cloud hours at 300×), and a job that
must wait that long after a preemption, or to put up its on-demand safety net, pays for it in
slack or in money. The triggerer runs all the time, so the trigger runs the job: each decision
step it looks (`Watch`), and when the look finds something to act on, the job's `JobRunner` acts
at once, in this thread (cloud calls block; the trigger runs this with `asyncio.to_thread`).

The record lives in the job table (`jobs.table`), written with compare-and-swap: a second copy of
this trigger (a triggerer failover) takes control by writing first, and the copy that finds its
version gone stops (`ControlLost`). A database that does not answer leaves the job as it is: the
record is read again at the next step, and what was written before an effect (a launch request
and its client token) makes the effect safe to repeat.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy.exc import DBAPIError

from airflow_provider_skynomad.jobs.contract import MAX_DB_STEPS, ControllerArgs, Outcome, OutcomeKind
from airflow_provider_skynomad.jobs.errors import ControlLost, SkyNomadDeadlineMissed, SkyNomadJobFailed
from airflow_provider_skynomad.jobs.events import JobEvent
from airflow_provider_skynomad.jobs.runner import Finish, JobRunner
from airflow_provider_skynomad.jobs.table import JobTable, TableStore
from airflow_provider_skynomad.jobs.watch import Watch


@dataclass
class Look:
    """What one step of the controller did: the outcome when the job ended, and words for the log."""

    outcome: Outcome | None = None
    words: str = ""
    at_hours: float | None = None  # the look's time on the job's clock: its words are stamped with it


class Controller:
    """Controls one job from its first deferral to its end (see the module docstring)."""

    def __init__(self, args: ControllerArgs, runner: JobRunner, store: TableStore, policy, log):
        self.args, self.runner, self.store, self.policy, self.log = args, runner, store, policy, log
        self.watch = Watch.of(runner.record, runner.stale, runner.fleet)
        self.db_failures = 0
        self._said = ""

    @classmethod
    def open(cls, args: ControllerArgs, config, cloud, table, log) -> Controller:
        """Take control of the job: its record from the job table, its runner, its first watch.

        `table` is the market table (shared by every trigger of one triggerer); the job table and
        the live-status board use its engine.
        """
        from airflow_provider_skynomad.jobs.live import LiveStatusTable
        from airflow_provider_skynomad.planner.registry import get_policy

        # The job must be the task's own (its arguments name both): another task's is never taken over.
        args.task.check_owns(args.job_id, "the trigger's arguments")
        jobs = JobTable(market=table)
        owner = f"trigger-{uuid.uuid4().hex[:12]}"
        board = LiveStatusTable(market=table)
        store, record = TableStore.take(jobs, args.job_id, owner, board=board, task_key=args.task.key)
        runner = JobRunner(args.params, config, cloud, store, args.task, args.conn_id, log, lambda: table)
        runner.record = record
        runner.view()  # opens the job's market source, which every look shares
        policy = get_policy(record.policy, **args.params.policy_params)
        return cls(args, runner, store, policy, log)

    @property
    def finished(self) -> bool:
        return self.runner.record.finished

    def step(self, late_hours: float = 0.0, late_seconds: float = 0.0) -> Look:
        """One decision step; `late_hours`: how late this step started, on the cloud's clock."""
        runner = self.runner
        try:
            if late_hours > 0:
                runner.learn_lag(late_hours, late_seconds)
            event, words = self.watch.step(runner.cloud, runner.source, self.policy)
            if self.watch.seen is not None:  # what the look measured is said at once, in time order
                runner.learn_warmup(self.watch.seen[0], self.watch.warmup_hours)
                at, progress = self.watch.seen
                done = progress / self.watch.job.work_hours if self.watch.job.work_hours else None
                runner.learn_pace(at, self.watch.pace, done)
            look = Look(words=self._new(words), at_hours=self.watch.seen[0] if self.watch.seen else None)
            if event is not None:
                look.outcome = self._act(event)
            self.db_failures = 0
            return look
        except ControlLost:
            raise
        except DBAPIError as exc:
            return self._database_down(exc)

    def publish(self) -> None:
        """Where the job stands at the last look, for the job page (and one line of the log)."""
        if self.watch.seen is None or self.finished:
            return
        elapsed, progress = self.watch.seen
        try:
            self.runner.publish_between(self.watch.state_now(elapsed, progress), elapsed)
        except DBAPIError as exc:
            self.log.warning("could not publish the job's live status (%s); the next step tries again", first_line(exc))

    def _act(self, event: JobEvent) -> Outcome | None:
        runner = self.runner
        self.store.check()  # still in control, just before any effect
        record = runner.record
        try:
            answer = runner.handle(record, event)
        except SkyNomadDeadlineMissed as exc:
            return Outcome(OutcomeKind.DEADLINE_MISSED, record.job_id, str(exc))
        except SkyNomadJobFailed as exc:
            return Outcome(OutcomeKind.FAILED, record.job_id, str(exc))
        if isinstance(answer, Finish):
            return Outcome(OutcomeKind.FINISHED, record.job_id)
        self.watch = Watch.of(runner.record, runner.stale, runner.fleet)
        return None

    def _database_down(self, exc: DBAPIError) -> Look:
        """The job table did not answer: read the record again next step; fail after MAX_DB_STEPS."""
        self.db_failures += 1
        words = f"the job's database did not answer ({first_line(exc)})"
        if self.db_failures >= MAX_DB_STEPS:
            message = f"SkyNomad job {self.args.job_id} stopped: {words} for {self.db_failures} decision steps in a row"
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
            self.runner.record = stored.record
            self.watch = Watch.of(stored.record, self.runner.stale, self.runner.fleet)
        return Look(words=f"{words}; the job's group is left as it is and the record read again")

    def _new(self, words: str) -> str:
        """`words` unless the last step said the same (a quiet job's log is not one line per step)."""
        if words == self._said:
            return ""
        self._said = words
        return words


def first_line(exc: DBAPIError) -> str:
    """The database's own first line of the error, for a log line (the driver's text, not SQLAlchemy's)."""
    text = str(getattr(exc, "orig", exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__
