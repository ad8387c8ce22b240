"""The cloud interface every backend implements.

Small on purpose: the planner decides, a cloud only does. Handles are plain data so they
can live in the task state store and in trigger kwargs, and a retried task can reconnect
to the group it launched instead of launching a second one.

Checkpoints belong to a *job* (``job_id``), never to a zone alone: two runs of one DAG in one
zone must not resume each other's work. Capabilities that not every cloud has (a bill, a place
where the final output can be read, a console page, the workload's last error lines) are
declared here with a "not available" default, so callers never probe with ``getattr``.
"""

from __future__ import annotations

import abc
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import Enum

from airflow_provider_skynomad.exceptions import CapacityError as CapacityError


class GroupStatus(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    SUCCEEDED = "succeeded"  # the workload exited 0: the job is done
    FAILED = "failed"
    TERMINATED = "terminated"


class Checkpointed(float):
    """What `Cloud.progress` answers: the share of the work (0..1) the newest completed checkpoint
    proves, which this *is* (a float, so every caller that wants only the share reads it as one),
    and when that checkpoint was written on the cloud's clock (`at_hours`, comparable with
    `Cloud.now_hours`; None when its store does not say).

    The pace is measured between checkpoints; a checkpoint dated by whoever happened to read it (a
    look delayed by a busy triggerer, a hand-off) makes a workload at its declared pace look faster.
    `at_hours` is what the agent stamped, which the reader still judges (jobs/watch.py): a stamp in
    the future or before the group launched is not believed.
    """

    __slots__ = ("at_hours",)

    def __new__(cls, fraction: float, at_hours: float | None = None) -> Checkpointed:
        made = super().__new__(cls, fraction)
        made.at_hours = at_hours
        return made

    def __repr__(self) -> str:
        return f"Checkpointed({float(self)!r}, at_hours={self.at_hours!r})"


def wall_hours(wall: float) -> float:
    """A real cloud's clock (`Cloud.now_hours`) at wall time `wall`, seconds since the Unix epoch."""
    return wall / 3600.0


def checkpointed(
    fraction: float, stamp: object, on_clock: Callable[[float], float | None] = wall_hours
) -> Checkpointed:
    """`fraction` dated by its store's `updated_at` `stamp` (ISO 8601 with its zone, as the agent
    writes it), put on a cloud's clock by `on_clock`; undated when the stamp is absent or not a time."""
    at = None
    if isinstance(stamp, str):
        try:
            moment = datetime.fromisoformat(stamp)
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None:
            at = on_clock(moment.timestamp())
    return Checkpointed(fraction, at if at is not None and math.isfinite(at) else None)


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
    job_id: str = ""  # whose checkpoints the group restores from and writes to

    def to_dict(self) -> dict:
        """Plain JSON data (a launch in flight is kept in task state so a retry can re-send it)."""
        data = asdict(self)
        data["command"] = list(self.command)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> LaunchRequest:
        return cls(**{**data, "command": tuple(data.get("command", ()))})


@dataclass(frozen=True)
class GroupHandle:
    """Identifies a launched gang; plain data (stored in task state and trigger kwargs)."""

    cloud: str
    zone: str
    instance_ids: tuple[str, ...]
    spot: bool
    client_token: str
    job_id: str = ""
    region: str = ""

    def to_dict(self) -> dict:
        data = asdict(self)
        data["instance_ids"] = list(self.instance_ids)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> GroupHandle:
        return cls(**{**data, "instance_ids": tuple(data["instance_ids"])})


PROBE_LAUNCH = "launch"
"""A probe that launches what it asks for and terminates what was granted: every granted instance
is billed the cloud's minimum (docs/probing.md)."""
PROBE_REQUEST = "request"
"""A probe that asks for capacity and gives it back the moment the cloud has allocated it, before
the instance runs (AWS: a request fleet deleted while its instances are ``pending``; GCP: a VM
deleted at ``STAGING``): billed only for an instance read running before the delete, or seen only
after it (docs/probing.md)."""
PROBE_KINDS = (PROBE_LAUNCH, PROBE_REQUEST)
REQUEST_FULFILLED_SHARE = 0.1
"""The prior race share: of the request probes that saw capacity, the share planned (and
simulated) as billed a minute because the instance ran before the delete landed. Neither cloud
documents the odds; the probe planner (probing/plan.py `race_shares`) replaces this with each
cloud's measured share as probes add up. Here, beside the kind, because the simulated cloud bills
by it too (clouds sit below probing)."""


@dataclass(frozen=True)
class ProbeResult:
    """What one probe saw, how (`kind`), and what it really cost.

    `usd` is the bill: the instances that ran (`billed`; None: every granted one, as a launch
    probe bills) for the cloud's minimum billed time each. A request probe that was cancelled
    before fulfilment saw `available` instances and billed none.
    """

    zone: str
    instance_type: str
    requested: int
    available: int
    spot_usd_per_hour: float
    on_demand_usd_per_hour: float
    usd: float = 0.0
    kind: str = PROBE_LAUNCH
    billed: int | None = None

    @property
    def billed_instances(self) -> int:
        """How many instances the cloud bills for this probe."""
        return self.available if self.billed is None else self.billed


def check_probe_kind(cloud: str, kind: str, supported: tuple[str, ...]) -> None:
    """Refuse a probe kind the cloud cannot do, naming the ones it can."""
    if kind not in supported:
        raise ValueError(
            f"the {cloud} cloud cannot probe by {kind!r}; it can: {', '.join(supported)} (docs/probing.md)"
        )


@dataclass(frozen=True)
class Signal:
    """A free market signal (no instance launched): a spot placement score or a spot price.

    `kind` is ``placement_score`` (AWS: 1-10, how likely a request of `count` succeeds) or
    ``spot_price`` (USD per instance-hour); stored beside the market table by the probe DAG.
    """

    observed_at: object  # a UTC pandas Timestamp
    cloud: str
    region: str
    zone: str
    instance_type: str
    kind: str
    value: float
    count: int = 1


@dataclass(frozen=True)
class Resource:
    """Something a job or a probe left in a cloud, found by its tags/labels (`skynomad cleanup`).

    `kind` is ``instance``, ``spot_request``, ``checkpoint`` (a job's checkpoint prefix), or
    ``fleet`` / ``launch_template`` (an AWS request probe's, left when the probe died);
    `job_id` is the ``skynomad-job`` tag ("" for probes); `detail` is plain words for a listing.
    """

    cloud: str
    kind: str
    id: str
    region: str
    zone: str
    job_id: str
    tags: dict[str, str] = field(default_factory=dict)
    detail: str = ""


class Cloud(abc.ABC):
    """Launch, watch and stop gangs; probe capacity; move a job's checkpoints between zones."""

    name: str
    probe_kinds: tuple[str, ...] = (PROBE_LAUNCH,)
    """The probe kinds this cloud can do (`PROBE_REQUEST` only where the cloud has a request that
    can be cancelled before anything runs)."""

    # -- clock: real clouds run on the wall clock; the simulated cloud replays a trace faster ----

    def now_hours(self) -> float:
        """The cloud's clock in hours (any fixed origin: callers only take differences)."""
        return wall_hours(time.time())

    def hours_at_wall(self, wall: float) -> float | None:
        """`now_hours` at wall time `wall` (seconds since the Unix epoch): how a time an instance
        stamped (a checkpoint's `updated_at`) is put on this cloud's clock; None when it cannot be."""
        return wall_hours(wall)

    def checkpointed(self, fraction: float, stamp: object) -> Checkpointed:
        """`fraction` dated by its store's `updated_at` `stamp` on this cloud's clock (`checkpointed`)."""
        return checkpointed(fraction, stamp, self.hours_at_wall)

    def now_timestamp(self):
        """The cloud's clock as a UTC pandas Timestamp (market rows are stamped and cut with it)."""
        import pandas as pd

        return pd.Timestamp.now(tz="UTC")

    # -- optional capabilities: the defaults say "this cloud cannot" --------------------------

    def bill(self, tags: dict[str, str] | None = None) -> dict | None:
        """The cloud's own bill for what carries `tags`, or None when the cloud cannot bill here."""
        return None

    def output_location(self, job_id: str, zone: str) -> str | None:
        """Where a finished job's final files can be read (a path or URL), None when unknown."""
        return None

    def console_url(self, handle: GroupHandle) -> str | None:
        """A page in the cloud's console for the group, None when the cloud has none."""
        return None

    def failure_detail(self, handle: GroupHandle) -> str | None:
        """The workload's last error lines when its group failed, None when unavailable."""
        return None

    def checkpoint_store(self, job_id: str, zone: str):
        """The job's checkpoints as seen from `zone`: an `agent.store.CheckpointStore` opened with
        this cloud's own credentials (the Airflow connection's, not the machine's), None when this
        cloud keeps no checkpoints. Lets a copy cross clouds (clouds/multi.py)."""
        return None

    def check(self, zones: list[str] | None = None, instance_type: str | None = None) -> list[str]:
        """Problems that would stop a launch in `zones` (None: every configured zone), found without
        launching anything: credentials, images/templates, subnets, buckets. Each problem names the
        setting to fix; [] means ready. The runner calls it before a job's first launch and
        `test_connection` calls it for the connection form."""
        return []

    def unusable_zones(self, zones: list[str]) -> dict[str, str]:
        """The zones of `zones` this cloud cannot launch in, each with why in plain words, told from
        its settings alone (no API call): a market table may hold rows of zones that no cloud of this
        connection has, and a job that did not list its zones leaves them out."""
        return {}

    def signals(self, region: str, zones: list[str], instance_type: str, count: int) -> list[Signal]:
        """Free market signals for `zones` (no instance launched); [] where the cloud has none."""
        return []

    def resources(self, tags: dict[str, str] | None = None) -> list[Resource]:
        """Instances, spot requests and checkpoints carrying SkyNomad's tags (and `tags`), any job."""
        return []

    def deployments(self) -> dict[str, str]:
        """This deployment's id per cloud (``cloud_options.deployment_id``): every resource the cloud
        creates carries it, and `skynomad cleanup` touches no resource carrying another."""
        from airflow_provider_skynomad.clouds.tags import DEFAULT_DEPLOYMENT

        return {self.name: getattr(self, "deployment_id", None) or DEFAULT_DEPLOYMENT}

    def release(self, resource: Resource) -> None:
        """End one `Resource` (terminate, cancel, delete); safe to call twice."""
        raise NotImplementedError(f"the {self.name} cloud cannot release {resource.kind} {resource.id}")

    # -- the interface ---------------------------------------------------------------------------

    @abc.abstractmethod
    def find(self, client_token: str) -> GroupHandle | None:
        """The group a launch with `client_token` started, without launching anything (None: none)."""

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
        """Fraction of the job done (0..1) per the latest checkpoint its workload *completed* where
        the group runs; None when there is none. Never an estimate from run time. Clouds whose
        store says when that checkpoint was written answer a `Checkpointed` carrying it."""

    @abc.abstractmethod
    def probe(
        self,
        region: str,
        zone: str,
        instance_type: str,
        count: int,
        *,
        tags: dict[str, str] | None = None,
        kind: str = PROBE_LAUNCH,
    ) -> ProbeResult:
        """Ask for `count` spot instances, release what was granted at once, report how many.

        `tags` (e.g. the job's) go on whatever the probe creates, so its cost is attributed like a launch's.
        `kind` is one of `probe_kinds` (`PROBE_LAUNCH` or `PROBE_REQUEST`); another raises ValueError.
        """

    @abc.abstractmethod
    def copy_checkpoint(
        self,
        source_zone: str,
        target_zone: str,
        size_gb: float,
        *,
        job_id: str,
        tags: dict[str, str] | None = None,
    ) -> bool:
        """Make the job's latest checkpoint available in `target_zone`.

        Returns whether a checkpoint existed and was copied (only then is egress paid and a
        migration counted). `tags` attribute the transfer where the cloud can.
        """
