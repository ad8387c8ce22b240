"""The one message a trigger sends its worker: what happened, when, and what the planner wants.

Typed on both sides; a plain dict only inside Airflow's `TriggerEvent`. `seq` names the deferral
the event answers, so a repeated event (events are at-least-once) is recognised and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..planner.actions import Decision

KINDS = ("finished", "preempted", "failed", "replan", "deadline_pressure", "status")


@dataclass(frozen=True)
class JobEvent:
    """:param kind: finished | preempted | failed | replan | deadline_pressure | status (nothing to do but
        record where the job stands, so the live status never goes stale).
    :param elapsed_hours: cloud hours since the job's start when the trigger saw it.
    :param progress_hours: work the job's last completed checkpoint proves.
    :param decision: what the planner wants now (after a preemption: what to run instead).
    :param detail: the workload's last error lines, when its group failed.
    :param sent_wall: wall-clock seconds (epoch) when the trigger sent it: the resume lag starts here.
    :param rescued: set when the trigger itself moved the job to on-demand under deadline pressure
        (no worker needed): ``{"handle", "option", "moved_from", "terminated"}`` as plain data.
    :param warmup_hours: the running group's measured warm-up (launch → first checkpoint), once seen.
    """

    kind: str
    seq: int
    elapsed_hours: float | None = None
    progress_hours: float | None = None
    status: str | None = None
    decision: Decision | None = None
    reason: str = ""
    detail: str | None = None
    decide_seconds: float | None = None
    sent_wall: float | None = None
    rescued: dict | None = None
    warmup_hours: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown SkyNomad event kind {self.kind!r}; expected one of {KINDS}")

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "seq": self.seq,
            "elapsed_hours": self.elapsed_hours,
            "progress_hours": self.progress_hours,
            "status": self.status,
            "decision": self.decision.to_dict() if self.decision else None,
            "reason": self.reason,
            "detail": self.detail,
            "decide_seconds": self.decide_seconds,
            "sent_wall": self.sent_wall,
            "rescued": self.rescued,
            "warmup_hours": self.warmup_hours,
        }

    @classmethod
    def from_dict(cls, data: dict) -> JobEvent:
        decision = data.get("decision")
        return cls(
            kind=data["kind"],
            seq=data.get("seq"),
            elapsed_hours=_float(data.get("elapsed_hours")),
            progress_hours=_float(data.get("progress_hours")),
            status=data.get("status"),
            decision=Decision.from_dict(decision) if decision else None,
            reason=data.get("reason") or "",
            detail=data.get("detail"),
            decide_seconds=_float(data.get("decide_seconds")),
            sent_wall=_float(data.get("sent_wall")),
            rescued=data.get("rescued"),
            warmup_hours=_float(data.get("warmup_hours")),
        )


def _float(value) -> float | None:
    return None if value is None else float(value)
