"""The AWS and GCP adapters end to end through ``dag.test()``: the session's environment
(tests/support/airflow_env.py) plus this folder's DAGs (dags/), copied into its DAGs folder."""

from __future__ import annotations

from pathlib import Path

from tests.support.airflow_env import DAGS_FOLDER, copy_dags  # noqa: F401

copy_dags(Path(__file__).resolve().parent / "dags")
