"""A button on every SkyNomad task instance that opens its job page (the plugin's view of the task).

Unlike the console link, nothing needs persisting: the page is addressed by the task instance
itself, and the page says so when the task has not started a job yet. The path is relative to the
api-server (its ``[api] base_url`` path prefix kept), so it works behind a proxy too.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from airflow.sdk import BaseOperatorLink

JOB_PAGE_PREFIX = "/skynomad/job"


def job_page_path(dag_id: str, run_id: str, task_id: str, map_index: int = -1, base_url: str = "") -> str:
    prefix = urlsplit(base_url).path.rstrip("/") if base_url else ""
    path = f"{prefix}{JOB_PAGE_PREFIX}/{quote(dag_id, safe='')}/{quote(run_id, safe='')}/{quote(task_id, safe='')}"
    return path + (f"?map_index={map_index}" if map_index is not None and map_index >= 0 else "")


class SkyNomadJobLink(BaseOperatorLink):
    """The job page: where the job runs, why it moved, progress against its deadline, spend."""

    name = "SkyNomad job page"

    def get_link(self, operator, *, ti_key) -> str:
        try:
            from airflow.configuration import conf

            base_url = conf.get("api", "base_url", fallback="") or ""
        except Exception:  # noqa: BLE001 - no configuration: a root-relative path still works
            base_url = ""
        return job_page_path(ti_key.dag_id, ti_key.run_id, ti_key.task_id, ti_key.map_index, base_url)
