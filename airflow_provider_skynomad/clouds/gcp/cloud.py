"""GCP Compute Engine behind the Cloud interface, on the google provider's hooks.

Launched the way GCP users run GPU jobs:

- each region's instances come from its instance template (``source_instance_template``: one
  name, or ``{region: template}``) or from an image with a network/subnetwork per region; the
  machine type is always the planner's choice (``LaunchRequest.instance_type``);
- spot members carry ``scheduling.provisioning_model = SPOT`` and
  ``instance_termination_action = DELETE``; every member carries labels for the job, DAG, run,
  task and try (from the request's tags, made label-safe) and SkyNomad's own (client token, gang
  size, rank); the exact token and job id are also in metadata (label values are cut and lowercased);
- one insert per member, named ``<token>-<i>``, with a ``request_id`` derived from the token, so a
  retried launch re-sends the same inserts and Compute Engine creates nothing twice; a stock-out
  deletes whatever members exist and raises CapacityError: a gang is all or nothing;
- the ``startup-script`` runs the workload agent (docs/agent.md) against the region's checkpoint
  bucket and powers the VM off when the agent exits, except after a preemption (exit 3), where
  Compute Engine ends the VM itself. The script holds no credential: the instance's service
  account gives the agent its access to the bucket, and `launch` refuses an env that looks like one.

Watching a gang costs one instance list (by the token's label) and one ``progress.json`` read
per decision step, whatever the gang size; the zone's ``compute.instances.preempted`` operations
and the agent's run record are read only once a member has stopped or gone. A logged preemption
wins over any run record, and progress and run records count only when they verify with the
job's key (agent/signing.py): a launch needs ``checkpoint_signing_secret``.
Instance bodies and the startup script are built in `boot.py`, checkpoints and progress live in
GCS (`storage.GcsStore`), `check` and `resources` are in `check.py`.
"""

from __future__ import annotations

import uuid
from typing import Any

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
    check_probe_kind,
)
from airflow_provider_skynomad.clouds.boot_env import job_checkpoint_key, signing_secret_problem
from airflow_provider_skynomad.clouds.gcp.boot import (
    CREDENTIAL_NAME,
    JOB_LABEL,
    SIZE_LABEL,
    TOKEN_LABEL,
    instance_body,
    instance_name,
    label_value,
    metadata_items,
    run_id,
)
from airflow_provider_skynomad.clouds.gcp.compute import BILLING_MINIMUM_HOURS, CAPACITY_MARKERS
from airflow_provider_skynomad.clouds.gcp.compute import not_found as _not_found
from airflow_provider_skynomad.clouds.gcp.storage import GcsStore
from airflow_provider_skynomad.clouds.tags import DEPLOYMENT, check_deployment_id, owner_record
from airflow_provider_skynomad.clouds.zones import gcp_region_of as region_of

PREEMPTED_OPERATION = "compute.instances.preempted"
STOPPED = ("STOPPING", "STOPPED", "TERMINATED", "SUSPENDING", "SUSPENDED")
COMPUTE = "https://www.googleapis.com/compute/v1"
CONSOLE_URL = "https://console.cloud.google.com/compute/instancesDetail/zones/{zone}/instances/{instance_id}"


def make_compute_hook(gcp_conn_id: str):
    """The Compute Engine hook a GcpCloud uses when none is given (tests replace this function)."""
    from airflow_provider_skynomad.clouds.gcp.hook import GceHook

    return GceHook(gcp_conn_id=gcp_conn_id)


def make_storage_hook(gcp_conn_id: str):
    """The GCS hook for checkpoints, progress and run records."""
    from airflow.providers.google.cloud.hooks.gcs import GCSHook

    return GCSHook(gcp_conn_id=gcp_conn_id)


