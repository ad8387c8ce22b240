"""A fleet of jobs on shared spot capacity: each job planned alone (as today) and fleet-aware.

    .venv/bin/python benchmarks/bench_fleet.py            # N = 10, 50, 200 on both traces
    .venv/bin/python benchmarks/bench_fleet.py --quick    # N = 10, 50

N jobs of one deployment run on one trace through `simulation.fleet.simulate_fleet`, sharing each
market's capacity by market.capacity's rule (a launch gets only what is left; the youngest groups
are taken back first). Policies: `alone` is today's SkyNomad, whose view has no fleet (it plans
as if it were the only job, but the capacity is shared all the same); `fleet-aware` is the same
policy with the other jobs' rows in its view (market.fleet, planner.crowding).

Jobs: T = 51.83 h (the paper's deadline), d = 0.2 h, S = 50 GB; job j starts at hour
⌊24·j/N⌋ of the trace (staggered over the first day) with T/P = 1.1 + 0.1·(3j mod 10) (mixed
slack, 1.1 to 2.0, uncorrelated with the start). Every job is feasible alone.

Capacity that binds: the GCP H100 week's probes asked for 16 instances per zone (available 0–16,
13 zones, about 105 instances on average in all); its jobs are gangs of 4 (about 26 gangs fit at
once), so 10 jobs crowd the cheap zones and 50 and 200 exceed the whole trace. The AWS V100
trace's probes asked for one instance (available 0 or 1, 9 zones, about 6 on average); its jobs
are single instances, so even 10 jobs exceed it.

Printed per setting, one line: ``fleet: jobs=N policy=P misses=M cost_vs_on_demand=R
cost_vs_optimum_alone=Q preemptions=K`` where R = fleet cost ÷ Σ each job's all-on-demand cost
(cheapest on-demand zone, one cold start) and Q = fleet cost ÷ Σ each job's exact optimum alone on
the unshared trace (simulation.optimal). The optimum is computed once per distinct (start, T/P)
and reused (200 jobs have at most 200 of them; each takes a fraction of a second).
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from functools import cache

import numpy as np
from bench_policies import load_grid

from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.simulation.fleet import FleetJob, simulate_fleet
from airflow_provider_skynomad.simulation.optimal import optimal_cost

DEADLINE_HOURS = 51.8333
TRACES = {
    "gcp-h100 week (13 zones, probes of 16, gangs of 4)": ("gcp-h100-2025-first-week.csv.gz", 4),
    "aws-v100 (9 zones, probes of 1, single instances)": ("aws-v100-2023.csv.gz", 1),
}
POLICIES = {"alone": False, "fleet-aware": True}
SIZES = (10, 50, 200)


@cache
def _grid(file: str):
    grid = load_grid(file, None)
    return grid, EgressModel().matrix(grid.markets)


def fleet_jobs(n: int, gang: int, step_hours: float) -> list[tuple[JobSpec, int]]:
    """The N jobs of a setting: (spec, start tick); see the module docstring."""
    out = []
    for j in range(n):
        ratio = round(1.1 + 0.1 * ((3 * j) % 10), 2)
        start = int(round((24 * j // n) / step_hours))
        spec = JobSpec(work_hours=DEADLINE_HOURS / ratio, deadline_hours=DEADLINE_HOURS, instances=gang)
        out.append((spec, start))
    return out


def run_fleet(args: tuple[str, int, str]) -> tuple[str, int, str, dict, float]:
    label, n, policy = args
    file, gang = TRACES[label]
    grid, egress = _grid(file)
    started = time.perf_counter()
    jobs = [
        FleetJob(spec, start, get_policy("skynomad"), sees_fleet=POLICIES[policy])
        for spec, start in fleet_jobs(n, gang, grid.step_hours)
    ]
    result = simulate_fleet(jobs, grid, egress)
    figures = {"cost": result.cost_usd, "misses": result.misses, "preemptions": result.preemptions}
    return label, n, policy, figures, time.perf_counter() - started


def run_optimum(args: tuple[str, float, int]) -> tuple[str, float, int, float]:
    """The exact optimum of one (start, T/P) alone on the unshared trace."""
    label, work_hours, start = args
    file, gang = TRACES[label]
    grid, egress = _grid(file)
    job = JobSpec(work_hours=work_hours, deadline_hours=DEADLINE_HOURS, instances=gang)
    optimum = optimal_cost(job, grid, start, egress)
    if not optimum.exact:
        raise RuntimeError(f"the optimum of {job} from tick {start} is only bracketed ({optimum})")
    return label, work_hours, start, optimum.cost_usd


def on_demand_usd(job: JobSpec, grid, start: int) -> float:
    """All on-demand in the cheapest zone at the start, one cold start: what the job costs without spot."""
    price = float(np.min(grid.on_demand_usd_per_hour[start])) * job.instances
    return price * (job.work_hours + job.cold_start_hours)


def main(quick: bool) -> None:
    sizes = SIZES[:2] if quick else SIZES
    settings = [(label, n, policy) for label in TRACES for n in sorted(sizes, reverse=True) for policy in POLICIES]
    optima = sorted(
        {
            (label, spec.work_hours, start)
            for label, (file, gang) in TRACES.items()
            for n in sizes
            for spec, start in fleet_jobs(n, gang, _grid(file)[0].step_hours)
        }
    )
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        fleets = pool.map(run_fleet, settings)
        best = {(label, work, start): cost for label, work, start, cost in pool.map(run_optimum, optima, chunksize=8)}
        results = {(label, n, policy): (figures, seconds) for label, n, policy, figures, seconds in fleets}
    for label, (file, gang) in TRACES.items():
        grid, _ = _grid(file)
        print(f"trace: {label} ({file}, step {grid.step_hours * 60:g} min)")
        for n in sizes:
            jobs = fleet_jobs(n, gang, grid.step_hours)
            od = sum(on_demand_usd(spec, grid, start) for spec, start in jobs)
            optimum = sum(best[(label, spec.work_hours, start)] for spec, start in jobs)
            for policy in POLICIES:
                figures, seconds = results[(label, n, policy)]
                cost = figures["cost"]
                print(
                    f"fleet: jobs={n} policy={policy} misses={figures['misses']} "
                    f"cost_vs_on_demand={cost / od:.3f} cost_vs_optimum_alone={cost / optimum:.3f} "
                    f"preemptions={figures['preemptions']}"
                )
    print(f"wall time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="N = 10 and 50 only")
    main(parser.parse_args().quick)
