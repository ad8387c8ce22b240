"""Deferred-task overhead and triggerer capacity of SkyNomad on the simulated cloud.

1. Overhead per decision step: one job driven the way Airflow drives it (execute → trigger →
   execute_complete → ... with an in-memory task state store); worker seconds (time inside the
   operator) and trigger seconds (time inside one decision step's blocking work) against the
   job's wall seconds.
2. Capacity: N SkyNomadTriggers on one event loop (one triggerer process), each watching its own
   running group on one shared simulated cloud and market table. A decision step is *late* when it
   starts more than half a step after it was due; report the largest N whose 95th-percentile
   lateness stays under that.

Run: ``python benchmarks/bench_triggerer.py`` (about two minutes on 2 cores).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, timedelta
from pathlib import Path

from harness import SPEED, STEP_MINUTES, TI, Store, setup  # benchmarks/ is on sys.path as the script's folder


def overhead(work_hours: float = 3.0) -> dict:
    from datetime import datetime
    from types import SimpleNamespace

    from airflow.sdk import DAG
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

    def op():  # a fresh operator object per worker visit, as Airflow does
        dag = DAG("bench", schedule=None, start_date=datetime(2025, 1, 1))
        return SkyNomadOperator(
            task_id="job",
            dag=dag,
            work_hours=work_hours,
            deadline=timedelta(hours=work_hours * 1.6),
            decision_step_minutes=STEP_MINUTES,
        )

    from airflow_provider_skynomad.jobs.watch import Watch

    original = Watch.step

    def timed(self, *a):
        nonlocal trigger_busy, steps
        s = time.monotonic()
        try:
            return original(self, *a)
        finally:
            trigger_busy += time.monotonic() - s
            steps += 1

    Watch.step = timed
    now = datetime.now(UTC)
    context = {"ti": TI(), "dag_run": SimpleNamespace(start_date=now, run_after=now), "task_state_store": Store()}
    worker = trigger_busy = 0.0
    steps = visits = 0
    started = time.monotonic()
    call, args = op().execute, (context,)
    while True:
        t0 = time.monotonic()
        try:
            summary = call(*args)
            worker += time.monotonic() - t0
            visits += 1
            break
        except TaskDeferred as deferred:
            worker += time.monotonic() - t0
            visits += 1
            trigger = deferred.trigger
        event = asyncio.run(anext(trigger.run())).payload
        call, args = op().execute_complete, (context, event)
    wall = time.monotonic() - started
    Watch.step = original
    return {
        "job_wall_seconds": round(wall, 1),
        "decision_steps": steps,
        "worker_visits": visits,
        "worker_seconds": round(worker, 2),
        "worker_seconds_per_step": round(worker / max(steps, 1), 4),
        "trigger_seconds_per_step": round(trigger_busy / max(steps, 1), 4),
        "step_wall_seconds": STEP_MINUTES * 60 / SPEED,
        "deadline_met": summary["deadline_met"],
        "preemptions": summary["preemptions"],
    }


async def capacity_run(n: int, seconds: float) -> dict:
    import pandas as pd

    from airflow_provider_skynomad.clouds.base import LaunchRequest
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadHook, make_cloud
    from airflow_provider_skynomad.jobs.watch import Watch
    from airflow_provider_skynomad.market.source import MarketSource
    from airflow_provider_skynomad.market.table import MarketTable
    from airflow_provider_skynomad.planner.actions import Mode, Option
    from airflow_provider_skynomad.planner.job import JobSpec, JobState
    from airflow_provider_skynomad.planner.registry import get_policy
    from airflow_provider_skynomad.triggers.skynomad import SkyNomadTrigger

    cloud = make_cloud(SkyNomadHook().get_config())
    # Jobs that keep running where they are (the on-demand policy's zone): every step is a full
    # decision step (poll, progress, market read, planner) that ends in "stay".
    table = MarketTable()
    now = cloud.now_timestamp()
    frame = table.read(until=now)
    view = MarketSource(
        table, sorted(set(frame["zone"])), None, now - pd.Timedelta(hours=72), STEP_MINUTES / 60, 1
    ).view(now)
    table.close()
    zone = get_policy("on-demand").decide(JobSpec(1000.0, 2000.0), JobState(), view, 0.0).try_in_order[0].market
    region = frame.loc[frame["zone"] == zone, "region"].iloc[0]
    step_wall = STEP_MINUTES * 60 / SPEED
    due: dict[int, list[float]] = {}

    original = Watch.step

    def timed(self, *a):
        due.setdefault(self.seq, []).append(time.monotonic())
        return original(self, *a)

    Watch.step = timed

    triggers = []
    for i in range(n):
        handle = cloud.launch(LaunchRequest("gcp", region, zone, "a3-highgpu-1g", 1, False, f"bench-{n}-{i}"))
        state = JobState(elapsed_hours=0.0, running=Option(zone, Mode.ON_DEMAND), checkpoint_market=zone)
        triggers.append(
            SkyNomadTrigger(
                job=JobSpec(work_hours=1000.0, deadline_hours=2000.0).to_dict(),
                job_start_hours=cloud.now_hours(),
                state=state.to_dict(),
                group=handle.to_dict(),
                launch_delay_hours=0.2,
                zones=sorted(set(frame["zone"])),
                instance_types=None,
                policy="on-demand",
                policy_params={},
                decision_step_hours=STEP_MINUTES / 60,
                seq=i,
                skynomad_conn_id="skynomad_default",
            )
        )

    events = []

    async def drive(trigger):
        async for event in trigger.run():
            events.append(event.payload)
            return

    tasks = [asyncio.create_task(drive(t)) for t in triggers]
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    Watch.step = original
    for i in range(n):
        cloud.terminate(cloud.launch(LaunchRequest("gcp", region, zone, "a3-highgpu-1g", 1, False, f"bench-{n}-{i}")))
    if events:
        print("  (events before the end:", [(e["kind"], e.get("reason", "")[:120]) for e in events[:3]], ")")
    lateness = []
    for stamps in due.values():
        stamps = stamps[2:]  # skip warm-up (each trigger loads the trace and opens the table once)
        for a, b in itertools.pairwise(stamps):
            lateness.append(max(0.0, (b - a) - step_wall))
    lateness.sort()
    p95 = lateness[int(0.95 * (len(lateness) - 1))] if lateness else float("inf")
    return {
        "jobs": n,
        "steps": len(lateness),
        "p95_late_seconds": round(p95, 3),
        "mean_late_seconds": round(statistics.mean(lateness), 3) if lateness else None,
        "on_time": bool(lateness) and p95 <= step_wall / 2,
    }


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="skynomad-bench-") as tmp:
        setup(Path(tmp))
        wall = STEP_MINUTES * 60 / SPEED
        print(f"step: {STEP_MINUTES:.0f} simulated minutes = {wall:.2f} wall seconds at {SPEED:g}x")
        result = overhead()
        print("overhead:", json.dumps(result))
        carried = 0
        for n in (10, 25, 50, 100, 200):
            run = asyncio.run(capacity_run(n, seconds=max(10.0, n * 0.1)))
            print("capacity:", json.dumps(run))
            if not run["on_time"]:
                break
            carried = n
        print(
            f"one triggerer carried {carried} concurrent SkyNomad jobs with decision steps on time "
            f"(step = {STEP_MINUTES * 60 / SPEED:.2f} s wall)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
