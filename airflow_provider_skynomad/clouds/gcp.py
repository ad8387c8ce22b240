"""GCP Compute Engine behind the Cloud interface, through the google provider's ComputeEngineHook.

- launch: one instance per gang member, named from the client token (``<token>-<i>``), inserted
  with a ``request_id`` derived from the token, so a retried launch finds or re-sends the same
  instances; spot members use ``provisioning_model=SPOT`` and are deleted on preemption; labels
  carry the job; the workload runs from the ``startup-script`` and powers the VM off at the end.
  A stock-out (``ZONE_RESOURCE_POOL_EXHAUSTED`` and friends) deletes what was created and raises
  CapacityError: a gang is all or nothing.
- poll: a spot member gone or TERMINATED by preemption → preempted; every member TERMINATED after
  the workload powered it off → succeeded.
"""

from __future__ import annotations

import re
import shlex
import time
import uuid
from typing import Any

from .base import CapacityError, Cloud, GroupHandle, GroupStatus, LaunchRequest, ProbeResult

CAPACITY_MARKERS = ("ZONE_RESOURCE_POOL_EXHAUSTED", "STOCKOUT", "does not have enough resources", "QUOTA_EXCEEDED")


def instance_name(token: str, index: int) -> str:
    """RFC 1035 name (lowercase, ≤ 63 chars) from the client token."""
    base = re.sub(r"[^a-z0-9-]", "-", token.lower()).strip("-")
    return f"{base[:55]}-{index}".lstrip("-0123456789") or f"sn-{index}"


def label_value(value: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "-", str(value).lower())[:63]


class GcpCloud(Cloud):
    """Compute Engine through ``ComputeEngineHook(gcp_conn_id)``.

    :param project_id: project owning the instances (default: the connection's project).
    :param source_instance_template: template with image, disks and network (required for real use).
    :param hook: a ready ComputeEngineHook (tests pass one with a fake client).
    """

    name = "gcp"

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        project_id: str | None = None,
        source_instance_template: str | None = None,
        hook: Any | None = None,
        **_: Any,
    ) -> None:
        self.gcp_conn_id = gcp_conn_id
        self.project_id = project_id
        self.source_instance_template = source_instance_template
        self._hook = hook

    @property
    def hook(self):
        if self._hook is None:
            from airflow.providers.google.cloud.hooks.compute import ComputeEngineHook

            self._hook = ComputeEngineHook(gcp_conn_id=self.gcp_conn_id)
        return self._hook

    def now_hours(self) -> float:
        return time.time() / 3600.0

    def launch(self, request: LaunchRequest) -> GroupHandle:
        names = [instance_name(request.client_token, i) for i in range(request.count)]
        created: list[str] = []
        for i, name in enumerate(names):
            if self._get(request.zone, name) is not None:
                continue  # a retried launch: this member exists already
            try:
                self.hook.insert_instance(
                    body=self._body(request, name),
                    zone=request.zone,
                    project_id=self.project_id,
                    request_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{request.client_token}/{i}")),
                    source_instance_template=self.source_instance_template,
                )
                created.append(name)
            except Exception as exc:  # the hook raises AirflowException with the operation's errors
                if any(marker in str(exc) for marker in CAPACITY_MARKERS):
                    for done in created:
                        self._delete(request.zone, done)
                    raise CapacityError(f"{request.zone}: {exc}") from exc
                raise
        return GroupHandle("gcp", request.zone, tuple(names), request.spot, request.client_token)

    def poll(self, handle: GroupHandle) -> GroupStatus:
        members = [self._get(handle.zone, name) for name in handle.instance_ids]
        if any(m is None for m in members):
            return GroupStatus.PREEMPTED if handle.spot else GroupStatus.TERMINATED
        statuses = [str(getattr(m, "status", "")) for m in members]
        stopped = [s in ("STOPPING", "STOPPED", "TERMINATED", "SUSPENDED") for s in statuses]
        if any(stopped):
            preempted = any("preempt" in str(getattr(m, "status_message", "")).lower() for m in members)
            if handle.spot and (preempted or not all(stopped)):
                return GroupStatus.PREEMPTED
            return GroupStatus.SUCCEEDED if all(stopped) else GroupStatus.FAILED
        return GroupStatus.RUNNING if all(s == "RUNNING" for s in statuses) else GroupStatus.STARTING

    def terminate(self, handle: GroupHandle) -> None:
        for name in handle.instance_ids:
            self._delete(handle.zone, name)

    def progress(self, handle: GroupHandle) -> float | None:
        return None  # the trigger estimates progress from run time

    def probe(
        self, region: str, zone: str, instance_type: str, count: int, *, tags: dict[str, str] | None = None
    ) -> ProbeResult:
        token = f"probe-{uuid.uuid4().hex[:10]}"
        granted = 0
        for i in range(count):
            request = LaunchRequest(
                "gcp",
                region,
                zone,
                instance_type,
                1,
                True,
                f"{token}-{i}",
                tags={**(tags or {}), "skynomad-purpose": "probe"},
            )
            try:
                handle = self.launch(request)
            except CapacityError:
                break
            granted += 1
            self.terminate(handle)
        return ProbeResult(zone, instance_type, count, granted, 0.0, 0.0)

    def copy_checkpoint(
        self, source_zone: str, target_zone: str, size_gb: float, *, tags: dict[str, str] | None = None
    ) -> None:
        """Checkpoints live in a multi-region bucket the workload reads directly: nothing to move."""

    # -- helpers -------------------------------------------------------------------------------

    def _body(self, request: LaunchRequest, name: str) -> dict:
        script = ""
        if request.command:
            exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(request.env.items()))
            script = f"#!/bin/bash\n{exports}{shlex.join(request.command)} && shutdown -h now\n"
        body: dict[str, Any] = {
            "name": name,
            "machine_type": f"zones/{request.zone}/machineTypes/{request.instance_type}",
            "labels": {label_value(k): label_value(v) for k, v in request.tags.items()},
            "metadata": {"items": [{"key": "startup-script", "value": script}]},
        }
        if request.spot:
            body["scheduling"] = {"provisioning_model": "SPOT", "instance_termination_action": "DELETE"}
        return body

    def _get(self, zone: str, name: str):
        try:
            return self.hook.get_instance(resource_id=name, zone=zone, project_id=self.project_id)
        except Exception as exc:
            if "404" in str(exc) or "NotFound" in type(exc).__name__ or "not found" in str(exc).lower():
                return None
            raise

    def _delete(self, zone: str, name: str) -> None:
        try:
            self.hook.delete_instance(resource_id=name, zone=zone, project_id=self.project_id)
        except Exception as exc:
            if not ("404" in str(exc) or "NotFound" in type(exc).__name__ or "not found" in str(exc).lower()):
                raise
