"""Airflow's own deadline view agrees with the job's, in the example DAG on the simulated clock.

Airflow 3.3 deletes a run's deadline when the run *succeeds* with ``end_date <= deadline_time``
(`Deadline.prune_deadlines`, called only on success); any other run keeps it, and the scheduler
marks it missed ("Deadline Missed" on the run page) once ``deadline_time`` passes. The timings
below are the ones measured in the README's ``airflow standalone`` recipe at 300x on a loaded
2-core box (a CPU burner beside it): a run's first try starts up to 38 s after it was queued, and
the run ends up to 48 s of wall time after its workload (the trigger's notice, a worker slot for
the last step, the scheduler's mark). With a one-minute allowance three fine-tunes that met their
deadline showed Deadline Missed; on an idle box the same two were 7 s and 18.7 s.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_skynomad.cli import demo
from airflow_provider_skynomad.operators.skynomad import AIRFLOW_ALLOWANCE

SPEED = 300.0
QUEUE_TO_FIRST_TRY = timedelta(seconds=38.0)
WORKLOAD_END_TO_RUN_END = timedelta(seconds=48.0)


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


def test_a_job_that_misses_fails_its_run_and_airflow_says_so_within_the_allowance(fine_tune):
    queued = datetime(2026, 12, 1, 23, 11, 15, tzinfo=UTC)
    task = fine_tune.get_task("fine_tune")
    # A miss fails the task (no retries), so the run fails and Airflow keeps its deadline ...
    assert task.on_deadline_miss == "fail"
    # ... and marks it missed once it passes: after the job's own deadline, the allowance later at most.
    late_by = airflow_deadline(fine_tune, queued) - job_deadline(fine_tune, queued)
    assert timedelta(0) < late_by <= AIRFLOW_ALLOWANCE == timedelta(minutes=2)


def test_the_alert_interval_reads_the_speed_from_the_environment_and_looks_up_no_connection(monkeypatch):
    from airflow.sdk.bases.hook import BaseHook

    from airflow_provider_skynomad.operators.skynomad import alert_interval

    def looked_up(*args, **kwargs):
        raise AssertionError("a connection lookup while a DAG file is parsed")

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(looked_up))
    extra = {"cloud": "simulated", "speed": 300}
    monkeypatch.setenv("AIRFLOW_CONN_SKYNOMAD_DEFAULT", json.dumps({"conn_type": "skynomad", "extra": extra}))
    assert alert_interval(timedelta(hours=10)) == timedelta(minutes=2) + AIRFLOW_ALLOWANCE
    assert alert_interval(timedelta(hours=10), speed=3600) == timedelta(seconds=10) + AIRFLOW_ALLOWANCE
    # a connection the environment does not define (the metadata database's): a real cloud's clock,
    # so the alert comes late rather than falsely
    monkeypatch.delenv("AIRFLOW_CONN_SKYNOMAD_DEFAULT")
    assert alert_interval(timedelta(hours=10)) == timedelta(hours=10) + AIRFLOW_ALLOWANCE
