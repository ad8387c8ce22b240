"""One look at a controlled job: poll its group, read its proven progress, ask the planner.

The controller (`jobs.controller`) runs this every decision step, in a thread (every call here
blocks). It reads the group's status and the progress the job's last *completed* checkpoint
proves (never run time: time since that checkpoint is work at risk, not work done), asks the
planner what it would run now, and returns the event the job's runner must act on (a
`JobEvent`), or None when nothing is to change. It changes nothing itself: every launch,
termination and checkpoint copy is the runner's (`jobs.carry_out`), so there is one launch path.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sqlalchemy.exc import DBAPIError

from airflow_provider_skynomad.clouds.base import Checkpointed, Cloud, GroupHandle, GroupStatus
from airflow_provider_skynomad.clouds.retry import CloudApiError
from airflow_provider_skynomad.jobs.events import EventKind, JobEvent
from airflow_provider_skynomad.jobs.markets import JobMarkets
from airflow_provider_skynomad.jobs.unanswered import MAX_API_STEPS, Patience, first_line
from airflow_provider_skynomad.planner.actions import Decision, Mode
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.pace import Pace
from airflow_provider_skynomad.planner.safety import is_safe

# The pace is read over at least this much productive time since the group's first checkpoint,
# and again every PACE_EVERY_HOURS: on a busy box a workload falls behind and catches up in
# bursts, and over a few decision steps that jitter reads as a pace 20 % off (on the accelerated
# simulated clock seconds of CPU starvation are a sizeable share of an hour).
PACE_MIN_HOURS = 0.5
PACE_EVERY_HOURS = 0.25
__all__ = ["MAX_API_STEPS", "Watch"]


@dataclass(kw_only=True)
class Watch:
    """What the controller watches: the job as its steps last left it, and its group.

    Keyword-only: several fields are hours or counts that look alike.
    """

    job: JobSpec
    job_start_hours: float
    base: JobState
    group: GroupHandle | None
    launch_delay_hours: float
    seq: int
    progress_at_launch: float | None = None  # set while the group's first checkpoint is awaited
    on_safety_net: bool = False  # on on-demand because the deadline demanded it: no move away
    expected_end_hours: float | None = None  # when the running workload should be done, per the last step
    warmup_hours: float | None = None  # measured: launch → the group's first checkpoint, minus that work
    _last_step_hours: float | None = None
    api: Patience = field(default_factory=lambda: Patience(MAX_API_STEPS))  # steps the cloud API did not answer
    stale_warnings: list[str] = field(default_factory=list)  # said with the step's words, then cleared
    seen: tuple[float, float] | None = None  # (elapsed, checkpointed progress) at the last look
    pace: Pace | None = None  # what the checkpoints say of the real work; `job.work_hours` is its bound
    # (time, fraction, the pace's measured hours and share) at the group's first checkpoint this watch saw
    _anchor: tuple[float, float, float, float] | None = None
    # How far the group's first checkpoint was behind the planner's count of it (launch + planned delay,
    # then the declared pace): time a workload pacing itself from the planned start may catch up
    _behind_hours: float = 0.0
    _since: float = 0.0  # productive hours since the anchor at the last checkpoint the pace observed
    _fraction: float | None = None  # the checkpointed share at the last look
    job_id: str = ""

    def __post_init__(self) -> None:
        self.declared_cold_start_hours = self.job.cold_start_hours
        self.planned_delay_hours = self.launch_delay_hours  # as launched: the warm-up's wait may raise the other
        if self.pace is None:
            self.pace = Pace(self.job.work_hours)

    @classmethod
    def of(cls, record) -> Watch:
        """What to watch after the controller's steps handled the last event (or the worker started the job)."""
        return cls(
            job=record.job,
            job_start_hours=record.job_start_hours,
            base=record.state,
            group=record.group,
            launch_delay_hours=record.launch_delay_hours,
            seq=record.seq,
            progress_at_launch=record.progress_at_launch,
            on_safety_net=record.on_safety_net,
            pace=record.pace,
            job_id=record.job_id,
        )

    def step(self, cloud: Cloud, markets: JobMarkets, policy) -> tuple[JobEvent | None, str]:
        """(event or None, a plain-words line on where the job stands): poll the group, read its proven
        progress, and when it was lost (preempted, or terminated by the cloud) ask the policy at once
        where to go on.

        A step the cloud API would not answer even after its retries (clouds/retry.py), or whose
        market read failed (the market database down or restarting), changes nothing (`_unanswered`).
        """
        try:
            elapsed = cloud.now_hours() - self.job_start_hours
            status = cloud.poll(self.group) if self.group else None
            if status is GroupStatus.SUCCEEDED:
                return self._answered(self._event(EventKind.FINISHED, elapsed, self.job.work_hours, status), "")
            progress = self.progress(cloud, elapsed)
            self._measure_warmup(elapsed, progress)
            progress = self._measure_pace(cloud, elapsed, progress)
            self.seen = (elapsed, progress)
            if status in (GroupStatus.PREEMPTED, GroupStatus.TERMINATED):
                lost = self.base.running.market if self.base.running else None
                after = self.base.progressed(progress, elapsed_hours=elapsed).advance(
                    running=None, warmup_left_hours=0.0, last_preempted_market=lost
                )
                decision = policy.decide(self.job, after, self.view(cloud, markets), elapsed)
                preempted = self._event(EventKind.PREEMPTED, elapsed, progress, status, decision=decision)
                return self._answered(preempted, "")
            if status is GroupStatus.FAILED:
                detail = cloud.failure_detail(self.group)
                failed = self._event(EventKind.FAILED, elapsed, progress, status, reason="group failed", detail=detail)
                return self._answered(failed, "")
            return self._answered(*self._replan(cloud, markets, policy, elapsed, progress, status))
        except (CloudApiError, DBAPIError) as exc:
            return self._unanswered(cloud, exc)

    def _answered(self, event: JobEvent | None, words: str) -> tuple[JobEvent | None, str]:
        """A step that was answered: the API's patience starts over; stale markets are said first."""
        self.api.answered()
        if self.stale_warnings:
            words = "; ".join([*self.stale_warnings, *([words] if words else [])])
            self.stale_warnings = []
        return event, words

    def _unanswered(self, cloud: Cloud, exc: CloudApiError | DBAPIError) -> tuple[JobEvent | None, str]:
        """The cloud API or the market table did not answer: a healthy group is not given up because its
        status or its markets could not be read. Only `MAX_API_STEPS` such steps in a row fail the job,
        naming what did not answer (`jobs.unanswered`, the one rule for what does not answer)."""
        if isinstance(exc, DBAPIError):  # the market database is down or restarting
            exc = CloudApiError(f"the market table did not answer ({first_line(exc)})")
        if not self.api.missed():
            return None, f"{exc}; the job's group is left as it is and asked again next step"
        elapsed = cloud.now_hours() - self.job_start_hours
        reason = f"{exc} ({self.api.misses} decision steps in a row)"
        return self._event(EventKind.FAILED, elapsed, self.base.progress_hours, None, reason=reason), reason

    def _replan(
        self, cloud: Cloud, markets: JobMarkets, policy, elapsed: float, progress: float, status: GroupStatus | None
    ) -> tuple[JobEvent | None, str]:
        """The group runs: what the planner would run now, as an event only when it wants a change."""
        if self.group is not None and progress >= self.job.work_hours - 1e-9:
            return None, "all work checkpointed; the workload is writing its result"
        state = self.state_now(elapsed, progress)
        if self.group is not None:
            self.expected_end_hours = elapsed + state.warmup_left_hours + (self.job.work_hours - progress)
        view = self.view(cloud, markets)
        decision = policy.decide(self.job, state, view, state.elapsed_hours)
        if not decision.wants_change(state.running):
            return None, ""
        running = state.running
        if self.on_safety_net and running is not None and running.mode is Mode.ON_DEMAND:
            # Once the deadline put the job on on-demand it finishes there: the planner's inputs
            # (lags, warm-ups) are measured late under Airflow, and a move back to spot that looks
            # safe on them can be the one that makes the job late.
            return None, ""
        safe = is_safe(self.job, state, view, state.running)
        kind = EventKind.REPLAN if safe else EventKind.DEADLINE_PRESSURE
        return self._event(kind, elapsed, progress, status, decision=decision), ""

    def _measure_warmup(self, elapsed: float, progress: float) -> None:
        """The group's real warm-up (cold start + the workload's own start-up), from its first checkpoint.

        The checkpoint landed between the previous poll and this one: take the middle. A slow
        start on a loaded box then shows up as a longer warm-up, which the job plans with.
        """
        previous, self._last_step_hours = self._last_step_hours, elapsed
        start = self.progress_at_launch
        if self.group is None or start is None or self.warmup_hours is not None:
            return
        age = elapsed - self.base.running_since_hours
        if progress <= start + 1e-9:
            # No checkpoint yet: the warm-up is at least this long, and this group is not yet to be
            # counted on for progress; plan with that until its first checkpoint says more.
            if age > self.job.cold_start_hours:
                self.job = replace(self.job, cold_start_hours=age)
                self.launch_delay_hours = max(self.launch_delay_hours, age + (elapsed - (previous or elapsed)))
            return
        if previous is not None:
            seen = (previous + elapsed) / 2.0  # it landed between this trigger's last look and this one
        else:
            # First look since the runner last acted: it landed after the runner last saw none (at the base state's
            # time); take that earliest instant, so a long gap (a retry) never inflates the warm-up.
            seen = max(self.base.elapsed_hours, self.base.running_since_hours)
        self.warmup_hours = max(0.0, seen - self.base.running_since_hours - (progress - start))
        self.job = replace(self.job, cold_start_hours=max(self.declared_cold_start_hours, self.warmup_hours))

    def _measure_pace(self, cloud: Cloud, elapsed: float, progress: float) -> float:
        """Learn the real work from this group's checkpoints after its first; the progress at the new bound.

        The first checkpoint of a group anchors it (its warm-up is measured from it, so it says
        nothing of the pace); each later one adds the productive time since the anchor. Both are
        dated by when they were written (`written_at`), not by the look that saw them: a look that
        comes late (a busy triggerer, a hand-off) would date an old checkpoint now, and a workload
        at its declared pace would read as faster.

        The hours fed to the pace are `productive_hours`: the time since the anchor, unless the
        group's first checkpoint came behind the planner's count and the workload caught that up.
        """
        checkpoint = cloud.progress(self.group) if self.group is not None else None
        warming = self.progress_at_launch is not None and self.warmup_hours is None
        if checkpoint is None or warming:
            return progress
        fraction = min(1.0, float(checkpoint))
        seen = self.written_at(checkpoint, elapsed)
        if self._anchor is None:
            # The pace counts only what was measured: productive time and work after an anchor,
            # never the work before it at a guessed pace (which would pull the estimate to the guess).
            self._anchor = (seen, fraction, self.pace.productive_hours, self.pace.fraction)
            self._fraction = fraction
            self._behind_hours = self._behind_at_anchor(seen, progress)
            self._since = 0.0
            return progress
        if fraction <= (self._fraction or 0.0) + 1e-12:
            return progress
        at, start, base_hours, base_fraction = self._anchor
        since = max(0.0, seen - at)
        if since < PACE_MIN_HOURS or since < self._since + PACE_EVERY_HOURS:
            return progress
        self._fraction, self._since = fraction, since
        done = min(1.0, base_fraction + max(0.0, fraction - start))
        self.pace = self.pace.observed(self.productive_hours(base_hours + since, done), done)
        self.job = self.pace.planning_job(self.job)
        return max(self.base.progress_hours, fraction * self.job.work_hours)

    def _behind_at_anchor(self, written: float, progress: float) -> float:
        """Hours the group's first checkpoint came behind the planner's count of it: its work started
        at launch + the planned delay and ran at the declared pace. Only for the group's first
        checkpoint (this watch saw it come: `progress_at_launch` is known), else 0."""
        if self.progress_at_launch is None or self.base.running is None:
            return 0.0
        planned_start = self.base.running_since_hours + self.planned_delay_hours
        return max(0.0, (written - planned_start) - (progress - self.progress_at_launch))

    def productive_hours(self, since_anchor: float, done: float) -> float:
        """The productive hours behind `done` (the pace's cumulative share), counted two ways.

        From the group's first checkpoint (`since_anchor`): a workload's start-up, however slow,
        says nothing of its pace. And from the planner's count of the group's start, the anchor's
        lateness `_behind_hours` included: a workload that paces itself from its planned start (the
        bundled one does: SKYNOMAD_WORKLOAD_START_WALL) catches a slow start-up up in a burst after
        its first checkpoint, which read from the anchor alone is a pace up to a third faster than
        it is (issue 32, the recipe on a busy box). Where the two agree on a side of the declared
        pace, the one nearer the declared is the measurement (a deviation both accountings show);
        where they disagree, the checkpoints cannot tell the pace from the start-up yet: the
        declared pace. Without lateness both are the same, so a slower workload is measured (and
        said) as early as before.
        """
        declared = done * self.pace.declared_work_hours
        return min(max(declared, since_anchor), since_anchor + self._behind_hours)

    def written_at(self, checkpoint: float, elapsed: float) -> float:
        """When `checkpoint` (a `Cloud.progress` answer) was written, in the job's elapsed hours.

        Its store's own time (`Checkpointed.at_hours`) when that is believable: not after this look
        and not before the group launched. Else this look's time: a store that does not say, an
        instance clock ahead of ours, or a checkpoint older than the group (one copied in for it).
        """
        at = checkpoint.at_hours if isinstance(checkpoint, Checkpointed) else None
        if at is None:
            return elapsed
        written = at - self.job_start_hours
        if not self.base.running_since_hours <= written <= elapsed:
            return elapsed
        return written

    def sleep_seconds(self, step_wall: float, wall_per_hour: float, now_hours: float) -> float:
        """Until the next step; shorter when the workload should finish before then, so its end is seen
        within a tenth of a step instead of up to a whole step late (that delay counts against the deadline)."""
        if self.expected_end_hours is None:
            return step_wall
        until_end = (self.expected_end_hours - (now_hours - self.job_start_hours)) * wall_per_hour
        return min(step_wall, max(step_wall / 10.0, until_end))

    def progress(self, cloud: Cloud, elapsed: float) -> float:
        """Work the job's last completed checkpoint proves, in hours (never less than at deferral)."""
        fraction = cloud.progress(self.group) if self.group else None
        if fraction is None:
            return self.base.progress_hours
        return max(self.base.progress_hours, min(1.0, float(fraction)) * self.job.work_hours)

    def state_now(self, elapsed: float, progress: float) -> JobState:
        """The planner's state at this look: the base state moved on to `elapsed`, with the proven progress
        and the warm-up the running group still has left (a decision must not count on it before)."""
        base = self.base
        age = elapsed - base.running_since_hours if base.running else 0.0
        warmup_left = max(0.0, self.launch_delay_hours - age) if base.running else 0.0
        return base.progressed(progress, elapsed_hours=elapsed, warmup_left_hours=warmup_left)

    def view(self, cloud: Cloud, markets: JobMarkets):
        """The planner's view now (`jobs.markets`); markets gone stale are said with the step's words."""
        view, warnings = markets.view(
            cloud, state=self.base, group=self.group, start_hours=self.job_start_hours, instances=self.job.instances
        )
        self.stale_warnings += warnings
        return view

    def _event(
        self,
        kind: EventKind,
        elapsed: float,
        progress: float,
        status: GroupStatus | None,
        *,
        decision: Decision | None = None,
        reason: str = "",
        detail: str | None = None,
    ) -> JobEvent:
        return JobEvent(
            kind=kind,
            seq=self.seq,
            elapsed_hours=elapsed,
            progress_hours=progress,
            status=status.value if status else None,
            decision=decision,
            reason=reason or (decision.reason if decision else ""),
            detail=detail,
            warmup_hours=self.warmup_hours,
            pace=self.pace,
        )
