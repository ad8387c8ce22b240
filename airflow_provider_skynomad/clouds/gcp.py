"""GCP Compute Engine behind the Cloud interface, through the google provider's ComputeEngineHook.

- launch: one instance per gang member, named from the client token (``<token>-<i>``), inserted
  with a ``request_id`` derived from the token, so a retried launch finds or re-sends the same
  instances; spot members use ``provisioning_model=SPOT`` and are deleted on preemption; labels
  carry the request's tags, the client token, the job id and the gang size (metadata items carry
  the exact token and job id); the workload runs from the ``startup-script`` and powers the VM off
  at the end.
  A stock-out (``ZONE_RESOURCE_POOL_EXHAUSTED`` and friends) deletes what was created and raises
  CapacityError: a gang is all or nothing.
- find: an aggregated (all zones) instance list filtered on the client-token label, so a launch
  is found from its token alone; the members' names follow from the token and the gang size.
- poll: a spot member gone or TERMINATED by preemption → preempted; every member TERMINATED after
  the workload powered it off → succeeded.
- checkpoints: not managed here yet: `progress` is None and `copy_checkpoint` returns False (the
  workload is told its job id and keeps its checkpoint where it can reach it from any zone).
"""

from __future__ import annotations

import re
import shlex
import uuid
from typing import Any

from .base import CapacityError, Cloud, GroupHandle, GroupStatus, LaunchRequest, ProbeResult

CAPACITY_MARKERS = ("ZONE_RESOURCE_POOL_EXHAUSTED", "STOCKOUT", "does not have enough resources", "QUOTA_EXCEEDED")
TOKEN_LABEL = "skynomad-client-token"  # label values are lowercased and cut: the exact token is in metadata
JOB_LABEL = "skynomad-job-id"
SIZE_LABEL = "skynomad-gang-size"
CONSOLE_URL = "https://console.cloud.google.com/compute/instancesDetail/zones/{zone}/instances/{instance_id}"


def instance_name(token: str, index: int) -> str:
    """RFC 1035 name (lowercase, ≤ 63 chars) from the client token."""
    base = re.sub(r"[^a-z0-9-]", "-", token.lower()).strip("-")
    return f"{base[:55]}-{index}".lstrip("-0123456789") or f"sn-{index}"


def label_value(value: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "-", str(value).lower())[:63]


def region_of(zone: str) -> str:
    """us-central1-a → us-central1."""
    return zone.rsplit("-", 1)[0]


class GcpCloud(Cloud):
    """Compute Engine through ``ComputeEngineHook(gcp_conn_id)``.

    :param project_id: project owning the instances (default: the connection's project).
    :param source_instance_template: template with image, disks and network (required for real use).
    :param hook: a ready ComputeEngineHook (tests pass one with a fake client).
    :param probe_targets: what the probe DAG asks for (read from the connection by
        ``operators.probe.probe_targets``; listed here so it is an accepted ``cloud_options`` key).
    """

    name = "gcp"

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        project_id: str | None = None,
        source_instance_template: str | None = None,
        hook: Any | None = None,
        probe_targets: list[dict] | None = None,
    ) -> None:
        self.gcp_conn_id = gcp_conn_id
        self.project_id = project_id
        self.source_instance_template = source_instance_template
        self.probe_targets = list(probe_targets or [])
        self._hook = hook

    @property
    def hook(self):
        if self._hook is None:
            from airflow.providers.google.cloud.hooks.compute import ComputeEngineHook

            self._hook = ComputeEngineHook(gcp_conn_id=self.gcp_conn_id)
        return self._hook

    def find(self, client_token: str) -> GroupHandle | None:
        """The instances labelled with `client_token` in any zone of the project; never launches."""
        client = self.hook.get_compute_instance_client()
        pages = client.aggregated_list(
            request={
                "project": self.project_id or self.hook.project_id,
                "filter": f'labels.{TOKEN_LABEL} = "{label_value(client_token)}"',
            }
        )
        for scope, listed in pages:
            for instance in getattr(listed, "instances", None) or []:
                meta = _metadata(instance)
                if meta.get(TOKEN_LABEL, client_token) != client_token:
                    continue  # another token with the same label value
                labels = dict(getattr(instance, "labels", None) or {})
                zone = str(getattr(instance, "zone", "") or scope).rsplit("/", 1)[-1]
                size = int(labels.get(SIZE_LABEL) or 1)
                scheduling = getattr(instance, "scheduling", None)
                spot = str(getattr(scheduling, "provisioning_model", "")).upper().endswith("SPOT")
                return GroupHandle(
                    "gcp",
                    zone,
                    tuple(instance_name(client_token, i) for i in range(size)),
                    spot,
                    client_token,
                    job_id=meta.get(JOB_LABEL, labels.get(JOB_LABEL, "")),
                    region=region_of(zone),
                )
        return None

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
        return GroupHandle(
            "gcp",
            request.zone,
            tuple(names),
            request.spot,
            request.client_token,
            job_id=request.job_id,
            region=request.region or region_of(request.zone),
        )

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
        """None: this cloud does not read the job's checkpoints yet (and never guesses from run time)."""
        return None

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
        self,
        source_zone: str,
        target_zone: str,
        size_gb: float,
        *,
        job_id: str,
        tags: dict[str, str] | None = None,
    ) -> bool:
        """False: this cloud cannot move checkpoints yet, so nothing is copied and no egress is paid.

        The workload must keep its checkpoint where every zone can read it (e.g. a multi-region
        bucket, under its ``SKYNOMAD_JOB_ID``); no move is counted as a migration.
        """
        return False

    def console_url(self, handle: GroupHandle) -> str | None:
        """The Compute Engine console page of the group's first instance."""
        if not handle.instance_ids:
            return None
        url = CONSOLE_URL.format(zone=handle.zone, instance_id=handle.instance_ids[0])
        return f"{url}?project={self.project_id}" if self.project_id else url

    # -- helpers -------------------------------------------------------------------------------

    def _body(self, request: LaunchRequest, name: str) -> dict:
        script = ""
        if request.command:
            env = {**request.env, "SKYNOMAD_ZONE": request.zone, "SKYNOMAD_INSTANCE_COUNT": str(request.count)}
            if request.job_id:
                env["SKYNOMAD_JOB_ID"] = request.job_id
            exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
            script = f"#!/bin/bash\n{exports}{shlex.join(request.command)} && shutdown -h now\n"
        labels = {label_value(k): label_value(v) for k, v in request.tags.items()}
        labels |= {TOKEN_LABEL: label_value(request.client_token), SIZE_LABEL: str(request.count)}
        items = [
            {"key": "startup-script", "value": script},
            {"key": TOKEN_LABEL, "value": request.client_token},
        ]
        if request.job_id:
            labels[JOB_LABEL] = label_value(request.job_id)
            items.append({"key": JOB_LABEL, "value": request.job_id})
        body: dict[str, Any] = {
            "name": name,
            "machine_type": f"zones/{request.zone}/machineTypes/{request.instance_type}",
            "labels": labels,
            "metadata": {"items": items},
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


def _metadata(instance) -> dict[str, str]:
    """An instance's metadata items as a dict (proto objects and plain dicts alike)."""
    metadata = getattr(instance, "metadata", None)
    items = getattr(metadata, "items", None) if not isinstance(metadata, dict) else metadata.get("items")
    out = {}
    for item in items or []:
        key = item.get("key") if isinstance(item, dict) else getattr(item, "key", None)
        value = item.get("value") if isinstance(item, dict) else getattr(item, "value", None)
        if key is not None:
            out[str(key)] = str(value)
    return out
