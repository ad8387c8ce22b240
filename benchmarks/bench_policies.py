"""Policy benchmarks: cost vs the optimum, decision latency, evaluation wall time.

    .venv/bin/python benchmarks/bench_policies.py            # everything (~10 min on 2 cores)
    .venv/bin/python benchmarks/bench_policies.py --quick    # fewer windows
    .venv/bin/python benchmarks/bench_policies.py --only cost --all-windows   # every window (AWS: 87, not 20)

(a) mean cost / optimum mean cost per policy, on the GCP H100 week (the paper's 6 zones, and all 13)
    and the AWS V100 trace, at T/P ∈ {1.05, 1.2, 1.5, 2.0}, deadline 51.83 h, d = 0.2 h, S = 50 GB;
    and "hindsight-best": per window the cheapest of all those runs (any zone for uniform progress);
(b) planner decision latency p50/p99 at 13 zones and at 200 zone×type options;
(c) wall time of a 10-window × 5-policy evaluation;
(d) skynomad with clairvoyant lifetimes (the trace's truth), seeing every market at every step, and
    seeing the probe DAG's market table as under Airflow: what better forecasts or observation could buy.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from importlib import resources

import numpy as np
from rich.console import Console
from rich.table import Table

from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.market.grid import Market, MarketGrid, build_grid, default_step_hours
from airflow_provider_skynomad.market.observations import read_observations
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.simulation.clairvoyant import ClairvoyantForecaster
from airflow_provider_skynomad.simulation.evaluate import Evaluation
from airflow_provider_skynomad.simulation.simulator import simulate

DATA = resources.files("airflow_provider_skynomad") / "data"
DEADLINE_HOURS = 51.8333
RATIOS = (1.05, 1.2, 1.5, 2.0)
PAPER_ZONES = ["us-central1-a", "us-west1-a", "europe-west1-c", "europe-west3-c", "asia-southeast1-b", "asia-south2-b"]
TRACES = {
    "gcp-h100 (6 zones)": ("gcp-h100-2025-first-week.csv.gz", PAPER_ZONES, None),
    "gcp-h100 (13 zones)": ("gcp-h100-2025-first-week.csv.gz", None, None),
    "aws-v100 (9 zones)": ("aws-v100-2023.csv.gz", None, 20),
}
JOB_SHAPE = {"cold_start_hours": 0.2, "checkpoint_gb": 50}  # the cost table's d and S
POLICIES = ("skynomad", "optimal", "on-demand", "uniform-progress", "eager-failover")
console = Console(width=170)


def load_grid(file: str, zones, step_minutes: float | None = None) -> MarketGrid:
    frame = read_observations(DATA / file, zones)
    return build_grid(frame, step_minutes / 60 if step_minutes else default_step_hours(frame))


def evaluate(args) -> tuple[str, float, dict, float]:
    """One row's summary (with the hindsight-best policy where the optimum ran) and its wall time."""
    label, ratio, report, seconds = evaluate_report(args)
    summary = report["summary"]
    if "optimal" in summary:
        summary["hindsight-best"] = hindsight_best(report["windows"])
    return label, ratio, summary, seconds


def evaluate_report(args) -> tuple[str, float, dict, float]:
    """One row's whole Evaluation report (each window's runs too) and its wall time.

    args: (label, ratio, max_windows, policies, params[, shape[, options]]); max_windows None is the
    trace's default, 0 all; the optional shape changes the job, options set Evaluation fields (e.g.
    observe_all).
    """
    label, ratio, max_windows, policies, params, *extra = args
    shape, options = (list(extra) + [{}, {}])[:2]
    file, zones, default_windows = TRACES[label]
    limit = default_windows if max_windows is None else (max_windows or None)
    grid = load_grid(file, zones)
    params = params(grid) if callable(params) else params
    job = JobSpec(work_hours=DEADLINE_HOURS / ratio, deadline_hours=DEADLINE_HOURS, **{**JOB_SHAPE, **shape})
    evaluation = Evaluation(
        job,
        grid,
        EgressModel().matrix(grid.markets),
        policies=policies,
        max_windows=limit,
        policy_params=params,
        **options,
    )
    started = time.perf_counter()
    report = evaluation.run()
    return label, ratio, report, time.perf_counter() - started


