"""The provider's writes to Airflow's metadata database while its jobs are deferred, per minute.

Why it matters: in ``airflow standalone`` Airflow's metadata database is one SQLite file, and its
scheduler, triggerer and dag-processor exit on ``database is locked`` when writers queue up. A
provider that wrote while its jobs wait (a trigger saving progress, a task state write per step)
would add a steady load that grows with the number of jobs. SkyNomad's trigger keeps the job's
record in the market database (`jobs/table.py`) and its live status there too; it writes nothing
of Airflow's. The task writes its task state at start, at the hand-off to the trigger and at the
end, and its XCom at the end.

How: the README recipe's load, four fine-tunes deferred at once on one market database (so they plan
as a fleet), each run as `skynomad demo` runs a DAG (``dag.test()``: the real task runner, the real
task state store, the trigger inline) in its own process with its own copy of one migrated SQLite
metadata database (``dag.test()`` runs one DAG run per process, and a private file keeps each
process's count its own). Beside them ``skynomad_probe`` runs on its schedule at this speed (once a
minute), so the market table stays fresh (the jobs start after its first run); its writes are
counted apart. Every INSERT / UPDATE / DELETE that reaches a metadata database's engine is counted
by table with its time, and split by phase: *deferred* (while a SkyNomad trigger runs) and *worker*
(everything else of the task and of ``dag.test()`` itself). Airflow's own triggerer, scheduler and
dag-processor do not run here: what is counted while deferred is what the provider does, and it
should be nothing. The window in which all the jobs were deferred at once is counted apart: every
job process's writes in it, and the probe DAG's.

Run: ``python benchmarks/bench_metadata_writes.py [--jobs 4] [--work-hours 6]`` (about 7 minutes on
a 2-core box: the fine-tunes at once at 70x, each deferred about 5 minutes, after the first probe
run). Prints the writes per minute while deferred, the all-deferred window, and each job's writes by
table. Results: benchmarks/results/metadata-writes.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

SPEED = 70.0  # 6 h of work in about 5 minutes of wall time: four deferrals long enough to count over at once
TRACE_START_HOURS = 90.0
WRITE = re.compile(r"^\s*(INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)", re.I)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=4, help="fine-tune runs deferred at once")
    parser.add_argument("--work-hours", type=float, default=6.0)
    parser.add_argument("--child", choices=("probe", "job"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--flag", help=argparse.SUPPRESS)
    parser.add_argument("--stop", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.child:
        return child(args)
    from airflow_provider_skynomad.cli.demo import demo_environment

    with tempfile.TemporaryDirectory(prefix="skynomad-bench-writes-") as tmp:
        workdir = Path(tmp)
        (workdir / "airflow").mkdir()
        env = demo_environment(workdir, SPEED, TRACE_START_HOURS)  # SKYNOMAD_HOME: one market database
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
        migrate = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True)
        if migrate.returncode != 0:
            print(migrate.stderr.decode()[-3000:], file=sys.stderr)
            return 1
        argv = [sys.executable, __file__, "--work-hours", repr(args.work_hours)]
        probed, stop, probe_out = workdir / "probed", workdir / "stop", workdir / "probe.json"
        prober = subprocess.Popen(
            [*argv, "--child", "probe", "--out", str(probe_out), "--flag", str(probed), "--stop", str(stop)],
            env=_own_database(env, workdir, "probe"),
        )
        while not probed.exists():  # the market table is fresh once the first probe run has succeeded
            if prober.poll() is not None:
                print("the probe DAG failed before the jobs started", file=sys.stderr)
                return 1
            time.sleep(1)
        outs = [workdir / f"job-{i}.json" for i in range(args.jobs)]
        children = [
            subprocess.Popen([*argv, "--child", "job", "--out", str(out)], env=_own_database(env, workdir, f"job-{i}"))
            for i, out in enumerate(outs)
        ]
        codes = [c.wait() for c in children]
        stop.touch()
        prober.wait()
        if any(not out.exists() for out in [*outs, probe_out]):
            print(
                f"a process ended without its counts (exit codes {codes}, probe {prober.returncode})", file=sys.stderr
            )
            return 1
        return report([json.loads(out.read_text()) for out in outs], json.loads(probe_out.read_text()), args)


def _own_database(env: dict[str, str], workdir: Path, name: str) -> dict[str, str]:
    """`env` with its own copy of the migrated metadata database (AIRFLOW_HOME too: logs and config)."""
    home = workdir / f"airflow-{name}"
    home.mkdir()
    shutil.copy(workdir / "airflow" / "airflow.db", home / "airflow.db")
    return {**env, "AIRFLOW_HOME": str(home), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}"}


def all_at_once(spans: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The stretches of time in which every job was deferred (each job's deferrals as (start, end))."""
    edges = sorted((t, step) for job in spans for start, end in job for t, step in ((start, 1), (end, -1)))
    windows, deferred, opened = [], 0, None
    for t, step in edges:
        deferred += step
        if deferred == len(spans) and opened is None:
            opened = t
        elif deferred < len(spans) and opened is not None:
            windows.append((opened, t))
            opened = None
    return [(a, b) for a, b in windows if b > a]


