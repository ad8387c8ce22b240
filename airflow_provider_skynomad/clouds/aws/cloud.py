"""AWS EC2 behind the Cloud interface, launched the way AWS users run it, on the amazon provider's hooks.

- launch: one ``run_instances`` for the whole gang (``MinCount = MaxCount = N``: all or nothing)
  from the region's launch template (id or name + version) or image, in the zone's subnet
  (``subnets: {zone: subnet-id}``) with the security groups and the IAM instance profile; spot as
  one-time requests that terminate on interruption. Instances, their volumes and spot requests
  carry the request's tags (job, DAG, run, task, try), the client token and the job id.
  ``ClientToken`` makes EC2 itself idempotent, and a lookup by the token tag first makes a
  retried launch return the group even after EC2's token window.
- user data: a boot script (clouds/aws/boot.py) that runs the workload under the agent and powers
  off; no credential ever goes into it. The agent writes under its own instance store,
  ``<job prefix>/<ROLE_ID>:<INSTANCE_ID>/`` (its instance-profile session's ``aws:userid``: the
  instance policy lets it write nowhere else), and restores from the store that held the job's
  newest checkpoint at launch (reads reach the whole deployment's prefix).
- poll: ``Server.SpotInstanceTermination`` (or ``Server.SpotInstanceShutdown``) on any member →
  preempted, whatever a run record says; members that shut down by themselves → the agent's run
  record in rank 0's instance store (``runs/<client token>.json``, counted only if it verifies
  with the job's key) says finished, failed or preempted; a user's terminate → terminated;
  anything else (``Server.InternalError``, ...) → failed.
- signing: a launch needs ``checkpoint_signing_secret``; progress, run records, checkpoints and
  output count only when they verify with the job's key derived from it (agent/signing.py), from
  whichever instance store they are read.
- checkpoints (clouds/aws/store.py): one bucket per region (``checkpoint_bucket`` with
  ``{region}``; a move copies the newest checkpoint the agent would restore, and a launch brings
  it into its region's bucket before the instances boot, both with the deployment's rights) or
  one bucket for all.
- probe: by ``launch`` (asks for the gang size, terminates what it got at once; EC2 bills at least
  60 s per instance) or by ``request`` (an EC2 Fleet of type request deleted as soon as EC2
  answers: clouds/aws/probe.py, docs/probing.md); on-demand prices come from the price table (market/prices.py).
- signals: spot placement scores and spot price history, both free.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_skynomad.agent.identity import AWS_USERID
from airflow_provider_skynomad.clouds.aws.boot import boot_script
from airflow_provider_skynomad.clouds.aws.ec2 import MIN_BILLED_SECONDS
from airflow_provider_skynomad.clouds.aws.ec2 import tag_list as _tag_list
from airflow_provider_skynomad.clouds.aws.store import JobStore
from airflow_provider_skynomad.clouds.base import (
    PROBE_LAUNCH,
    PROBE_REQUEST,
    CapacityError,
    Cloud,
    GroupHandle,
    GroupStatus,
    LaunchRequest,
    ProbeResult,
    Resource,
    Signal,
    check_probe_kind,
)
from airflow_provider_skynomad.clouds.boot_env import job_checkpoint_key, signing_secret_problem
from airflow_provider_skynomad.clouds.tags import DEPLOYMENT, OWNER_RECORD, check_deployment_id, owner_record
from airflow_provider_skynomad.clouds.zones import aws_region_of as region_of

CAPACITY_CODES = {
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded",
    "InsufficientFreeAddressesInSubnet",
    "Unsupported",
}
PREEMPTION_REASONS = {"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"}
SELF_SHUTDOWN = "Client.InstanceInitiatedShutdown"
USER_SHUTDOWN = "Client.UserInitiatedShutdown"
TOKEN_TAG = "skynomad:client-token"
JOB_TAG = "skynomad:job-id"
PURPOSE_TAG = "skynomad:purpose"
SKYNOMAD_TAG_KEYS = ["skynomad-job", TOKEN_TAG, JOB_TAG, PURPOSE_TAG, DEPLOYMENT]
CONSOLE_URL = "https://console.aws.amazon.com/ec2/home?region={region}#InstanceDetails:instanceId={instance_id}"


def _per_region(value, region: str):
    return value.get(region) if isinstance(value, dict) else value


def _retrying(hook):
    """The botocore config for a hook's client: the connection's own, with client-side retries
    (adaptive mode) unless the connection's ``config_kwargs`` set ``retries`` themselves."""
    from airflow_provider_skynomad.clouds.retry import botocore_retry_config

    return botocore_retry_config(hook.conn_config.botocore_config)