def hindsight_best(windows: list[dict]) -> dict:
    """Per window the cheapest on-time run of any online policy (uniform progress: any zone), picked after the fact.

    No choice among these policies does better, not even one made per window after the fact: a
    target below this figure asks for a policy that, on average, beats each of them in the windows
    where it was best (the optimum does, by switching with perfect knowledge).
    """
    online = [[r for name, r in w["results"].items() if name != "optimal"] for w in windows]
    best = [min((r["cost_usd"] for r in runs if r["met_deadline"]), default=np.inf) for runs in online]
    optimal = [w["results"]["optimal"]["cost_usd"] for w in windows]
    misses = sum(not np.isfinite(b) for b in best)
    return {"ratio_to_optimal": round(float(np.mean(best) / np.mean(optimal)), 4), "misses": misses}


def cost_table(quick: bool, all_windows: bool = False) -> None:
    """`all_windows`: every window of every trace; the 67 AWS windows the default leaves out act as held-out data."""
    windows = 4 if quick else (0 if all_windows else None)
    jobs = [(label, ratio, windows, POLICIES, {}) for label in TRACES for ratio in RATIOS]
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(evaluate, jobs))
    table = Table(title="(a) mean cost ÷ optimal mean cost (misses in brackets when any)")
    names = [
        "skynomad",
        "eager-failover",
        "uniform-progress-best",
        "uniform-progress-mean",
        "on-demand",
        "hindsight-best",
    ]
    for column in ("trace", "T/P", "optimal $", *names, "s"):
        table.add_column(column, justify="right")
    worst = {"skynomad": 0.0}
    for label, ratio, summary, seconds in results:
        cells = []
        for name in names:
            row = summary[name]
            miss = f" [{row['misses']:g} miss]" if row["misses"] else ""
            cells.append(f"{row['ratio_to_optimal']:.3f}{miss}")
        table.add_row(label, f"{ratio}", f"{summary['optimal']['mean_cost_usd']:.2f}", *cells, f"{seconds:.0f}")
        sky, eager = summary["skynomad"]["mean_cost_usd"], summary["eager-failover"]["mean_cost_usd"]
        worst["skynomad"] = max(worst["skynomad"], sky / eager)
    console.print(table)
    console.print(f"max over rows of skynomad ÷ eager-failover mean cost: {worst['skynomad']:.3f}")


def forecaster_table(quick: bool) -> None:
    jobs = [
        (label, 1.2, 4 if quick else 6, ("skynomad", "optimal"), {"skynomad": {"forecaster": name}})
        for label in ("gcp-h100 (6 zones)", "aws-v100 (9 zones)")
        for name in ("nelson-aalen", "learned", "constant")
    ]
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(evaluate, jobs))
    table = Table(title="planner cost with each lifetime forecaster (T/P 1.2)")
    for column in ("trace", "forecaster", "skynomad ÷ optimal", "s"):
        table.add_column(column, justify="right")
    for (label, _, _, _, params), (_, _, summary, seconds) in zip(jobs, results, strict=True):
        table.add_row(
            label, params["skynomad"]["forecaster"], f"{summary['skynomad']['ratio_to_optimal']:.3f}", f"{seconds:.0f}"
        )
    console.print(table)


def every_step_params(grid: MarketGrid) -> dict:
    """skynomad refitting its forecasts every step (the control for the clairvoyant run)."""
    return {"skynomad": {"refit_hours": 0}}


def clairvoyant_params(grid: MarketGrid) -> dict:
    """skynomad told each market's true remaining run (simulation.clairvoyant), capped as its forecasts are.

    Refitted every step: the truth an hour old is not the truth.
    """
    cap = SkyNomadPolicy().lifetimes.cap_hours
    forecaster = ClairvoyantForecaster(grid.usable(1), grid.step_hours, cap_hours=cap)
    return {"skynomad": {"forecaster": forecaster, "refit_hours": 0}}


def clairvoyant_table(all_windows: bool = False) -> None:
    """(d) What better knowledge could buy, same windows as (a): skynomad with the trace's true lifetimes,
    seeing every market at every step (as if a probe DAG watched them all, free to the job), and seeing
    what Airflow shows it: the market table a probe DAG fills every hour, the last row holding."""
    windows = 0 if all_windows else None
    variants = {
        "nelson-aalen": ({}, {}),
        "nelson-aalen, refit every step": (every_step_params, {}),
        "clairvoyant": (clairvoyant_params, {}),
        "sees every market": ({}, {"observe_all": True}),
        "market table, hourly probes": ({}, {"table_probe_hours": 1.0}),
    }
    jobs = [
        (label, ratio, windows, ("skynomad", "optimal"), params, {}, options)
        for label in TRACES
        for ratio in RATIOS
        for params, options in variants.values()
    ]
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(evaluate, jobs))
    table = Table(
        title="(d) skynomad ÷ optimal with its own lifetime forecasts, with clairvoyant ones, "
        "seeing every market, and seeing the market table"
    )
    for column in ("trace", "T/P", *variants, "misses"):
        table.add_column(column, justify="right")
    for row in range(0, len(results), len(variants)):
        runs = [summary["skynomad"] for _, _, summary, _ in results[row : row + len(variants)]]
        label, ratio = results[row][:2]
        table.add_row(
            label,
            f"{ratio}",
            *(f"{run['ratio_to_optimal']:.3f}" for run in runs),
            f"{sum(run['misses'] for run in runs):g}",
        )
    console.print(table)


