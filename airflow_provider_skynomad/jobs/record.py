"""What one SkyNomad job remembers between worker visits: a typed record, plain JSON only in the store.

The record is written *before* every effect that a retry must not repeat: a launch is recorded
with its client token first, so a worker that dies mid-launch is followed by a retry that finds
the same group by that token instead of starting a second one. Inside the runtime the record is
typed (JobSpec, JobState, GroupHandle, LaunchRequest, Segment); `to_dict` / `from_dict` are used at
the state-store boundary only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from airflow_provider_skynomad.clouds.base import GroupHandle, LaunchRequest
from airflow_provider_skynomad.clouds.tags import job_id_for, task_key_for, task_key_of
from airflow_provider_skynomad.planner.actions import Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.pace import Pace
from airflow_provider_skynomad.planner.timeline import NoteKind, SegmentEnd

RECORD_KEY = "skynomad_job"
STATUS_KEY = "skynomad_status"
RECORD_VERSION = 2
__all__ = [
    "JOB_TAG",
    "JobRecord",
    "PendingLaunch",
    "Segment",
    "StateStore",
    "job_id_for",
    "task_key_for",
    "task_key_of",
]

JOB_TAG = "skynomad-job"  # on every group, probe and checkpoint copy of the job: its value is the job id


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
    end: SegmentEnd | None = None  # PREEMPTED, MIGRATED, RELEASED, FINISHED or FAILED once closed

    def __post_init__(self) -> None:
        if self.end is not None:
            self.end = SegmentEnd(self.end)  # a stored record's word, checked

    def close(self, at_hours: float, end: SegmentEnd) -> None:
        """End the stretch at `at_hours` (never before its start: a bill has no negative hours)."""
        self.end_hours = max(self.start_hours, float(at_hours))
        self.end = SegmentEnd(end)

    def to_dict(self) -> dict:
        """Plain JSON for the store: the end as its word, as records have always said it."""
        return {**asdict(self), "end": None if self.end is None else self.end.value}


@dataclass(frozen=True)
class PendingLaunch:
    """A launch written down before it is sent: what, for which option, decided when."""

    request: LaunchRequest
    option: Option
    elapsed_hours: float

    def to_dict(self) -> dict:
        """Plain JSON for the store: a worker that dies mid-launch leaves this for the next to finish."""
        return {"request": self.request.to_dict(), "option": self.option.to_dict(), "elapsed_hours": self.elapsed_hours}

    @classmethod
    def from_dict(cls, data: dict) -> PendingLaunch:
        """The launch `to_dict` wrote, to be finished with the same client token."""
        return cls(LaunchRequest.from_dict(data["request"]), Option.from_dict(data["option"]), data["elapsed_hours"])


@dataclass
class JobRecord:
    """The job's memory. Hours are cloud hours since the job started unless named otherwise."""

    job_id: str
    job: JobSpec
    job_start_hours: float  # the cloud clock at the start
    deadline_hours: float  # the task's deadline (the DAG's, minus the downstream reserve)
    zones: list[str]
    instance_types: list[str] | None
    policy: str
    state: JobState
    all_on_demand_usd: float  # at the declared work: `jobs.summary.all_on_demand_usd` is the figure shown
    dag_deadline_hours: float | None = None  # the DAG's deadline when a downstream reserve was taken off it
    market_since: str = ""  # ISO start of the job's market-table window (fixed: the window grows, never slides)
    max_tries: int | None = None  # the task instance's when the job started: Airflow raises it on a clear
    version: int = RECORD_VERSION
    group: GroupHandle | None = None
    launch_delay_hours: float = 0.0
    launches: int = 0
    seq: int = 0
    pending: PendingLaunch | None = None
    segments: list[Segment] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    lags_hours: list[float] = field(default_factory=list)  # measured trigger event → worker lags
    warmups_hours: list[float] = field(default_factory=list)  # measured launch → first checkpoint, minus its work
    progress_at_launch: float | None = None  # the running group's first checkpoint is still awaited
    on_safety_net: bool = False  # deadline pressure put the job on on-demand: it stays there to the end
    pace: Pace | None = None  # what the checkpoints measured of the real work (`job.work_hours` is its bound)
    pace_told: float = 1.0  # the slowdown last said in the log (1.0: none)
    deadline_risk_told: bool = False  # "even on-demand cannot make it" was said (and the callback called)
    groups_used: list[GroupHandle] = field(default_factory=list)
    migrations: int = 0
    preemptions: int = 0
    failed_launches: int = 0
    egress_usd: float = 0.0
    probe_usd: float = 0.0
    finished: bool = False
    summary: dict | None = None
    wants: str | None = None  # idle, waiting for spot in this market: a claim the deployment's other jobs see
    on_demand_usd_per_hour: float = 0.0  # the cheapest on-demand price at the start, for the whole gang

    # -- small verbs ---------------------------------------------------------------------------

    def note(self, at_hours: float, kind: NoteKind, **details: Any) -> dict:
        """Append a timeline note of `kind`; the item is plain data (the kind as its word), as stored."""
        # Rounded as the live status rounds its hours, so a log line and a status line of one
        # moment show the same time.
        item = {"at_hours": round(float(at_hours), 3), "event": NoteKind(kind).value, **details}
        self.timeline.append(item)
        return item

    def noted(self, kind: NoteKind) -> list[dict]:
        """The timeline's notes of `kind`, oldest first."""
        return [item for item in self.timeline if item.get("event") == kind]

    def open_segment(self, segment: Segment) -> None:
        """A group launched: its stretch is billed and drawn from now until it is closed."""
        self.segments.append(segment)

    def close_segment(self, at_hours: float, end: SegmentEnd) -> Segment | None:
        """Close the running stretch with how it ended; None when none runs (a second close is a no-op)."""
        if self.segments and self.segments[-1].end_hours is None:
            self.segments[-1].close(at_hours, end)
            return self.segments[-1]
        return None

    @property
    def region(self) -> str | None:
        """The region of the job's last group (None before its first launch)."""
        return self.segments[-1].region if self.segments else None

    # -- the state-store boundary ----------------------------------------------------------------

    def to_dict(self) -> dict:
        """The record as plain JSON, the only shape the job table and task state hold."""
        data = asdict(self)
        data["job"] = self.job.to_dict()
        data["state"] = self.state.to_dict()
        data["group"] = self.group.to_dict() if self.group else None
        data["pending"] = self.pending.to_dict() if self.pending else None
        data["groups_used"] = [g.to_dict() for g in self.groups_used]
        data["segments"] = [s.to_dict() for s in self.segments]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> JobRecord:
        """The typed record from what `to_dict` stored; a record of another version is refused with what to do."""
        if data.get("version") != RECORD_VERSION:
            raise ValueError(
                f"task state holds a SkyNomad job record of version {data.get('version')!r}; this provider "
                f"reads version {RECORD_VERSION}. Clear the task state (or the task) to start over."
            )
        data = dict(data)
        data["job"] = JobSpec(**data["job"])
        data["state"] = JobState.from_dict(data["state"])
        data["group"] = GroupHandle.from_dict(data["group"]) if data.get("group") else None
        data["pending"] = PendingLaunch.from_dict(data["pending"]) if data.get("pending") else None
        data["segments"] = [Segment(**s) for s in data.get("segments", [])]
        data["groups_used"] = [GroupHandle.from_dict(g) for g in data.get("groups_used", [])]
        data["pace"] = Pace(**data["pace"]) if data.get("pace") else None
        return cls(**data)


