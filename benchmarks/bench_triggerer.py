"""Triggerer capacity of SkyNomad on the simulated cloud (one job's overhead: bench_runtime.py).

N SkyNomadTriggers on one event loop, run as Airflow 3.3's triggerer runs them (``asyncio.run``
of one coroutine per trigger; their blocking calls go to the loop's default thread pool), each
watching its own running group on one shared simulated cloud and market table. The decision
step is 10 simulated minutes = 10 wall seconds (the cloud runs at 60x).

A step is *late* by how much its decision (when `Watch.step` returned) came after it was due:
the jobs run far from their end, so a trigger owes one decision per step, and step k is due
k − j steps after each earlier decision j; it is late by how much it trails the earliest of
those. Each trigger's first two steps are warm-up (it reads its market window and fits its
forecasts once); measuring starts once every trigger is past them. Prints, per N:
p50/p99/max lateness, each step's wall time, the triggerer's CPU seconds per decision step, the loop's own lag (how late
a 0.1 s timer on the loop fires), and at the end the largest N whose p99 lateness is < 1 s.
First it prints what one step's calls to the simulated cloud cost with 50 and 200 groups in it.

Run: ``python benchmarks/bench_triggerer.py`` (N = 50, 100, 200, 300; about 6 minutes on 2 cores),
or ``python benchmarks/bench_triggerer.py --jobs 200 --seconds 90``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from harness import STEP_MINUTES, setup  # benchmarks/ is on sys.path as the script's folder

STEP_WALL_SECONDS = 10.0
SPEED = STEP_MINUTES * 60 / STEP_WALL_SECONDS  # simulated seconds per wall second
WARMUP_STEPS = 2
LATE_SECONDS = 1.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("inf")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def capacity_run(n: int, seconds: float) -> dict:
    import pandas as pd

    from airflow_provider_skynomad.clouds.base import LaunchRequest
    from airflow_provider_skynomad.hooks.skynomad import SkyNomadHook, make_cloud
    from airflow_provider_skynomad.jobs.watch import Watch
    from airflow_provider_skynomad.market.source import MarketSource
    from airflow_provider_skynomad.market.store.table import MarketTable
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
    zones = sorted(set(frame["zone"]))
    view = MarketSource(table, zones, None, now - pd.Timedelta(hours=72), STEP_MINUTES / 60, 1).view(now)
    table.close()
    zone = get_policy("on-demand").decide(JobSpec(1000.0, 2000.0), JobState(), view, 0.0).try_in_order[0].market
    region = frame.loc[frame["zone"] == zone, "region"].iloc[0]

    starts: dict[int, list[float]] = {}
    decided: dict[int, list[float]] = {}
    original_step = Watch.step

    def timed_step(self, *a):
        starts.setdefault(self.seq, []).append(time.monotonic())
        try:
            return original_step(self, *a)
        finally:
            decided.setdefault(self.seq, []).append(time.monotonic())

    Watch.step = timed_step

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
                zones=zones,
                instance_types=None,
                policy="on-demand",
                policy_params={},
                decision_step_hours=STEP_MINUTES / 60,
                seq=i,
                skynomad_conn_id="skynomad_default",
            )
        )

    events = []
    loop_lag: list[float] = []

    async def drive(trigger):
        async for event in trigger.run():
            events.append(event.payload)
            return

    async def watch_loop():
        while True:
            asked = time.monotonic()
            await asyncio.sleep(0.1)
            loop_lag.append(time.monotonic() - asked - 0.1)

    started = time.monotonic()
    tasks = [asyncio.create_task(drive(t)) for t in triggers]
    lag_task = asyncio.create_task(watch_loop())
    # Measure once every trigger is past its warm-up: lateness, CPU and loop lag of the steady state only.
    deadline = time.monotonic() + 300
    while sum(len(decided.get(i, [])) > WARMUP_STEPS for i in range(n)) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    window_start = time.monotonic()
    cpu_before, steps_before, lag_from = cpu_seconds(), sum(map(len, decided.values())), len(loop_lag)
    await asyncio.sleep(seconds)
    cpu_used, steps = cpu_seconds() - cpu_before, sum(map(len, decided.values())) - steps_before
    window_end = time.monotonic()
    for task in [*tasks, lag_task]:
        task.cancel()
    await asyncio.gather(*tasks, lag_task, return_exceptions=True)
    Watch.step = original_step
    for i in range(n):
        cloud.terminate(cloud.find(request(i).client_token))
    if events:
        print("  (events before the end:", [(e["kind"], e.get("reason", "")[:120]) for e in events[:3]], ")")

    lateness, durations = [], []
    for seq, done in decided.items():
        # The promise is one decision per step. Step k is due k - j steps after any earlier
        # decision j, so it is late by how much it trails the earliest of those cadences: a trigger
        # whose steps drift by their own duration falls further behind at every step.
        best = float("inf")  # min over earlier decisions j of done[j] - j·step
        for k in range(WARMUP_STEPS, len(done)):
            if k > WARMUP_STEPS and window_start <= done[k] <= window_end:
                lateness.append(max(0.0, done[k] - k * STEP_WALL_SECONDS - best))
                durations.append(done[k] - starts[seq][k])
            best = min(best, done[k] - k * STEP_WALL_SECONDS)
    lags = loop_lag[lag_from:]
    return {
        "jobs": n,
        "steps": len(lateness),
        "p50_late_s": round(percentile(lateness, 0.50), 3),
        "p99_late_s": round(percentile(lateness, 0.99), 3),
        "max_late_s": round(max(lateness), 3) if lateness else None,
        "step_wall_p50_s": round(percentile(durations, 0.50), 3),
        "step_wall_p99_s": round(percentile(durations, 0.99), 3),
        "cpu_s_per_step": round(cpu_used / steps, 4) if steps else None,
        "steps_per_s": round(steps / seconds, 2),
        "loop_lag_p99_s": round(percentile(lags, 0.99), 3),
        "warmup_s": round(window_start - started, 1),
        "wall_s": round(time.monotonic() - started, 1),
    }


def cloud_calls(home: Path, n: int) -> dict:
    """What one decision step asks of the simulated cloud (poll, progress, clock) with `n` groups in it."""
    from airflow_provider_skynomad.clouds.base import LaunchRequest
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud
    from airflow_provider_skynomad.hooks.skynomad import bundled_trace

    cloud = SimulatedCloud(bundled_trace(), home / f"calls-{n}", speed=SPEED, trace_start=90.0)
    market = cloud.market.grid.markets[0]
    handles = [
        cloud.launch(
            LaunchRequest("gcp", market.region, market.zone, market.instance_type, 1, False, f"c{i}", job_id=f"c{i}")
        )
        for i in range(n)
    ]
    wall, cpu = time.perf_counter(), time.process_time()
    for handle in handles:
        cloud.poll(handle), cloud.progress(handle), cloud.now_timestamp()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    for handle in handles:
        cloud.terminate(handle)
    return {"groups": n, "cpu_ms_per_job": round(1000 * cpu / n, 2), "wall_ms_per_job": round(1000 * wall / n, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="50,100,200,300", help="comma-separated N to try, ascending")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured wall seconds per N (after warm-up)")
    parser.add_argument("--calls-only", action="store_true", help="only the simulated cloud's per-step calls")
    parser.add_argument("--keep-going", action="store_true", help="try every N, also after one missed the target")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="skynomad-bench-") as tmp:
        setup(Path(tmp), speed=SPEED)
        print(f"step: {STEP_MINUTES:.0f} simulated minutes = {STEP_WALL_SECONDS:.0f} wall seconds at {SPEED:g}x")
        for n in (50, 200):
            print("simulated cloud, one step's poll + progress + clock:", json.dumps(cloud_calls(Path(tmp), n)))
        if args.calls_only:
            return 0
        carried = 0
        for n in (int(x) for x in args.jobs.split(",")):
            run = asyncio.run(capacity_run(n, seconds=args.seconds))
            print("capacity:", json.dumps(run), flush=True)
            if run["p99_late_s"] < LATE_SECONDS:
                carried = max(carried, n)
            elif not args.keep_going:
                break
        print(
            f"one triggerer carried {carried} concurrent SkyNomad jobs with p99 decision lateness "
            f"< {LATE_SECONDS:g} s (step = {STEP_WALL_SECONDS:g} s wall; the largest N tried that met it)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