def wide_grid(base: MarketGrid, markets: int, seed: int = 0) -> MarketGrid:
    """`markets` options built from the real ones: prices jittered, availability shifted in time."""
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, len(base.markets), markets)
    shifts = rng.integers(0, base.ticks, markets)
    scale = rng.uniform(0.8, 1.2, markets)
    available = np.stack([np.roll(base.available[:, c], s) for c, s in zip(cols, shifts, strict=True)], axis=1)
    made = tuple(
        Market(
            f"{base.markets[c].zone}:type{j}",
            base.markets[c].cloud,
            base.markets[c].region,
            base.markets[c].zone,
            f"type{j}",
        )
        for j, c in enumerate(cols)
    )
    return MarketGrid(
        base.start,
        base.step_hours,
        made,
        available,
        base.spot_usd_per_hour[:, cols] * scale,
        base.on_demand_usd_per_hour[:, cols] * scale,
    )


def latency_table() -> None:
    table = Table(
        title="(b) skynomad decision latency (every decision of whole simulated jobs); "
        "CPU: the thread's own time, which other processes on a loaded box do not inflate"
    )
    for column in ("markets", "options", "decisions", "p50 ms", "p99 ms", "max ms", "CPU p50 ms", "CPU p99 ms"):
        table.add_column(column, justify="right")
    base = load_grid("gcp-h100-2025-first-week.csv.gz", None)
    for grid in (base, wide_grid(base, 100)):
        job = JobSpec(work_hours=DEADLINE_HOURS / 1.2, deadline_hours=DEADLINE_HOURS)
        egress = EgressModel().matrix(grid.markets)
        times: list[float] = []
        cpu: list[float] = []
        for start in (0, 216, 432, 648):
            policy = get_policy("skynomad")
            decide = policy.decide

            def timed(*args, _decide=decide, _times=times, _cpu=cpu):
                t0, c0 = time.perf_counter(), time.thread_time()
                out = _decide(*args)
                _times.append(time.perf_counter() - t0)
                _cpu.append(time.thread_time() - c0)
                return out

            policy.decide = timed
            simulate(policy, job, grid, start, egress)
        ms, cpu_ms = np.array(times) * 1e3, np.array(cpu) * 1e3
        table.add_row(
            str(len(grid.markets)),
            str(2 * len(grid.markets)),
            str(len(ms)),
            f"{np.percentile(ms, 50):.3f}",
            f"{np.percentile(ms, 99):.3f}",
            f"{ms.max():.2f}",
            f"{np.percentile(cpu_ms, 50):.3f}",
            f"{np.percentile(cpu_ms, 99):.3f}",
        )
    console.print(table)


def wall_time() -> None:
    grid = load_grid("gcp-h100-2025-first-week.csv.gz", None)
    job = JobSpec(work_hours=DEADLINE_HOURS / 1.2, deadline_hours=DEADLINE_HOURS)
    started = time.perf_counter()
    evaluation = Evaluation(job, grid, EgressModel().matrix(grid.markets), policies=POLICIES, max_windows=10)
    evaluation.run()
    seconds = time.perf_counter() - started
    runs = evaluation.total_runs()
    console.print(
        f"(c) evaluation of 10 windows × 5 policies (13 zones, uniform-progress per zone = {runs} runs): "
        f"{seconds:.1f} s wall"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["cost", "forecasters", "clairvoyant", "latency", "wall"], default=None)
    parser.add_argument("--all-windows", action="store_true", help="cost table on every window (slow: ~20 min)")
    args = parser.parse_args()
    steps = {
        "cost": lambda: cost_table(args.quick, args.all_windows),
        "forecasters": lambda: forecaster_table(args.quick),
        "clairvoyant": lambda: clairvoyant_table(args.all_windows),
        "latency": latency_table,
        "wall": wall_time,
    }
    for name, step in steps.items():
        if args.only in (None, name):
            step()
