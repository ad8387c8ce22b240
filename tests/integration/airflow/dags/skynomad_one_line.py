"""Test DAG: a job whose market table is stale (tests/integration/airflow/test_operator_one_line.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

with DAG("skynomad_one_line", schedule=None, start_date=datetime(2025, 1, 1), catchup=False) as dag:
    SkyNomadOperator(task_id="job", work_hours=2.0, deadline=timedelta(hours=4), retries=2)
