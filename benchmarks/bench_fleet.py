"""A fleet of jobs on shared spot capacity: each job planned alone (as today) and fleet-aware.

    .venv/bin/python benchmarks/bench_fleet.py            # N = 10, 50, 200 on both traces
    .venv/bin/python benchmarks/bench_fleet.py --quick    # N = 10, 50
    .venv/bin/python benchmarks/bench_fleet.py --sizes 50,200 --policies fleet-aware,fleet-aware-no-payback \
        --no-optimum-alone                                 # the payback rule's effect, without the optima
    .venv/bin/python benchmarks/bench_fleet.py --traces gcp --sizes 50 --policies fleet-aware --no-optimum-alone

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

``cost_vs_lower_bound=B`` divides the fleet's cost by a bound no policy can beat on the *shared*
trace (simulation.bound.fleet_lower_bound, a linear program solved with HiGHS). Its argument:
any run in which every job meets its deadline bills each job, tick by tick, a share of the tick
on spot in some market (at that market's price) or on on-demand (at least the tick's cheapest
on-demand price), never more than the tick, at least W + d hours over its window (its work and
one cold start), and no market holds more than ⌊available ÷ gang⌋ gangs in a tick, except that a
job finishing in a tick releases its group within it and a later job may launch into it: each
job gets one tick outside capacity, at its window's cheapest spot price, for that. Every run is
a feasible point of the LP, so it costs at least the LP's optimum; the LP leaves out every cold
start after the first, egress, probes, whole ticks and foresight.

``cost_vs_restart_bound=C`` divides it by a second bound, tighter and still valid: the same LP
with the cold starts capacity forces on any run (fleet_lower_bound(restarts=True)). It counts
launches by the rises of what the fleet holds: p[z,t] ≥ y[z,t] − y[z,t−1] for the gangs on spot
market z, q[t] ≥ O[t] − O[t−1] for those on on-demand, and the fleet's hours must cover its work
and d for each: dt·Σ_j (Σ_t (u + o) + f_j) ≥ Σ_j W_j + d·(Σ p + Σ q). Why any run without misses
is a feasible point: drop from it every group (one stay of a job in one market and mode) that
ended in its cold start; that removes cost and capacity held and no work. Every group left is
billed its whole warm-up, at least d, before its work, so the fleet is billed at least Σ W + d·G
hours for its G groups. A group's share of each tick rises once to at most 1 and falls (its
stay is one interval; the job's last tick, given to f_j, cuts it short), so its rises sum to at
most 1, and the rises of a market's total (or of on-demand's) are at most the sum of its groups'
rises: Σ p + Σ q ≤ G. A finisher's capacity taken by a newcomer in the same tick, or one job
leaving on-demand as another goes to it, is a launch the net rise misses, which only loosens the
bound. It still leaves out transfers, egress, probes and such swaps. A ``bounds:`` line gives
both bounds, the launches the restart bound charges (Σ p + Σ q, first launches included), what
it adds over the first bound, and each LP's solve time.

A second line per setting, ``gap:``, says where the distance to the bound sits, in $ and as a
share of it: ``restarts`` is every cold start after each job's first, egress and probes (the
bound pays none); ``od_while_spot_free`` is on-demand billed in a tick where a spot market had a
gang's capacity no group held, priced at the cheapest on-demand price minus that market's spot
price (cheapest free markets first); ``timing`` is the rest: the bound runs each job's work on
spot capacity at other times than the fleet did (spot left free while jobs idled, or after jobs
finished early, then bought dearer later). Then, in gang-hours, the spot capacity left free
while a job sat idle (``idle_while_spot_free``) and in all while any job was active
(``spot_left_free``); the launches; the share of preempted spot groups preempted before their
cold start ended (``died_in_cold_start``); and on-demand → idle → on-demand round trips.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from itertools import pairwise

import numpy as np
from bench_policies import load_grid

from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.simulation.bound import FleetBound, fleet_lower_bound
from airflow_provider_skynomad.simulation.fleet import FleetJob, simulate_fleet
from airflow_provider_skynomad.simulation.optimal import optimal_cost

DEADLINE_HOURS = 51.8333
TRACES = {
    "gcp-h100 week (13 zones, probes of 16, gangs of 4)": ("gcp-h100-2025-first-week.csv.gz", 4),
    "aws-v100 (9 zones, probes of 1, single instances)": ("aws-v100-2023.csv.gz", 1),
}
# name -> (sees the fleet, SkyNomadPolicy parameters); "no payback" is the planner without planner/payback.py
POLICIES = {
    "alone": (False, {}),
    "fleet-aware": (True, {}),
    "fleet-aware-no-payback": (True, {"payback": False}),
}
DEFAULT_POLICIES = ("alone", "fleet-aware")
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


def run_fleet(args: tuple[str, int, str, int]) -> tuple[str, int, str, dict, float]:
    label, n, policy, seed = args
    file, gang = TRACES[label]
    grid, egress = _grid(file)
    started = time.perf_counter()
    specs = fleet_jobs(n, gang, grid.step_hours)
    sees, params = POLICIES[policy]
    jobs = [FleetJob(spec, start, get_policy("skynomad", **params), sees_fleet=sees) for spec, start in specs]
    result = simulate_fleet(jobs, grid, egress, seed=seed)
    figures = {"cost": result.cost_usd, "misses": result.misses, "preemptions": result.preemptions}
    figures.update(where_the_gap_sits(specs, result.runs, grid))
    return label, n, policy, figures, time.perf_counter() - started


def run_bound(args: tuple[str, int, bool]) -> tuple[str, int, bool, FleetBound, float]:
    """One LP lower bound of one setting (simulation.bound): the issue's, or with `restarts` the restart bound."""
    label, n, restarts = args
    file, gang = TRACES[label]
    grid, _ = _grid(file)
    started = time.perf_counter()
    bound = fleet_lower_bound(fleet_jobs(n, gang, grid.step_hours), grid, restarts=restarts)
    return label, n, restarts, bound, time.perf_counter() - started


