"""The GCP request probe: insert a spot VM, watch its status, delete it the moment Compute Engine
has allocated it.

What Compute Engine's own words make of each answer (docs/probing.md):

- **capacity**: the instance reached ``STAGING`` — "All required resources have been allocated
  and the instance is being started" — or ``RUNNING`` (Instance.Status, Compute Engine API
  reference; ``PROVISIONING`` is only "Resources are being allocated for the instance"). It is
  deleted at once.
- **no capacity**: the insert fails with ``ZONE_RESOURCE_POOL_EXHAUSTED`` ("does not have enough
  resources available to fulfill the request") and creates nothing.
- **no answer** within `WAIT_SECONDS`: the VM (if any) is deleted and the zone fails
  (`ProbeNoAnswer`): "no answer" is not "no capacity".

Billing: "Instance uptime is measured as the number of seconds between when you start an
instance and when you stop an instance", "charged a minimum of 1 minute"
(https://cloud.google.com/compute/vm-instance-pricing). Whether a VM deleted in ``STAGING`` was
"started" is not stated there, so this is the *assumption* the probe counts by: deleted before it
was read ``RUNNING`` = not billed; read ``RUNNING`` before the delete = one billed minute.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from airflow_provider_skynomad.clouds.base import PROBE_REQUEST, LaunchRequest, ProbeResult
from airflow_provider_skynomad.clouds.gcp.compute import BILLING_MINIMUM_HOURS, CAPACITY_MARKERS
from airflow_provider_skynomad.clouds.gcp.compute import not_found as _not_found
from airflow_provider_skynomad.exceptions import ProbeNoAnswer as ProbeNoAnswer

SAW_CAPACITY = ("STAGING", "RUNNING")
BILLED = "RUNNING"
WAIT_SECONDS = 60.0  # an insert that has neither allocated nor failed in a minute is no answer
POLL_SECONDS = 1.0


def request_probe(
    cloud,
    region: str,
    zone: str,
    instance_type: str,
    count: int,
    tags: dict[str, str],
    *,
    wait_seconds: float = WAIT_SECONDS,
    poll_seconds: float = POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> ProbeResult:
    """Insert up to `count` spot VMs one by one until a stock-out; delete each as soon as it is
    allocated. `available` counts the VMs that reached STAGING or RUNNING; `billed` those read
    RUNNING before the delete. `cloud` is the `GcpCloud` (its hook, prices, settings)."""
    from airflow_provider_skynomad.clouds.gcp.boot import instance_body, instance_name

    token = f"probe-{uuid.uuid4().hex[:10]}"
    request = LaunchRequest("gcp", region, zone, instance_type, count, True, token, tags=tags)
    instances = cloud.hook.get_compute_instance_client()
    operations = cloud.hook.get_compute_client("ZoneOperationsClient")
    seen, billed = 0, 0
    for rank in range(count):
        name = instance_name(token, rank)
        operation = instances.insert(
            request={
                "instance_resource": instance_body(cloud, request, region, rank, name),
                "request_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{token}/{rank}")),
                "project": cloud.project,
                "zone": zone,
                "source_instance_template": cloud.template(region),
            }
        )
        status, error = None, None
        try:
            deadline = clock() + wait_seconds
            while True:
                status = _status(instances, cloud.project, zone, name)
                if status in SAW_CAPACITY:
                    break
                error = _error(operations, cloud.project, zone, operation.name)
                if error or clock() >= deadline:
                    break
                sleep(poll_seconds)
        finally:
            cloud._delete(zone, name)  # at once; a VM that never existed is not found, and that is fine
        if status in SAW_CAPACITY:
            seen += 1
            billed += status == BILLED
            continue
        if error and any(marker in error for marker in CAPACITY_MARKERS):
            break  # a stock-out: the insert created nothing
        if error:
            raise RuntimeError(f"{zone}: Compute Engine refused the probe's insert: {error}")
        raise ProbeNoAnswer(
            f"{zone}: Compute Engine neither allocated nor refused {name} within {wait_seconds:.0f} s "
            f"(last status {status or 'none'}); deleted it"
        )
    spot = float(cloud.spot_usd_per_hour.get(instance_type, 0.0))
    return ProbeResult(
        zone,
        instance_type,
        count,
        seen,
        spot,
        cloud.on_demand_usd_per_hour(region, instance_type),
        usd=billed * spot * BILLING_MINIMUM_HOURS,
        kind=PROBE_REQUEST,
        billed=billed,
    )


def _status(instances, project: str, zone: str, name: str) -> str | None:
    try:
        return str(instances.get(request={"project": project, "zone": zone, "instance": name}).status)
    except Exception as exc:
        if _not_found(exc):
            return None
        raise


def _error(operations, project: str, zone: str, operation: str) -> str | None:
    """The insert operation's errors as text ("CODE: message; ..."), or None while it has none."""
    found = operations.get(request={"project": project, "zone": zone, "operation": operation})
    errors = getattr(getattr(found, "error", None), "errors", None) or []
    return "; ".join(f"{e.code}: {e.message}" for e in errors) or None
