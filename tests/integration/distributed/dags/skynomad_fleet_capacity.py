"""Shared-capacity fleet DAG: one gang of 4 per run, its work, deadline and planner from the run's conf.

benchmarks/bench_fleet_distributed.py triggers many runs of it, staggered, on the simulated cloud's
shared spot capacity: the GCP H100 trace shows at most 16 instances per zone, so 50 gangs of 4
cannot all hold spot at once. Per run: ``work_hours`` (P), ``deadline_hours`` (T, relative to the
run's start), ``policy`` and ``policy_params`` (the planner; the operator takes these as plain
arguments, so they are made templated here). Templates render to native values (the deadline a
number of hours, not text). A missed deadline is reported, not failed (``on_deadline_miss="warn"``),
so every run leaves its summary for the benchmark. The workload is tests/integration/distributed/light_workload.py.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

WORKLOAD = str(Path(__file__).resolve().parents[1] / "light_workload.py")
INSTANCES = 4
COLD_START_HOURS = 0.2


class FleetJob(SkyNomadOperator):
    """SkyNomadOperator whose planner can be chosen per run."""

    template_fields = (*SkyNomadOperator.template_fields, "policy", "policy_params", "fleet_aware")


with DAG(
    "skynomad_fleet_capacity",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1000,
    max_active_tasks=1000,
    render_template_as_native_obj=True,
    params={"work_hours": 3.0, "deadline_hours": 4.5, "policy": "skynomad", "policy_params": {}, "fleet_aware": True},
) as dag:
    FleetJob(
        task_id="train",
        work_hours="{{ params.work_hours }}",
        deadline="{{ params.deadline_hours }}",
        policy="{{ params.policy }}",
        policy_params="{{ params.policy_params }}",
        fleet_aware="{{ params.fleet_aware }}",
        command=[sys.executable, WORKLOAD, "{{ params.work_hours }}", "20"],
        instances=INSTANCES,
        accelerator="H100",
        cold_start_hours=COLD_START_HOURS,
        checkpoint_gb=50,
        decision_step_minutes=10,
        on_deadline_miss="warn",
        retries=3,
        retry_delay=timedelta(seconds=2),
    )
