"""An AWS account in moto as a user would set it up: a VPC with a subnet per zone, a security
group, an instance profile, a launch template and a checkpoint bucket per region.

Shared by the AWS adapter tests (tests/unit/clouds/aws/ and tests/integration/clouds/); `account(...)` works both inside
``moto.mock_aws()`` and against a moto server (pass ``endpoint_url``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import boto3

PROFILE = "skynomad-instance"
BUCKET = "ckpt-{region}"
SIGNING_SECRET = "deployment-signing-secret-for-tests-0123"  # the connection's checkpoint_signing_secret


@dataclass
class Account:
    regions: list[str]
    subnets: dict[str, str] = field(default_factory=dict)  # zone → subnet id
    security_groups: dict[str, list[str]] = field(default_factory=dict)
    templates: dict[str, str] = field(default_factory=dict)  # region → template id
    images: dict[str, str] = field(default_factory=dict)
    profile_arn: str = ""

    def cloud_options(self, **overrides) -> dict:
        options = {
            "launch_template": dict(self.templates),
            "subnets": dict(self.subnets),
            "security_group_ids": {r: list(g) for r, g in self.security_groups.items()},
            "instance_profile": PROFILE,
        }
        return {**options, **overrides}


def client(service: str, region: str, endpoint_url: str | None = None):
    return boto3.client(service, region_name=region, endpoint_url=endpoint_url)


# The first of moto's Amazon images (the same id in every region). Asked for by name: listing all of
# moto's ~1300 Amazon images takes a second or more per call, most of it building the answer.
AMAZON_IMAGE_NAME = "Windows_Server-2016-English-Nano-Base-2017.10.13"


def amazon_image(ec2) -> str:
    """An Amazon image in the client's region: AMAZON_IMAGE_NAME, else the first Amazon image listed."""
    named = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": [AMAZON_IMAGE_NAME]}])
    return (named["Images"] or ec2.describe_images(Owners=["amazon"])["Images"])[0]["ImageId"]


def account(zones: dict[str, list[str]], endpoint_url: str | None = None, buckets: bool = True) -> Account:
    """`zones`: ``{region: [zone, ...]}``; one subnet per zone, one template per region."""
    acct = Account(regions=list(zones))
    iam = client("iam", "us-east-1", endpoint_url)
    iam.create_role(
        RoleName=PROFILE,
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
                ],
            }
        ),
    )
    profile = iam.create_instance_profile(InstanceProfileName=PROFILE)["InstanceProfile"]
    iam.add_role_to_instance_profile(InstanceProfileName=PROFILE, RoleName=PROFILE)
    acct.profile_arn = profile["Arn"]
    for region, region_zones in zones.items():
        ec2 = client("ec2", region, endpoint_url)
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        for i, zone in enumerate(region_zones):
            subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=zone)["Subnet"]
            acct.subnets[zone] = subnet["SubnetId"]
        group = ec2.create_security_group(GroupName="skynomad", Description="skynomad jobs", VpcId=vpc)["GroupId"]
        acct.security_groups[region] = [group]
        image = amazon_image(ec2)
        acct.images[region] = image
        template = ec2.create_launch_template(
            LaunchTemplateName="skynomad-gpu", LaunchTemplateData={"ImageId": image, "KeyName": "ops"}
        )["LaunchTemplate"]["LaunchTemplateId"]
        acct.templates[region] = template
        if buckets:
            s3 = client("s3", region, endpoint_url)
            config = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
            s3.create_bucket(Bucket=BUCKET.format(region=region), **config)
    return acct


ROLE_ID = "AROAEXAMPLEINSTANCEROLE"  # a role's unique id, as IAM makes them


def instance_store(job: str, instance_id: str, role_id: str = ROLE_ID) -> str:
    """Where the agent on `instance_id` writes: ``<job>/<ROLE_ID>:<INSTANCE_ID>`` (its session's aws:userid)."""
    return f"{job}/{role_id}:{instance_id}"


