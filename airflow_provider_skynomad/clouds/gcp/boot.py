"""What a GCP instance is launched with: its Instance body (labels, metadata, scheduling, disks and
network for image launches) and the startup script that runs the workload agent.

The script holds no credential: the agent reads and writes the job's bucket with the instance's
service account, and a launch whose env has a credential-looking name is refused before it is sent.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, Any

from airflow_provider_skynomad.clouds.base import LaunchRequest
from airflow_provider_skynomad.clouds.boot_env import agent_key_prefix, export_lines
from airflow_provider_skynomad.clouds.tags import DEPLOYMENT, exact_metadata

if TYPE_CHECKING:
    from airflow_provider_skynomad.clouds.base import Cloud

TOKEN_LABEL = "skynomad-client-token"  # label values are lowercased and cut: the exact token is in metadata
JOB_LABEL = "skynomad-job-id"
SIZE_LABEL = "skynomad-gang-size"
RANK_LABEL = "skynomad-rank"
MANAGED_LABEL = "skynomad-managed"  # on everything this adapter creates: how `resources` finds leftovers
PREEMPTED_EXIT_CODE = 3  # the agent's "preempted" (docs/agent.md): Compute Engine ends the VM itself
CREDENTIAL_NAME = re.compile(r"SECRET|PASSWORD|TOKEN|CREDENTIAL|PRIVATE_KEY|ACCESS_KEY", re.IGNORECASE)


def instance_name(token: str, index: int) -> str:
    """RFC 1035 name (lowercase, ≤ 63 chars) from the client token."""
    base = re.sub(r"[^a-z0-9-]", "-", token.lower()).strip("-")
    return f"{base[:55]}-{index}".lstrip("-0123456789") or f"sn-{index}"


def label_value(value: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "-", str(value).lower())[:63]


def label_key(key: str) -> str:
    """Label keys also start with a lowercase letter."""
    value = label_value(key)
    return value if value[:1].isalpha() else f"k-{value}"[:63]


def run_id(token: str, rank: int) -> str:
    """The agent's ``--run-id`` of one member: the token for rank 0, ``<token>-<rank>`` after it."""
    return token if rank == 0 else f"{token}-{rank}"


def startup_script(cloud: Cloud, request: LaunchRequest, region: str, rank: int, name: str) -> str:
    """Run the agent on the region's store, then power off (unless preempted: GCP ends the VM)."""
    if not request.command:
        return ""
    env = {
        **request.env,
        "SKYNOMAD_ZONE": request.zone,
        "SKYNOMAD_INSTANCE_COUNT": str(request.count),
        "SKYNOMAD_RANK": str(rank),
    }
    if request.job_id:
        env["SKYNOMAD_JOB_ID"] = request.job_id
    exports = export_lines(env)  # refuses a name that is not a shell variable name (UnsafeEnvError)
    key_of = getattr(cloud, "checkpoint_key", None)
    checkpoint_key = key_of(request.job_id) if key_of is not None and request.job_id else None
    agent = [
        *shlex.split(cloud.python),
        "-m",
        "airflow_provider_skynomad.agent",
        "run",
        "--store",
        cloud.store.uri(region, request.job_id or request.client_token),
        "--work-dir",
        f"{cloud.work_dir.rstrip('/')}/{name}",
        "--run-id",
        run_id(request.client_token, rank),
        "--notice",
        "gcp",
        "--rank",
        str(rank),
        "--",
        *request.command,
    ]
    return (
        f"#!/bin/bash\n{exports}{agent_key_prefix(checkpoint_key)}{shlex.join(agent)}\ncode=$?\n"
        f'if [ "$code" != {PREEMPTED_EXIT_CODE} ]; then {cloud.power_off_command}; fi\nexit $code\n'
    )


def instance_body(cloud: Cloud, request: LaunchRequest, region: str, rank: int, name: str) -> dict:
    """The Instance resource of one member (with a template: what overrides it)."""
    labels = {label_key(k): label_value(v) for k, v in request.tags.items()}
    labels |= {
        TOKEN_LABEL: label_value(request.client_token),
        SIZE_LABEL: str(request.count),
        RANK_LABEL: str(rank),
        MANAGED_LABEL: "true",
    }
    labels[DEPLOYMENT] = cloud.deployment_id
    exact = {**exact_metadata(request.tags), DEPLOYMENT: cloud.deployment_id}
    items = [
        {"key": "startup-script", "value": startup_script(cloud, request, region, rank, name)},
        {"key": TOKEN_LABEL, "value": request.client_token},
        *({"key": k, "value": v} for k, v in sorted(exact.items())),  # labels mangle them: these are exact
    ]
    if request.job_id:
        labels[JOB_LABEL] = label_value(request.job_id)
        items.append({"key": JOB_LABEL, "value": request.job_id})
    body: dict[str, Any] = {
        "name": name,
        "machine_type": f"zones/{request.zone}/machineTypes/{request.instance_type}",
        "labels": labels,
        "metadata": {"items": items},
    }
    if request.spot:
        body["scheduling"] = {
            "provisioning_model": "SPOT",
            "instance_termination_action": "DELETE",
            "automatic_restart": False,
            "on_host_maintenance": "TERMINATE",
        }
    if cloud.template(region) is None:
        body |= image_launch(cloud, region)
    return body


def image_launch(cloud: Cloud, region: str) -> dict:
    """Boot disk from the region's image, its subnetwork (or the network), the instances' service account."""
    image = cloud._per_region(cloud.image, region)
    if not image:
        raise ValueError(
            f"gcp cloud: cloud_options.source_instance_template has no template for region {region} "
            "and cloud_options.image has no image for it; set one of them"
        )
    subnetwork = cloud._per_region(cloud.subnetwork, region)
    if isinstance(cloud.subnetwork, dict) and not subnetwork:
        raise ValueError(f"gcp cloud: cloud_options.subnetwork has no subnetwork for region {region}")
    nic = {"subnetwork": subnetwork} if subnetwork else {"network": cloud.network or "global/networks/default"}
    launch: dict[str, Any] = {
        "disks": [
            {
                "boot": True,
                "auto_delete": True,
                "initialize_params": {"source_image": image, "disk_size_gb": cloud.boot_disk_gb},
            }
        ],
        "network_interfaces": [{**nic, "access_configs": [{"name": "External NAT", "type_": "ONE_TO_ONE_NAT"}]}],
    }
    if cloud.service_account:
        launch["service_accounts"] = [
            {"email": cloud.service_account, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
        ]
    return launch


def metadata_items(instance) -> dict[str, str]:
    """An instance's metadata items as a dict (proto objects and plain dicts alike)."""
    metadata = getattr(instance, "metadata", None)
    items = getattr(metadata, "items", None) if not isinstance(metadata, dict) else metadata.get("items")
    out = {}
    for item in items or []:
        key = item.get("key") if isinstance(item, dict) else getattr(item, "key", None)
        value = item.get("value") if isinstance(item, dict) else getattr(item, "value", None)
        if key is not None:
            out[str(key)] = str(value)
    return out
