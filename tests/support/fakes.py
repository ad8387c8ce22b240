"""A scripted in-memory cloud for the Airflow glue tests: the test sets the clock and the outcomes."""

from __future__ import annotations

import itertools
import threading

import pandas as pd

from airflow_provider_skynomad.clouds.base import (
    CapacityError,
    Cloud,
    GroupHandle,
    GroupStatus,
    LaunchRequest,
    ProbeResult,
)


class FakeCloud(Cloud):
    """Launch/poll/terminate bookkeeping with a clock the test moves.

    :param start: the timestamp of hour 0 (market rows are compared with it).
    :param full: zones where spot launches raise CapacityError.
    """

    name = "fake"
    _ids = itertools.count(1)

    def __init__(self, start: str | pd.Timestamp, full: set[str] | None = None, hours: float = 0.0):
        self.start = pd.Timestamp(start)
        self.hours = hours
        self.full = set(full or ())
        self.launches: list[LaunchRequest] = []
        self.groups: dict[str, GroupHandle] = {}  # client_token -> handle
        self.status: dict[str, GroupStatus] = {}  # client_token -> status
        self.terminated: list[str] = []
        self.copies: list[tuple[str, str, float]] = []
        self.copy_job_ids: list[str] = []  # the job_id of each copy, in the order of `copies`
        self.progress_fraction: float | None = 0.0
        self.probes: list[str] = []
        self.probe_kinds_asked: list[str] = []
        self.cost_tags: list[dict | None] = []  # tags passed with each probe and checkpoint copy
        self.probe_fail: set[str] = set()
        self.tick_hours = 0.0  # clock advance per now_hours() call (lets triggers see time pass)
        self._lock = threading.Lock()

    # clock
    def now_hours(self) -> float:
        with self._lock:
            self.hours += self.tick_hours
            return self.hours

    def now_timestamp(self) -> pd.Timestamp:
        return self.start + pd.Timedelta(hours=self.hours)

    # interface
    def launch(self, request: LaunchRequest) -> GroupHandle:
        if request.client_token in self.groups:
            return self.groups[request.client_token]
        self.launches.append(request)
        if request.spot and request.zone in self.full:
            raise CapacityError(f"{request.zone} full")
        ids = tuple(f"i-{next(self._ids)}" for _ in range(request.count))
        handle = GroupHandle(
            request.cloud,
            request.zone,
            ids,
            request.spot,
            request.client_token,
            job_id=request.job_id,
            region=request.region,
        )
        self.groups[request.client_token] = handle
        self.status[request.client_token] = GroupStatus.RUNNING
        return handle

    def poll(self, handle: GroupHandle) -> GroupStatus:
        return self.status.get(handle.client_token, GroupStatus.FAILED)

    def terminate(self, handle: GroupHandle) -> None:
        self.terminated.append(handle.client_token)
        if self.status.get(handle.client_token) in (GroupStatus.RUNNING, GroupStatus.STARTING):
            self.status[handle.client_token] = GroupStatus.TERMINATED

    def progress(self, handle: GroupHandle) -> float | None:
        return self.progress_fraction

    def probe(
        self, region: str, zone: str, instance_type: str, count: int, *, tags=None, kind: str = "launch"
    ) -> ProbeResult:
        if zone in self.probe_fail:
            raise RuntimeError(f"API error in {zone}")
        self.probes.append(zone)
        self.probe_kinds_asked.append(kind)
        self.cost_tags.append(tags)
        return ProbeResult(zone, instance_type, count, 0 if zone in self.full else count, 2.0, 10.0, kind=kind)

    def copy_checkpoint(self, source_zone: str, target_zone: str, size_gb: float, *, job_id: str, tags=None) -> bool:
        self.copies.append((source_zone, target_zone, size_gb))
        self.copy_job_ids.append(job_id)
        self.cost_tags.append(tags)
        return bool(self.progress_fraction)  # a checkpoint exists once the workload reported progress

    def find(self, client_token: str) -> GroupHandle | None:
        return self.groups.get(client_token)

    # helpers for tests
    def running(self) -> list[GroupHandle]:
        return [h for t, h in self.groups.items() if self.status[t] in (GroupStatus.RUNNING, GroupStatus.STARTING)]