def _segments(run, start: int, dt: float):
    """(first tick, ticks, mode, market key, hours) of each billed segment, on the grid."""
    for segment in run.segments:
        mode, market = segment.option.split("(", 1)
        first = start + int(round(segment.start_hours / dt))
        last = start + max(int(round(segment.start_hours / dt)) + 1, int(np.ceil(segment.end_hours / dt - 1e-9)))
        yield first, last - first, mode, market[:-1], segment


def where_the_gap_sits(specs: list[tuple[JobSpec, int]], runs, grid) -> dict:
    """What the fleet paid that the bound does not (module docstring, the ``gap:`` line), from the runs' segments."""
    dt = grid.step_hours
    index = {key: i for i, key in enumerate(grid.keys)}
    gang = specs[0][0].instances
    held = np.zeros(grid.available.shape, dtype=np.int64)
    on_demand = np.zeros(grid.ticks, dtype=np.int64)
    idle = np.zeros(grid.ticks, dtype=np.int64)
    restarts = launches = died = preempted = round_trips = 0
    for (spec, start), run in zip(specs, runs, strict=True):
        restarts += run.egress_usd + run.probe_usd
        busy = np.zeros(grid.ticks, dtype=bool)
        modes = []
        for k, (first, ticks, mode, market, segment) in enumerate(_segments(run, start, dt)):
            launches += 1
            hours = segment.end_hours - segment.start_hours
            if k > 0 and hours > 0:
                restarts += segment.usd * min(spec.cold_start_hours, hours) / hours
            if mode == "spot":
                held[first : first + ticks, index[market]] += 1
                if segment.ended_by == "preempted":
                    preempted += 1
                    died += hours <= spec.cold_start_hours + 1e-9
            else:
                on_demand[first : first + ticks] += 1
            busy[first : first + ticks] = True
            modes.append((mode, segment.ended_by))
        round_trips += sum(a == ("on-demand", "idle") and b[0] == "on-demand" for a, b in pairwise(modes))
        end = start + int(np.ceil((run.finish_hours or spec.deadline_hours) / dt - 1e-9))
        idle[start:end] += ~busy[start:end]
    free = np.maximum(grid.available // gang - held, 0)
    spot = np.where(np.isfinite(grid.spot_usd_per_hour), grid.spot_usd_per_hour, np.inf)
    cheapest_od = np.min(grid.on_demand_usd_per_hour, axis=1)
    od_free, idle_hours = 0.0, 0.0
    for g in np.flatnonzero((on_demand > 0) | (idle > 0)):
        offers = np.sort(np.repeat(spot[g], free[g]))
        taken = offers[: on_demand[g]]
        od_free += float(np.sum(np.maximum(cheapest_od[g] - taken, 0.0))) * gang * dt
        idle_hours += min(len(offers) - len(taken), idle[g]) * dt
    active = idle + on_demand + held.sum(axis=1) > 0
    return {
        "restarts": restarts,
        "od_while_spot_free": od_free,
        "idle_free_hours": idle_hours,
        "free_gang_hours": float(np.sum(free[active])) * dt,
        "launches": launches,
        "died_in_cold_start": died / preempted if preempted else 0.0,
        "round_trips": round_trips,
    }


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


def main(
    sizes: tuple[int, ...],
    policies: tuple[str, ...],
    optimum_alone: bool = True,
    traces: tuple[str, ...] = (),
    seed: int = 0,
) -> None:
    chosen = {label: TRACES[label] for label in TRACES if not traces or label.split("-")[0] in traces}
    settings = [(label, n, policy) for label in chosen for n in sorted(sizes, reverse=True) for policy in policies]
    optima = sorted(
        {
            (label, spec.work_hours, start)
            for label, (file, gang) in chosen.items()
            for n in sizes
            for spec, start in fleet_jobs(n, gang, _grid(file)[0].step_hours)
        }
        if optimum_alone
        else ()
    )
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        fleets = pool.map(run_fleet, [(*setting, seed) for setting in settings])
        bounds = pool.map(
            run_bound, [(label, n, restarts) for label in chosen for n in sorted(sizes) for restarts in (True, False)]
        )
        best = {(label, work, start): cost for label, work, start, cost in pool.map(run_optimum, optima, chunksize=8)}
        results = {(label, n, policy): (figures, seconds) for label, n, policy, figures, seconds in fleets}
        bound = {(label, n, restarts): (lp, seconds) for label, n, restarts, lp, seconds in bounds}
    for label, (file, gang) in chosen.items():
        grid, _ = _grid(file)
        print(f"trace: {label} ({file}, step {grid.step_hours * 60:g} min)")
        for n in sizes:
            jobs = fleet_jobs(n, gang, grid.step_hours)
            od = sum(on_demand_usd(spec, grid, start) for spec, start in jobs)
            optimum = sum(best[(label, spec.work_hours, start)] for spec, start in jobs) if optimum_alone else np.nan
            for policy in policies:
                figures, seconds = results[(label, n, policy)]
                cost = figures["cost"]
                (lp, lp_s), (tight, tight_s) = bound[(label, n, False)], bound[(label, n, True)]
                lower = lp.cost_usd
                print(
                    f"fleet: jobs={n} policy={policy} misses={figures['misses']} "
                    f"cost_vs_on_demand={cost / od:.3f} cost_vs_optimum_alone={cost / optimum:.3f} "
                    f"cost_vs_lower_bound={cost / lower:.3f} cost_vs_restart_bound={cost / tight.cost_usd:.3f} "
                    f"preemptions={figures['preemptions']}"
                )
                gap = cost - lower
                rest = gap - figures["restarts"] - figures["od_while_spot_free"]
                parts = " ".join(
                    f"{name}=${usd:,.0f} ({usd / gap:.0%})" if gap > 0 else f"{name}=${usd:,.0f}"
                    for name, usd in (
                        ("restarts", figures["restarts"]),
                        ("od_while_spot_free", figures["od_while_spot_free"]),
                        ("timing", rest),
                    )
                )
                print(
                    f"  gap: ${gap:,.0f} = {parts} | idle_while_spot_free={figures['idle_free_hours']:,.0f} gang-h "
                    f"spot_left_free={figures['free_gang_hours']:,.0f} gang-h launches={figures['launches']} "
                    f"died_in_cold_start={figures['died_in_cold_start']:.0%} "
                    f"od_idle_od_round_trips={figures['round_trips']}"
                )
                print(
                    f"  bounds: lower=${lower:,.0f} ({lp_s:.0f} s) restart=${tight.cost_usd:,.0f} ({tight_s:.0f} s, "
                    f"{tight.launches:,.1f} launches charged of the fleet's {figures['launches']}): the restart bound "
                    f"adds ${tight.cost_usd - lower:,.0f} against the fleet's restarts=${figures['restarts']:,.0f}"
                )
    print(f"wall time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="N = 10 and 50 only")
    parser.add_argument("--sizes", help="comma-separated fleet sizes (default 10,50,200)")
    parser.add_argument(
        "--policies", default=",".join(DEFAULT_POLICIES), help=f"comma-separated, of {', '.join(POLICIES)}"
    )
    parser.add_argument(
        "--no-optimum-alone", action="store_true", help="skip each job's exact optimum (cost_vs_optimum_alone: nan)"
    )
    parser.add_argument("--traces", default="gcp,aws", help="comma-separated, of gcp, aws (default both)")
    parser.add_argument("--seed", type=int, default=0, help="the order jobs act in within a tick (simulate_fleet)")
    args = parser.parse_args()
    sizes = tuple(int(n) for n in args.sizes.split(",")) if args.sizes else SIZES[:2] if args.quick else SIZES
    chosen = tuple(args.policies.split(","))
    unknown = [p for p in chosen if p not in POLICIES]
    if unknown:
        parser.error(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    providers = tuple(args.traces.split(","))
    if not set(providers) <= {"gcp", "aws"}:
        parser.error(f"unknown traces {providers}; choose from gcp, aws")
    main(sizes, chosen, not args.no_optimum_alone, providers, args.seed)