class GcpCloud(Cloud):
    """Compute Engine through ``GceHook(gcp_conn_id)`` (a ComputeEngineHook), GCS through ``GCSHook``.

    :param gcp_conn_id: google provider connection (its credentials create and watch the instances).
    :param project_id: project owning the instances (default: the connection's project).
    :param source_instance_template: instance template per region: one name (a global template)
        or ``{region: template}``; a template is a name, or a path such as
        ``projects/P/regions/R/instanceTemplates/T`` for a regional one. It carries image, disks,
        network and service account; the machine type is always the planner's.
    :param image: boot image where no template is set: one image or ``{region: image}``, e.g.
        ``projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11-py310``.
    :param network: VPC network for image launches (default ``global/networks/default``).
    :param subnetwork: subnetwork for image launches: one path or ``{region: path}``
        (``regions/R/subnetworks/S``).
    :param service_account: email of the instances' service account for image launches (needs
        ``roles/storage.objectAdmin`` on the checkpoint bucket; docs/clouds.md).
    :param boot_disk_gb: boot disk size of image launches.
    :param checkpoint_bucket: GCS bucket name with ``{region}`` (one bucket per region), or one
        (multi-region) bucket for every region.
    :param checkpoint_prefix: key prefix of the jobs' stores (a job's is ``<prefix>/<job_id>``).
    :param python: python on the instance that runs ``-m airflow_provider_skynomad.agent``.
    :param work_dir: local disk of the agent; each member uses ``<work_dir>/<instance name>``.
    :param power_off_command: what the startup script runs when the agent is done.
    :param spot_usd_per_hour: ``{instance_type: price}`` of one spot VM, for probe costs and reports.
    :param price_table: an on-demand price table file (``skynomad prices refresh --output``) instead
        of the refreshed or shipped one (market/prices.py).
    :param regions: where `check` and `resources` look when not told (default: the regions of
        `source_instance_template` / `image` / `subnetwork` when they are dicts).
    :param hook: a ready GceHook (tests pass one with fake clients).
    :param gcs_hook: a ready GCSHook.
    :param checkpoint_signing_secret: the deployment's secret each job's key is derived from
        (docs/agent.md, "Checkpoint signatures"): required to launch a job, since its instances'
        checkpoints, progress and run records count only when they verify with that key.
    :param probe_targets: what the probe DAG asks for (read from the connection by
        ``operators.probe.probe_targets``; listed here so it is an accepted ``cloud_options`` key).
    :param probe_kind: how the probe DAG probes this cloud's markets: ``request`` (default: insert,
        watch the status, delete at STAGING; billed only if the VM was read RUNNING first, an
        assumption of docs/probing.md) or ``launch`` (insert, delete when the insert returns, each
        VM billed the one-minute minimum); read by the probe DAG.
    :param deployment_id: this Airflow's id (lowercase letters, digits, '-'; default ``default``): a
        label and a metadata item on every instance and probe, and in every job's owner record
        (clouds/tags.py). `skynomad cleanup` touches nothing carrying another; give each Airflow that
        shares the project its own.
    """

    name = "gcp"
    probe_kinds = (PROBE_LAUNCH, PROBE_REQUEST)

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        project_id: str | None = None,
        source_instance_template: str | dict[str, str] | None = None,
        image: str | dict[str, str] | None = None,
        network: str | None = None,
        subnetwork: str | dict[str, str] | None = None,
        service_account: str | None = None,
        boot_disk_gb: int = 200,
        checkpoint_bucket: str | None = None,
        checkpoint_prefix: str = "skynomad",
        python: str = "python3",
        work_dir: str = "/var/tmp/skynomad",
        power_off_command: str = "shutdown -h now",
        spot_usd_per_hour: dict[str, float] | None = None,
        price_table: str | None = None,
        regions: list[str] | None = None,
        hook: Any | None = None,
        gcs_hook: Any | None = None,
        probe_targets: list[dict] | None = None,
        probe_kind: str = "request",
        deployment_id: str | None = None,
        checkpoint_signing_secret: str | None = None,
    ) -> None:
        self._signing_secret = checkpoint_signing_secret  # never logged; only per-job keys leave this object
        self.gcp_conn_id = gcp_conn_id
        self.deployment_id = check_deployment_id(deployment_id)
        self.project_id = project_id
        self.source_instance_template = source_instance_template
        self.image = image
        self.network = network
        self.subnetwork = subnetwork
        self.service_account = service_account
        self.boot_disk_gb = int(boot_disk_gb)
        self.checkpoint_bucket = checkpoint_bucket
        self.checkpoint_prefix = checkpoint_prefix
        self.python = python
        self.work_dir = work_dir
        self.power_off_command = power_off_command
        self.spot_usd_per_hour = dict(spot_usd_per_hour or {})
        self.price_table = price_table
        self._prices = None
        self.regions = list(regions) if regions else None
        self.probe_targets = list(probe_targets or [])
        check_probe_kind(self.name, probe_kind, self.probe_kinds)
        self.probe_kind = probe_kind
        self._hook = hook
        self._gcs_hook = gcs_hook
        self._store: GcsStore | None = None

    # -- clients -------------------------------------------------------------------------------

    @property
    def hook(self):
        if self._hook is None:
            self._hook = make_compute_hook(self.gcp_conn_id)
        return self._hook

    @property
    def store(self) -> GcsStore | None:
        """The checkpoint buckets (None when `checkpoint_bucket` is not set)."""
        if self._store is None and self.checkpoint_bucket:
            gcs = self._gcs_hook if self._gcs_hook is not None else make_storage_hook(self.gcp_conn_id)
            self._store = GcsStore(gcs, self.checkpoint_bucket, self.checkpoint_prefix, key_of=self.checkpoint_key)
        return self._store

    @property
    def project(self) -> str:
        return self.project_id or self.hook.project_id

    # -- per-region settings -------------------------------------------------------------------

    @staticmethod
    def _per_region(setting, region: str):
        return setting.get(region) if isinstance(setting, dict) else setting

    def template(self, region: str) -> str | None:
        """The insert's ``source_instance_template`` for `region` (a bare name is a global template)."""
        name = self._per_region(self.source_instance_template, region)
        if not name:
            return None
        return name if "/" in name else f"global/instanceTemplates/{name}"

    def configured_regions(self) -> list[str]:
        if self.regions:
            return sorted(self.regions)
        found: set[str] = set()
        for setting in (self.source_instance_template, self.image, self.subnetwork):
            if isinstance(setting, dict):
                found |= set(setting)
        return sorted(found)

    # -- Cloud interface -----------------------------------------------------------------------

    def find(self, client_token: str) -> GroupHandle | None:
        """The instances labelled with `client_token` in any zone of the project; never launches."""
        client = self.hook.get_compute_instance_client()
        pages = client.aggregated_list(
            request={"project": self.project, "filter": f'labels.{TOKEN_LABEL} = "{label_value(client_token)}"'}
        )
        for scope, listed in pages:
            for instance in getattr(listed, "instances", None) or []:
                meta = metadata_items(instance)
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
        """Insert every member (idempotent on the token); a stock-out deletes them all and raises CapacityError."""
        unsigned = signing_secret_problem(self._signing_secret)
        if unsigned:
            raise ValueError(f"gcp cloud: {unsigned}")
        region = request.region or region_of(request.zone)
        if request.command and self.store is None:
            raise ValueError(
                "gcp cloud: cloud_options.checkpoint_bucket is not set; the workload agent keeps the job's "
                "checkpoints, progress and outcome there (a bucket name, with {region} for one per region)"
            )
        leaked = sorted(k for k in request.env if CREDENTIAL_NAME.search(k))
        if leaked:
            raise ValueError(
                f"gcp cloud: env {', '.join(leaked)} looks like a credential and would be readable in the "
                "instance's metadata; give the instances' service account the access instead"
            )
        names = [instance_name(request.client_token, i) for i in range(request.count)]
        if request.job_id and self.store is not None:
            tags = {**request.tags, DEPLOYMENT: self.deployment_id}
            self.store.write_owner(region, request.job_id, owner_record(tags, request.job_id, self.deployment_id))
        existing = self._members(request.zone, request.client_token)
        for i, name in enumerate(names):
            if name in existing:
                continue  # a retried launch: this member exists already
            try:
                self._insert(request, region, i, name)
            except Exception as exc:  # the hook raises AirflowException with the operation's errors
                if any(marker in str(exc) for marker in CAPACITY_MARKERS):
                    for member in names[:i] + [n for n in existing if n not in names[:i]]:
                        self._delete(request.zone, member)
                    raise CapacityError(f"{request.zone}: {exc}") from exc
                if "alreadyExists" not in str(exc) and "already exists" not in str(exc):
                    raise
        return GroupHandle(
            "gcp", request.zone, tuple(names), request.spot, request.client_token, job_id=request.job_id, region=region
        )

    def poll(self, handle: GroupHandle) -> GroupStatus:
        """One instance list while all members run; the run record and preemption operations once one stopped."""
        members = self._members(handle.zone, handle.client_token)
        statuses = {name: str(getattr(members.get(name), "status", "") or "") for name in handle.instance_ids}
        ended = [n for n in handle.instance_ids if n not in members or statuses[n] in STOPPED]
        if not ended:
            running = all(s == "RUNNING" for s in statuses.values())
            return GroupStatus.RUNNING if running else GroupStatus.STARTING
        if handle.spot and self._preempted(handle.zone, ended):
            return GroupStatus.PREEMPTED  # logged by Compute Engine: wins over any run record
        outcome = (self._run_record(handle, 0) or {}).get("outcome")
        if outcome == "finished":
            return GroupStatus.SUCCEEDED
        if outcome == "preempted":
            return GroupStatus.PREEMPTED
        if outcome == "failed":
            return GroupStatus.FAILED
        if len(ended) == len(handle.instance_ids):  # all powered off (or deleted) with no finished record
            return GroupStatus.FAILED if all(n in members for n in ended) else GroupStatus.TERMINATED
        return GroupStatus.RUNNING  # members power off one by one at the end: wait for rank 0's record

    def terminate(self, handle: GroupHandle) -> None:
        for name in handle.instance_ids:
            self._delete(handle.zone, name)

    def progress(self, handle: GroupHandle) -> float | None:
        """``step / total_steps`` from the job's ``progress.json`` in the group's region (one GCS read)."""
        if self.store is None or not handle.job_id:
            return None
        return self.store.progress(handle.region or region_of(handle.zone), handle.job_id)

    def failure_detail(self, handle: GroupHandle) -> str | None:
        """The workload's stderr tail from the agent's run record of the first member that failed."""
        for rank in range(len(handle.instance_ids)):
            record = self._run_record(handle, rank) or {}
            tail = record.get("stderr_tail") or []
            if record.get("outcome") == "failed" or tail:
                lines = tail if isinstance(tail, list) else str(tail).splitlines()
                return f"rank {rank} exit code {record.get('exit_code')}:\n" + "\n".join(map(str, lines))
        return None

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
        """Insert up to `count` spot VMs with no workload until a stock-out, delete them at once.

        ``request`` (clouds/gcp/probe.py): each VM is watched and deleted as soon as it reaches
        STAGING ("All required resources have been allocated"); billed a minute only if it was read
        RUNNING before the delete (an assumption: docs/probing.md). ``launch``: each VM is deleted
        when its insert returns and billed the one-minute minimum ("Instance uptime is measured as
        the number of seconds between when you start an instance and when you stop an instance",
        https://cloud.google.com/compute/vm-instance-pricing). A stock-out
        (``ZONE_RESOURCE_POOL_EXHAUSTED``) fails the insert and creates nothing.
        """
        check_probe_kind(self.name, kind, self.probe_kinds)
        if kind == PROBE_REQUEST:
            from airflow_provider_skynomad.clouds.gcp.probe import request_probe

            labels = {**(tags or {}), "skynomad-purpose": "probe"}
            return request_probe(self, region, zone, instance_type, count, labels)
        token = f"probe-{uuid.uuid4().hex[:10]}"
        request = LaunchRequest(
            "gcp", region, zone, instance_type, count, True, token, tags={**(tags or {}), "skynomad-purpose": "probe"}
        )
        granted: list[str] = []
        try:
            for i in range(count):
                name = instance_name(token, i)
                try:
                    self._insert(request, region, i, name)
                except Exception as exc:
                    if any(marker in str(exc) for marker in CAPACITY_MARKERS):
                        break
                    raise
                granted.append(name)
        finally:
            for name in granted:
                self._delete(zone, name)
        spot = float(self.spot_usd_per_hour.get(instance_type, 0.0))
        usd = len(granted) * spot * BILLING_MINIMUM_HOURS
        on_demand = self.on_demand_usd_per_hour(region, instance_type)
        return ProbeResult(zone, instance_type, count, len(granted), spot, on_demand, usd=usd)

    def on_demand_usd_per_hour(self, region: str, instance_type: str) -> float:
        """From the price table (market/prices.py); 0.0 when the table has no such row."""
        if self._prices is None:
            from airflow_provider_skynomad.market.prices import load_prices

            self._prices = load_prices("gcp", self.price_table)
        return float(self._prices.usd_per_hour(region, instance_type) or 0.0)

    def copy_checkpoint(
        self,
        source_zone: str,
        target_zone: str,
        size_gb: float,
        *,
        job_id: str,
        tags: dict[str, str] | None = None,
    ) -> bool:
        """Copy the newest complete checkpoint (+ ``progress.json``) to the target region's bucket.

        True when a checkpoint existed (with one bucket for every region: nothing to copy, still
        True); False without one or without a checkpoint bucket. GCS copies carry no labels, so
        `tags` are not used.
        """
        if self.store is None:
            return False
        return self.store.copy(region_of(source_zone), region_of(target_zone), job_id)

    def checkpoint_store(self, job_id: str, zone: str):
        """The job's store in `zone`'s region, through the GCSHook's client (for a copy to another cloud)."""
        if self.store is None:
            return None
        from airflow_provider_skynomad.agent.backends import open_backend
        from airflow_provider_skynomad.agent.store import CheckpointStore

        uri = self.store.uri(region_of(zone), job_id)
        return CheckpointStore(
            uri, backend=open_backend(uri, self.store.hook.get_conn()), key=self.checkpoint_key(job_id)
        )

    def checkpoint_key(self, job_id: str) -> bytes | None:
        """The job's key (docs/agent.md), None without a signing secret (or a job id)."""
        return job_checkpoint_key(self._signing_secret, job_id) if job_id else None

    def output_location(self, job_id: str, zone: str) -> str | None:
        """``gs://<region's bucket>/<prefix>/<job_id>/output`` (the agent uploads the final files there)."""
        return f"{self.store.uri(region_of(zone), job_id)}/output" if self.store else None

    def console_url(self, handle: GroupHandle) -> str | None:
        """The Compute Engine console page of the group's first instance."""
        if not handle.instance_ids:
            return None
        url = CONSOLE_URL.format(zone=handle.zone, instance_id=handle.instance_ids[0])
        return f"{url}?project={self.project_id}" if self.project_id else url

    def unusable_zones(self, zones: list[str]) -> dict[str, str]:
        """Names that are not GCP zones, and zones of regions the settings do not cover when they are
        set per region."""
        from airflow_provider_skynomad.market.zone_names import cloud_of

        regions = self.configured_regions()
        unusable = {}
        for zone in zones:
            if cloud_of(zone) != "gcp":
                unusable[zone] = "not a GCP zone name"
            elif regions and region_of(zone) not in regions:
                unusable[zone] = f"its region is not one of the configured regions ({', '.join(regions)})"
        return unusable

    def check(self, zones: list[str] | None = None, instance_type: str | None = None) -> list[str]:
        from airflow_provider_skynomad.clouds.gcp.check import check

        unsigned = signing_secret_problem(self._signing_secret)
        return [*([unsigned] if unsigned else []), *check(self, zones, instance_type)]

    def resources(self, tags: dict[str, str] | None = None) -> list[Resource]:
        from airflow_provider_skynomad.clouds.gcp.check import resources

        return resources(self, tags)

    def release(self, resource: Resource) -> None:
        if resource.kind == "instance":
            self._delete(resource.zone, resource.id)
        elif resource.kind == "checkpoint" and self.store is not None:
            self.store.delete_job(self.store.bucket(resource.region), resource.job_id)
        else:
            raise NotImplementedError(f"the gcp cloud cannot release {resource.kind} {resource.id}")

    # -- helpers -------------------------------------------------------------------------------

    def _insert(self, request: LaunchRequest, region: str, rank: int, name: str) -> None:
        self.hook.insert_instance(
            body=instance_body(self, request, region, rank, name),
            zone=request.zone,
            project_id=self.project,
            request_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{request.client_token}/{rank}")),
            source_instance_template=self.template(region),
        )

    def _members(self, zone: str, token: str) -> dict[str, Any]:
        """The zone's instances of the launch with `token`, by name (one list call)."""
        client = self.hook.get_compute_instance_client()
        listed = client.list(
            request={"project": self.project, "zone": zone, "filter": f'labels.{TOKEN_LABEL} = "{label_value(token)}"'}
        )
        return {
            instance.name: instance for instance in listed if metadata_items(instance).get(TOKEN_LABEL, token) == token
        }

    def _run_record(self, handle: GroupHandle, rank: int) -> dict | None:
        if self.store is None or not handle.job_id:
            return None
        region = handle.region or region_of(handle.zone)
        return self.store.run_record(region, handle.job_id, run_id(handle.client_token, rank))

    def _preempted(self, zone: str, names: list[str]) -> bool:
        """Whether Compute Engine logged a ``compute.instances.preempted`` operation for one of `names`."""
        client = self.hook.get_compute_client("ZoneOperationsClient")
        for name in names:
            link = f"{COMPUTE}/projects/{self.project}/zones/{zone}/instances/{name}"
            query = f'(operationType = "{PREEMPTED_OPERATION}") AND (targetLink = "{link}")'
            if any(True for _ in client.list(request={"project": self.project, "zone": zone, "filter": query})):
                return True
        return False

    def _delete(self, zone: str, name: str) -> None:
        try:
            self.hook.delete_instance(resource_id=name, zone=zone, project_id=self.project)
        except Exception as exc:
            if not _not_found(exc):
                raise
