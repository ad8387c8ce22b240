"""One decision step of a deferred job, as the trigger runs it: look, plan, and say whether to wake the worker.

The trigger only waits; this is what it does between two sleeps, in a worker thread (every
call here blocks). It reads the group's status and the progress the job's last *completed*
checkpoint proves (never run time: time since that checkpoint is work at risk, not work done),
asks the planner what it would run now on the job's market source, and returns the event the
worker must act on, or None to keep waiting.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd

from ..clouds.base import Cloud, GroupHandle, GroupStatus
from ..market.source import MarketSource
from ..planner.actions import Decision
from ..planner.job import JobSpec, JobState
from ..planner.safety import is_safe
from .events import JobEvent


@dataclass
class Watch:
    """What a trigger watches: the job, where it stands at deferral, and its group."""

    job: JobSpec
    job_start_hours: float
    base: JobState
    group: GroupHandle | None
    launch_delay_hours: float
    seq: int

    @classmethod
    def from_kwargs(
        cls, job: dict, job_start_hours: float, state: dict, group: dict | None, launch_delay_hours: float, seq: int
    ) -> Watch:
        """From the trigger's plain-data arguments."""
        return cls(
            JobSpec(**job),
            float(job_start_hours),
            JobState.from_dict(state),
            GroupHandle.from_dict(group) if group else None,
            float(launch_delay_hours),
            int(seq),
        )

    def status_event(self, cloud: Cloud) -> JobEvent:
        """Nothing to change: wake the worker only to record where the job stands (and measure the lag)."""
        elapsed = cloud.now_hours() - self.job_start_hours
        return self._event("status", elapsed, self.progress(cloud, elapsed), None)

    def step(self, cloud: Cloud, source: MarketSource, policy) -> tuple[JobEvent | None, str]:
        """(event or None, a plain-words line on where the job stands)."""
        started = time.monotonic()
        elapsed = cloud.now_hours() - self.job_start_hours
        status = cloud.poll(self.group) if self.group else None
        if status is GroupStatus.SUCCEEDED:
            return self._event("finished", elapsed, self.job.work_hours, status), "the workload finished"
        progress = self.progress(cloud, elapsed)
        if status in (GroupStatus.PREEMPTED, GroupStatus.TERMINATED):
            lost = self.base.running.market if self.base.running else None
            after = self.base.progressed(progress, elapsed_hours=elapsed).advance(
                running=None, warmup_left_hours=0.0, last_preempted_market=lost
            )
            decision = policy.decide(self.job, after, self.view(cloud, source), elapsed)
            event = self._event("preempted", elapsed, progress, status, decision=decision)
            return event, f"{self.group.zone} preempted at {100 * progress / self.job.work_hours:.0f}% done"
        if status is GroupStatus.FAILED:
            detail = cloud.failure_detail(self.group)
            event = self._event("failed", elapsed, progress, status, reason="group failed", detail=detail)
            return event, f"the group in {self.group.zone} failed"
        if self.group is not None and progress >= self.job.work_hours - 1e-9:
            return None, "all work checkpointed; the workload is writing its result"
        state = self.state_now(elapsed, progress)
        view = self.view(cloud, source)
        decision = policy.decide(self.job, state, view, state.elapsed_hours)
        if not decision.wants_change(state.running):
            return None, ""
        kind = "replan" if is_safe(self.job, state, view, state.running) else "deadline_pressure"
        event = self._event(
            kind, elapsed, progress, status, decision=decision, decide_seconds=time.monotonic() - started
        )
        return event, ""

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

    @staticmethod
    def view(cloud: Cloud, source: MarketSource):
        return source.view(cloud.now_timestamp() + pd.Timedelta(seconds=1))

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
        )
