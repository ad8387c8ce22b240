"""Whole DAG runs through Airflow: the session's environment (tests/support/airflow_env.py) plus this
folder's test DAGs (dags/), copied into its DAGs folder."""

from __future__ import annotations

from pathlib import Path

from tests.support.airflow_env import DAGS_FOLDER, EXAMPLE_DAGS, copy_dags, seed_market  # noqa: F401

TEST_DAGS = copy_dags(Path(__file__).resolve().parent / "dags")
