"""The cloud interface every backend implements (DESIGN §5).

Small on purpose: the planner decides, a cloud only does. Handles are plain data so they
can live in the task state store and in trigger kwargs, and a retried task can reconnect
to the group it launched instead of launching a second one.
"""

from __future__ import annotations

import abc
from dataclasses import asdict, dataclass, field
from enum import Enum


class GroupStatus(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    SUCCEEDED = "succeeded"  # the workload exited 0: the job is done
    FAILED = "failed"
    TERMINATED = "terminated"


class CapacityError(RuntimeError):
    """The zone had no capacity for the whole gang; nothing is left running or billed."""


@dataclass(frozen=True)
class LaunchRequest:
    """One gang launch; `client_token` makes a retried launch return the same group."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    count: int
    spot: bool
    client_token: str
    command: tuple[str, ...] = ()  # the workload; run on every member once the cold start is over
    env: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """Plain JSON data (a launch in flight is kept in task state so a retry can re-send it)."""
        data = asdict(self)
        data["command"] = list(self.command)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "LaunchRequest":
        return cls(**{**data, "command": tuple(data.get("command", ()))})


@dataclass(frozen=True)
class GroupHandle:
    """Identifies a launched gang; plain data (stored in task state and trigger kwargs)."""

    cloud: str
    zone: str
    instance_ids: tuple[str, ...]
    spot: bool
    client_token: str

    def to_dict(self) -> dict:
        data = asdict(self)
        data["instance_ids"] = list(self.instance_ids)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "GroupHandle":
        return cls(**{**data, "instance_ids": tuple(data["instance_ids"])})


@dataclass(frozen=True)
class ProbeResult:
    zone: str
    instance_type: str
    requested: int
    available: int
    spot_usd_per_hour: float
    on_demand_usd_per_hour: float


class Cloud(abc.ABC):
    """Launch, watch and stop gangs; probe capacity; move checkpoints between zones."""

    name: str

    @abc.abstractmethod
    def launch(self, request: LaunchRequest) -> GroupHandle:
        """Start the whole gang or nothing (raise CapacityError); idempotent on `client_token`."""

    @abc.abstractmethod
    def poll(self, handle: GroupHandle) -> GroupStatus:
        """Current status of the gang (preempted as soon as any member is)."""

    @abc.abstractmethod
    def terminate(self, handle: GroupHandle) -> None:
        """Stop and release every member; safe to call twice."""

    @abc.abstractmethod
    def progress(self, handle: GroupHandle) -> float | None:
        """Fraction of the workload done (0..1) per its latest checkpoint, None if unknown."""

    @abc.abstractmethod
    def probe(
        self, region: str, zone: str, instance_type: str, count: int, *, tags: dict[str, str] | None = None
    ) -> ProbeResult:
        """Ask for `count` spot instances, release what was granted at once, report how many.

        `tags` (e.g. the job's) go on whatever the probe creates, so its cost is attributed like a launch's.
        """

    @abc.abstractmethod
    def copy_checkpoint(
        self, source_zone: str, target_zone: str, size_gb: float, *, tags: dict[str, str] | None = None
    ) -> None:
        """Make the latest checkpoint available in `target_zone`; `tags` attribute the transfer where the cloud can."""
