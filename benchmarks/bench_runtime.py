"""What one deferred SkyNomad job costs its triggerer and worker, and how often it refits forecasts.

One job on the simulated cloud, driven the way Airflow drives it (execute → trigger → execute_complete
→ ... with an in-memory task state store and a fresh operator object per worker visit). Prints:

- trigger CPU seconds per decision step (the process CPU spent inside the trigger's loop, over the
  number of planner decisions it made);
- worker CPU seconds per visit;
- forecaster fits per job-hour (cloud hours), counted on the default forecaster's ``fit``;
- lines of the Airflow glue and of the job runtime.

The script only uses names that existed before the job runtime moved to ``jobs/``, so the same file
measures an older checkout: ``PYTHONPATH=/path/to/old/checkout python benchmarks/bench_runtime.py``.

Run: ``python benchmarks/bench_runtime.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

from harness import SPEED, STEP_MINUTES, TI, Store, setup  # benchmarks/ is on sys.path as the script's folder

WORK_HOURS = 3.0


def counting(cls, name: str, counter: dict, key: str):
    original = getattr(cls, name)

    def wrapped(self, *args, **kwargs):
        counter[key] += 1
        return original(self, *args, **kwargs)

    setattr(cls, name, wrapped)


def one_job() -> dict:
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_provider_skynomad.forecasts.nelson_aalen import NelsonAalenForecaster
    from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator
    from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy

    counts = {"fits": 0, "decisions": 0}
    counting(NelsonAalenForecaster, "fit", counts, "fits")
    counting(SkyNomadPolicy, "decide", counts, "decisions")

    def op():  # a fresh operator object per worker visit, as Airflow does
        dag = DAG("bench", schedule=None, start_date=datetime(2025, 1, 1))
        return SkyNomadOperator(
            task_id="job",
            dag=dag,
            work_hours=WORK_HOURS,
            deadline=timedelta(hours=WORK_HOURS * 1.6),
            decision_step_minutes=STEP_MINUTES,
        )

    now = datetime.now(UTC)
    context = {"ti": TI(), "dag_run": SimpleNamespace(start_date=now, run_after=now), "task_state_store": Store()}
    worker_cpu = trigger_cpu = 0.0
    trigger_decisions = visits = 0
    started = time.monotonic()
    call, args = op().execute, (context,)
    while True:
        cpu = time.process_time()
        try:
            summary = call(*args)
            worker_cpu += time.process_time() - cpu
            visits += 1
            break
        except TaskDeferred as deferred:
            worker_cpu += time.process_time() - cpu
            visits += 1
            trigger = deferred.trigger
        before, cpu = counts["decisions"], time.process_time()
        event = asyncio.run(anext(trigger.run())).payload
        trigger_cpu += time.process_time() - cpu
        trigger_decisions += counts["decisions"] - before
        call, args = op().execute_complete, (context, event)
    wall = time.monotonic() - started
    job_hours = summary["elapsed_hours"]
    return {
        "job_hours": round(job_hours, 2),
        "job_wall_seconds": round(wall, 1),
        "trigger_decision_steps": trigger_decisions,
        "worker_visits": visits,
        "trigger_cpu_seconds_per_step": round(trigger_cpu / max(trigger_decisions, 1), 4),
        "worker_cpu_seconds_per_visit": round(worker_cpu / max(visits, 1), 4),
        "forecaster_fits": counts["fits"],
        "forecaster_fits_per_job_hour": round(counts["fits"] / max(job_hours, 1e-9), 2),
        "deadline_met": summary["deadline_met"],
        "preemptions": summary["preemptions"],
        "migrations": summary["migrations"],
    }


def lines_of_code() -> dict:
    import airflow_provider_skynomad

    root = Path(airflow_provider_skynomad.__file__).parent
    out = {}
    for folder in ("operators", "triggers", "hooks", "links", "jobs"):
        files = sorted((root / folder).glob("*.py"))
        out[folder] = sum(len(f.read_text().splitlines()) for f in files) if files else 0
    return out


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="skynomad-bench-runtime-") as tmp:
        setup(Path(tmp))
        import airflow_provider_skynomad

        print(f"code: {Path(airflow_provider_skynomad.__file__).parent}")
        print(f"step: {STEP_MINUTES:.0f} simulated minutes = {STEP_MINUTES * 60 / SPEED:.2f} wall s at {SPEED:g}x")
        print("job:", json.dumps(one_job()))
        print("lines:", json.dumps(lines_of_code()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
