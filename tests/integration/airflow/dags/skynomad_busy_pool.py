"""Test DAG: the SkyNomad task shares a one-slot pool with a task that holds it for a long time.

While the job is deferred the other task takes the only slot, so every resume waits for it (a
pipeline full of other work). The deadline must hold anyway: the trigger launches the on-demand
safety net itself when waiting for a worker would be too late.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

POOL = "skynomad_tight"
HOG_SECONDS = 30.0

with DAG("skynomad_busy_pool", schedule=None, start_date=datetime(2025, 1, 1), catchup=False) as dag:
    SkyNomadOperator(
        task_id="train",
        work_hours=1.0,
        deadline=timedelta(hours=2.0),
        zones=["us-east4-a", "us-east4-b", "us-east5-a"],
        accelerator="H100",
        decision_step_minutes=10,
        pool=POOL,
    )

    @task(pool=POOL, priority_weight=1)
    def hog() -> None:
        """Someone else's long task in the same pool."""
        time.sleep(HOG_SECONDS)

    hog()
