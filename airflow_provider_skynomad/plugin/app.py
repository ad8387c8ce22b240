"""The plugin's FastAPI app, mounted by the api-server under /skynomad: every route goes through the auth manager.

A plugin's FastAPI app is not behind Airflow's auth by itself, so each route depends on the
api-server's own security dependencies (airflow.api_fastapi.core_api.security):

- a job page: ``requires_access_dag("GET", TASK_INSTANCE)`` on the DAG in its path, as the public
  task-state-store route does (no session → 401, a bad token → 403, a DAG you may not read → 403);
  it shows only the task instance's own job, read from the connection its DAG declares (plugin/jobs.py);
- the jobs dashboard: a signed-in user, and only the DAGs ``get_authorized_dag_ids`` gives them;
- the markets page: a signed-in user (market data belongs to no DAG), a SkyNomad connection, and one
  other than the default only for users who may read it; its probe button triggers
  ``skynomad_probe`` only for users allowed to run that DAG (``requires_access_dag("POST", RUN)``).

The session is Airflow's own JWT cookie, which the UI's iframe sends (SameSite=lax). The probe
button's POST is also refused unless it comes from this server's own origin (auth.same_origin): a
page on another port or subdomain of the same site gets the cookie too. No page renders a
connection: the market table is named by its URL with the password hidden.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from airflow_provider_skynomad.config import DEFAULT_CONN_ID
from airflow_provider_skynomad.plugin.auth import (
    auth_manager,
    current_user,
    dag_access,
    may_read_connection,
    may_run,
    same_origin,
)

log = logging.getLogger(__name__)
PREFIX = "/skynomad"
PROBE_DAG_ID = "skynomad_probe"

# No /docs or /openapi.json: they would be the only routes outside the auth manager.
app = FastAPI(title="SkyNomad", docs_url=None, redoc_url=None, openapi_url=None)


def job_href(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    path = f"{PREFIX}/job/{quote(dag_id, safe='')}/{quote(run_id, safe='')}/{quote(task_id, safe='')}"
    return path + (f"?map_index={map_index}" if map_index >= 0 else "")


@app.get(
    "/job/{dag_id}/{run_id}/{task_id}",
    response_class=HTMLResponse,
    dependencies=[Depends(dag_access("GET", "TASK_INSTANCE"))],
)
def job_page(dag_id: str, run_id: str, task_id: str, map_index: str = "-1") -> HTMLResponse:
    """One SkyNomad task instance: live while deferred (its status), final after (its summary).

    `map_index` comes from the UI's URL template: a task that is not mapped may get it empty or as the
    unfilled ``{MAP_INDEX}``, which means -1.
    """
    try:
        map_index = max(-1, int(map_index))
    except ValueError:
        map_index = -1
    title = f"{dag_id} / {run_id} / {task_id}" + (f" [{map_index}]" if map_index >= 0 else "")
    from airflow_provider_skynomad.plugin import jobs, pages
    from airflow_provider_skynomad.plugin.facts import job_facts

    job = jobs.find_job(dag_id, run_id, task_id, map_index)
    if job is None:
        raise HTTPException(404, f"no task instance {title}")
    if job.foreign:
        note = f"This job cannot be shown: {job.foreign}. Clear this task's state to start again."
        return HTMLResponse(pages.job_page(title, job.ti_state, None, note))
    if job.record is None:
        if job.ti_state in ("failed", "upstream_failed"):
            note = (
                "This task failed before it started a job (for example an impossible deadline or a stale "
                "market table): nothing was launched, and its log says why."
            )
        else:
            note = (
                "This task has no SkyNomad job record (yet): it has not started a job, or its task state was cleared."
            )
        return HTMLResponse(pages.job_page(title, job.ti_state, None, note))
    try:
        facts = job_facts(job.record, job.status)
    except Exception as exc:  # noqa: BLE001 - a record anyone with the DAG's task state could write
        log.warning("SkyNomad job page %s: %s", title, exc, exc_info=not isinstance(exc, ValueError))
        note = f"This job's record or live status could not be shown: {exc}"
        return HTMLResponse(pages.job_page(title, job.ti_state, None, note))
    note = "" if facts.finished else f"Live: this page reloads every {pages.REFRESH_SECONDS} s."
    return HTMLResponse(pages.job_page(title, job.ti_state, facts, note))


@app.get("/jobs", response_class=HTMLResponse)
def jobs_dashboard(
    user: Annotated[object, Depends(current_user)], days: Annotated[float, Query(gt=0, le=366)] = 7
) -> HTMLResponse:
    """Every SkyNomad task of the last `days` days in the DAGs this user may read."""
    from airflow_provider_skynomad.plugin import jobs, pages

    readable = auth_manager().get_authorized_dag_ids(user=user, method="GET")
    found = jobs.list_jobs(set(readable), days)
    return HTMLResponse(pages.dashboard_page(found, days, lambda j: job_href(*j.key)))


@app.get("/markets", response_class=HTMLResponse)
def markets(
    user: Annotated[object, Depends(current_user)],
    days: Annotated[float, Query(gt=0, le=366)] = 7,
    conn_id: str = DEFAULT_CONN_ID,
    max_age_hours: Annotated[float | None, Query(gt=0)] = None,
    probe: str = "",
) -> HTMLResponse:
    """The market table behind `conn_id`: availability heatmap, prices, probe ages, forecasts, probe spend.

    Heatmap and prices come from the database's GROUP BY (market/store/aggregate.py), the forecast from the
    last `FORECAST_DAYS` of rows, so the page costs about the same for a week or a month of probes.
    """
    import pandas as pd

    from airflow_provider_skynomad.clouds.factory import market_now
    from airflow_provider_skynomad.market.store.table import MarketTable
    from airflow_provider_skynomad.plugin import pages
    from airflow_provider_skynomad.plugin.connections import market_config
    from airflow_provider_skynomad.plugin.markets import daily_probe_spend, fleet_holdings, market_summary
    from airflow_provider_skynomad.plugin.overview import expected_max_age_hours

    config = market_config(conn_id, lambda conn: may_read_connection(user, conn))
    if max_age_hours is None:
        max_age_hours = expected_max_age_hours(config)
    url = config.market_url
    now = market_now(config)  # the simulated cloud's rows are on its replayed trace's clock
    since = now - pd.Timedelta(days=days)
    table = MarketTable(url)
    try:
        heat, prices, rows = market_summary(table, since, now, max_age_hours)
    finally:
        table.close()
    can_probe = may_run(user, PROBE_DAG_ID)
    message = {"started": f"Started a {PROBE_DAG_ID} run.", "missing": f"There is no {PROBE_DAG_ID} DAG."}.get(
        probe, ""
    )
    html = pages.markets_page(
        rows,
        heat,
        prices,
        daily_probe_spend(url, since),
        held=fleet_holdings(url, rows),
        days=days,
        max_age_hours=max_age_hours,
        source=table.display_url,
        can_probe=can_probe,
        probe_message=message,
    )
    return HTMLResponse(html)


@app.post(
    "/probe",
    dependencies=[Depends(dag_access("POST", "RUN", dag_id=PROBE_DAG_ID)), Depends(same_origin)],
)
def trigger_probe(request: Request, user: Annotated[object, Depends(current_user)]) -> RedirectResponse:
    """Start a run of the probe DAG, then back to the markets page."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.exceptions import DagNotFound
    from airflow.utils.types import DagRunTriggeredByType

    try:
        trigger_dag(
            PROBE_DAG_ID,
            triggered_by=DagRunTriggeredByType.UI,
            triggering_user_name=getattr(user, "get_name", lambda: None)(),
            run_id=f"manual__skynomad_ui__{datetime.now(UTC):%Y%m%dT%H%M%S%f}",
        )
        outcome = "started"
    except DagNotFound:
        outcome = "missing"
    return RedirectResponse(f"markets?probe={outcome}", status_code=303)
