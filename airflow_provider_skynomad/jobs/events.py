"""What one look at the job found that the controller's steps must act on: typed, never a dict between modules.

The controller's `Watch` makes a `JobEvent`; its steps (`JobSteps.handle`) act on it in the same
process. `seq` names the record's state the look started from, so an event about a state the
job has since left is recognised and dropped.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from airflow_provider_skynomad.planner.actions import Decision
from airflow_provider_skynomad.planner.pace import Pace


class EventKind(enum.StrEnum):
    """FINISHED: the workload succeeded. PREEMPTED: the group was lost (the decision says what instead).
    FAILED: the group or the cloud API failed. REPLAN: the planner wants a change that keeps the
    deadline safe. DEADLINE_PRESSURE: staying is no longer safe: the change is the safety net."""

    FINISHED = "finished"
    PREEMPTED = "preempted"
    FAILED = "failed"
    REPLAN = "replan"
    DEADLINE_PRESSURE = "deadline_pressure"


@dataclass(frozen=True)
class JobEvent:
    """:param kind: what happened.
    :param elapsed_hours: cloud hours since the job's start when the look saw it.
    :param progress_hours: work the job's last completed checkpoint proves.
    :param decision: what the planner wants now (after a preemption: what to run instead).
    :param detail: the workload's last error lines, when its group failed.
    :param warmup_hours: the running group's measured warm-up (launch → first checkpoint), once seen.
    :param pace: what the checkpoints say of the real work, as of this look.
    """

    kind: EventKind
    seq: int
    elapsed_hours: float | None = None
    progress_hours: float | None = None
    status: str | None = None
    decision: Decision | None = None
    reason: str = ""
    detail: str | None = None
    warmup_hours: float | None = None
    pace: Pace | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", EventKind(self.kind))  # a plain string from a test is checked here