class StateStore:
    """``context["task_state_store"]`` for the record and the live status, in memory when absent.

    Task state can be written by anyone allowed to write the task's DAG (Airflow's public
    task-state route), so the runtime reads back only a pointer from it: the job id (`pointer`),
    which it follows only when that job belongs to the task (`TaskIdentity.check_owns`), into the
    job table. The record itself is written there first (`bind`): the job table is the record the
    runtime acts on; task state keeps a copy for the pages. No connection id is read from it: the
    connection is the operator's own ``skynomad_conn_id``.
    """

    def __init__(self, accessor: Any | None):
        self._accessor = accessor
        self._memory: dict[str, Any] = {}
        self._table = None
        self._task_key = ""
        self._owner = ""

    @classmethod
    def of(cls, context) -> StateStore:
        """The task's state store from an Airflow context; in memory when the context has none (tests, old Airflow)."""
        try:
            accessor = context["task_state_store"]
        except (KeyError, TypeError):
            accessor = None
        return cls(accessor)

    @property
    def durable(self) -> bool:
        """Whether what is saved outlives this process: a retry after a crash can reconnect to the job."""
        return self._accessor is not None

    def bind(self, table, task_key: str, owner: str) -> None:
        """Write every record to `table` (`jobs.table.JobTable`) before task state, as task `task_key`."""
        self._table, self._task_key, self._owner = table, task_key, owner

    def pointer(self):
        """The job id this task's state names (None: no job), unverified: a pointer to check, not a record."""
        data = self._get(RECORD_KEY)
        if data in (None, {}, ""):
            return None
        return data.get("job_id") if isinstance(data, dict) else data

    def save(self, record: JobRecord) -> int | None:
        """Write `record`; the job table's new version when bound (`bind`), else None."""
        version = None
        if self._table is not None:
            version = self._table.put(record, owner=self._owner, task_key=self._task_key)
        self._set(RECORD_KEY, record.to_dict())
        return version

    def save_status(self, status: dict) -> None:
        """Keep the live status where the pages read it while the job runs."""
        self._set(STATUS_KEY, status)

    def _get(self, key: str):
        return self._accessor.get(key) if self._accessor is not None else self._memory.get(key)

    def _set(self, key: str, value) -> None:
        if self._accessor is None:
            self._memory[key] = value
            return
        try:
            from airflow.sdk.execution_time.context import NEVER_EXPIRE
        except ImportError:  # pragma: no cover - stores without retention support
            NEVER_EXPIRE = timedelta.max
        try:
            self._accessor.set(key, value, retention=NEVER_EXPIRE)
        except TypeError:  # test doubles and accessors without `retention`
            self._accessor.set(key, value)
