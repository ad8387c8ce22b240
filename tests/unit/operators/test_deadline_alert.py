"""Airflow's own deadline view agrees with the job's, in the example DAG on the simulated clock.

Airflow 3.3 deletes a run's deadline when the run *succeeds* with ``end_date <= deadline_time``
(`Deadline.prune_deadlines`, called only on success); any other run keeps it, and the scheduler
marks it missed ("Deadline Missed" on the run page) once ``deadline_time`` passes. The timings
below are the ones measured in the README's ``airflow standalone`` recipe at 300x on a busy
2-core box: a run's first try starts up to 7 s after it was queued, and the run ends up to
18.7 s of wall time after its workload (the trigger's notice, a worker slot for the last step,
the scheduler's mark). Before the fix four fine-tunes that met their deadline 1.4 h early showed
Deadline Missed: the alert was the job's deadline in wall time and nothing for Airflow's own part.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_skynomad.cli import demo

SPEED = 300.0
QUEUE_TO_FIRST_TRY = timedelta(seconds=7.0)
WORKLOAD_END_TO_RUN_END = timedelta(seconds=18.7)


@pytest.fixture
def fine_tune(monkeypatch):
    extra = {"cloud": "simulated", "speed": SPEED, "cloud_options": {"trace_start": 90}}
    monkeypatch.setenv("AIRFLOW_CONN_SKYNOMAD_DEFAULT", json.dumps({"conn_type": "skynomad", "extra": extra}))
    return demo.load_example_dag("skynomad_fine_tune")


def wall(cloud_hours: float) -> timedelta:
    return timedelta(hours=cloud_hours / SPEED)


def airflow_deadline(dag, queued_at: datetime) -> datetime:
    (alert,) = dag.deadline if isinstance(dag.deadline, list) else [dag.deadline]
    assert type(alert.reference).__name__ == "DagRunQueuedAtDeadline"
    return queued_at + alert.interval


def job_deadline(dag, queued_at: datetime) -> datetime:
    """The job's deadline on the wall clock: its cloud hours from the first try, the queue counted 1:1."""
    task = dag.get_task("fine_tune")
    first_try = queued_at + QUEUE_TO_FIRST_TRY
    cloud_hours = task.deadline.total_seconds() / 3600.0 - QUEUE_TO_FIRST_TRY.total_seconds() / 3600.0
    return first_try + wall(cloud_hours)


@pytest.mark.parametrize("early_hours", [1.4, 0.5, 0.0])
def test_a_job_that_meets_its_deadline_ends_its_run_before_airflows_deadline(fine_tune, early_hours):
    queued = datetime(2026, 12, 1, 23, 11, 15, tzinfo=UTC)
    workload_end = job_deadline(fine_tune, queued) - wall(early_hours)
    run_end = workload_end + WORKLOAD_END_TO_RUN_END
    assert run_end <= airflow_deadline(fine_tune, queued)  # pruned: no Deadline Missed


def test_a_job_that_misses_fails_its_run_and_airflow_says_so_within_a_minute(fine_tune):
    queued = datetime(2026, 12, 1, 23, 11, 15, tzinfo=UTC)
    task = fine_tune.get_task("fine_tune")
    # A miss fails the task (no retries), so the run fails and Airflow keeps its deadline ...
    assert task.on_deadline_miss == "fail"
    # ... and marks it missed once it passes: after the job's own deadline, a minute later at most.
    late_by = airflow_deadline(fine_tune, queued) - job_deadline(fine_tune, queued)
    assert timedelta(0) < late_by <= timedelta(minutes=1)