class AwsCloud(Cloud):
    """EC2 and S3 through the amazon provider's ``EC2Hook`` / ``S3Hook``, one client per region.

    :param aws_conn_id: amazon provider connection (its extra's ``endpoint_url`` points elsewhere, e.g. moto).
    :param launch_template: launch template id (``lt-...``) or name, one for all regions or
        ``{region: template}``; it usually carries the image, key pair, disks and network settings.
    :param launch_template_version: ``$Default`` (default), ``$Latest`` or a version number.
    :param image_id: AMI, one id or ``{region: ami}``; without a launch template it is required, with
        one it overrides the template's image.
    :param subnets: ``{zone: subnet-id}``, a subnet of your VPC in each zone the job may use (without
        it: the default VPC, or the template's network).
    :param security_group_ids: security group ids, one list for all regions or ``{region: [ids]}``.
    :param instance_profile: IAM instance profile name or ARN: the instances' own credentials (the
        agent reads and writes the job's checkpoint prefix with them; see docs/clouds.md).
    :param checkpoint_bucket: S3 bucket, ``{region}`` filled in (one per region, e.g.
        ``acme-ckpt-{region}``) or one name for every region.
    :param checkpoint_prefix: key prefix of the jobs' checkpoints (a job's under ``<prefix>/<job_id>/``).
    :param regions: where `find` and `resources` look (besides the regions this object has launched
        in); default: the regions of the settings above, else every region enabled for the account.
    :param agent_python: the python on the instance image that has the package (``python3``).
    :param agent_work_dir: local directory on the instance for the restored checkpoint.
    :param setup_commands: shell lines the boot script runs before the agent (e.g. a ``pip install``).
    :param price_table: a price table file (``skynomad prices refresh --output``) instead of the
        refreshed or shipped one.
    :param probe_targets: what the probe DAG asks for (read by ``operators.probe.probe_targets``).
    :param probe_kind: how the probe DAG probes this cloud's markets: ``request`` (default: an EC2
        Fleet of type request whose instances carry the probe's tags, deleted as soon as EC2
        answers; billed only for an instance read running before the delete) or ``launch``
        (instances launched and terminated, each billed the 60 s minimum); read by the probe DAG,
        docs/probing.md.
    :param deployment_id: this Airflow's id (lowercase letters, digits, '-'; default ``default``): a
        tag on every instance, volume, spot request and probe, and in every job's owner record
        (clouds/tags.py). `skynomad cleanup` touches nothing tagged with another; give each Airflow
        that shares the account its own.
    :param checkpoint_signing_secret: the deployment's secret each job's key is derived from
        (docs/agent.md, "Checkpoint signatures"): required to launch a job, since its instances'
        checkpoints, progress and run records count only when they verify with that key.
    """

    name = "aws"
    probe_kinds = (PROBE_LAUNCH, PROBE_REQUEST)

    def __init__(
        self,
        aws_conn_id: str | None = "aws_default",
        launch_template: str | dict[str, str] | None = None,
        launch_template_version: str | int = "$Default",
        image_id: str | dict[str, str] | None = None,
        subnets: dict[str, str] | None = None,
        security_group_ids: list[str] | dict[str, list[str]] | None = None,
        instance_profile: str | None = None,
        checkpoint_bucket: str | None = None,
        checkpoint_prefix: str = "skynomad",
        regions: list[str] | None = None,
        agent_python: str = "python3",
        agent_work_dir: str = "/var/lib/skynomad",
        setup_commands: list[str] | None = None,
        price_table: str | None = None,
        probe_targets: list[dict] | None = None,
        probe_kind: str = "request",
        deployment_id: str | None = None,
        checkpoint_signing_secret: str | None = None,
    ) -> None:
        self._signing_secret = checkpoint_signing_secret  # never logged; only per-job keys leave this object
        self.aws_conn_id = aws_conn_id
        self.deployment_id = check_deployment_id(deployment_id)
        self.launch_template = launch_template
        self.launch_template_version = str(launch_template_version)
        self.image_id = image_id
        self.subnets = dict(subnets or {})
        self.security_group_ids = security_group_ids
        self.instance_profile = instance_profile
        self.checkpoint_bucket = checkpoint_bucket
        self.checkpoint_prefix = checkpoint_prefix.strip("/")
        self.regions = list(regions) if regions else None
        self.agent_python = agent_python
        self.agent_work_dir = agent_work_dir
        self.setup_commands = tuple(setup_commands or ())
        self.price_table = price_table
        self.probe_targets = list(probe_targets or [])
        check_probe_kind(self.name, probe_kind, self.probe_kinds)
        self.probe_kind = probe_kind
        self._clients: dict[str, Any] = {}
        self._s3_clients: dict[str, Any] = {}
        self._instance_stores: dict[tuple[str, str, str], str] = {}
        self._prices = None

    # -- clients and settings ------------------------------------------------------------------

    def ec2(self, region: str):
        if region not in self._clients:
            self._clients[region] = self._ec2_hook(region).conn
        return self._clients[region]

    def s3(self, region: str):
        if region not in self._s3_clients:
            from airflow.providers.amazon.aws.hooks.s3 import S3Hook

            config = _retrying(S3Hook(aws_conn_id=self.aws_conn_id, region_name=region))
            self._s3_clients[region] = S3Hook(
                aws_conn_id=self.aws_conn_id, region_name=region, config=config
            ).get_conn()
        return self._s3_clients[region]

    def sts(self):
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

        return AwsBaseHook(aws_conn_id=self.aws_conn_id, client_type="sts").conn

    def _ec2_hook(self, region: str | None):
        from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook

        config = _retrying(EC2Hook(aws_conn_id=self.aws_conn_id, region_name=region, api_type="client_type"))
        return EC2Hook(aws_conn_id=self.aws_conn_id, region_name=region, api_type="client_type", config=config)

    @property
    def store(self) -> JobStore:
        return JobStore(self.s3, self.checkpoint_bucket, self.checkpoint_prefix, key_of=self.checkpoint_key)

    def template_for(self, region: str) -> tuple[str | None, str]:
        return _per_region(self.launch_template, region), self.launch_template_version

    def image_for(self, region: str) -> str | None:
        return _per_region(self.image_id, region)

    def security_groups_for(self, region: str) -> list[str]:
        return list(_per_region(self.security_group_ids, region) or [])

    def configured_zones(self) -> list[str]:
        return list(self.subnets)

    def configured_regions(self) -> list[str]:
        regions = list(self.regions or [])
        for value in (self.launch_template, self.image_id, self.security_group_ids):
            if isinstance(value, dict):
                regions += list(value)
        regions += [region_of(z) for z in self.subnets]
        return list(dict.fromkeys(regions))

    def on_demand_usd_per_hour(self, region: str, instance_type: str) -> float:
        """From the price table (market/prices.py); 0.0 when the table has no such row."""
        if self._prices is None:
            from airflow_provider_skynomad.market.prices import load_prices

            self._prices = load_prices("aws", self.price_table)
        return float(self._prices.usd_per_hour(region, instance_type) or 0.0)

    def _launch_args(self, region: str, zone: str, instance_type: str, tags: dict[str, str], spot: bool) -> dict:
        """What a launch and a probe share: template/image, network, profile, market, tags."""
        template, version = self.template_for(region)
        image = self.image_for(region)
        if not template and not image:
            raise ValueError(
                f"aws cloud: neither cloud_options.launch_template nor cloud_options.image_id is set for {region}"
            )
        args: dict[str, Any] = {"InstanceType": instance_type}
        if template:
            key = "LaunchTemplateId" if template.startswith("lt-") else "LaunchTemplateName"
            args["LaunchTemplate"] = {key: template, "Version": version}
        if image:
            args["ImageId"] = image
        if self.subnets:
            if zone not in self.subnets:
                raise ValueError(f"aws cloud: cloud_options.subnets has no subnet for {zone}")
            args["SubnetId"] = self.subnets[zone]
        else:
            args["Placement"] = {"AvailabilityZone": zone}
        groups = self.security_groups_for(region)
        if groups:
            args["SecurityGroupIds"] = groups
        if self.instance_profile:
            key = "Arn" if self.instance_profile.startswith("arn:") else "Name"
            args["IamInstanceProfile"] = {key: self.instance_profile}
        specs = [
            {"ResourceType": "instance", "Tags": _tag_list(tags)},
            {"ResourceType": "volume", "Tags": _tag_list(tags)},
        ]
        if spot:
            args["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
            specs.append({"ResourceType": "spot-instances-request", "Tags": _tag_list(tags)})
        args["TagSpecifications"] = specs
        return args

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

        unsigned = signing_secret_problem(self._signing_secret)
        if unsigned:
            raise ValueError(f"aws cloud: {unsigned}")
        client = self.ec2(request.region)
        existing = self._find_in(client, request.client_token, request.region)
        if existing is not None:
            return existing
        tags = {**request.tags, TOKEN_TAG: request.client_token, DEPLOYMENT: self.deployment_id}
        if request.job_id:
            tags[JOB_TAG] = request.job_id
        args = self._launch_args(request.region, request.zone, request.instance_type, tags, request.spot)
        if request.job_id and self.store.configured:
            self.store.write_json(
                request.region, request.job_id, OWNER_RECORD, owner_record(tags, request.job_id, self.deployment_id)
            )
        self._bring_checkpoint(request)
        args.update(
            MinCount=request.count,
            MaxCount=request.count,
            ClientToken=request.client_token,
            InstanceInitiatedShutdownBehavior="terminate",
            UserData=self.user_data(request),
        )
        try:
            reservation = client.run_instances(**args)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in CAPACITY_CODES:
                raise CapacityError(f"{request.zone}: {code}") from exc
            raise
        ids = tuple(i["InstanceId"] for i in sorted(reservation["Instances"], key=lambda i: i.get("AmiLaunchIndex", 0)))
        self._drop_older_checkpoints(client, request)
        return GroupHandle(
            "aws", request.zone, ids, request.spot, request.client_token, job_id=request.job_id, region=request.region
        )

    def user_data(self, request: LaunchRequest) -> str:
        """The boot script of `request` (clouds/aws/boot.py); "" when it has no command."""
        if not request.command:
            return ""
        if not request.job_id:
            raise ValueError("aws cloud: a launch with a command needs a job_id (its checkpoints are kept per job)")
        env = {
            **request.env,
            "AWS_DEFAULT_REGION": request.region,
            "SKYNOMAD_JOB_ID": request.job_id,
            "SKYNOMAD_ZONE": request.zone,
            "SKYNOMAD_INSTANCE_COUNT": str(request.count),
        }
        newest = self.store.newest_store(request.region, request.job_id)
        return boot_script(
            command=request.command,
            env=env,
            store_uri=self.store.uri(request.region, f"{request.job_id}/{AWS_USERID}"),
            restore_uri=self.store.uri(request.region, newest[0]) if newest else None,
            run_id=request.client_token,
            python=self.agent_python,
            work_dir=self.agent_work_dir,
            setup_commands=self.setup_commands,
            checkpoint_key=self.checkpoint_key(request.job_id),
        )

    def poll(self, handle: GroupHandle) -> GroupStatus:
        instances = self._describe(handle)
        if len(instances) < len(handle.instance_ids):
            return GroupStatus.PREEMPTED if handle.spot else GroupStatus.TERMINATED
        states = [i["State"]["Name"] for i in instances]
        reasons = [i.get("StateReason", {}).get("Code", "") for i in instances]
        gone = [s in ("shutting-down", "terminated", "stopping", "stopped") for s in states]
        if not any(gone):
            return GroupStatus.STARTING if "pending" in states else GroupStatus.RUNNING
        if any(r in PREEMPTION_REASONS for r in reasons):
            return GroupStatus.PREEMPTED
        ended = [r for r, g in zip(reasons, gone, strict=True) if g]
        if any(r == SELF_SHUTDOWN for r in ended):
            outcome = (self._run_record(handle) or {}).get("outcome")
            if outcome == "preempted":
                return GroupStatus.PREEMPTED
            if outcome == "failed":
                return GroupStatus.FAILED
            if outcome == "finished":
                # The others are still uploading or powering off: not done until all are.
                return GroupStatus.SUCCEEDED if all(gone) else GroupStatus.RUNNING
            return GroupStatus.FAILED  # powered off without a record: the agent never ran (exit 2, no package)
        if any(r == USER_SHUTDOWN for r in ended):
            return GroupStatus.TERMINATED
        return GroupStatus.FAILED

    def terminate(self, handle: GroupHandle) -> None:
        from botocore.exceptions import ClientError

        try:
            self.ec2(self._region(handle)).terminate_instances(InstanceIds=list(handle.instance_ids))
        except ClientError as exc:
            if "NotFound" not in exc.response.get("Error", {}).get("Code", ""):
                raise

    def progress(self, handle: GroupHandle) -> float | None:
        """step / total_steps from ``progress.json`` in the instance store of the group's rank 0, signed
        with the job's key; before rank 0 wrote one that verifies, the step of the checkpoint the group
        restores from (the region's newest verified one), None without one. Dated by when that
        checkpoint was written (progress.json's `updated_at`, the manifest's `created_at`)."""
        store = self._rank0_store(handle)
        region = self._region(handle)
        done = None if store is None else self.store.progress(region, store)
        if done is not None or not (self.store.configured and handle.job_id):
            return done
        newest = self.store.newest_store(region, handle.job_id)
        if newest is None:
            return None
        manifest = newest[2]
        try:
            fraction = min(1.0, max(0.0, float(manifest["step"]) / float(manifest["total_steps"])))
        except (TypeError, KeyError, ValueError, ZeroDivisionError):
            return None
        return self.checkpointed(fraction, manifest.get("created_at"))

    def failure_detail(self, handle: GroupHandle) -> str | None:
        """The workload's stderr tail from the agent's run record, None without one."""
        record = self._run_record(handle)
        tail = (record or {}).get("stderr_tail") or []
        if not tail:
            return None
        code = record.get("exit_code")
        return (f"exit code {code}:\n" if code is not None else "") + "\n".join(str(line) for line in tail)

    def checkpoint_store(self, job_id: str, zone: str):
        """The job's store in `zone`'s region through the S3Hook's client (for a copy to another cloud)."""
        if not self.store.configured or not job_id:
            return None
        from airflow_provider_skynomad.agent.backends import open_backend
        from airflow_provider_skynomad.agent.store import CheckpointStore

        region = region_of(zone)
        newest = self.store.newest_store(region, job_id)
        uri = self.store.uri(region, newest[0] if newest else job_id)
        return CheckpointStore(uri, backend=open_backend(uri, self.s3(region)), key=self.checkpoint_key(job_id))

    def checkpoint_key(self, job_id: str) -> bytes | None:
        """The job's key (docs/agent.md), None without a signing secret (or a job id)."""
        return job_checkpoint_key(self._signing_secret, job_id) if job_id else None

    def output_location(self, job_id: str, zone: str) -> str | None:
        """``output/`` of the instance store whose output manifest verifies with the job's key (the
        newest, should several), None before one did: an output another job's instance wrote under
        its own name in this job's prefix is not this job's."""
        if not self.store.configured or not job_id:
            return None
        region = region_of(zone)
        outputs = []
        for store in self.store.instance_stores(region, job_id):
            manifest = self.store.output(region, store)
            if manifest is not None:
                outputs.append((str(manifest.get("created_at", "")), store))
        if not outputs:
            return None
        return f"{self.store.uri(region, max(outputs)[1])}/output/"

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
        """Ask for `count` spot instances, release at once what EC2 granted, say what it cost.

        ``launch``: one ``run_instances`` (at least one), every granted instance terminated and
        billed EC2's 60 s minimum. ``request``: a request fleet deleted as soon as EC2 answers
        (clouds/aws/probe.py): billed only for instances read running before the delete.
        """
        check_probe_kind(self.name, kind, self.probe_kinds)
        tags = {**(tags or {}), PURPOSE_TAG: "probe", DEPLOYMENT: self.deployment_id}
        if kind == PROBE_REQUEST:
            from airflow_provider_skynomad.clouds.aws.probe import request_probe

            return request_probe(self, region, zone, instance_type, count, tags)
        return self._launch_probe(region, zone, instance_type, count, tags)

    def _launch_probe(self, region: str, zone: str, instance_type: str, count: int, tags: dict) -> ProbeResult:
        from botocore.exceptions import ClientError

        client = self.ec2(region)
        args = self._launch_args(region, zone, instance_type, tags, spot=True)
        granted: list[str] = []
        try:
            reservation = client.run_instances(**args, MinCount=1, MaxCount=count)
            granted = [i["InstanceId"] for i in reservation["Instances"]]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code", "") not in CAPACITY_CODES:
                raise
        finally:
            if granted:
                client.terminate_instances(InstanceIds=granted)
        spot = self._spot_price(client, zone, instance_type)
        return ProbeResult(
            zone,
            instance_type,
            count,
            len(granted),
            spot,
            self.on_demand_usd_per_hour(region, instance_type),
            usd=round(len(granted) * spot * MIN_BILLED_SECONDS / 3600.0, 6),
        )

    def signals(self, region: str, zones: list[str], instance_type: str, count: int) -> list[Signal]:
        """Spot placement scores (per zone, for `count` instances) and the newest spot price per zone."""
        import datetime as dt

        client = self.ec2(region)
        now = self.now_timestamp()
        names = {z["ZoneId"]: z["ZoneName"] for z in client.describe_availability_zones()["AvailabilityZones"]}
        wanted = set(zones)
        rows: list[Signal] = []
        scores = client.get_spot_placement_scores(
            InstanceTypes=[instance_type], TargetCapacity=int(count), SingleAvailabilityZone=True, RegionNames=[region]
        ).get("SpotPlacementScores", [])
        for score in scores:
            zone = names.get(score.get("AvailabilityZoneId", ""), "")
            if zone in wanted:
                rows.append(
                    Signal(now, "aws", region, zone, instance_type, "placement_score", float(score["Score"]), count)
                )
        history = client.describe_spot_price_history(
            InstanceTypes=[instance_type],
            ProductDescriptions=["Linux/UNIX"],
            StartTime=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1),
        ).get("SpotPriceHistory", [])
        newest: dict[str, dict] = {}
        for entry in history:
            zone = entry["AvailabilityZone"]
            if zone in wanted and (zone not in newest or entry["Timestamp"] > newest[zone]["Timestamp"]):
                newest[zone] = entry
        for zone, entry in sorted(newest.items()):
            rows.append(Signal(now, "aws", region, zone, instance_type, "spot_price", float(entry["SpotPrice"]), 1))
        return rows

    def copy_checkpoint(
        self,
        source_zone: str,
        target_zone: str,
        size_gb: float,
        *,
        job_id: str,
        tags: dict[str, str] | None = None,
    ) -> bool:
        """Copy the job's newest complete checkpoint (and progress.json) to the target region's bucket.

        True when the job had one (then egress is paid and a migration counted): copied between
        regional buckets, or already readable from the one bucket for all regions. False within a
        region (its zones share the bucket: nothing moves) or without a checkpoint. S3 bills the
        transfer to the bucket: `tags` are unused.
        """
        if not job_id:
            raise ValueError("copy_checkpoint: job_id is empty; checkpoints are kept per job")
        source, target = region_of(source_zone), region_of(target_zone)
        if not self.store.configured or source == target:
            return False
        newest = self.store.newest_store(source, job_id)
        if newest is None:
            return False
        return self.store.copy_newest(source, target, newest[0])

    def console_url(self, handle: GroupHandle) -> str | None:
        """The EC2 console page of the group's first instance."""
        if not handle.instance_ids:
            return None
        return CONSOLE_URL.format(region=self._region(handle), instance_id=handle.instance_ids[0])

    def check(self, zones: list[str] | None = None, instance_type: str | None = None) -> list[str]:
        """See clouds/aws/check.py: describe calls only, every problem naming its setting."""
        from airflow_provider_skynomad.clouds.aws.check import check_aws

        unsigned = signing_secret_problem(self._signing_secret)
        return [*([unsigned] if unsigned else []), *check_aws(self, zones, instance_type)]

    def unusable_zones(self, zones: list[str]) -> dict[str, str]:
        """Names that are not AWS zones, zones without a subnet when subnets are set per zone, and
        zones of regions the settings do not cover when they are set per region."""
        from airflow_provider_skynomad.market.zone_names import cloud_of

        regions = self.configured_regions()
        unusable = {}
        for zone in zones:
            if cloud_of(zone) != "aws":
                unusable[zone] = "not an AWS zone name"
            elif self.subnets and zone not in self.subnets:
                unusable[zone] = "cloud_options.subnets has no subnet for it"
            elif regions and region_of(zone) not in regions:
                unusable[zone] = f"its region is not one of the configured regions ({', '.join(regions)})"
        return unusable

    def resources(self, tags: dict[str, str] | None = None) -> list[Resource]:
        """Instances (not terminated), open spot requests, live EC2 Fleets and launch templates (what a
        request probe that died left, clouds/aws/probe.py) and checkpoint prefixes with SkyNomad's tags."""
        from airflow_provider_skynomad.clouds.aws.probe import leftovers

        wanted = dict(tags or {})
        filters = [{"Name": "tag-key", "Values": SKYNOMAD_TAG_KEYS}]
        filters += [{"Name": f"tag:{k}", "Values": [v]} for k, v in wanted.items()]
        found: list[Resource] = []
        listed: set[str] = set()
        for region in self._find_regions():
            client = self.ec2(region)
            pages = client.get_paginator("describe_instances").paginate(
                Filters=[
                    *filters,
                    {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
                ]
            )
            for page in pages:
                for reservation in page["Reservations"]:
                    for i in reservation["Instances"]:
                        itags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
                        found.append(
                            Resource("aws", "instance", i["InstanceId"], region, i["Placement"]["AvailabilityZone"],
                                     itags.get("skynomad-job", itags.get(JOB_TAG, "")), itags,
                                     f"{i['InstanceType']} {i['State']['Name']}")
                        )  # fmt: skip
            requests = client.describe_spot_instance_requests(
                Filters=[*filters, {"Name": "state", "Values": ["open", "active"]}]
            )["SpotInstanceRequests"]
            for r in requests:
                rtags = {t["Key"]: t["Value"] for t in r.get("Tags", [])}
                found.append(
                    Resource("aws", "spot_request", r["SpotInstanceRequestId"], region,
                             r.get("LaunchedAvailabilityZone", ""), rtags.get("skynomad-job", rtags.get(JOB_TAG, "")),
                             rtags, f"spot request {r['State']}")
                )  # fmt: skip
            found += leftovers(client, region, SKYNOMAD_TAG_KEYS, wanted)
            bucket = self.store.bucket(region) if self.store.configured else None
            if bucket and bucket not in listed and set(wanted) <= {"skynomad-job"}:
                listed.add(bucket)  # one bucket for every region: its prefixes are listed once
                for job_id in self.store.job_ids(region):
                    if wanted.get("skynomad-job", job_id) == job_id:
                        uri = f"s3://{bucket}/{self.store.key(job_id)}"
                        owner = self.store.owner(region, job_id)
                        detail = "prefix" if DEPLOYMENT in owner else f"prefix without {OWNER_RECORD}"
                        found.append(Resource("aws", "checkpoint", uri, region, "", job_id, owner, detail))
        return found

    def release(self, resource: Resource) -> None:
        from botocore.exceptions import ClientError

        client = self.ec2(resource.region)
        try:
            if resource.kind == "instance":
                client.terminate_instances(InstanceIds=[resource.id])
            elif resource.kind == "spot_request":
                client.cancel_spot_instance_requests(SpotInstanceRequestIds=[resource.id])
            elif resource.kind == "checkpoint":
                self.store.delete(resource.region, resource.job_id)
            elif resource.kind in ("fleet", "launch_template"):
                from airflow_provider_skynomad.clouds.aws.probe import end_leftover

                end_leftover(client, resource)
            else:
                raise ValueError(f"aws cloud: cannot release a {resource.kind!r}")
        except ClientError as exc:
            if "NotFound" not in exc.response.get("Error", {}).get("Code", ""):
                raise

    # -- helpers -------------------------------------------------------------------------------

    def _bring_checkpoint(self, request: LaunchRequest) -> None:
        """Copy the job's newest complete checkpoint, from whichever configured region holds it, into
        the launch region's bucket *before* the instances boot.

        The job runtime launches first and moves the checkpoint after (`copy_checkpoint`, which then
        finds it in place): on EC2 a boot can beat a large copy, and an agent that restores before
        the manifest lands starts from an older checkpoint or from scratch.
        """
        if not (self.store.per_region and request.job_id and request.command):
            return
        best: tuple[str, str, int] | None = None
        for region in self.configured_regions():
            newest = self.store.newest_store(region, request.job_id)
            if newest is not None and (best is None or int(newest[1]) > best[2]):
                best = (region, newest[0], int(newest[1]))
        if best is not None and best[0] != request.region:
            self.store.copy_newest(best[0], request.region, best[1])  # same path: the boot script restores it

    def _drop_older_checkpoints(self, client, request: LaunchRequest) -> None:
        """Delete the checkpoints of the job's instance stores in the launch region that are neither
        the newest (the one the new group restores from) nor of an instance still there.

        Each instance keeps its own two newest checkpoints, so without this a job would keep two per
        instance it ever ran on. An instance not yet terminated may still be uploading: its store waits
        for the next launch (or `skynomad cleanup`).
        """
        if not (self.store.configured and request.job_id and request.command):
            return
        newest = self.store.newest_store(request.region, request.job_id)
        older = {s.rsplit(":", 1)[-1]: s for s in self.store.instance_stores(request.region, request.job_id)}
        older = {i: s for i, s in older.items() if newest is None or s != newest[0]}
        if not older:
            return
        pages = client.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-id", "Values": sorted(older)}]
        )
        present = {
            i["InstanceId"]
            for page in pages
            for r in page["Reservations"]
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        }
        for instance_id, store in sorted(older.items()):
            if instance_id not in present:
                self.store.drop_checkpoints(request.region, store)

    def _run_record(self, handle: GroupHandle) -> dict | None:
        """Rank 0's outcome record (``runs/<client token>.json``), None without a bucket or record."""
        store = self._rank0_store(handle)
        return None if store is None else self.store.run_record(self._region(handle), store, handle.client_token)

    def _rank0_store(self, handle: GroupHandle) -> str | None:
        """The instance store rank 0 of the group writes (its instances are in launch-index order),
        None without a bucket or before it wrote anything; remembered once found."""
        if not self.store.configured or not handle.job_id or not handle.instance_ids:
            return None
        region = self._region(handle)
        key = (region, handle.job_id, handle.instance_ids[0])
        if key not in self._instance_stores:
            store = self.store.instance_store(*key)
            if store is None:
                return None
            self._instance_stores[key] = store
        return self._instance_stores[key]

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
        configured = self.configured_regions()
        if not configured:
            client = next(iter(self._clients.values()), None) or self._ec2_hook(None).conn  # the connection's region
            configured = sorted(r["RegionName"] for r in client.describe_regions()["Regions"])
        return list(dict.fromkeys([*self._clients, *configured]))

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
