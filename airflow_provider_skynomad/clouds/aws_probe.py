"""The AWS request-and-cancel probe: ask EC2 for one-time spot requests, read their status, cancel.

Why it costs nothing in the common case (Amazon EC2 User Guide, quoted in docs/probing.md):

- A one-time request first waits in ``pending-evaluation``, then either holds (status
  ``capacity-not-available``, ``capacity-oversubscribed``, ``price-too-low``, ...; request
  ``open``, instance "Not applicable") or goes to ``pending-fulfillment`` (EC2 found capacity and
  is about to launch), then ``fulfilled`` (request ``active``, instance launched).
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-request-status.html
- Cancelled before fulfilment, a request ends ``canceled-before-fulfillment`` with instance state
  "Not applicable": no instance, nothing billed.
- The race is real: "Canceling a Spot Instance request does not terminate running Spot Instances
  associated with the request." (API_CancelSpotInstanceRequests). A request fulfilled before the
  cancel landed has an instance; it is terminated at once and counted at EC2's 60-second minimum
  (Linux is billed per second with a 60 s minimum; ``pending`` is "Not billed", ``running`` is
  "Billed": https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html).

A capacity answer is a status code, not an error, so the probe polls the requests briefly
(`WAIT_SECONDS`), counts those that saw capacity, cancels every one, then looks once more for
instances the race let through and terminates them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .base import PROBE_REQUEST, ProbeResult

SAW_CAPACITY = {"pending-fulfillment", "fulfilled"}
NO_CAPACITY = {
    "capacity-not-available",
    "capacity-oversubscribed",
    "price-too-low",
    "not-scheduled-yet",
    "launch-group-constraint",
    "az-group-constraint",
    "placement-group-constraint",
    "constraint-not-fulfillable",
}
FAILED = {"bad-parameters", "system-error"}
WAIT_SECONDS = 15.0  # EC2 evaluates a one-time request within seconds; longer is treated as no answer
POLL_SECONDS = 1.0


class ProbeNoAnswer(RuntimeError):
    """EC2 gave no capacity answer in time; the requests were cancelled and the zone is not recorded."""


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
    """Submit `count` one-time spot requests in `zone`, read whether EC2 found capacity, cancel them.

    `available` counts the requests that reached ``pending-fulfillment`` or ``fulfilled``; `billed`
    counts the instances EC2 launched before the cancel (each terminated at once and billed the
    60 s minimum). `cloud` is the `AwsCloud` (its client, prices and launch settings).
    """
    from .aws import MIN_BILLED_SECONDS

    client = cloud.ec2(region)
    answer = client.request_spot_instances(**_request_args(cloud, region, zone, instance_type, count, tags))
    ids = [r["SpotInstanceRequestId"] for r in answer["SpotInstanceRequests"]]
    seen: dict[str, dict] = {r["SpotInstanceRequestId"]: r for r in answer["SpotInstanceRequests"]}
    try:
        deadline = clock() + wait_seconds
        while not _all_answered(seen.values()) and clock() < deadline:
            sleep(poll_seconds)
            seen.update({r["SpotInstanceRequestId"]: r for r in _describe(client, ids)})
    finally:
        client.cancel_spot_instance_requests(SpotInstanceRequestIds=ids)
        after = {r["SpotInstanceRequestId"]: r for r in _describe(client, ids)}  # fulfilled in the race?
        instances = sorted({r["InstanceId"] for r in [*seen.values(), *after.values()] if r.get("InstanceId")})
        if instances:
            _terminate(client, zone, instances)
    failed = [r for r in seen.values() if _code(r) in FAILED]
    if failed:
        raise RuntimeError(f"{zone}: EC2 refused the spot request ({_code(failed[0])}): {_message(failed[0])}")
    if not _all_answered(seen.values()):
        raise ProbeNoAnswer(f"{zone}: EC2 did not answer the spot request within {wait_seconds:.0f} s; cancelled it")
    saw = sum(1 for r in seen.values() if _code(r) in SAW_CAPACITY or r.get("InstanceId"))
    spot = cloud._spot_price(client, zone, instance_type)
    return ProbeResult(
        zone,
        instance_type,
        count,
        saw,
        spot,
        cloud.on_demand_usd_per_hour(region, instance_type),
        usd=round(len(instances) * spot * MIN_BILLED_SECONDS / 3600.0, 6),
        kind=PROBE_REQUEST,
        billed=len(instances),
    )


def _request_args(cloud, region: str, zone: str, instance_type: str, count: int, tags: dict[str, str]) -> dict:
    """A one-time request for `count` instances in `zone`: the image (configured, or the launch
    template's: a spot request's launch specification cannot name a template), the zone's subnet
    or placement, the security groups; the probe's tags on the request itself."""
    from .aws import _tag_list

    spec: dict = {"ImageId": _image(cloud, region), "InstanceType": instance_type}
    if cloud.subnets:
        if zone not in cloud.subnets:
            raise ValueError(f"aws cloud: cloud_options.subnets has no subnet for {zone}")
        spec["SubnetId"] = cloud.subnets[zone]
    else:
        spec["Placement"] = {"AvailabilityZone": zone}
    groups = cloud.security_groups_for(region)
    if groups:
        spec["SecurityGroupIds"] = groups
    args = {
        "InstanceCount": int(count),
        "Type": "one-time",
        "InstanceInterruptionBehavior": "terminate",
        "LaunchSpecification": spec,
    }
    if tags:
        args["TagSpecifications"] = [{"ResourceType": "spot-instances-request", "Tags": _tag_list(tags)}]
    return args


def _image(cloud, region: str) -> str:
    image = cloud.image_for(region)
    if image:
        return image
    template, version = cloud.template_for(region)
    if template:
        key = "LaunchTemplateId" if template.startswith("lt-") else "LaunchTemplateName"
        versions = cloud.ec2(region).describe_launch_template_versions(**{key: template}, Versions=[version])
        for found in versions.get("LaunchTemplateVersions", []):
            image = found.get("LaunchTemplateData", {}).get("ImageId")
            if image:
                return image
    raise ValueError(
        f"aws cloud: a request probe in {region} needs an image: set cloud_options.image_id, give the launch "
        "template an image, or set probe_kind to launch"
    )


def _terminate(client, zone: str, instances: list[str]) -> None:
    """Terminate what EC2 launched before the cancel. EC2 does not copy a spot request's tags to
    its instances, so these carry none: a refusal is raised naming them, never left unsaid."""
    from botocore.exceptions import ClientError

    try:
        client.terminate_instances(InstanceIds=instances)
    except ClientError as exc:
        raise RuntimeError(
            f"{zone}: EC2 launched {', '.join(instances)} before the probe's cancel and they could not be "
            f"terminated ({exc.response.get('Error', {}).get('Code', exc)}); terminate them by hand"
        ) from exc


def _describe(client, ids: list[str]) -> list[dict]:
    """The requests' current state; [] once EC2 (or a test double) no longer lists them."""
    from botocore.exceptions import ClientError

    try:
        return client.describe_spot_instance_requests(SpotInstanceRequestIds=ids)["SpotInstanceRequests"]
    except ClientError as exc:
        if "NotFound" in exc.response.get("Error", {}).get("Code", ""):
            return []
        raise


def _code(request: dict) -> str:
    return str(request.get("Status", {}).get("Code", ""))


def _message(request: dict) -> str:
    return str(request.get("Status", {}).get("Message", ""))


def _all_answered(requests) -> bool:
    return all(_code(r) in SAW_CAPACITY | NO_CAPACITY | FAILED or r.get("InstanceId") for r in requests)
