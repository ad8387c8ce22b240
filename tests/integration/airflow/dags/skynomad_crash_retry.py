"""Test DAG: the SkyNomad task's first try dies right after launching, before it can defer.

The retry must find the job in the task state store and reconnect to the group already running,
not launch a second one.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator


class WorkerDiesAfterLaunch(SkyNomadOperator):
    def _answer(self, context, answer, runner):
        if context["ti"].try_number == 1 and runner.record is not None and runner.record.launches == 1:
            raise RuntimeError("simulated worker crash right after the first launch")
        return super()._answer(context, answer, runner)


with DAG("skynomad_crash_retry", schedule=None, start_date=datetime(2025, 1, 1), catchup=False) as dag:
    WorkerDiesAfterLaunch(
        task_id="job",
        work_hours=1.5,
        deadline=timedelta(hours=4),
        policy="on-demand",
        accelerator="H100",
        retries=1,
        retry_delay=timedelta(seconds=0),
    )
