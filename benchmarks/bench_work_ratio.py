"""Jobs whose real work differs from their declared `work_hours`, run by the Airflow runtime on the simulated cloud.

The issue's cases: 4 h declared and 5 h real at deadlines 5.6 h and 6.0 h (feasible at the real
pace even all on-demand: 5.2 h), starting at trace hours 89.5 and 135 of the bundled GCP week,
13 zones; and 5 h declared, 4 h real. Each job runs as Airflow drives a deferrable task
(`execute` → the trigger, which controls the job to its end → `execute_complete`), its workload
the bundled training loop paced to the *real* work, in a process of its own (its own simulated
clock). Prints one line per case:

    work: declared=4 real=5 deadline=5.6 trace_hour=89.5 met=True finished=5.41 pace_said=1.25 cost=31.2 ...

`--believe-declared` plans with the declared work throughout (the pace measured but not used):
what the runtime did before it measured the pace. Run: ``python benchmarks/bench_work_ratio.py``
(about 4 minutes on 2 cores; 600x).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

from harness import SPEED, STEP_MINUTES, TI, Store, setup  # benchmarks/ is on sys.path as the script's folder

CASES = [(4.0, 5.0, 5.6, 89.5), (4.0, 5.0, 6.0, 89.5), (4.0, 5.0, 5.6, 135.0), (4.0, 5.0, 6.0, 135.0)]
FASTER = (5.0, 4.0, 7.0, 89.5)


def one_job(declared: float, real: float, deadline: float, believe_declared: bool) -> dict:
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator
    from airflow_provider_skynomad.workload import default_workload

    if believe_declared:
        from airflow_provider_skynomad.planner.pace import Pace

        Pace.work_hours_bound = property(lambda self: self.declared_work_hours)
        Pace.ratio_to_declared = lambda self: None

    def op():  # a fresh operator object per worker visit, as Airflow does
        dag = DAG("bench_work_ratio", schedule=None, start_date=datetime(2025, 1, 1))
        return SkyNomadOperator(
            task_id="job",
            dag=dag,
            work_hours=declared,
            command=default_workload(real),  # the workload really needs `real` hours
            deadline=timedelta(hours=deadline),
            decision_step_minutes=STEP_MINUTES,
            on_deadline_miss="warn",
        )

    now = datetime.now(UTC)
    store = Store()
    context = {"ti": TI(), "dag_run": SimpleNamespace(start_date=now, run_after=now), "task_state_store": store}
    call, args = op().execute, (context,)
    while True:
        try:
            summary = call(*args)
            break
        except TaskDeferred as deferred:
            event = asyncio.run(anext(deferred.trigger.run())).payload
            call, args = op().execute_complete, (context, event)
    record = store.get("skynomad_job")
    said = [t["ratio"] for t in record["timeline"] if t["event"] == "pace"]
    return {
        "met": summary["deadline_met"],
        "finished": round(summary["elapsed_hours"], 2),
        "pace_said": said[-1] if said else None,
        "cost": summary["cost_usd"]["total"],
        "all_on_demand": round(summary["all_on_demand_cost_usd"], 2),
        "preemptions": summary["preemptions"],
    }


def child(args) -> int:
    with tempfile.TemporaryDirectory(prefix="skynomad-bench-work-") as tmp:
        setup(Path(tmp), trace_start_hours=args.trace_hour)
        result = one_job(args.declared, args.real, args.deadline, args.believe_declared)
    print(json.dumps(result))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--believe-declared", action="store_true", help="plan with the declared work throughout")
    parser.add_argument("--child", nargs=4, type=float, metavar=("DECLARED", "REAL", "DEADLINE", "TRACE_HOUR"))
    args = parser.parse_args()
    if args.child:
        args.declared, args.real, args.deadline, args.trace_hour = args.child
        return child(args)
    print(f"runtime at {SPEED:g}x, decision step {STEP_MINUTES:g} min, 13 GCP H100 zones")
    misses = 0
    for case in [*CASES, FASTER]:
        flags = ["--believe-declared"] if args.believe_declared else []
        done = subprocess.run(
            [sys.executable, __file__, "--child", *map(repr, case), *flags], capture_output=True, text=True
        )
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        result = json.loads(done.stdout.strip().splitlines()[-1])
        misses += not result["met"]
        declared, real, deadline, hour = case
        print(
            f"work: declared={declared:g} real={real:g} deadline={deadline:g} trace_hour={hour:g} "
            + " ".join(f"{k}={v}" for k, v in result.items()),
            flush=True,
        )
    how = " (planning with the declared work)" if args.believe_declared else ""
    print(f"misses: {misses} of {len(CASES) + 1}{how}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
