"""SkyNomad on a distributed Airflow: N concurrent jobs, then each fault on its own wave of jobs.

The cluster is tests/integration/distributed/cluster.py (CeleryExecutor, Redis broker, two Celery workers,
two triggerers, scheduler, dag-processor, api-server, a private PostgreSQL for the metadata DB
and the market table, the simulated cloud on a fast clock). Printed:

- scale run (N runs at once, no fault): runs completed / started, decision-step lateness p50/p99
  (a step is late by how much later than planned it started: the triggerers' `Watch.step` is
  timed by a sitecustomize on their PYTHONPATH), worker-seconds per job-hour (Celery worker
  slots held by the fleet's task, sampled every second, per cloud hour of the jobs' run time),
  DB queries per decision step (pg_stat_statements calls and pg_stat_database transactions on
  the market database over the run, per timed step);
- each fault on its own wave (`--fault-runs` jobs): runs completed / started, the invariants of
  tests/integration/distributed/invariants.py, and the recovery time after the triggerer kill.

Run: ``python benchmarks/bench_distributed.py --runs 200`` (the issue's N; on a loaded 2-core box
a run of 200 takes tens of minutes, mostly Celery workers parsing the DAG for each task start).
``--runs 40 --fault-runs 12`` takes ~15 minutes there.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "distributed"))

from cluster import FLEET_DAG, PROBE_DAG, Cluster  # noqa: E402
from faults import KillScheduler, KillTriggerer, KillWorker, RestartPostgres, SaturatePool, Wave  # noqa: E402
from invariants import check  # noqa: E402

COLD_START_HOURS = 0.2  # the fleet DAG's
STEP_TIMER = '''
"""Benchmark hook (triggerers only): how late each SkyNomad decision step starts, one line per step."""
import os, time
_watch = None
if os.environ.get("SKYNOMAD_BENCH_STEPS_DIR"):  # triggerers only (instances inherit PYTHONPATH, not this)
    try:
        from airflow_provider_skynomad.jobs import watch as _watch
    except Exception:  # never stop a triggerer from starting
        _watch = None

if _watch is not None:
    _out = open(os.path.join(os.environ["SKYNOMAD_BENCH_STEPS_DIR"], f"steps-{os.getpid()}.txt"), "a", buffering=1)
    _sleep_seconds, _step = _watch.Watch.sleep_seconds, _watch.Watch.step


def sleep_seconds(self, *args, **kwargs):
    seconds = _sleep_seconds(self, *args, **kwargs)
    self._bench_due = time.monotonic() + seconds
    return seconds


def step(self, *args, **kwargs):
    due = getattr(self, "_bench_due", None)
    if due is not None:
        _out.write(f"{time.monotonic() - due:.4f}\\n")
        self._bench_due = None
    return _step(self, *args, **kwargs)


if _watch is not None:
    _watch.Watch.sleep_seconds, _watch.Watch.step = sleep_seconds, step
'''


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))] if ordered else float("nan")


class SlotMeter:
    """Worker slots held by fleet tasks (state running), integrated over wall time."""

    def __init__(self, cluster: Cluster):
        self.cluster, self.slot_seconds, self._last = cluster, 0.0, time.monotonic()

    def __call__(self, _elapsed: float) -> None:
        now = time.monotonic()
        try:
            running = self.cluster.sql(
                "SELECT count(*) FROM task_instance WHERE dag_id=%s AND state='running'", (FLEET_DAG,)
            )[0][0]
        except Exception:  # noqa: BLE001 - the database restarting: this second is not counted
            running = 0
        self.slot_seconds += running * (now - self._last)
        self._last = now


def market_counters(cluster: Cluster) -> tuple[int, int]:
    """(statement calls, transactions) on the market database so far."""
    (calls,) = cluster.sql(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
        "WHERE d.datname = 'market'",
        dbname="postgres",
    )[0]
    (xacts,) = cluster.sql(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'market'", dbname="postgres"
    )[0]
    return int(calls), int(xacts)


def read_steps(folder: Path) -> list[float]:
    return [float(line) for path in folder.glob("steps-*.txt") for line in path.read_text().split()]


def scale_run(cluster: Cluster, runs: int, steps_dir: Path, timeout: float) -> None:
    for path in steps_dir.glob("steps-*.txt"):
        path.write_text("")
    before = market_counters(cluster)
    meter = SlotMeter(cluster)
    began = time.monotonic()
    run_ids = [cluster.trigger(FLEET_DAG, {"work_hours": 0.8 + 0.1 * (i % 6)}) for i in range(runs)]
    states = cluster.wait_runs(FLEET_DAG, run_ids, timeout, during=meter)
    wall = time.monotonic() - began
    calls, xacts = (a - b for a, b in zip(market_counters(cluster), before, strict=True))
    steps = read_steps(steps_dir)
    report = check(cluster, states, COLD_START_HOURS)
    summaries = [s for r, s in cluster.summaries().items() if r in states]
    job_hours = sum(s["elapsed_hours"] for s in summaries)
    late = [max(0.0, s) for s in steps]
    step_wall = 10 * 60 / cluster.speed
    print(f"\n== scale: {runs} concurrent SkyNomad runs, {cluster.speed:g}x clock ({step_wall:.1f} s wall per step)")
    print(f"runs completed / started: {report.completed} / {report.started} in {wall:.0f} s wall")
    print(
        f"decision steps timed: {len(late)}; lateness p50 {quantile(late, 0.5):.3f} s, "
        f"p99 {quantile(late, 0.99):.3f} s, max {max(late, default=float('nan')):.3f} s"
    )
    print(
        f"worker-seconds per job-hour: {meter.slot_seconds / job_hours:.1f} worker-slot s per cloud job-hour "
        f"({meter.slot_seconds:.0f} slot-s over {job_hours:.1f} cloud job-hours)"
    )
    if steps:
        print(
            f"DB queries per decision step (market DB, all its clients): {calls / len(steps):.1f} statements, "
            f"{xacts / len(steps):.1f} transactions ({calls} statements, {xacts} transactions, {len(steps)} steps)"
        )
    print(
        f"deadlines met: {sum(s['deadline_met'] for s in summaries)} / {len(summaries)}; mean cost "
        f"${statistics.mean(s['cost_usd']['total'] for s in summaries):.2f} "
        f"(all on-demand ${statistics.mean(s['all_on_demand_cost_usd'] for s in summaries):.2f})"
        if summaries
        else "no summaries"
    )
    print("invariants:", "all hold" if report.ok else "; ".join(report.problems[:10]))


def fault_runs(cluster: Cluster, runs: int, timeout: float, only: set[str] | None) -> list[dict]:
    faults = {
        "worker": lambda: KillWorker("kill -9 of a Celery worker during a launch"),
        "triggerer": lambda: KillTriggerer("kill -9 of a triggerer while jobs are deferred"),
        "scheduler": lambda: KillScheduler("kill -9 of the scheduler"),
        "postgres": lambda: RestartPostgres("PostgreSQL restarted during decision steps"),
        "pool": lambda: SaturatePool("worker pool saturated by other tasks", seconds=15.0),
    }
    results = []
    for key, make in faults.items():
        if only and key not in only:
            continue
        fault = make()
        wave = Wave(cluster, [0.8 + 0.1 * (i % 6) for i in range(runs)], [fault])
        try:
            states = wave.run(timeout)
        except TimeoutError as exc:
            print(f"\n== {fault.name}: runs did not end in {timeout:.0f} s\n{exc}"[:3000])
            results.append({"fault": fault.name, "completed": None, "started": runs})
            continue
        report = check(cluster, states, COLD_START_HOURS)
        result = {"fault": fault.name, "completed": report.completed, "started": report.started, **fault.record}
        results.append(result)
        print(f"\n== {fault.name}: runs completed / started {report.completed} / {report.started}")
        print("  ", json.dumps(fault.record))
        print("   invariants:", "all hold" if report.ok else "; ".join(report.problems[:10]))
        if not fault.done:
            print("   the fault's moment never came during the wave: it was not injected")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="concurrent runs of the scale run (0: skip it)")
    parser.add_argument("--fault-runs", type=int, default=12, help="runs per fault wave (0: no fault waves)")
    parser.add_argument("--faults", default="", help="a subset of worker,triggerer,scheduler,postgres,pool")
    parser.add_argument("--speed", type=float, default=50.0, help="simulated seconds per wall second")
    parser.add_argument("--worker-concurrency", type=int, default=4, help="slots per Celery worker")
    parser.add_argument(
        "--queued-timeout",
        type=float,
        default=None,
        help="seconds a task may wait queued (default: 45 s with fault waves, else long enough for the whole queue)",
    )
    parser.add_argument(
        "--future-hours",
        type=float,
        default=12.0,
        help="trace hours after the start written to the market table as a running probe DAG would (0: none)",
    )
    parser.add_argument("--keep", type=Path, default=None, help="keep the cluster's files (logs) in this directory")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the cluster on the way out
    queued_timeout = args.queued_timeout or (45.0 if args.fault_runs else max(600.0, 12.0 * args.runs))
    with tempfile.TemporaryDirectory(prefix="skynomad-bench-distributed-") as tmp:
        root = args.keep.resolve() if args.keep else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        hooks, steps_dir = root / "hooks", root / "steps"
        hooks.mkdir()
        steps_dir.mkdir()
        (hooks / "sitecustomize.py").write_text(STEP_TIMER)
        cluster = Cluster(
            root / "cluster",
            speed=args.speed,
            worker_concurrency=args.worker_concurrency,
            triggerer_pythonpath=(str(hooks),),
            triggerer_env={"SKYNOMAD_BENCH_STEPS_DIR": str(steps_dir)},
            task_queued_timeout=queued_timeout,
            future_hours=args.future_hours,
        )
        began = time.monotonic()
        try:
            cluster.start()
            print(
                f"cluster up in {time.monotonic() - began:.0f} s: CeleryExecutor, {cluster.workers} workers x "
                f"{cluster.worker_concurrency} slots, {cluster.triggerers} triggerers (load on this box makes "
                "every wall figure pessimistic)"
            )
            probes = list(cluster.run_states(PROBE_DAG)) or [cluster.trigger(PROBE_DAG)]
            cluster.wait_runs(PROBE_DAG, probes, 600)
            if args.runs:
                scale_run(cluster, args.runs, steps_dir, timeout=max(600.0, 12.0 * args.runs))
            if args.fault_runs:
                only = {f.strip() for f in args.faults.split(",") if f.strip()} or None
                results = fault_runs(cluster, args.fault_runs, timeout=900.0, only=only)
                print("\n== runs completed / started per fault")
                for r in results:
                    extra = f", recovery {r['recovery_seconds']} s" if r.get("recovery_seconds") is not None else ""
                    print(f"  {r['fault']}: {r['completed']} / {r['started']}{extra}")
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
