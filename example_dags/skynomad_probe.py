"""skynomad_probe: keep the market table fresh, one mapped probe task per cloud/region.

Every interval (``SKYNOMAD_PROBE_INTERVAL_MINUTES``, default 10) the first task lists what the
`skynomad` connection's cloud can be asked about (the simulated cloud's catalog is its trace),
then one ``SkyNomadProbeOperator`` per cloud/region launches spot instances in each zone,
releases them at once and appends the observations to the market table. A region that fails
fails only its own mapped task: the other regions' rows are already written.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_skynomad.hooks.skynomad import SkyNomadHook
from airflow_provider_skynomad.operators.probe import SkyNomadProbeOperator, probe_targets

PROBE_INTERVAL = timedelta(minutes=float(os.environ.get("SKYNOMAD_PROBE_INTERVAL_MINUTES", "10")))

with DAG(
    dag_id="skynomad_probe",
    schedule=PROBE_INTERVAL,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={"regions": None, "count": 16},
    tags=["skynomad", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def list_targets(params=None) -> list[dict]:
        config = SkyNomadHook().get_config()
        return probe_targets(config, regions=params.get("regions"), count=int(params.get("count") or 16))

    SkyNomadProbeOperator.partial(
        task_id="probe",
        map_index_template="{{ task.target['cloud'] }}/{{ task.target['region'] }}",
        retries=1,
        retry_delay=timedelta(seconds=5),
    ).expand(target=list_targets())
