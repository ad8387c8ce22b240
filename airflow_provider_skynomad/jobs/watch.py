"""One decision step of a deferred job, as the trigger runs it: look, plan, and say whether to wake the worker.

The trigger waits; this is what it does between two sleeps, in a worker thread (every call
here blocks). It reads the group's status and the progress the job's last *completed*
checkpoint proves (never run time: time since that checkpoint is work at risk, not work done),
asks the planner what it would run now on the job's market source, and returns the event the
worker must act on, or None to keep waiting.

Two actions are the trigger's own (`jobs.rescue`): relaunching a preempted job, and the on-demand
safety net under deadline pressure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import pandas as pd
from sqlalchemy.exc import DBAPIError

from ..clouds.base import Cloud, GroupHandle, GroupStatus
from ..clouds.retry import CloudApiError
from ..market.source import MarketSource
from ..planner.actions import Decision, Mode, Option
from ..planner.job import JobSpec, JobState
from ..planner.safety import is_safe
from .events import JobEvent
from .live import seen_by_trigger
from .narrate import where_it_stands
from .rescue import Rescue, launch_rescue
from .stale import StaleGuard, held_rows

STATUS_SLACK_STEPS = 4  # status visits only with at least this many (step + lag) of slack
MAX_API_STEPS = 3  # decision steps in a row the cloud API may leave unanswered before the job fails


@dataclass
class Watch:
    """What a trigger watches: the job, where it stands at deferral, and its group."""

    job: JobSpec
    job_start_hours: float
    base: JobState
    group: GroupHandle | None
    launch_delay_hours: float
    seq: int
    rescue: Rescue | None = None
    progress_at_launch: float | None = None  # set while the group's first checkpoint is awaited
    on_safety_net: bool = False  # on on-demand because the deadline demanded it: no move away
    expected_end_hours: float | None = None  # when the running workload should be done, per the last step
    warmup_hours: float | None = None  # measured: launch → the group's first checkpoint, minus that work
    rescued: dict | None = None  # the trigger's own rescue, told to the worker with the next event
    _last_step_hours: float | None = None
    api_failures: int = 0  # steps in a row the cloud API did not answer
    stale: StaleGuard = field(default_factory=StaleGuard)
    stale_warnings: list[str] = field(default_factory=list)  # said with the step's words, then cleared
    seen: tuple[float, float] | None = None  # (elapsed, checkpointed progress) at the last look

    def __post_init__(self) -> None:
        self.declared_cold_start_hours = self.job.cold_start_hours

    @classmethod
    def from_kwargs(
        cls,
        job: dict,
        job_start_hours: float,
        state: dict,
        group: dict | None,
        launch_delay_hours: float,
        seq: int,
        rescue: dict | None = None,
        progress_at_launch: float | None = None,
        on_safety_net: bool = False,
    ) -> Watch:
        """From the trigger's plain-data arguments."""
        return cls(
            JobSpec(**job),
            float(job_start_hours),
            JobState.from_dict(state),
            GroupHandle.from_dict(group) if group else None,
            float(launch_delay_hours),
            int(seq),
            Rescue.from_dict(rescue),
            progress_at_launch,
            bool(on_safety_net),
        )

    def status_event(self, cloud: Cloud, step_hours: float) -> JobEvent | None:
        """Nothing to change: wake the worker only to record where the job stands (and measure the lag).

        None while the slack is tight: an event ends this trigger, and until a worker slot comes
        nobody watches the job (a pipeline's other tasks may hold every slot), so a status visit is
        only worth it with room to spare. None too while a group's first checkpoint is awaited: a
        cold start is when a spot group is most often lost, and a preemption nobody watches for waits
        for the worker, however long a busy pool keeps it.
        """
        if self.group is not None and self.progress_at_launch is not None and self.warmup_hours is None:
            return None
        elapsed = cloud.now_hours() - self.job_start_hours
        try:
            progress = self.progress(cloud, elapsed)
        except CloudApiError:
            return None  # a status visit can wait; the next step asks the cloud again
        state = self.state_now(elapsed, progress)
        on_demand = state.running is not None and state.running.mode is Mode.ON_DEMAND
        warmup = state.warmup_left_hours if on_demand else self.job.cold_start_hours
        slack = self.job.deadline_hours - elapsed - (self.job.work_hours - progress) - warmup
        if slack < STATUS_SLACK_STEPS * (step_hours + self.job.reaction_hours):
            return None
        return self._event("status", elapsed, progress, None)

    def live(self, base: dict) -> dict | None:
        """The job's live status as of the last look (`jobs.live`), None before one.

        `base` is what the worker published at deferral; once this trigger moved the job itself,
        the spend is the worker's to tell."""
        if self.seen is None:
            return None
        elapsed, progress = self.seen
        state = self.state_now(elapsed, progress)
        where = where_it_stands(base["job_id"], self.job, state, self.group, base["deadline_hours"], elapsed)
        return seen_by_trigger(base, where, elapsed, moved=self.rescued is not None)

    def step(self, cloud: Cloud, source: MarketSource, policy) -> tuple[JobEvent | None, str]:
        """(event or None, a plain-words line on where the job stands).

        A step the cloud API would not answer even after its retries (clouds/retry.py), or whose
        market read failed (the market database down or restarting), changes nothing: a healthy
        group is not given up because its status or its markets could not be read. Only
        `MAX_API_STEPS` such steps in a row fail the job, naming what did not answer.
        """
        try:
            answer = self._step(cloud, source, policy)
        except (CloudApiError, DBAPIError) as exc:
            if isinstance(exc, DBAPIError):  # the market database is down or restarting
                first = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
                exc = CloudApiError(f"the market table did not answer ({first})")
            self.api_failures += 1
            if self.api_failures < MAX_API_STEPS:
                return None, f"{exc}; the job's group is left as it is and asked again next step"
            elapsed = cloud.now_hours() - self.job_start_hours
            reason = f"{exc} ({self.api_failures} decision steps in a row)"
            return self._event("failed", elapsed, self.base.progress_hours, None, reason=reason), reason
        self.api_failures = 0
        if self.stale_warnings:
            event, words = answer
            answer = event, "; ".join([*self.stale_warnings, *([words] if words else [])])
            self.stale_warnings = []
        return answer

    def _step(self, cloud: Cloud, source: MarketSource, policy) -> tuple[JobEvent | None, str]:
        started = time.monotonic()
        elapsed = cloud.now_hours() - self.job_start_hours
        status = cloud.poll(self.group) if self.group else None
        if status is GroupStatus.SUCCEEDED:
            return self._event("finished", elapsed, self.job.work_hours, status), "the workload finished"
        progress = self.progress(cloud, elapsed)
        self.seen = (elapsed, progress)
        self._measure_warmup(elapsed, progress)
        if status in (GroupStatus.PREEMPTED, GroupStatus.TERMINATED):
            lost = self.base.running.market if self.base.running else None
            after = self.base.progressed(progress, elapsed_hours=elapsed).advance(
                running=None, warmup_left_hours=0.0, last_preempted_market=lost
            )
            view = self.view(cloud, source)
            decision = policy.decide(self.job, after, view, elapsed)
            event = self._event("preempted", elapsed, progress, status, decision=decision)
            words = f"{self.group.zone} preempted at {100 * progress / self.job.work_hours:.0f}% done"
            first = decision.first
            # A preempted job waits for nothing but its relaunch, and a worker may be long in coming
            # (a full pool): the trigger relaunches it itself, once per deferral. What it cannot
            # launch (no capacity there, or a launch already made this deferral) the worker decides.
            if self.rescue is not None and self.rescued is None and first is not None:
                rescued = launch_rescue(cloud, view, self.job, after, first, self.rescue, self.seq, self.group)
                if rescued is not None:
                    option = Option.from_dict(rescued["option"])
                    safety_net = option.mode is Mode.ON_DEMAND and not is_safe(self.job, after, view, None)
                    self._carry_on(rescued, after, elapsed, "preempted", safety_net)
                    zone = rescued["handle"]["zone"]
                    return None, words + f"; relaunched {option.mode.value} in {zone} without waiting for a worker"
            return event, words
        if status is GroupStatus.FAILED:
            detail = cloud.failure_detail(self.group)
            event = self._event("failed", elapsed, progress, status, reason="group failed", detail=detail)
            return event, f"the group in {self.group.zone} failed"
        if self.group is not None and progress >= self.job.work_hours - 1e-9:
            return None, "all work checkpointed; the workload is writing its result"
        state = self.state_now(elapsed, progress)
        if self.group is not None:
            self.expected_end_hours = elapsed + state.warmup_left_hours + (self.job.work_hours - progress)
        view = self.view(cloud, source)
        decision = policy.decide(self.job, state, view, state.elapsed_hours)
        if not decision.wants_change(state.running):
            return None, ""
        running = state.running
        if self.on_safety_net and running is not None and running.mode is Mode.ON_DEMAND:
            # Once the deadline put the job on on-demand it finishes there: the planner's inputs
            # (lags, warm-ups) are measured late under Airflow, and a move back to spot that looks
            # safe on them can be the one that makes the job late.
            return None, ""
        kind = "replan" if is_safe(self.job, state, view, state.running) else "deadline_pressure"
        first = decision.first
        safety_net = first is not None and first.mode is Mode.ON_DEMAND
        if kind == "deadline_pressure" and self.rescue is not None and safety_net:
            rescued = launch_rescue(cloud, view, self.job, state, first, self.rescue, self.seq, self.group)
            if rescued is not None:
                self._carry_on(rescued, state, elapsed, "deadline_pressure", True)
                return None, f"deadline pressure: launched on-demand in {rescued['handle']['zone']} without waiting"
        event = self._event(
            kind, elapsed, progress, status, decision=decision, decide_seconds=time.monotonic() - started
        )
        return event, ""

    def _carry_on(self, rescued: dict, state: JobState, elapsed: float, cause: str, safety_net: bool) -> None:
        """After the trigger's own launch: watch the new group, and tell the worker with the next event.

        No worker is needed now, so none is woken: a pipeline holding every worker slot cannot leave
        the job unwatched, and its end is still seen on time. `safety_net`: the launch is the
        deadline's on-demand net, which the job then keeps to the end.
        """
        option = Option.from_dict(rescued["option"])
        moved = rescued.get("moved_from") is not None
        base = state.advance(elapsed_hours=elapsed)
        if not moved and base.moves_checkpoint(option.market):
            base = base.advance(checkpoint_market=None, progress_hours=0.0)  # nothing could be copied
        delay = self.job.launch_hours(moved)
        self.rescued = {
            **rescued,
            "cause": cause,
            "at_hours": elapsed,
            "progress_hours": state.progress_hours,
            "safety_net": safety_net,
        }
        self.base = base.launched(option, elapsed, delay)
        self.group = GroupHandle.from_dict(rescued["handle"])
        self.launch_delay_hours = delay
        self.progress_at_launch = self.base.progress_hours
        self.warmup_hours = None
        self.on_safety_net = self.on_safety_net or safety_net
        self.expected_end_hours = None

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
            # First look of this deferral: it landed after the worker last saw none (at the base state's
            # time); take that earliest instant, so a long gap (a retry) never inflates the warm-up.
            seen = max(self.base.elapsed_hours, self.base.running_since_hours)
        self.warmup_hours = max(0.0, seen - self.base.running_since_hours - (progress - start))
        self.job = replace(self.job, cold_start_hours=max(self.declared_cold_start_hours, self.warmup_hours))

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
        base = self.base
        age = elapsed - base.running_since_hours if base.running else 0.0
        warmup_left = max(0.0, self.launch_delay_hours - age) if base.running else 0.0
        return base.progressed(progress, elapsed_hours=elapsed, warmup_left_hours=warmup_left)

    def view(self, cloud: Cloud, source: MarketSource):
        """The planner's view now; stale markets show no spot capacity, and are said once (jobs/stale.py)."""
        now = cloud.now_timestamp()
        view = source.view(now + pd.Timedelta(seconds=1))
        running = self.base.running.market if self.group is not None and self.base.running else None
        view, warnings = self.stale.apply(view, held_rows(source), now, running)
        self.stale_warnings += warnings
        return view

    def _event(
        self,
        kind: str,
        elapsed: float,
        progress: float,
        status: GroupStatus | None,
        *,
        decision: Decision | None = None,
        reason: str = "",
        detail: str | None = None,
        decide_seconds: float | None = None,
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
            decide_seconds=decide_seconds,
            sent_wall=time.time(),
            warmup_hours=self.warmup_hours,
            rescued=self.rescued,
        )
