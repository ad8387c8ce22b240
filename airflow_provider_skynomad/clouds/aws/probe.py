"""The AWS request probe: an EC2 Fleet of type ``request`` whose instances carry the probe's tags
from creation, deleted (instances terminated) as soon as EC2 answers.

Why a fleet and not one-time spot requests: EC2 does not copy a spot request's tags to the
instance it launches, so an instance that won the race to the cancel carried no SkyNomad tag, and
the shipped IAM policy (which ends only what carries this deployment's tags) could not end it. A
fleet's instances take their tags from its launch template: "If the fleet type is maintain or
request, specify a resource type of fleet to tag the fleet. You cannot specify a resource type of
instance. To tag instances at launch, specify the tags in a launch template." (CreateFleet,
TagSpecifications). So each probe creates a small launch template of its own (the image, the
security groups, the probe's tags on instance and volume, and a probe id), a one-target-per-
instance ``request`` fleet over it, and deletes both at the end (docs/probing.md).

What EC2 answers, and how it is read (the fleet's instances, `DescribeFleetInstances`; its
history, `DescribeFleetHistory`):

- **capacity**: the fleet launched an instance. It is deleted at once with
  ``DeleteFleets(TerminateInstances=True)``. EC2's instance table says ``pending`` is "Not billed"
  and ``running`` is "Billed" (per second, 60 s minimum for Linux;
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html): an instance
  read as ``running`` before the delete is counted a billed minute, one read as ``pending`` is
  not, and one the probe first sees after the delete (launched in the race) is counted billed.
- **no capacity**: a history event that says so (its description names insufficient or
  unavailable capacity); the probe records what was launched (0 or fewer than asked).
- **refused**: any other error event (iamFleetRoleInvalid, spotFleetRequestConfigurationInvalid,
  spotInstanceCountLimitExceeded, ...): the zone fails, naming it.
- **no answer** in `WAIT_SECONDS`: the fleet is deleted and the zone fails (`ProbeNoAnswer`):
  "no answer" is not "no capacity".

A probe whose process dies between the create and the delete leaves its fleet and template behind
(their instances carry the probe's tags and are found like any instance). `leftovers` lists both by
their tags for `skynomad cleanup` (clouds/cleanup.py decides: this deployment's, ``purpose=probe``
exactly) and `end_leftover` deletes one, a fleet with its instances.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from airflow_provider_skynomad.clouds.aws.ec2 import MIN_BILLED_SECONDS
from airflow_provider_skynomad.clouds.aws.ec2 import tag_list as _tag_list
from airflow_provider_skynomad.clouds.base import PROBE_REQUEST, ProbeResult, Resource
from airflow_provider_skynomad.exceptions import ProbeNoAnswer as ProbeNoAnswer

PROBE_ID_TAG = "skynomad:probe-id"
"""A tag unique to one probe on its template's instances: finds what the fleet launched in the race."""
WAIT_SECONDS = 15.0  # EC2 answers a request fleet within seconds; longer is treated as no answer
POLL_SECONDS = 1.0
ENDED = {"shutting-down", "terminated"}
LIVE_FLEET_STATES = ("submitted", "active", "modifying")
"""Fleet states in which a fleet may still launch (EC2 keeps a deleted fleet listed for a while)."""
CAPACITY_WORDS = ("insufficientinstancecapacity", "insufficient capacity", "capacity-not-available", "no spot capacity")
"""A history event whose description contains one of these (lowercased) says "no capacity". EC2
documents the event sub-types, not the descriptions' wording: this match is an assumption."""


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
    """Ask a ``request`` fleet for `count` spot instances in `zone`, delete it as soon as EC2 answers.

    `available` counts the instances the fleet launched; `billed` those read ``running`` before
    the delete or first seen after it. `cloud` is the `AwsCloud` (its client, prices, settings).
    """
    client = cloud.ec2(region)
    probe_id = f"probe-{uuid.uuid4().hex[:12]}"
    tags = {**tags, PROBE_ID_TAG: probe_id}
    template = _create_template(cloud, client, region, probe_id, tags)
    seen: dict[str, str] = {}  # instance id -> its state at the last read before the delete
    answer = None
    try:
        fleet = client.create_fleet(**_fleet_args(cloud, zone, instance_type, count, template, tags, probe_id))
        fleet_id = fleet["FleetId"]
        since = datetime.now(UTC) - timedelta(minutes=1)
        try:
            deadline = clock() + wait_seconds
            while True:
                seen.update(_states(client, _fleet_instances(client, fleet_id)))
                if len(seen) >= count:
                    answer = "capacity"
                    break
                answer = _history_answer(client, fleet_id, since)
                if answer is not None or clock() >= deadline:
                    break
                sleep(poll_seconds)
            seen.update(_states(client, list(seen)))  # the states at the delete, as near as can be read
        finally:
            client.delete_fleets(FleetIds=[fleet_id], TerminateInstances=True)
            raced = _end_what_the_fleet_launched(client, zone, probe_id, set(seen))
    finally:
        client.delete_launch_template(LaunchTemplateId=template)
    if isinstance(answer, tuple):
        raise RuntimeError(f"{zone}: EC2 refused the probe's fleet ({answer[0]}): {answer[1]}")
    if answer is None:
        raise ProbeNoAnswer(f"{zone}: EC2 did not answer the probe's fleet within {wait_seconds:.0f} s; deleted it")
    billed = sum(1 for state in seen.values() if state == "running") + len(raced)
    spot = cloud._spot_price(client, zone, instance_type)
    return ProbeResult(
        zone,
        instance_type,
        count,
        min(len(seen) + len(raced), count),
        spot,
        cloud.on_demand_usd_per_hour(region, instance_type),
        usd=round(billed * spot * MIN_BILLED_SECONDS / 3600.0, 6),
        kind=PROBE_REQUEST,
        billed=billed,
    )


