"""Test DAG: every run of it trains in the same zone (one zone allowed, on-demand).

Two runs at once on one connection must each resume only their own checkpoints and each end
with their own model, bit-identical to an uninterrupted run.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

with DAG("skynomad_same_zone", schedule=None, start_date=datetime(2025, 1, 1), catchup=False, max_active_runs=2) as dag:
    SkyNomadOperator(
        task_id="train",
        work_hours=1.0,
        deadline=timedelta(hours=3),
        zones=["us-central1-a"],
        policy="on-demand",
        accelerator="H100",
        decision_step_minutes=10,
        # One zone, on-demand: the market table's age changes nothing here, so a run needs no probe
        # run just before it (at the test's 200x two days are 14 wall minutes).
        max_market_age=timedelta(days=2),
    )
