"""Test DAGs for the fault tests: one short SkyNomad job on the light workload.

The workload (tests/integration/distributed/light_workload.py: paced steps, no scikit-learn) comes through
the run's conf, as the DAG file itself is copied into a temporary DAGs folder. No retries: a fault
the job cannot carry must fail the run, naming its cause, and leave nothing running.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator


def job_dag(dag_id: str, **overrides) -> DAG:
    with DAG(
        dag_id,
        schedule=None,
        start_date=datetime(2025, 1, 1),
        catchup=False,
        params={"work_hours": 1.0, "workload": "light_workload.py"},
    ) as dag:
        SkyNomadOperator(
            task_id="job",
            work_hours="{{ params.work_hours }}",
            command=[sys.executable, "{{ params.workload }}", "{{ params.work_hours }}", "12"],
            deadline=overrides.pop("deadline", timedelta(hours=3)),
            cold_start_hours=0.1,
            checkpoint_gb=10,
            decision_step_minutes=10,
            retries=0,
            **overrides,
        )
    return dag


dag = job_dag("skynomad_faults")
stale_dag = job_dag("skynomad_faults_stale", max_market_age=timedelta(hours=8))
short_dag = job_dag("skynomad_faults_short", deadline=timedelta(hours=2.5))
on_demand_dag = job_dag("skynomad_faults_on_demand", policy="on-demand")
