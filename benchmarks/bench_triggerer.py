"""Triggerer capacity of SkyNomad on the simulated cloud (one job's overhead: bench_runtime.py).

N SkyNomadTriggers on one event loop (one triggerer process), each watching its own running group
on one shared simulated cloud and market table. A decision step is *late* when it starts more than
half a step after it was due; report the largest N whose 95th-percentile lateness stays under that.

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
from pathlib import Path

from harness import SPEED, STEP_MINUTES, setup  # benchmarks/ is on sys.path as the script's folder


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

    def request(i: int) -> LaunchRequest:
        token = f"bench-{n}-{i}"
        return LaunchRequest("gcp", region, zone, "a3-highgpu-1g", 1, False, token, job_id=token)

    triggers = []
    for i in range(n):
        handle = cloud.launch(request(i))
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
        cloud.terminate(cloud.find(request(i).client_token))
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
