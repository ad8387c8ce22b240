"""Test DAG: every resume is slow and the workload starts slowly and checkpoints late, on a tight deadline.

``execute_complete`` sleeps before it acts (as under a saturated worker pool or a busy box), and the
workload sleeps before it starts training, so its first checkpoint comes long after the declared cold
start. The start's delay is ``SKYNOMAD_TEST_DELAY_SECONDS`` of wall time (the test sets a quarter of a
cloud hour at its cloud's speed; 1.5 s by default, a quarter of an hour at 600×), the resume's
``SKYNOMAD_TEST_RESUME_DELAY_SECONDS`` (the start's by default). The job must still meet
its deadline: the task fails if it does not (``on_deadline_miss="fail"``).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

START_DELAY_SECONDS = float(os.environ.get("SKYNOMAD_TEST_DELAY_SECONDS", "1.5"))
RESUME_DELAY_SECONDS = float(os.environ.get("SKYNOMAD_TEST_RESUME_DELAY_SECONDS", START_DELAY_SECONDS))


class SlowResume(SkyNomadOperator):
    def execute_complete(self, context, event=None):
        time.sleep(RESUME_DELAY_SECONDS)
        return super().execute_complete(context, event)


SLOW_START = (
    f"sleep {START_DELAY_SECONDS}; SKYNOMAD_WORKLOAD_START_WALL=$(date +%s.%N) exec {sys.executable} "
    "-m airflow_provider_skynomad.workload.train --total-steps 20 --work-hours 2.0"
)

with DAG("skynomad_slow_resume", schedule=None, start_date=datetime(2025, 1, 1), catchup=False) as dag:
    SlowResume(
        task_id="job",
        command=["sh", "-c", SLOW_START],
        work_hours=2.0,
        deadline=timedelta(hours=3.5),
        zones=["us-east4-a", "us-east4-b", "us-east5-a"],
        accelerator="H100",
        decision_step_minutes=10,
    )