def report(jobs: list[dict], probe: dict, args) -> int:
    deferred = sum(1 for job in jobs for _, where, _ in job["writes"] if where == "deferred")
    minutes = sum(end - start for job in jobs for start, end in job["deferred"]) / 60.0
    windows = all_at_once([[tuple(span) for span in job["deferred"]] for job in jobs])
    together = sum(end - start for start, end in windows) / 60.0
    in_windows = sum(1 for job in jobs for t, _, _ in job["writes"] if any(a <= t <= b for a, b in windows))
    print(
        f"{len(jobs)} fine-tune job(s) at once at {SPEED:g}x, {args.work_hours:g} h of work each "
        "(dag.test, one process and SQLite metadata database each, one market database)"
    )
    print(f"deferred for {minutes:.1f} min of wall time in all: {deferred} metadata-database write(s)")
    print(f"provider writes per minute while deferred: {deferred / minutes if minutes else float('nan'):.2f}")
    print(
        f"all {len(jobs)} deferred at once for {together:.1f} min: {in_windows} metadata-database write(s) "
        f"by any of them ({in_windows / together if together else float('nan'):.2f} per minute)"
    )
    runs = [run for run in probe["runs"] if run[2] == "success"]
    in_runs = [sum(1 for t, _ in probe["writes"] if start <= t <= end) for start, end, _ in runs]
    beside = sum(1 for t, _ in probe["writes"] if any(a <= t <= b for a, b in windows))
    tables = Counter(table for t, table in probe["writes"] if any(a <= t <= b for a, b, _ in runs))
    print(
        f"the probe DAG beside them, on its schedule at this speed: {len(runs)} run(s), "
        f"{sum(in_runs) / len(runs) if runs else float('nan'):.0f} metadata-database writes each as dag.test() makes "
        f"them, its DAG sync included; {beside} while all the jobs were deferred"
    )
    per_run = {table: round(n / len(runs), 1) for table, n in tables.most_common()} if runs else {}
    print(f"  probe run writes by table, per run: {json.dumps(per_run)}")
    for i, job in enumerate(jobs, 1):
        worker = Counter(table for _, where, table in job["writes"] if where == "worker")
        print(
            f"job {i} ({job['state']}, deferred {sum(b - a for a, b in job['deferred']) / 60:.1f} min): "
            f"writes outside the deferral by table (task + dag.test): {json.dumps(dict(sorted(worker.items())))}"
        )
        print(f"  of which task state store writes: {worker.get('task_state_store', 0)}")
    return 0 if deferred == 0 and all(job["state"] == "success" for job in jobs) else 1