def put_checkpoint(
    s3, bucket: str, job: str, seq: int, files: dict[str, bytes], manifest: bool = True, step=None, signed=True
):
    """Write a checkpoint the way the agent does (files, then MANIFEST.json, then progress.json),
    signed with the job's key from SIGNING_SECRET unless `signed` is False.

    `job`: the job id, or an instance store's path (`instance_store`); the key is the job's either way.
    """
    import hashlib

    from airflow_provider_skynomad.agent.signing import PROGRESS_CLAIM, derive_job_key, sign, sign_claim

    base = f"skynomad/{job}/checkpoints/{seq:010d}"
    for path, body in files.items():
        s3.put_object(Bucket=bucket, Key=f"{base}/files/{path}", Body=body)
    if manifest:
        doc = {
            "format": 1,
            "seq": seq,
            "step": step if step is not None else seq,
            "total_steps": 10,
            "files": [{"path": p, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for p, b in files.items()],
        }
        progress = {"step": doc["step"], "total_steps": 10, "seq": seq}
        if signed:
            key = derive_job_key(SIGNING_SECRET, job.split("/")[0])
            doc, progress = sign(doc, key), sign_claim(progress, key, PROGRESS_CLAIM)
        s3.put_object(Bucket=bucket, Key=f"{base}/MANIFEST.json", Body=json.dumps(doc).encode())
        s3.put_object(Bucket=bucket, Key=f"skynomad/{job}/progress.json", Body=json.dumps(progress).encode())


# -- EC2 Fleet on moto -------------------------------------------------------------------------
# moto creates a request fleet's spot requests at once and launches their instances running, with
# the tags of the fleet's launch template (as EC2 does). It has no DescribeFleetHistory: `FleetEvents`
# adds it, returning the events a test sets, and can hold the fleet's launches back or start them
# `pending` (EC2's "Not billed" state).


class FleetEvents:
    """moto's EC2 Fleet with a fleet history, and the answers a test chooses."""

    def __init__(self, monkeypatch):
        from moto.core.responses import ActionResult
        from moto.ec2.models.fleets import Fleet, FleetsBackend
        from moto.ec2.responses.fleets import Fleets

        self.records: list[dict] = []  # history records every fleet reports
        self.created: list = []  # moto's Fleet objects, in creation order
        self.deleted: list[tuple[str, bool]] = []  # (fleet id, TerminateInstances)
        self._monkeypatch = monkeypatch
        events = self

        def history(response):
            fleet_id = response._get_param("FleetId")
            return ActionResult(
                {"HistoryRecords": list(events.records), "FleetId": fleet_id, "StartTime": "2026-01-01T00:00:00Z"}
            )

        monkeypatch.setattr(Fleets, "describe_fleet_history", history, raising=False)
        init, delete = Fleet.__init__, FleetsBackend.delete_fleets

        def created(fleet, *args, **kwargs):
            init(fleet, *args, **kwargs)
            events.created.append(fleet)

        def deleted(backend, fleet_ids, terminate_instances):
            events.deleted += [(f, bool(terminate_instances)) for f in fleet_ids]
            fleets = backend.fleets
            empty = [f for f in fleet_ids if not fleets[f].spot_requests + fleets[f].on_demand_instances]
            for fleet_id in empty:  # moto's terminate of no instances fails ("No instances specified"); EC2's does not
                backend.fleets[fleet_id].state = "deleted"
            rest = delete(backend, [f for f in fleet_ids if f not in empty], terminate_instances)
            return [backend.fleets[f] for f in empty] + rest

        monkeypatch.setattr(Fleet, "__init__", created)
        monkeypatch.setattr(FleetsBackend, "delete_fleets", deleted)

    def no_capacity(self, description="There is no Spot capacity available that matches your request."):
        """The fleet launches nothing and its history says why."""
        from moto.ec2.models.fleets import Fleet

        self._monkeypatch.setattr(Fleet, "create_spot_requests", lambda fleet, weight: [])
        self.records.append(
            {
                "EventType": "service-error",
                "Timestamp": "2026-01-01T00:00:01Z",
                "EventInformation": {"EventSubType": "launchSpecUnusable", "EventDescription": description},
            }
        )

    def launches_pending(self):
        """Instances the fleet launches start `pending` (moto starts them `running`)."""
        from moto.ec2.models.instances import InstanceState
        from moto.ec2.models.spot_requests import SpotInstanceRequest

        launch = SpotInstanceRequest.launch_instance

        def pending(request):
            instance = launch(request)
            instance._state = InstanceState("pending", 0)
            return instance

        self._monkeypatch.setattr(SpotInstanceRequest, "launch_instance", pending)

    def hides_instances(self):
        """DescribeFleetInstances lists nothing (the fleet launched while the probe was not looking)."""
        from moto.ec2.models.fleets import FleetsBackend

        self._monkeypatch.setattr(FleetsBackend, "describe_fleet_instances", lambda backend, fleet_id: [])
