"""A cloud in front of another cloud: the base of the retrying and the fault-injecting wrappers.

Both wrappers change what happens around an API call and nothing else, so every call to the
cloud's API goes through one method, `api`, which a wrapper overrides; a call that is not an API
call (the clock, a console URL, the pre-launch check) goes straight to `inner`. Attributes the
`Cloud` interface does not define (``state_dir``, ``to_config``, ``launches`` ...) are `inner`'s,
so code written for one backend keeps working through any number of wrappers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_provider_skynomad.clouds.base import PROBE_LAUNCH, Cloud, GroupHandle, LaunchRequest, ProbeResult

T = TypeVar("T")


@dataclass(frozen=True)
class ApiCall:
    """What a wrapper may want to know of a call: its method, the zone and mode it is about,
    its arguments, and a few words for a log line or an error ("a status poll of the group in ...")."""

    method: str
    zone: str | None
    spot: bool | None
    args: tuple
    words: str


class WrappedCloud(Cloud):
    """`inner`, with every API call passed through `api` (which, here, just makes it)."""

    def __init__(self, inner: Cloud):
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (unpickling): do not recurse
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def api(self, call: ApiCall, make: Callable[[], T]) -> T:
        return make()

    def now_hours(self) -> float:
        return self.inner.now_hours()

    def hours_at_wall(self, wall: float) -> float | None:
        return self.inner.hours_at_wall(wall)

    def now_timestamp(self):
        return self.inner.now_timestamp()

    def output_location(self, job_id: str, zone: str) -> str | None:
        return self.inner.output_location(job_id, zone)

    def console_url(self, handle: GroupHandle) -> str | None:
        return self.inner.console_url(handle)

    def failure_detail(self, handle: GroupHandle) -> str | None:
        return self.inner.failure_detail(handle)

    def checkpoint_store(self, job_id: str, zone: str):
        return self.inner.checkpoint_store(job_id, zone)

    def check(self, zones=None, instance_type=None) -> list[str]:
        return self.inner.check(zones, instance_type)

    def unusable_zones(self, zones: list[str]) -> dict[str, str]:
        return self.inner.unusable_zones(zones)

    def find(self, client_token: str) -> GroupHandle | None:
        call = ApiCall("find", None, None, (client_token,), f"a lookup of launch {client_token}")
        return self.api(call, lambda: self.inner.find(client_token))

    def launch(self, request: LaunchRequest) -> GroupHandle:
        # A wrapper that repeats this call repeats the same request, so the same client token: a
        # repeat of a launch that went through unanswered returns its group, never a second one.
        words = f"{'spot' if request.spot else 'on-demand'} launch in {request.zone}"
        call = ApiCall("launch", request.zone, request.spot, (request,), words)
        return self.api(call, lambda: self.inner.launch(request))

    def poll(self, handle: GroupHandle):
        call = ApiCall("poll", handle.zone, handle.spot, (handle,), f"a status poll of the group in {handle.zone}")
        return self.api(call, lambda: self.inner.poll(handle))

    def terminate(self, handle: GroupHandle) -> None:
        call = ApiCall("terminate", handle.zone, handle.spot, (handle,), f"terminate of the group in {handle.zone}")
        return self.api(call, lambda: self.inner.terminate(handle))

    def progress(self, handle: GroupHandle) -> float | None:
        call = ApiCall("progress", handle.zone, handle.spot, (handle,), f"a progress read in {handle.zone}")
        return self.api(call, lambda: self.inner.progress(handle))

    @property
    def probe_kinds(self) -> tuple[str, ...]:
        return self.inner.probe_kinds

    def probe(
        self, region: str, zone: str, instance_type: str, count: int, *, tags=None, kind: str = PROBE_LAUNCH
    ) -> ProbeResult:
        call = ApiCall("probe", zone, True, (region, zone), f"a probe of {zone}")
        return self.api(call, lambda: self.inner.probe(region, zone, instance_type, count, tags=tags, kind=kind))

    def copy_checkpoint(self, source_zone: str, target_zone: str, size_gb: float, *, job_id: str, tags=None) -> bool:
        words = f"a checkpoint copy {source_zone} → {target_zone}"
        call = ApiCall("copy_checkpoint", target_zone, None, (source_zone, target_zone), words)
        return self.api(
            call, lambda: self.inner.copy_checkpoint(source_zone, target_zone, size_gb, job_id=job_id, tags=tags)
        )

    def bill(self, tags=None):
        return self.api(ApiCall("bill", None, None, (tags,), "a bill read"), lambda: self.inner.bill(tags))

    def signals(self, region: str, zones: list[str], instance_type: str, count: int):
        call = ApiCall("signals", None, None, (region,), f"market signals of {region}")
        return self.api(call, lambda: self.inner.signals(region, zones, instance_type, count))

    def resources(self, tags=None):
        call = ApiCall("resources", None, None, (tags,), "a resource listing")
        return self.api(call, lambda: self.inner.resources(tags))

    def deployments(self) -> dict[str, str]:
        return self.inner.deployments()

    def release(self, resource) -> None:
        call = ApiCall("release", None, None, (resource,), f"release of {resource.kind} {resource.id}")
        return self.api(call, lambda: self.inner.release(resource))