def _create_template(cloud, client, region: str, probe_id: str, tags: dict[str, str]) -> str:
    """The probe's own launch template: the image (configured, or the region's template's), the
    security groups, and the probe's tags on the instances and volumes it launches."""
    data: dict = {
        "ImageId": _image(cloud, region),
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": _tag_list(tags)},
            {"ResourceType": "volume", "Tags": _tag_list(tags)},
        ],
    }
    groups = cloud.security_groups_for(region)
    if groups:
        data["SecurityGroupIds"] = groups
    made = client.create_launch_template(
        LaunchTemplateName=f"skynomad-{probe_id}",
        LaunchTemplateData=data,
        TagSpecifications=[{"ResourceType": "launch-template", "Tags": _tag_list(tags)}],
    )
    return made["LaunchTemplate"]["LaunchTemplateId"]


def _fleet_args(cloud, zone: str, instance_type: str, count: int, template: str, tags: dict, token: str) -> dict:
    override: dict = {"InstanceType": instance_type}
    if cloud.subnets:
        if zone not in cloud.subnets:
            raise ValueError(f"aws cloud: cloud_options.subnets has no subnet for {zone}")
        override["SubnetId"] = cloud.subnets[zone]
    else:
        override["AvailabilityZone"] = zone
    return {
        "Type": "request",
        "ClientToken": token,
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {"LaunchTemplateId": template, "Version": "$Latest"},
                "Overrides": [override],
            }
        ],
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": int(count),
            "SpotTargetCapacity": int(count),
            "DefaultTargetCapacityType": "spot",
        },
        "SpotOptions": {"AllocationStrategy": "price-capacity-optimized", "InstanceInterruptionBehavior": "terminate"},
        "TagSpecifications": [{"ResourceType": "fleet", "Tags": _tag_list(tags)}],
    }


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


def _fleet_instances(client, fleet_id: str) -> list[str]:
    found = client.describe_fleet_instances(FleetId=fleet_id).get("ActiveInstances", [])
    return [i["InstanceId"] for i in found if i.get("InstanceId")]


def _states(client, ids: list[str]) -> dict[str, str]:
    if not ids:
        return {}
    reservations = client.describe_instances(InstanceIds=ids)["Reservations"]
    return {i["InstanceId"]: i["State"]["Name"] for r in reservations for i in r["Instances"]}


