"""GcpCloud's pre-launch check and its leftovers listing: reads only, nothing is launched.

`check` answers "would a launch in these zones work?" with one problem per wrong setting, each
naming the ``cloud_options`` key to fix: credentials, the template (or image, subnetwork,
machine type) of each region, the checkpoint bucket of each region. `resources` lists what
SkyNomad left in the project: instances by SkyNomad's labels, job stores by bucket prefix.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from airflow_provider_skynomad.clouds.base import Resource

if TYPE_CHECKING:
    from airflow_provider_skynomad.clouds.base import Cloud

TEMPLATE_PATH = re.compile(
    r"^(?:https://www\.googleapis\.com/compute/v1/)?(?:projects/(?P<project>[^/]+)/)?"
    r"(?:global|regions/(?P<region>[^/]+))/instanceTemplates/(?P<name>[^/]+)$"
)
IMAGE_PATH = re.compile(
    r"^(?:https://www\.googleapis\.com/compute/v1/)?(?:projects/(?P<project>[^/]+)/)?"
    r"global/images/(?:family/(?P<family>[^/]+)|(?P<name>[^/]+))$"
)
SUBNETWORK_PATH = re.compile(
    r"^(?:https://www\.googleapis\.com/compute/v1/)?(?:projects/(?P<project>[^/]+)/)?"
    r"(?:regions/(?P<region>[^/]+)/subnetworks/)?(?P<name>[^/]+)$"
)


def _missing(exc: Exception) -> bool:
    return "NotFound" in type(exc).__name__ or "404" in str(exc) or "not found" in str(exc).lower()


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def check(cloud: Cloud, zones: list[str] | None, instance_type: str | None) -> list[str]:
    """Problems that would stop a launch in `zones` (None: every configured region); [] means ready."""
    from airflow_provider_skynomad.clouds.zones import gcp_region_of as region_of

    try:
        cloud.hook.get_credentials()
        project = cloud.project
    except Exception as exc:  # noqa: BLE001 - any failure here is the connection's
        return [f"gcp_conn_id {cloud.gcp_conn_id!r}: cannot get credentials ({_reason(exc)})"]
    if not project:
        return [f"gcp_conn_id {cloud.gcp_conn_id!r} has no project; set gcp_project (or cloud_options.project_id)"]
    regions = sorted({region_of(z) for z in zones}) if zones else cloud.configured_regions()
    problems: list[str] = []
    for region in regions or [None]:
        problems += _check_launch_settings(cloud, project, region)
        problems += _check_bucket(cloud, region)
    if instance_type:
        for zone in zones or []:
            problems += _check_machine_type(cloud, project, zone, instance_type)
    return problems


def _check_launch_settings(cloud: Cloud, project: str, region: str | None) -> list[str]:
    where = f"region {region}" if region else "every region"
    template = cloud.template(region) if region else cloud._per_region(cloud.source_instance_template, "")
    if template:
        return _check_template(cloud, project, region, template)
    if isinstance(cloud.source_instance_template, dict) and not cloud._per_region(cloud.image, region or ""):
        return [f"cloud_options.source_instance_template has no template for {where} (nor cloud_options.image)"]
    image = cloud._per_region(cloud.image, region or "")
    if not image:
        return [f"cloud_options.source_instance_template or cloud_options.image must be set for {where}"]
    problems = _check_image(cloud, project, image)
    subnetwork = cloud._per_region(cloud.subnetwork, region or "")
    if isinstance(cloud.subnetwork, dict) and not subnetwork:
        problems.append(f"cloud_options.subnetwork has no subnetwork for {where}")
    elif subnetwork and region:
        problems += _check_subnetwork(cloud, project, region, subnetwork)
    return problems


def _check_template(cloud: Cloud, project: str, region: str | None, template: str) -> list[str]:
    path = template if "/" in template else f"global/instanceTemplates/{template}"
    match = TEMPLATE_PATH.match(path)
    if match is None:
        return [f"cloud_options.source_instance_template: {template!r} is not a template name or path"]
    owner = match["project"] or project
    try:
        if match["region"]:
            client = cloud.hook.get_compute_client("RegionInstanceTemplatesClient")
            client.get(request={"project": owner, "region": match["region"], "instance_template": match["name"]})
        else:
            cloud.hook.get_instance_template(resource_id=match["name"], project_id=owner)
    except Exception as exc:  # noqa: BLE001 - reported, not raised: check() lists every problem
        where = f" (region {region})" if region else ""
        if _missing(exc):
            return [
                f"cloud_options.source_instance_template: template {match['name']!r}{where} "
                f"does not exist in project {owner}"
            ]
        return [f"cloud_options.source_instance_template: cannot read template {match['name']!r}: {_reason(exc)}"]
    return []


def _check_image(cloud: Cloud, project: str, image: str) -> list[str]:
    match = IMAGE_PATH.match(image)
    if match is None:
        return [f"cloud_options.image: {image!r} is not an image path (projects/P/global/images/[family/]NAME)"]
    client = cloud.hook.get_compute_client("ImagesClient")
    owner = match["project"] or project
    try:
        if match["family"]:
            client.get_from_family(request={"project": owner, "family": match["family"]})
        else:
            client.get(request={"project": owner, "image": match["name"]})
    except Exception as exc:  # noqa: BLE001
        return [f"cloud_options.image: {image!r} " + ("does not exist" if _missing(exc) else f"unreadable: {exc}")]
    return []


def _check_subnetwork(cloud: Cloud, project: str, region: str, subnetwork: str) -> list[str]:
    match = SUBNETWORK_PATH.match(subnetwork)
    if match is None or (match["region"] and match["region"] != region):
        return [f"cloud_options.subnetwork: {subnetwork!r} is not a subnetwork of region {region}"]
    client = cloud.hook.get_compute_client("SubnetworksClient")
    try:
        client.get(request={"project": match["project"] or project, "region": region, "subnetwork": match["name"]})
    except Exception as exc:  # noqa: BLE001
        state = "does not exist" if _missing(exc) else f"unreadable: {_reason(exc)}"
        return [f"cloud_options.subnetwork: {subnetwork!r} (region {region}) {state}"]
    return []


def _check_machine_type(cloud: Cloud, project: str, zone: str, instance_type: str) -> list[str]:
    client = cloud.hook.get_compute_client("MachineTypesClient")
    try:
        client.get(request={"project": project, "zone": zone, "machine_type": instance_type})
    except Exception as exc:  # noqa: BLE001
        state = "is not offered" if _missing(exc) else f"cannot be read ({_reason(exc)})"
        return [f"instance type {instance_type} {state} in zone {zone} (the market table's instance_type)"]
    return []


def _check_bucket(cloud: Cloud, region: str | None) -> list[str]:
    if not cloud.checkpoint_bucket:
        return ["cloud_options.checkpoint_bucket is not set: the workload agent keeps the job's checkpoints there"]
    store = cloud.store
    if region is None and not store.one_bucket:
        return []  # a per-region pattern and no region to fill in
    bucket = store.bucket(region or "")
    try:
        exists = store.bucket_exists(bucket)
    except Exception as exc:  # noqa: BLE001
        return [f"cloud_options.checkpoint_bucket: cannot read bucket {bucket!r}: {_reason(exc)}"]
    if not exists:
        where = f" for region {region}" if region and not store.one_bucket else ""
        return [f"cloud_options.checkpoint_bucket: bucket {bucket!r}{where} does not exist"]
    return []


def resources(cloud: Cloud, tags: dict[str, str] | None) -> list[Resource]:
    """SkyNomad's instances (any zone, by label) and job stores (per configured region's bucket)."""
    from airflow_provider_skynomad.clouds.gcp.boot import (
        JOB_LABEL,
        MANAGED_LABEL,
        label_key,
        label_value,
        metadata_items,
    )
    from airflow_provider_skynomad.clouds.tags import EXACT_KEYS, JOB
    from airflow_provider_skynomad.clouds.zones import gcp_region_of as region_of

    wanted = {label_key(k): label_value(v) for k, v in (tags or {}).items()}
    query = " AND ".join(f'(labels.{k} = "{v}")' for k, v in {MANAGED_LABEL: "true", **wanted}.items())
    client = cloud.hook.get_compute_instance_client()
    found: list[Resource] = []
    for scope, listed in client.aggregated_list(request={"project": cloud.project, "filter": query}):
        for instance in getattr(listed, "instances", None) or []:
            labels = dict(getattr(instance, "labels", None) or {})
            meta = metadata_items(instance)
            zone = str(getattr(instance, "zone", "") or scope).rsplit("/", 1)[-1]
            exact = {k: meta[k] for k in EXACT_KEYS if k in meta}  # labels are lowercased copies: not these
            tags = {**{k: v for k, v in labels.items() if k not in EXACT_KEYS}, **exact}
            job_id = meta.get(JOB_LABEL) or exact.get(JOB, "")
            found.append(
                Resource(
                    "gcp",
                    "instance",
                    instance.name,
                    region_of(zone),
                    zone,
                    job_id,
                    tags,
                    f"{instance.status} {str(instance.machine_type).rsplit('/', 1)[-1]}",
                )
            )
    store = cloud.store
    only_job = (tags or {}).get("skynomad-job")
    if store is not None and set(tags or {}) <= {"skynomad-job"}:  # stores carry no other tag
        regions = [""] if store.one_bucket else cloud.configured_regions()
        for region in regions:
            bucket = store.bucket(region)
            for job_id in store.job_ids(bucket):
                if only_job is None or job_id == only_job:
                    uri = f"gs://{bucket}/{store.base(job_id)}"
                    owner = store.owner(bucket, job_id)
                    found.append(Resource("gcp", "checkpoint", uri, region, "", job_id, owner, f"job store {uri}"))
    return found
