"""skynomad_existing_pipeline: an ordinary extract → train → evaluate DAG, with one operator swapped in.

The training step used to be a fixed on-demand job. Replacing it with ``SkyNomadOperator`` is
the whole adoption path: the same command, plus a work estimate and a deadline (here relative:
12 h after the run starts). Upstream and downstream tasks do not change; ``evaluate`` reads the
model the job wrote and the cost summary the operator returned.

To see a workload slower than declared, trigger it with conf ``{"work_hours": 6, "workload_hours":
7.5}``: the job declares 6 h of work (``work_hours``) while the bundled workload really does 7.5 h
(25 % slower). The task log says the pace it measured soon after the first checkpoints, and the
planner plans with it.
"""

from __future__ import annotations

import pickle
import sys
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

with DAG(
    dag_id="skynomad_existing_pipeline",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    params={"work_hours": 6.0, "total_steps": 60, "workload_hours": None},
    tags=["skynomad", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def extract(params=None) -> dict:
        """Stand-in for the pipeline's own extract: pick the data set and the training length."""
        from sklearn.datasets import load_digits

        rows = len(load_digits().target)
        return {"dataset": "sklearn-digits", "rows": rows, "total_steps": int(params["total_steps"])}

    train = SkyNomadOperator(
        task_id="train",
        command=[
            sys.executable,
            "-m",
            "airflow_provider_skynomad.workload.train",
            "--total-steps",
            "{{ ti.xcom_pull(task_ids='extract')['total_steps'] }}",
            "--work-hours",
            "{{ params.workload_hours or params.work_hours }}",  # the work it really does
        ],
        work_hours="{{ params.work_hours }}",
        deadline=timedelta(hours=12),
        accelerator="H100",
        checkpoint_gb=20,
        decision_step_minutes=10,
        max_market_age=None,  # what the skynomad_probe DAG's pace keeps, read when the task runs
    )

    @task
    def evaluate(summary: dict) -> dict:
        """Score the trained model on the data set and report it beside the job's cost."""
        from sklearn.datasets import load_digits

        digits = load_digits()
        model = pickle.loads((Path(summary["output_dir"]) / "model.pkl").read_bytes())
        accuracy = float(model.score(digits.data / 16.0, digits.target))
        print(
            f"accuracy {accuracy:.3f}; cost ${summary['cost_usd']['total']:.2f} vs all-on-demand "
            f"${summary['all_on_demand_cost_usd']:.2f}; deadline met: {summary['deadline_met']}"
        )
        return {"accuracy": accuracy, "cost_usd": summary["cost_usd"]["total"]}

    extract() >> train
    evaluate(train.output)
