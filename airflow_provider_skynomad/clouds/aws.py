"""AWS EC2 behind the Cloud interface, through the amazon provider's EC2Hook (minimal but real).

- launch: one ``run_instances`` for the whole gang (``MinCount = MaxCount = N``: all or nothing),
  spot as one-time requests that terminate on interruption, tagged with the job and the client
  token; ``ClientToken`` makes EC2 itself idempotent, and a lookup by the token tag first makes a
  retried launch return the running group even across EC2's token window.
- capacity errors (``InsufficientInstanceCapacity``, ``SpotMaxPriceTooLow``, ...) → CapacityError.
- poll: any member gone with ``Server.SpotInstanceTermination`` → preempted; all members shut
  down by themselves (the workload's last command is ``shutdown``) → succeeded.
- checkpoints live in one S3 bucket per region (``checkpoint_bucket`` with ``{region}``); a move
  copies the job's prefix across; progress is read from ``progress.json`` there.
"""

from __future__ import annotations

import json
import shlex
import time
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
    :param checkpoint_prefix: key prefix of the job's checkpoint in those buckets.
    :param on_demand_usd_per_hour: ``{instance_type: price}`` for probe reports.
    """

    name = "aws"

    def __init__(
        self,
        aws_conn_id: str | None = "aws_default",
        image_id: str | dict[str, str] | None = None,
        checkpoint_bucket: str | None = None,
        checkpoint_prefix: str = "skynomad",
        on_demand_usd_per_hour: dict[str, float] | None = None,
        **_: Any,
    ) -> None:
        self.aws_conn_id = aws_conn_id
        self.image_id = image_id
        self.checkpoint_bucket = checkpoint_bucket
        self.checkpoint_prefix = checkpoint_prefix.strip("/")
        self.on_demand_usd_per_hour = on_demand_usd_per_hour or {}
        self._clients: dict[str, Any] = {}

    # -- clients -------------------------------------------------------------------------------

    def ec2(self, region: str):
        if region not in self._clients:
            from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook

            self._clients[region] = EC2Hook(
                aws_conn_id=self.aws_conn_id, region_name=region, api_type="client_type"
            ).conn
        return self._clients[region]

    def _s3(self):
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        return S3Hook(aws_conn_id=self.aws_conn_id)

    def _image(self, region: str) -> str:
        image = self.image_id.get(region) if isinstance(self.image_id, dict) else self.image_id
        if not image:
            raise ValueError(f"aws cloud: no image_id for region {region}; set cloud_options.image_id")
        return image

    # -- Cloud interface -----------------------------------------------------------------------

    def now_hours(self) -> float:
        return time.time() / 3600.0

    def launch(self, request: LaunchRequest) -> GroupHandle:
        from botocore.exceptions import ClientError

        client = self.ec2(request.region)
        existing = self._by_token(client, request.client_token)
        if existing:
            return GroupHandle("aws", request.zone, tuple(existing), request.spot, request.client_token)
        tags = [{"Key": k, "Value": v} for k, v in {**request.tags, TOKEN_TAG: request.client_token}.items()]
        args: dict[str, Any] = dict(
            ImageId=self._image(request.region),
            InstanceType=request.instance_type,
            MinCount=request.count,
            MaxCount=request.count,
            ClientToken=request.client_token,
            Placement={"AvailabilityZone": request.zone},
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
            InstanceInitiatedShutdownBehavior="terminate",
            UserData=user_data(request.command, request.env),
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
        return GroupHandle("aws", request.zone, ids, request.spot, request.client_token)

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
            self.ec2(region_of(handle.zone)).terminate_instances(InstanceIds=list(handle.instance_ids))
        except ClientError as exc:
            if "NotFound" not in exc.response.get("Error", {}).get("Code", ""):
                raise

    def progress(self, handle: GroupHandle) -> float | None:
        if not self.checkpoint_bucket:
            return None
        try:
            text = self._s3().read_key(self._key("progress.json"), self._bucket(region_of(handle.zone)))
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
        self, source_zone: str, target_zone: str, size_gb: float, *, tags: dict[str, str] | None = None
    ) -> None:
        """Copy the checkpoint between regional buckets (S3 bills the transfer to the bucket: `tags` are unused)."""
        source, target = region_of(source_zone), region_of(target_zone)
        if not self.checkpoint_bucket or source == target:
            return  # one bucket per region: zones of a region share it
        s3 = self._s3()
        for key in s3.list_keys(self._bucket(source), prefix=self.checkpoint_prefix + "/") or []:
            s3.copy_object(key, key, source_bucket_name=self._bucket(source), dest_bucket_name=self._bucket(target))

    # -- helpers -------------------------------------------------------------------------------

    def _by_token(self, client, token: str) -> list[str]:
        reservations = client.describe_instances(
            Filters=[
                {"Name": f"tag:{TOKEN_TAG}", "Values": [token]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )["Reservations"]
        return [i["InstanceId"] for r in reservations for i in r["Instances"]]

    def _describe(self, handle: GroupHandle) -> list[dict]:
        from botocore.exceptions import ClientError

        try:
            reservations = self.ec2(region_of(handle.zone)).describe_instances(InstanceIds=list(handle.instance_ids))[
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

    def _key(self, name: str) -> str:
        return f"{self.checkpoint_prefix}/{name}"
