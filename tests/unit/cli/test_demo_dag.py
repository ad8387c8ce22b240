"""`skynomad demo` checks --work-hours and --trace-start-hours against the fine-tune DAG before it
deletes anything, from constants of its own (the parent process never imports Airflow): they must be
what the DAG declares."""

from __future__ import annotations

from datetime import timedelta

from airflow_provider_skynomad.cli import demo


def test_demo_constants_are_the_fine_tune_dags():
    dag = demo.load_example_dag("skynomad_fine_tune")
    assert dag.get_task("fine_tune").deadline == timedelta(hours=demo.FINE_TUNE_DEADLINE_HOURS)
    assert dag.get_task("fine_tune").cold_start_hours == demo.FINE_TUNE_COLD_START_HOURS
