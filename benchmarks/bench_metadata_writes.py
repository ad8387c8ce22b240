"""The provider's writes to Airflow's metadata database while its jobs are deferred, per minute.

Why it matters: in ``airflow standalone`` Airflow's metadata database is one SQLite file, and its
scheduler, triggerer and dag-processor exit on ``database is locked`` when writers queue up. A
provider that wrote while its jobs wait (a trigger saving progress, a task state write per step)
would add a steady load that grows with the number of jobs. SkyNomad's trigger keeps the job's
record in the market database (`jobs/table.py`) and its live status there too; it writes nothing
of Airflow's. The task writes its task state at start, at the hand-off to the trigger and at the
end, and its XCom at the end.

How: the example DAGs run as `skynomad demo` runs them (``dag.test()``: the real task runner, the
real task state store, the trigger inline, a private SQLite metadata database), with every
INSERT / UPDATE / DELETE that reaches the metadata database's engine counted by table, and split
by phase: *deferred* (while a SkyNomad trigger runs) and *worker* (everything else of the task
and of ``dag.test()`` itself). Airflow's own triggerer, scheduler and dag-processor do not run
here: what is counted while deferred is what the provider does, and it should be nothing.

Run: ``python benchmarks/bench_metadata_writes.py [--jobs 2] [--work-hours 4]`` (about 3 minutes
per job on 2 cores: a probe run, then a fine-tune at 120x). Prints the writes per minute while
deferred, and each job's writes by table. Results: benchmarks/results/metadata-writes.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

SPEED = 120.0  # one cloud hour every 30 s: a deferral long enough to count over
TRACE_START_HOURS = 90.0
WRITE = re.compile(r"^\s*(INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)", re.I)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2, help="fine-tune runs, one after another")
    parser.add_argument("--work-hours", type=float, default=4.0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    from airflow_provider_skynomad.cli.demo import demo_environment

    with tempfile.TemporaryDirectory(prefix="skynomad-bench-writes-") as tmp:
        workdir = Path(tmp)
        (workdir / "airflow").mkdir()
        env = demo_environment(workdir, SPEED, TRACE_START_HOURS)
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
        migrate = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True)
        if migrate.returncode != 0:
            print(migrate.stderr.decode()[-3000:], file=sys.stderr)
            return 1
        argv = [sys.executable, __file__, "--child", "--dir", str(workdir), "--jobs", str(args.jobs)]
        return subprocess.run([*argv, "--work-hours", repr(args.work_hours)], env=env).returncode


def child(args) -> int:
    import logging

    import pandas as pd
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    logging.getLogger().setLevel(logging.WARNING)
    from airflow import settings
    from airflow.sdk.execution_time.supervisor import InProcessTestSupervisor

    from airflow_provider_skynomad.cli.demo import demo_trace, load_example_dag, run_dag_test
    from airflow_provider_skynomad.market.observations import read_observations
    from airflow_provider_skynomad.market.store.table import MarketTable
    from airflow_provider_skynomad.triggers.skynomad import SkyNomadTrigger

    metadata_url = str(settings.engine.url)
    phase = {"now": "worker", "deferred_seconds": 0.0}
    writes: Counter = Counter()  # (phase, table) -> statements

    @event.listens_for(Engine, "before_cursor_execute")
    def count(conn, cursor, statement, parameters, context, executemany):
        if str(conn.engine.url) != metadata_url:
            return  # the market database: the provider's own
        match = WRITE.match(statement)
        if match:
            rows = len(parameters) if executemany and isinstance(parameters, (list, tuple)) else 1
            writes[(phase["now"], match.group(2).lower())] += rows

    real_run = InProcessTestSupervisor.run_trigger_in_process.__func__

    def run_trigger(cls, *, trigger, ti):
        if not isinstance(trigger, SkyNomadTrigger):
            return real_run(cls, trigger=trigger, ti=ti)
        phase["now"], started = "deferred", time.monotonic()
        try:
            return real_run(cls, trigger=trigger, ti=ti)
        finally:
            phase["deferred_seconds"] += time.monotonic() - started
            phase["now"] = "worker"

    InProcessTestSupervisor.run_trigger_in_process = classmethod(run_trigger)

    frame = read_observations(demo_trace())
    start = frame["observed_at"].min() + pd.Timedelta(hours=TRACE_START_HOURS)
    with MarketTable() as table:
        table.create()
        table.append(frame[(frame["observed_at"] < start) & (frame["observed_at"] >= start - pd.Timedelta(hours=48))])
    probe, fine_tune = load_example_dag("skynomad_probe"), load_example_dag("skynomad_fine_tune")
    per_job = []
    for _ in range(args.jobs):
        state, _ = run_dag_test(probe)  # a fresh market table for each job, as the probe DAG keeps it
        if state != "success":
            print(f"skynomad_probe: {state}", file=sys.stderr)
            return 1
        before = Counter(writes)
        state, _ = run_dag_test(fine_tune, run_conf={"work_hours": args.work_hours})
        per_job.append({"state": state, "writes": Counter(writes) - before})
    deferred = sum(n for job in per_job for (where, _), n in job["writes"].items() if where == "deferred")
    minutes = phase["deferred_seconds"] / 60.0
    print(f"{args.jobs} fine-tune job(s) at {SPEED:g}x, {args.work_hours:g} h of work each (dag.test, SQLite metadata)")
    print(f"deferred for {minutes:.1f} min of wall time in all: {deferred} metadata-database write(s)")
    print(f"provider writes per minute while deferred: {deferred / minutes if minutes else float('nan'):.2f}")
    for i, job in enumerate(per_job, 1):
        worker = {table: n for (where, table), n in sorted(job["writes"].items()) if where == "worker"}
        print(f"job {i} ({job['state']}): writes outside the deferral by table (task + dag.test): {json.dumps(worker)}")
        print(f"  of which task state store writes: {worker.get('task_state_store', 0)}")
    return 0 if deferred == 0 and all(job["state"] == "success" for job in per_job) else 1


if __name__ == "__main__":
    sys.exit(main())
