"""skynomad_fine_tune: one deadline-bound training job, placed and moved by the SkyNomad planner.

The job's deadline (10 h, of its cloud's clock) and the DAG's ``DeadlineAlert`` come from one
number. The alert counts on Airflow's wall clock from the run's queued time to the run's end;
the job counts on its cloud's clock from its task's start to its workload's end. So
`alert_interval` takes the deadline in wall time (``speed`` times shorter on the simulated
cloud, the speed read from the connection's definition in the environment: parsing this file
looks up no connection) plus two minutes for what only Airflow counts: the queue before the
first try, and after the workload ends the trigger's notice, a worker slot for the last step and
the scheduler's mark (86 s together on a loaded 2-core box). A job that meets its deadline ends
its run before the alert; one that misses it fails its task, Airflow keeps the deadline of a run
that did not succeed, and the run page shows Deadline Missed when the alert passes, two minutes
of wall time after the job's own deadline at most.

On the default simulated cloud the bundled training loop runs as a real subprocess, checkpoints,
is preempted when the replayed trace loses capacity and resumes elsewhere; the task returns a
small summary (zones timeline, hours by mode, cost, all-on-demand cost, deadline met). Its
``max_market_age`` is None: what the skynomad_probe DAG's pace keeps, read from the connection
when the task runs (`jobs/probe_schedule.py`).
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
        max_market_age=None,  # what the skynomad_probe DAG's pace keeps, read when the task runs
        retries=2,
        retry_delay=timedelta(seconds=2),
    )
