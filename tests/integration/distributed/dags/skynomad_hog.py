"""Someone else's pipeline: mapped tasks that hold worker slots for a while (a saturated worker pool)."""

from __future__ import annotations

import time
from datetime import datetime

from airflow.sdk import DAG, task

with DAG(
    "skynomad_hog", schedule=None, start_date=datetime(2025, 1, 1), catchup=False, params={"tasks": 8, "seconds": 20}
) as dag:

    @task
    def slots(params=None) -> list[float]:
        return [float(params["seconds"])] * int(params["tasks"])

    @task(priority_weight=1)
    def hold(seconds: float) -> None:
        """Hold one worker slot (an ordinary task of another team)."""
        time.sleep(seconds)

    hold.expand(seconds=slots())
