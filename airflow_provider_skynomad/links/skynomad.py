"""A button on the task instance that opens the job's current group in its cloud console.

Airflow 3 resolves operator links on the worker when a task attempt ends and stores the URL
in XCom for the UI. The operator keeps ``{cloud, region, zone, instance_id}`` of its current
group on itself (ids and places only, never credentials), so the link needs no extra XCom:
AWS and GCP get their console URL, the simulated cloud none.
"""

from __future__ import annotations

from airflow.sdk import BaseOperatorLink

ATTRIBUTE = "_skynomad_group_link"

CONSOLE = {
    "aws": "https://console.aws.amazon.com/ec2/home?region={region}#InstanceDetails:instanceId={instance_id}",
    "gcp": "https://console.cloud.google.com/compute/instancesDetail/zones/{zone}/instances/{instance_id}",
}


def console_url(data: dict | None) -> str:
    if not data or data.get("cloud") not in CONSOLE or not data.get("instance_id"):
        return ""
    try:
        return CONSOLE[data["cloud"]].format(**data)
    except KeyError:
        return ""


def link_data(handle: dict | None, region: str | None) -> dict | None:
    if not handle or not handle.get("instance_ids"):
        return None
    return {
        "cloud": handle["cloud"],
        "region": region,
        "zone": handle["zone"],
        "instance_id": handle["instance_ids"][0],
    }


class SkyNomadGroupLink(BaseOperatorLink):
    """Cloud console page of the first instance of the job's current group."""

    name = "SkyNomad instance"

    def get_link(self, operator, *, ti_key) -> str:
        return console_url(getattr(operator, ATTRIBUTE, None))
