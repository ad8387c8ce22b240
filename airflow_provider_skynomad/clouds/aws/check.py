"""What would stop an AWS launch, found without launching anything (`AwsCloud.check`).

Only describe/list calls: credentials (``sts:GetCallerIdentity``, which needs no permission),
the launch template or image of every region used, a subnet per zone that exists and sits in that
zone, the security groups, the instance type's offering in each zone, and the checkpoint bucket
of each region. Every problem names the setting to fix, e.g. ``cloud_options.subnets has no subnet
for us-east-1c``.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_provider_skynomad.clouds.base import Cloud


def _code(exc) -> str:
    return exc.response.get("Error", {}).get("Code", "") if hasattr(exc, "response") else type(exc).__name__


def check_aws(cloud: Cloud, zones: list[str] | None, instance_type: str | None) -> list[str]:
    from botocore.exceptions import BotoCoreError, ClientError

    from airflow_provider_skynomad.clouds.zones import aws_region_of as region_of

    zones = list(zones) if zones else cloud.configured_zones()
    regions = list(dict.fromkeys(region_of(z) for z in zones)) or cloud.configured_regions()
    problems: list[str] = []
    try:
        cloud.sts().get_caller_identity()
    except (ClientError, BotoCoreError) as exc:
        return [f"aws_conn_id {cloud.aws_conn_id!r}: the credentials do not work ({_code(exc)}: {exc})"]
    for region in regions:
        try:
            problems += _check_region(cloud, region, [z for z in zones if region_of(z) == region], instance_type)
        except (ClientError, BotoCoreError) as exc:
            problems.append(f"region {region}: cannot describe the launch settings ({_code(exc)}: {exc})")
    return problems


def _check_region(cloud: Cloud, region: str, zones: list[str], instance_type: str | None) -> list[str]:
    from botocore.exceptions import ClientError

    ec2 = cloud.ec2(region)
    problems = []
    template, version = cloud.template_for(region)
    image = cloud.image_for(region)
    if template:
        which = {"LaunchTemplateIds": [template]} if template.startswith("lt-") else {"LaunchTemplateNames": [template]}
        try:
            found = ec2.describe_launch_templates(**which)["LaunchTemplates"]
        except ClientError as exc:
            if "NotFound" not in _code(exc) and "Malformed" not in _code(exc):
                raise
            found = []
        if not found:
            problems.append(f"cloud_options.launch_template: {template} does not exist in {region}")
        elif version not in ("$Default", "$Latest"):
            try:
                ec2.describe_launch_template_versions(
                    LaunchTemplateId=found[0]["LaunchTemplateId"], Versions=[str(version)]
                )
            except ClientError:
                problems.append(
                    f"cloud_options.launch_template_version: {template} has no version {version} in {region}"
                )
    if image:
        try:
            images = ec2.describe_images(ImageIds=[image])["Images"]
        except ClientError as exc:
            if "NotFound" not in _code(exc) and "Malformed" not in _code(exc):
                raise
            images = []
        if not images:
            problems.append(f"cloud_options.image_id: {image} does not exist in {region}")
    if not template and not image:
        problems.append(
            f"cloud_options.launch_template or cloud_options.image_id: neither is set for {region} "
            "(give one, or a {region: value} map that includes it)"
        )
    problems += _check_subnets(cloud, ec2, region, zones)
    groups = cloud.security_groups_for(region)
    if groups:
        problems += _missing(
            lambda ids: [g["GroupId"] for g in ec2.describe_security_groups(GroupIds=ids)["SecurityGroups"]],
            groups,
            f"cloud_options.security_group_ids: {{}} does not exist in {region}",
        )
    if instance_type and zones:
        offered = {
            o["Location"]
            for o in ec2.describe_instance_type_offerings(
                LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
            )["InstanceTypeOfferings"]
        }
        problems += [f"instance type {instance_type} is not offered in {z}" for z in zones if z not in offered]
    problems += _check_bucket(cloud, region)
    return problems


def _check_subnets(cloud: Cloud, ec2, region: str, zones: list[str]) -> list[str]:
    if not cloud.subnets:
        return []  # the default VPC (or the launch template's network)
    problems = [f"cloud_options.subnets has no subnet for {z}" for z in zones if z not in cloud.subnets]
    wanted = {z: cloud.subnets[z] for z in zones if z in cloud.subnets}
    if not wanted:
        return problems
    from botocore.exceptions import ClientError

    found = {}
    for zone, subnet in wanted.items():  # one id at a time: a missing id fails the whole call
        try:
            described = ec2.describe_subnets(SubnetIds=[subnet])["Subnets"]
        except ClientError as exc:
            if "NotFound" not in _code(exc) and "Malformed" not in _code(exc):
                raise
            described = []
        if not described:
            problems.append(f"cloud_options.subnets.{zone}: {subnet} does not exist in {region}")
            continue
        found[zone] = described[0]["AvailabilityZone"]
        if found[zone] != zone:
            problems.append(f"cloud_options.subnets.{zone}: {subnet} is in {found[zone]}, not {zone}")
    return problems


def _missing(describe, ids: list[str], message: str) -> list[str]:
    """The ids `describe` does not return, each as `message`; one call per id after a failed batch."""
    from botocore.exceptions import ClientError

    try:
        present = set(describe(ids))
    except ClientError:
        present = set()
        for one in ids:
            with contextlib.suppress(ClientError):
                present |= set(describe([one]))
    return [message.format(i) for i in ids if i not in present]


def _check_bucket(cloud: Cloud, region: str) -> list[str]:
    from botocore.exceptions import ClientError

    if not cloud.store.configured:
        return ["checkpoint_bucket: not set on the skynomad connection (the agent keeps the job's checkpoints there)"]
    bucket = cloud.store.bucket(region)
    try:
        cloud.s3(region).head_bucket(Bucket=bucket)
    except ClientError as exc:
        code = _code(exc)
        what = "does not exist" if code in ("404", "NoSuchBucket", "NotFound") else f"is not reachable ({code})"
        return [f"checkpoint_bucket: bucket {bucket} (for {region}) {what}"]
    return []
