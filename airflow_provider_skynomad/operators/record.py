"""What one SkyNomad job remembers between worker visits, kept in ``context["task_state_store"]``.

The record is plain JSON (the store's value type) and is written *before* every effect that a
retry must not repeat: a launch is recorded with its client token first, so a worker that dies
mid-launch is followed by a retry that re-sends the same request and gets the same group back.
The record also keeps a cost estimate from the market prices seen at each launch, for clouds that
cannot bill (`summary` reports the cloud's own bill where there is one).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

RECORD_KEY = "skynomad_job"
RECORD_VERSION = 1
JOB_TAG = "skynomad-job"  # on every group, probe and checkpoint copy of the job: its value is the job id


def job_id_for(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """Stable, short, tag-safe id of one task instance's job (the client-token prefix)."""
    digest = hashlib.sha256(f"{dag_id}\x00{run_id}\x00{task_id}\x00{map_index}".encode()).hexdigest()
    return f"sn-{digest[:16]}"


@dataclass
class Segment:
    """One stretch on one group: where, how, from when to when, and how it ended."""

    market: str
    zone: str
    region: str
    mode: str
    start_hours: float
    usd_per_hour: float  # whole gang, at launch
    launch_delay_hours: float
    instance_ids: list[str]
    end_hours: float | None = None
    end: str | None = None  # preempted | migrated | released | finished | failed


@dataclass
class JobRecord:
    job_id: str
    job: dict
    job_start_hours: float
    deadline_hours: float
    zones: list[str]
    instance_types: list[str] | None
    policy: str
    state: dict
    all_on_demand_usd: float
    version: int = RECORD_VERSION
    group: dict | None = None
    launch_delay_hours: float = 0.0
    launches: int = 0
    seq: int = 0
    pending: dict | None = None  # LaunchRequest dict sent (or about to be) and not yet recorded
    pending_meta: dict | None = None
    segments: list[dict] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    migrations: int = 0
    preemptions: int = 0
    failed_launches: int = 0
    egress_usd: float = 0.0
    probe_usd: float = 0.0
    finished: bool = False
    summary: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> JobRecord:
        if data.get("version") != RECORD_VERSION:
            raise ValueError(
                f"task state holds a SkyNomad job record of version {data.get('version')!r}; this provider "
                f"reads version {RECORD_VERSION}. Clear the task state (or the task) to start over."
            )
        return cls(**data)

    def note(self, at_hours: float, event: str, **details: Any) -> None:
        self.timeline.append({"at_hours": round(float(at_hours), 4), "event": event, **details})

    def open_segment(self, segment: Segment) -> None:
        self.segments.append(asdict(segment))

    def close_segment(self, at_hours: float, end: str) -> dict | None:
        if self.segments and self.segments[-1]["end_hours"] is None:
            seg = self.segments[-1]
            seg["end_hours"] = max(seg["start_hours"], float(at_hours))
            seg["end"] = end
            return seg
        return None


class StateStore:
    """``context["task_state_store"]`` for the record, with an in-memory stand-in when absent."""

    def __init__(self, accessor: Any | None):
        self._accessor = accessor
        self._memory: dict[str, Any] = {}

    @classmethod
    def of(cls, context) -> StateStore:
        try:
            accessor = context["task_state_store"]
        except (KeyError, TypeError):
            accessor = None
        return cls(accessor)

    @property
    def durable(self) -> bool:
        return self._accessor is not None

    def load(self) -> JobRecord | None:
        data = self._accessor.get(RECORD_KEY) if self._accessor is not None else self._memory.get(RECORD_KEY)
        return JobRecord.from_dict(data) if data else None

    def save(self, record: JobRecord) -> None:
        data = record.to_dict()
        if self._accessor is None:
            self._memory[RECORD_KEY] = data
            return
        try:
            from airflow.sdk.execution_time.context import NEVER_EXPIRE
        except ImportError:  # pragma: no cover - stores without retention support
            NEVER_EXPIRE = timedelta.max
        try:
            self._accessor.set(RECORD_KEY, data, retention=NEVER_EXPIRE)
        except TypeError:  # test doubles and older accessors without `retention`
            self._accessor.set(RECORD_KEY, data)
