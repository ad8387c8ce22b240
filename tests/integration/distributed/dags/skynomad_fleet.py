"""Fleet DAG: one SkyNomad job per run, many runs at once (the distributed harness triggers N of them).

The workload is tests/integration/distributed/light_workload.py (no scikit-learn per group, so hundreds of
groups fit on a small box). ``work_hours`` comes from the run's conf; the deadline is fixed and
feasible (T ≥ P + d). Retries reconnect to the running job after a worker dies.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

WORKLOAD = str(Path(__file__).resolve().parents[1] / "light_workload.py")
DEADLINE_HOURS = 2.5

with DAG(
    "skynomad_fleet",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1000,
    max_active_tasks=1000,
    params={"work_hours": 1.0},
) as dag:
    SkyNomadOperator(
        task_id="train",
        work_hours="{{ params.work_hours }}",
        command=[sys.executable, WORKLOAD, "{{ params.work_hours }}", "20"],
        deadline=timedelta(hours=DEADLINE_HOURS),
        accelerator="H100",
        cold_start_hours=0.2,
        checkpoint_gb=50,
        decision_step_minutes=10,
        retries=3,
        retry_delay=timedelta(seconds=2),
    )
