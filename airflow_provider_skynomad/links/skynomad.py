"""A button on the task instance that opens the job's group in its cloud console.

As the amazon provider's links do (`BaseAwsLink.persist`), the worker stores what the link points
at in XCom — the console page of every group the job used, newest last, as the cloud names it
(`Cloud.console_url`) — and the link reads it back for the UI. Clouds without a console (the
simulated cloud) store nothing, so no link is shown for a group that has no page.
"""

from __future__ import annotations

from airflow.sdk import BaseOperatorLink

XCOM_KEY = "skynomad_group_links"


def group_links(runner) -> list[dict]:
    """``[{zone, instance_id, url}]`` for every group the job used that has a console page."""
    record = runner.record
    if record is None:
        return []
    links = []
    for handle in record.groups_used:
        url = runner.cloud.console_url(handle)
        if url:
            links.append({"zone": handle.zone, "instance_id": handle.instance_ids[0], "url": url})
    return links


def persist_group_links(context, runner) -> None:
    """Store the job's console links in XCom (ids and places only, never credentials).

    An empty list is stored too: the UI asks for the link of every SkyNomad task, and a missing
    XCom is logged as an error by Airflow.
    """
    context["ti"].xcom_push(key=XCOM_KEY, value=group_links(runner))


class SkyNomadGroupLink(BaseOperatorLink):
    """Cloud console page of the newest group the job ran on."""

    name = "SkyNomad instance"

    def get_link(self, operator, *, ti_key) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        try:
            links = XCom.get_value(key=XCOM_KEY, ti_key=ti_key)
        except Exception:  # noqa: BLE001 - a link that cannot be read is no link
            return ""
        return links[-1]["url"] if links else ""
