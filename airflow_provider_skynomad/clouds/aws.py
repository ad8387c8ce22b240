"""AWS EC2 behind the Cloud interface, through the amazon provider's EC2Hook (minimal but real).

- launch: one ``run_instances`` for the whole gang (``MinCount = MaxCount = N``: all or nothing),
  spot as one-time requests that terminate on interruption, tagged with the request's tags, the
  client token and the job id; ``ClientToken`` makes EC2 itself idempotent, and a lookup by the
  token tag first makes a retried launch return the group even across EC2's token window.
- find: the instances tagged with the client token, in the regions it may be in (``regions``).
- capacity errors (``InsufficientInstanceCapacity``, ``SpotMaxPriceTooLow``, ...) → CapacityError.
- poll: any member gone with ``Server.SpotInstanceTermination`` → preempted; all members shut
  down by themselves (the workload's last command is ``shutdown``) → succeeded.
- checkpoints live in one S3 bucket per region (``checkpoint_bucket`` with ``{region}``), each job
  under its own prefix ``<checkpoint_prefix>/<job_id>/`` (the workload is told the place in
  ``SKYNOMAD_CHECKPOINT_URI``); a move copies that prefix across regions; progress is read from
  ``progress.json`` there.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from .base import CapacityError, Cloud, GroupHandle, GroupStatus, LaunchRequest, ProbeResult

CAPACITY_CODES = {
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded",
    "InsufficientFreeAddressesInSubnet",
    "Unsupported",
}
TOKEN_TAG = "skynomad:client-token"
JOB_TAG = "skynomad:job-id"
CONSOLE_URL = "https://console.aws.amazon.com/ec2/home?region={region}#InstanceDetails:instanceId={instance_id}"


def region_of(zone: str) -> str:
    """us-east-1a → us-east-1."""
    return zone[:-1] if zone and zone[-1].isalpha() else zone


def user_data(command: tuple[str, ...], env: dict[str, str]) -> str:
    """Boot script: run the workload, then power off (→ 'succeeded' when every member did)."""
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
    return f"#!/bin/bash\n{exports}{shlex.join(command)} && shutdown -h now\n" if command else ""


class AwsCloud(Cloud):
    """EC2 through ``EC2Hook(aws_conn_id, region_name=...)``, one client per region.

    :param aws_conn_id: amazon provider connection.
    :param image_id: AMI to boot, one id or ``{region: ami}``.
    :param checkpoint_bucket: S3 bucket name pattern with ``{region}`` (optional).
    :param checkpoint_prefix: key prefix of the jobs' checkpoints in those buckets (a job's are
        under ``<checkpoint_prefix>/<job_id>/``).
    :param on_demand_usd_per_hour: ``{instance_type: price}`` for probe reports.
    :param regions: where `find` looks for a launch by its client token (besides the regions this
        object has launched in); default: the regions of `image_id` when it is a dict, else every
        region enabled for the account.
    :param probe_targets: what the probe DAG asks for (read from the connection by
        ``operators.probe.probe_targets``; listed here so it is an accepted ``cloud_options`` key).
    """

    name = "aws"

    def __init__(
        self,
        aws_conn_id: str | None = "aws_default",
        image_id: str | dict[str, str] | None = None,
        checkpoint_bucket: str | None = None,
        checkpoint_prefix: str = "skynomad",
        on_demand_usd_per_hour: dict[str, float] | None = None,
        regions: list[str] | None = None,
        probe_targets: list[dict] | None = None,
    ) -> None:
        self.aws_conn_id = aws_conn_id
        self.image_id = image_id
        self.checkpoint_bucket = checkpoint_bucket
        self.checkpoint_prefix = checkpoint_prefix.strip("/")
        self.on_demand_usd_per_hour = on_demand_usd_per_hour or {}
        self.regions = list(regions) if regions else None
        self.probe_targets = list(probe_targets or [])
        self._clients: dict[str, Any] = {}

    # -- clients -------------------------------------------------------------------------------

    def ec2(self, region: str):
        if region not in self._clients:
            self._clients[region] = self._ec2_hook(region).conn
        return self._clients[region]

    def _ec2_hook(self, region: str | None):
        from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook

        return EC2Hook(aws_conn_id=self.aws_conn_id, region_name=region, api_type="client_type")

    def _s3(self):
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        return S3Hook(aws_conn_id=self.aws_conn_id)

    def _image(self, region: str) -> str:
        image = self.image_id.get(region) if isinstance(self.image_id, dict) else self.image_id
        if not image:
            raise ValueError(f"aws cloud: no image_id for region {region}; set cloud_options.image_id")
        return image

    # -- Cloud interface -----------------------------------------------------------------------

    def find(self, client_token: str) -> GroupHandle | None:
        """The instances tagged with `client_token` (any state), searched region by region; never launches."""
        for region in self._find_regions():
            handle = self._find_in(self.ec2(region), client_token, region)
            if handle is not None:
                return handle
        return None

    def launch(self, request: LaunchRequest) -> GroupHandle:
        from botocore.exceptions import ClientError

        client = self.ec2(request.region)
        existing = self._find_in(client, request.client_token, request.region)
        if existing is not None:
            return existing
        tags = {**request.tags, TOKEN_TAG: request.client_token}
        if request.job_id:
            tags[JOB_TAG] = request.job_id
        args: dict[str, Any] = dict(
            ImageId=self._image(request.region),
            InstanceType=request.instance_type,
            MinCount=request.count,
            MaxCount=request.count,
            ClientToken=request.client_token,
            Placement={"AvailabilityZone": request.zone},
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
            InstanceInitiatedShutdownBehavior="terminate",
            UserData=user_data(request.command, {**request.env, **self._workload_env(request)}),
        )
        if request.spot:
            args["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        try:
            reservation = client.run_instances(**args)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in CAPACITY_CODES:
                raise CapacityError(f"{request.zone}: {code}") from exc
            raise
        ids = tuple(i["InstanceId"] for i in reservation["Instances"])
        return GroupHandle(
            "aws", request.zone, ids, request.spot, request.client_token, job_id=request.job_id, region=request.region
        )

    def poll(self, handle: GroupHandle) -> GroupStatus:
        instances = self._describe(handle)
        if len(instances) < len(handle.instance_ids):
            return GroupStatus.PREEMPTED if handle.spot else GroupStatus.TERMINATED
        states = [i["State"]["Name"] for i in instances]
        reasons = [i.get("StateReason", {}).get("Code", "") for i in instances]
        gone = [s in ("shutting-down", "terminated", "stopping", "stopped") for s in states]
        if any(gone):
            if any(r == "Server.SpotInstanceTermination" for r in reasons):
                return GroupStatus.PREEMPTED
            if all(gone) and all(r == "Client.InstanceInitiatedShutdown" for r in reasons):
                return GroupStatus.SUCCEEDED
            if any(r == "Client.UserInitiatedShutdown" for r in reasons):
                return GroupStatus.TERMINATED
            return GroupStatus.FAILED
        return GroupStatus.STARTING if "pending" in states else GroupStatus.RUNNING

    def terminate(self, handle: GroupHandle) -> None:
        from botocore.exceptions import ClientError

        try:
            self.ec2(self._region(handle)).terminate_instances(InstanceIds=list(handle.instance_ids))
        except ClientError as exc:
            if "NotFound" not in exc.response.get("Error", {}).get("Code", ""):
                raise

    def progress(self, handle: GroupHandle) -> float | None:
        """step / total_steps from ``<checkpoint_prefix>/<job_id>/progress.json`` in the group's region's bucket."""
        if not self.checkpoint_bucket or not handle.job_id:
            return None
        try:
            text = self._s3().read_key(self._key(handle.job_id, "progress.json"), self._bucket(self._region(handle)))
            data = json.loads(text)
            return min(1.0, max(0.0, float(data["step"]) / float(data["total_steps"])))
        except Exception:  # noqa: BLE001 - no progress file yet
            return None

    def probe(
        self, region: str, zone: str, instance_type: str, count: int, *, tags: dict[str, str] | None = None
    ) -> ProbeResult:
        from botocore.exceptions import ClientError

        probe_tags = [{"Key": k, "Value": v} for k, v in {**(tags or {}), "skynomad:purpose": "probe"}.items()]
        client = self.ec2(region)
        granted: list[str] = []
        try:
            reservation = client.run_instances(
                ImageId=self._image(region),
                InstanceType=instance_type,
                MinCount=1,
                MaxCount=count,
                Placement={"AvailabilityZone": zone},
                InstanceMarketOptions={"MarketType": "spot", "SpotOptions": {"SpotInstanceType": "one-time"}},
                TagSpecifications=[{"ResourceType": "instance", "Tags": probe_tags}],
            )
            granted = [i["InstanceId"] for i in reservation["Instances"]]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code", "") not in CAPACITY_CODES:
                raise
        finally:
            if granted:
                client.terminate_instances(InstanceIds=granted)
        return ProbeResult(
            zone,
            instance_type,
            count,
            len(granted),
            self._spot_price(client, zone, instance_type),
            float(self.on_demand_usd_per_hour.get(instance_type, 0.0)),
        )

    def copy_checkpoint(
        self,
        source_zone: str,
        target_zone: str,
        size_gb: float,
        *,
        job_id: str,
        tags: dict[str, str] | None = None,
    ) -> bool:
        """Copy the job's checkpoint (``<checkpoint_prefix>/<job_id>/``) between regional buckets.

        True only when the job had keys in the source region's bucket and they were copied.
        False without a bucket, within a region (its zones share the bucket: nothing moves, no
        egress), or when the job has no checkpoint yet. S3 bills the transfer to the bucket:
        `tags` are unused.
        """
        if not job_id:
            raise ValueError("copy_checkpoint: job_id is empty; checkpoints are kept per job")
        source, target = region_of(source_zone), region_of(target_zone)
        if not self.checkpoint_bucket or source == target:
            return False
        s3 = self._s3()
        keys = s3.list_keys(self._bucket(source), prefix=self._key(job_id, "")) or []
        for key in keys:
            s3.copy_object(key, key, source_bucket_name=self._bucket(source), dest_bucket_name=self._bucket(target))
        return bool(keys)

    def console_url(self, handle: GroupHandle) -> str | None:
        """The EC2 console page of the group's first instance."""
        if not handle.instance_ids:
            return None
        return CONSOLE_URL.format(region=self._region(handle), instance_id=handle.instance_ids[0])

    # -- helpers -------------------------------------------------------------------------------

    def _by_token(self, client, token: str) -> list[dict]:
        """Every instance tagged with the client token, in any state, in launch order."""
        pages = client.get_paginator("describe_instances").paginate(
            Filters=[{"Name": f"tag:{TOKEN_TAG}", "Values": [token]}]
        )
        instances = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
        return sorted(instances, key=lambda i: (i.get("AmiLaunchIndex", 0), i["InstanceId"]))

    def _find_in(self, client, token: str, region: str) -> GroupHandle | None:
        instances = self._by_token(client, token)
        if not instances:
            return None
        first = instances[0]
        tags = {t["Key"]: t["Value"] for t in first.get("Tags", [])}
        return GroupHandle(
            "aws",
            first["Placement"]["AvailabilityZone"],
            tuple(i["InstanceId"] for i in instances),
            first.get("InstanceLifecycle") == "spot",
            token,
            job_id=tags.get(JOB_TAG, ""),
            region=region,
        )

    def _find_regions(self) -> list[str]:
        """Regions this object launched in first, then the configured ones (default: every enabled one)."""
        if self.regions:
            configured = self.regions
        elif isinstance(self.image_id, dict) and self.image_id:
            configured = list(self.image_id)
        else:
            client = next(iter(self._clients.values()), None) or self._ec2_hook(None).conn  # the connection's region
            configured = sorted(r["RegionName"] for r in client.describe_regions()["Regions"])
        return list(dict.fromkeys([*self._clients, *configured]))

    def _workload_env(self, request: LaunchRequest) -> dict[str, str]:
        """What the workload is told about its job: its id and where its checkpoint lives."""
        env = {"SKYNOMAD_ZONE": request.zone, "SKYNOMAD_INSTANCE_COUNT": str(request.count)}
        if request.job_id:
            env["SKYNOMAD_JOB_ID"] = request.job_id
            if self.checkpoint_bucket:
                bucket = self._bucket(request.region)
                env["SKYNOMAD_CHECKPOINT_URI"] = f"s3://{bucket}/{self._key(request.job_id, '')}"
        return env

    def _region(self, handle: GroupHandle) -> str:
        return handle.region or region_of(handle.zone)

    def _describe(self, handle: GroupHandle) -> list[dict]:
        from botocore.exceptions import ClientError

        try:
            reservations = self.ec2(self._region(handle)).describe_instances(InstanceIds=list(handle.instance_ids))[
                "Reservations"
            ]
        except ClientError as exc:
            if "NotFound" in exc.response.get("Error", {}).get("Code", ""):
                return []
            raise
        return [i for r in reservations for i in r["Instances"]]

    def _spot_price(self, client, zone: str, instance_type: str) -> float:
        history = client.describe_spot_price_history(
            InstanceTypes=[instance_type], AvailabilityZone=zone, ProductDescriptions=["Linux/UNIX"], MaxResults=1
        ).get("SpotPriceHistory", [])
        return float(history[0]["SpotPrice"]) if history else 0.0

    def _bucket(self, region: str) -> str:
        return self.checkpoint_bucket.format(region=region)

    def _key(self, job_id: str, name: str) -> str:
        """``<checkpoint_prefix>/<job_id>/<name>`` (``name=""``: the job's prefix, with its slash)."""
        prefix = f"{self.checkpoint_prefix}/" if self.checkpoint_prefix else ""
        return f"{prefix}{job_id}/{name}"
