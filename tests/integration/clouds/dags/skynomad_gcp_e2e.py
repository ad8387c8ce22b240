"""Test DAG: a tiny job on the GCP adapter (fake Compute Engine, GCS emulator; test_gcp_e2e.py beside dags/).

Two regions, spot, decisions every 6 s: half a minute of work on the bundled training
loop, so the preemption, the move to the other region and the finish all happen within a minute or two.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

WORK_HOURS = 0.0075  # 27 s of work: 20 steps of 1.35 s (workload.default_steps)

with DAG("skynomad_gcp_e2e", schedule=None, start_date=datetime(2025, 1, 1), catchup=False) as dag:
    SkyNomadOperator(
        task_id="train",
        work_hours=WORK_HOURS,
        deadline=timedelta(hours=0.25),
        zones=["us-central1-a", "europe-west4-b"],
        accelerator="H100",
        # SkyPilot's EAGER_NEXT_REGION: after the preemption the other region first, whatever A's
        # forecast says, so the run moves regions deterministically (the adapter is under test here).
        policy="eager-failover",
        cold_start_hours=0.003,
        checkpoint_gb=0.001,
        decision_step_minutes=0.1,
        max_wall_seconds_per_step=3.0,
        retries=1,
        retry_delay=timedelta(seconds=0),
    )
