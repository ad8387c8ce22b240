"""skynomad_fine_tune: one deadline-bound training job, placed and moved by the SkyNomad planner.

The job's deadline (10 h) and the DAG's ``DeadlineAlert`` come from one number, on one clock: the
alert fires when the job's own deadline passes, on the simulated cloud too (`alert_interval`
shortens it by the simulated clock's speed). They can disagree near the end there: the job counts
the run's wall time before the task started one to one (not `speed` times) and stops its clock
when the workload finishes, while Airflow counts the run until it ends. A job that finishes less
than (those seconds + the worker's resume lag) × speed before its deadline, about 0.8 h at 300x in
``airflow standalone``, says "deadline met" while the run page says the deadline was missed. On
a real cloud both are the same few seconds. On the default simulated
cloud the bundled training loop runs as a real subprocess, checkpoints, is preempted when the
replayed trace loses capacity and resumes elsewhere; the task returns a small summary (zones
timeline, hours by mode, cost, all-on-demand cost, deadline met).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, AsyncCallback, DeadlineAlert, DeadlineReference

from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator, alert_interval, on_deadline_missed

DEADLINE = timedelta(hours=10)  # of the job's cloud time (simulated hours on the simulated cloud)

with DAG(
    dag_id="skynomad_fine_tune",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    params={"work_hours": 8.0, "policy": "skynomad"},
    deadline=DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=alert_interval(DEADLINE),
        callback=AsyncCallback(on_deadline_missed),
    ),
    tags=["skynomad", "example"],
    doc_md=__doc__,
) as dag:
    SkyNomadOperator(
        task_id="fine_tune",
        work_hours="{{ params.work_hours }}",
        deadline=DEADLINE,
        accelerator="H100",
        instances=1,
        cold_start_hours=0.2,
        checkpoint_gb=50,
        policy="skynomad",
        decision_step_minutes=10,
        retries=2,
        retry_delay=timedelta(seconds=2),
    )