def _history_answer(client, fleet_id: str, since: datetime):
    """ "no capacity", ("sub-type", "description") for a refusal, or None (nothing said yet)."""
    records = client.describe_fleet_history(FleetId=fleet_id, StartTime=since).get("HistoryRecords", [])
    for record in records:
        info = record.get("EventInformation", {})
        sub, text = str(info.get("EventSubType", "")), str(info.get("EventDescription", ""))
        if any(word in text.lower() for word in CAPACITY_WORDS):
            return "no capacity"
        if record.get("EventType") in ("service-error", "error"):
            return (sub, text)
    return None


def _end_what_the_fleet_launched(client, zone: str, probe_id: str, known: set[str]) -> list[str]:
    """After the delete: every instance carrying this probe's id; terminate any still alive (their
    tags let the shipped IAM policy do it); return those the probe had not seen (the race)."""
    from botocore.exceptions import ClientError

    found = client.describe_instances(Filters=[{"Name": f"tag:{PROBE_ID_TAG}", "Values": [probe_id]}])
    states = {i["InstanceId"]: i["State"]["Name"] for r in found["Reservations"] for i in r["Instances"]}
    alive = sorted(i for i, state in states.items() if state not in ENDED)
    if alive:
        try:
            client.terminate_instances(InstanceIds=alive)
        except ClientError as exc:
            raise RuntimeError(
                f"{zone}: the probe's fleet left {', '.join(alive)} running and they could not be terminated "
                f"({exc.response.get('Error', {}).get('Code', exc)}); `skynomad cleanup` finds them by tag"
            ) from exc
    return sorted(set(states) - known)


def leftovers(client, region: str, tag_keys: list[str], wanted: dict[str, str]) -> list[Resource]:
    """The region's live fleets and launch templates carrying one of `tag_keys` and every `wanted`
    tag, matched here: DescribeFleets filters by state and type, not by tag, and an account holds
    few templates (moto's ``tag-key`` filter with several keys also wants all of them)."""
    found: list[Resource] = []
    pages = client.get_paginator("describe_fleets").paginate(
        Filters=[{"Name": "fleet-state", "Values": list(LIVE_FLEET_STATES)}]
    )
    for fleet in (f for page in pages for f in page.get("Fleets", [])):
        tags = {t["Key"]: t["Value"] for t in fleet.get("Tags", [])}
        if fleet.get("FleetState") not in LIVE_FLEET_STATES or not _tagged(tags, tag_keys, wanted):
            continue
        overrides = [o for c in fleet.get("LaunchTemplateConfigs", []) for o in c.get("Overrides", [])]
        zone = next((o["AvailabilityZone"] for o in overrides if o.get("AvailabilityZone")), "")
        detail = f"EC2 Fleet ({fleet.get('Type', '?')}) {fleet['FleetState']}"
        found.append(Resource("aws", "fleet", fleet["FleetId"], region, zone, _job_of(tags), tags, detail))
    for page in client.get_paginator("describe_launch_templates").paginate():
        for template in page.get("LaunchTemplates", []):
            tags = {t["Key"]: t["Value"] for t in template.get("Tags", [])}
            if not _tagged(tags, tag_keys, wanted):
                continue
            detail = f"launch template {template.get('LaunchTemplateName', '')}"
            found.append(
                Resource(
                    "aws", "launch_template", template["LaunchTemplateId"], region, "", _job_of(tags), tags, detail
                )
            )
    return found


def end_leftover(client, resource: Resource) -> None:
    """Delete a leftover fleet (terminating its instances) or launch template; one already gone is fine."""
    if resource.kind == "launch_template":
        client.delete_launch_template(LaunchTemplateId=resource.id)
        return
    answer = client.delete_fleets(FleetIds=[resource.id], TerminateInstances=True)
    for failed in answer.get("UnsuccessfulFleetDeletions", []):
        error = failed.get("Error", {})
        if error.get("Code") != "fleetIdDoesNotExist":
            raise RuntimeError(f"EC2 did not delete fleet {resource.id}: {error.get('Code')}: {error.get('Message')}")


def _tagged(tags: dict[str, str], keys: list[str], wanted: dict[str, str]) -> bool:
    return any(k in tags for k in keys) and all(tags.get(k) == v for k, v in wanted.items())


def _job_of(tags: dict[str, str]) -> str:
    return tags.get("skynomad-job", tags.get("skynomad:job-id", ""))
