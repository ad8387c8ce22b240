"""Test DAG: a tiny job on the AWS cloud (moto on localhost in tests/airflow/test_aws_e2e.py).

Two zones in two regions; the job runs on the wall clock (real clouds), so the work is tiny
(`work_hours` from the run's conf, ~1 minute) and the planner decides every 6 s. The policy is
``eager-failover`` (after a preemption: the cheapest spot elsewhere, the preempted region last):
under the ``skynomad`` policy this run relaunched in us-east-1a although its newest market rows
showed no spot capacity there and a price 8x us-west-2a's (reported to the planner's owner).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

with DAG("skynomad_aws_e2e", schedule=None, start_date=datetime(2025, 1, 1), catchup=False) as dag:
    SkyNomadOperator(
        task_id="train",
        work_hours="{{ dag_run.conf.get('work_hours', 0.015) }}",
        deadline=timedelta(minutes=20),
        zones=["us-east-1a", "us-west-2a"],
        instance_types=["g4dn.xlarge"],
        cold_start_hours=0.003,
        checkpoint_gb=0.001,
        decision_step_minutes=0.1,
        policy="eager-failover",
        max_market_age=timedelta(hours=2),
        retries=0,
    )