def child(args) -> int:
    import logging

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    logging.getLogger().setLevel(logging.WARNING)
    from airflow import settings
    from airflow.sdk.execution_time.supervisor import InProcessTestSupervisor

    from airflow_provider_skynomad.cli.demo import load_example_dag, run_dag_test
    from airflow_provider_skynomad.triggers.skynomad import SkyNomadTrigger

    metadata_url = str(settings.engine.url)
    if args.child == "probe":
        return prober(args, metadata_url)

    phase = {"now": "worker"}
    writes: list[tuple[float, str, str]] = []  # (wall time, phase, table), one per row written
    deferrals: list[tuple[float, float]] = []

    @event.listens_for(Engine, "before_cursor_execute")
    def count(conn, cursor, statement, parameters, context, executemany):
        if str(conn.engine.url) != metadata_url:
            return  # the market database: the provider's own
        match = WRITE.match(statement)
        if match:
            rows = len(parameters) if executemany and isinstance(parameters, (list, tuple)) else 1
            writes.extend([(time.time(), phase["now"], match.group(2).lower())] * rows)

    real_run = InProcessTestSupervisor.run_trigger_in_process.__func__

    def run_trigger(cls, *, trigger, ti):
        if not isinstance(trigger, SkyNomadTrigger):
            return real_run(cls, trigger=trigger, ti=ti)
        phase["now"], started = "deferred", time.time()
        try:
            return real_run(cls, trigger=trigger, ti=ti)
        finally:
            deferrals.append((started, time.time()))
            phase["now"] = "worker"

    InProcessTestSupervisor.run_trigger_in_process = classmethod(run_trigger)

    state, _ = run_dag_test(load_example_dag("skynomad_fine_tune"), run_conf={"work_hours": args.work_hours})
    Path(args.out).write_text(json.dumps({"state": state, "deferred": deferrals, "writes": writes}))
    return 0


def prober(args, metadata_url: str) -> int:
    """The market table of the last 48 trace hours, then a probe DAG run every interval of its schedule at
    this speed (as Airflow's scheduler would start them) until told to stop, each run's writes counted."""
    import pandas as pd
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from airflow_provider_skynomad.cli.demo import demo_trace, load_example_dag, run_dag_test
    from airflow_provider_skynomad.jobs.probe_schedule import ProbeSchedule
    from airflow_provider_skynomad.market.observations import read_observations
    from airflow_provider_skynomad.market.store.table import MarketTable

    writes: list[tuple[float, str]] = []

    @event.listens_for(Engine, "before_cursor_execute")
    def count(conn, cursor, statement, parameters, context, executemany):
        match = WRITE.match(statement) if str(conn.engine.url) == metadata_url else None
        if match:
            rows = len(parameters) if executemany and isinstance(parameters, (list, tuple)) else 1
            writes.extend([(time.time(), match.group(2).lower())] * rows)

    frame = read_observations(demo_trace())
    start = frame["observed_at"].min() + pd.Timedelta(hours=TRACE_START_HOURS)
    with MarketTable() as table:
        table.create()
        table.append(frame[(frame["observed_at"] < start) & (frame["observed_at"] >= start - pd.Timedelta(hours=48))])
    probe, runs = load_example_dag("skynomad_probe"), []
    every = ProbeSchedule.declared().wall_interval.total_seconds()  # the DAG's schedule at this speed
    while not Path(args.stop).exists():
        started = time.time()
        state, _ = run_dag_test(probe)
        runs.append((started, time.time(), state))
        if state != "success":
            print(f"skynomad_probe: {state}", file=sys.stderr)
            break
        Path(args.flag).touch()
        while time.time() < started + every and not Path(args.stop).exists():
            time.sleep(0.5)
    Path(args.out).write_text(json.dumps({"runs": runs, "writes": writes}))
    return 0 if runs and runs[-1][2] == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
