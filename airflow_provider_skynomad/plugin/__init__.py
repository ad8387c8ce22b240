"""The SkyNomad plugin: a job page per task instance, a markets page and a jobs dashboard in the Airflow UI.

The provider ships it through ``plugins`` in its provider info (get_provider_info.py). The pages
are server-rendered HTML with inline SVG from the FastAPI app in app.py, mounted under
``/skynomad`` and shown by the UI as external views; nothing is loaded from the internet.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_skynomad.plugin.app import PREFIX, app

JOB_VIEW = {
    "name": "SkyNomad job",
    "href": PREFIX + "/job/{DAG_ID}/{RUN_ID}/{TASK_ID}?map_index={MAP_INDEX}",
    "destination": "task_instance",
    "url_route": "skynomad_job",
}
MARKETS_VIEW = {
    "name": "SkyNomad markets",
    "href": PREFIX + "/markets",
    "destination": "nav",
    "category": "browse",
    "url_route": "skynomad_markets",
}
JOBS_VIEW = {
    "name": "SkyNomad jobs",
    "href": PREFIX + "/jobs",
    "destination": "nav",
    "category": "browse",
    "url_route": "skynomad_jobs",
}


class SkyNomadPlugin(AirflowPlugin):
    """Registers the FastAPI app and the three views (see the module docstring)."""

    name = "skynomad"
    fastapi_apps = [{"app": app, "url_prefix": PREFIX, "name": "SkyNomad"}]
    external_views = [JOB_VIEW, MARKETS_VIEW, JOBS_VIEW]
