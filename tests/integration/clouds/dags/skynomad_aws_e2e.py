"""Test DAG: a tiny job on the AWS cloud (moto on localhost in tests/integration/clouds/test_aws_e2e.py).

Two zones in two regions; the job runs on the wall clock (real clouds), so the work is tiny
(`work_hours` from the run's conf, half a minute) and the planner (the ``skynomad`` policy) decides
every 6 s. After the preemption it retries us-east-1a while the market rows it has read still show it
cheap (by design: a refused launch costs nothing and staying saves the egress); the test makes EC2
refuse it for capacity, as it would.
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
        max_market_age=timedelta(hours=2),
        retries=0,
    )
