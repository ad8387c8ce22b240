"""Several clouds behind one Cloud: a job may plan over AWS and GCP zones at once.

Every call goes to the cloud that owns the zone: a launch, a group, a probe or a checkpoint copy
by its zone's name (`zones.cloud_of_zone`), so a handle routes the same whichever cloud object
made it.

A checkpoint copy between two clouds is not a call either cloud offers: the newest complete
checkpoint is read from the source cloud's store and written to the target's (the agent's
store format, docs/agent.md), and egress is what the planner priced it at: the source cloud's
internet egress (market/egress.py).
"""

from __future__ import annotations

from airflow_provider_skynomad.clouds.base import (
    PROBE_KINDS,
    PROBE_LAUNCH,
    Cloud,
    GroupHandle,
    GroupStatus,
    LaunchRequest,
    ProbeResult,
    Resource,
    Signal,
)
from airflow_provider_skynomad.clouds.zones import cloud_of_zone


class MultiCloud(Cloud):
    """Route each call to one of `clouds` (``{"aws": AwsCloud(...), "gcp": GcpCloud(...)}``)."""

    name = "multi"
    probe_kinds = PROBE_KINDS  # each zone's own cloud checks the kind

    def __init__(self, clouds: dict[str, Cloud]) -> None:
        if not clouds:
            raise ValueError("MultiCloud needs at least one cloud")
        self.clouds = dict(clouds)

    def now_hours(self) -> float:
        """One clock for the job: the first cloud's (real clouds all run on the wall clock)."""
        return next(iter(self.clouds.values())).now_hours()

    def hours_at_wall(self, wall: float) -> float | None:
        return next(iter(self.clouds.values())).hours_at_wall(wall)

    def now_timestamp(self):
        return next(iter(self.clouds.values())).now_timestamp()

    def cloud(self, name: str) -> Cloud:
        try:
            return self.clouds[name]
        except KeyError:
            has = ", ".join(sorted(self.clouds))
            raise ValueError(f"no {name!r} cloud in this connection (it has {has})") from None

    def for_zone(self, zone: str) -> Cloud:
        return self.cloud(cloud_of_zone(zone))

    # -- routed calls ---------------------------------------------------------------------------

    def find(self, client_token: str) -> GroupHandle | None:
        for cloud in self.clouds.values():
            handle = cloud.find(client_token)
            if handle is not None:
                return handle
        return None

    def launch(self, request: LaunchRequest) -> GroupHandle:
        return self.for_zone(request.zone).launch(request)

    def poll(self, handle: GroupHandle) -> GroupStatus:
        return self.for_zone(handle.zone).poll(handle)

    def terminate(self, handle: GroupHandle) -> None:
        self.for_zone(handle.zone).terminate(handle)

    def progress(self, handle: GroupHandle) -> float | None:
        return self.for_zone(handle.zone).progress(handle)

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
        """The zone's own cloud probes it, and refuses a kind it cannot do."""
        return self.for_zone(zone).probe(region, zone, instance_type, count, tags=tags, kind=kind)

    def signals(self, region: str, zones: list[str], instance_type: str, count: int) -> list[Signal]:
        if not zones:
            return []
        return self.for_zone(zones[0]).signals(region, zones, instance_type, count)

    def copy_checkpoint(
        self,
        source_zone: str,
        target_zone: str,
        size_gb: float,
        *,
        job_id: str,
        tags: dict[str, str] | None = None,
    ) -> bool:
        source, target = self.for_zone(source_zone), self.for_zone(target_zone)
        if source is target:
            return source.copy_checkpoint(source_zone, target_zone, size_gb, job_id=job_id, tags=tags)
        from_store = source.checkpoint_store(job_id, source_zone)
        to_store = target.checkpoint_store(job_id, target_zone)
        if from_store is None or to_store is None:
            return False  # one side keeps no checkpoints: the job restarts honestly
        from airflow_provider_skynomad.agent.transfer import copy_latest

        return copy_latest(from_store, to_store)

    def checkpoint_store(self, job_id: str, zone: str) -> str | None:
        return self.for_zone(zone).checkpoint_store(job_id, zone)

    def check(self, zones: list[str] | None = None, instance_type: str | None = None) -> list[str]:
        if zones is None:
            return [p for cloud in self.clouds.values() for p in cloud.check(None, instance_type)]
        problems: list[str] = []
        by_cloud: dict[str, list[str]] = {}
        for zone in zones:
            try:
                by_cloud.setdefault(cloud_of_zone(zone), []).append(zone)
            except ValueError as exc:
                problems.append(str(exc))
        for name, its_zones in by_cloud.items():
            if name not in self.clouds:
                problems.append(
                    f"zones {', '.join(its_zones)} are {name} zones, but this connection has no {name} cloud "
                    f"(it has {', '.join(sorted(self.clouds))})"
                )
                continue
            problems += self.clouds[name].check(its_zones, instance_type)
        return problems

    def unusable_zones(self, zones: list[str]) -> dict[str, str]:
        unusable: dict[str, str] = {}
        by_cloud: dict[str, list[str]] = {}
        for zone in zones:
            try:
                by_cloud.setdefault(cloud_of_zone(zone), []).append(zone)
            except ValueError:
                unusable[zone] = "neither an AWS nor a GCP zone name"
        for name, its_zones in by_cloud.items():
            if name in self.clouds:
                unusable |= self.clouds[name].unusable_zones(its_zones)
            else:
                unusable |= {
                    zone: f"an {name.upper()} zone, and this connection has no {name} cloud" for zone in its_zones
                }
        return unusable

    def resources(self, tags: dict[str, str] | None = None) -> list[Resource]:
        return [r for cloud in self.clouds.values() for r in cloud.resources(tags)]

    def deployments(self) -> dict[str, str]:
        return {name: cloud.deployments()[cloud.name] for name, cloud in self.clouds.items()}

    def release(self, resource: Resource) -> None:
        cloud = self.for_zone(resource.zone) if resource.zone else self.cloud(resource.cloud)
        cloud.release(resource)

    def bill(self, tags: dict[str, str] | None = None) -> dict | None:
        return None  # each cloud bills on its own; no cloud here can add them up

    def output_location(self, job_id: str, zone: str) -> str | None:
        return self.for_zone(zone).output_location(job_id, zone)

    def console_url(self, handle: GroupHandle) -> str | None:
        return self.for_zone(handle.zone).console_url(handle)

    def failure_detail(self, handle: GroupHandle) -> str | None:
        return self.for_zone(handle.zone).failure_detail(handle)
