"""The scenario lookahead (`lookahead`) against `skynomad` and `eager-failover`, and its decision time per replan.

    .venv/bin/python benchmarks/bench_lookahead.py --windows 4      # E57's table (~15 min on 2 cores)
    .venv/bin/python benchmarks/bench_lookahead.py --futures 4 32 --traces "gcp-h100 (13 zones)" "aws-v100 (9 zones)"
    .venv/bin/python benchmarks/bench_lookahead.py --replan-steps 1 --traces "gcp-h100 (13 zones)" "aws-v100 (9 zones)"

Same traces, job shape and window picks as bench_policies.py (a), at T/P 1.05, 1.2, 1.5, 2.0:
mean cost ÷ the exact optimum's mean cost, misses, the lookahead's replans per run, and the wall
time of one replan (sampling the K futures and the DP) at p50/p99. A cell runs a few windows
only, so its figure is noisier than bench_policies.py's.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from bench_policies import DEADLINE_HOURS, JOB_SHAPE, RATIOS, TRACES, load_grid
from rich.console import Console
from rich.table import Table

from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.simulation.evaluate import Evaluation
from airflow_provider_skynomad.simulation.optimal import optimal_cost
from airflow_provider_skynomad.simulation.simulator import simulate

BASELINES = ("skynomad", "eager-failover")
console = Console(width=170)


def time_calls(obj, method: str, sink_ms: list[float]) -> None:
    """Wrap `obj.method` so that each call's wall time in milliseconds is appended to `sink_ms`."""
    inner = getattr(obj, method)

    def timed(*args):
        started = time.perf_counter()
        out = inner(*args)
        sink_ms.append((time.perf_counter() - started) * 1e3)
        return out

    setattr(obj, method, timed)


def cell(args) -> dict:
    """One trace × T/P: every policy on the same windows, the optimum, and the lookahead's replan times."""
    label, ratio, windows, futures, replan_steps = args
    file, zones, _ = TRACES[label]
    grid = load_grid(file, zones)
    egress = EgressModel().matrix(grid.markets)
    job = JobSpec(work_hours=DEADLINE_HOURS / ratio, deadline_hours=DEADLINE_HOURS, **JOB_SHAPE)
    starts = Evaluation(job, grid, egress, policies=("optimal",), max_windows=windows).windows()
    costs: dict[str, list[float]] = {name: [] for name in ("lookahead", *BASELINES, "optimal")}
    misses = dict.fromkeys(costs, 0)
    replan_ms: list[float] = []
    replans = 0
    for start in starts:
        costs["optimal"].append(optimal_cost(job, grid, start, egress).cost_usd)
        for name in ("lookahead", *BASELINES):
            policy = get_policy(name)
            if name == "lookahead":
                policy = get_policy(name, futures=futures, replan_steps=replan_steps)
                time_calls(policy, "_rank", replan_ms)
            result = simulate(policy, job, grid, start, egress)
            costs[name].append(result.cost_usd)
            misses[name] += int(not result.met_deadline)
            replans += getattr(policy, "replans", 0)
    optimum = float(np.mean(costs["optimal"]))
    return {
        "label": label,
        "ratio": ratio,
        "windows": len(starts),
        "optimal": optimum,
        "ratio_to_optimal": {n: float(np.mean(c)) / optimum for n, c in costs.items() if n != "optimal"},
        "misses": misses,
        "replans_per_run": replans / len(starts),
        "p50_ms": float(np.percentile(replan_ms, 50)),
        "p99_ms": float(np.percentile(replan_ms, 99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", type=int, default=2, help="windows per trace × T/P cell")
    parser.add_argument("--futures", type=int, nargs="+", default=[16], help="K values to measure")
    parser.add_argument("--replan-steps", type=int, nargs="+", default=[6], help="replan at least this often")
    parser.add_argument("--traces", nargs="+", default=list(TRACES))
    args = parser.parse_args()
    jobs = [
        (label, ratio, args.windows, k, every)
        for k in args.futures
        for every in args.replan_steps
        for label in args.traces
        for ratio in RATIOS
    ]
    with ProcessPoolExecutor(max_workers=2) as pool:
        rows = list(pool.map(cell, jobs))
    policy = get_policy("lookahead")
    console.print(
        f"lookahead: horizon {policy.horizon_hours:g} h, replan on an event (running group gone, a market's "
        f"observed state or a spot price changed) or every `every` steps"
    )
    table = Table(title="mean cost ÷ exact optimum mean cost (misses in brackets when any)")
    for column in (
        "K",
        "every",
        "trace",
        "T/P",
        "windows",
        "optimal $",
        "lookahead",
        *BASELINES,
        "replans/run",
        "p50 ms",
        "p99 ms",
    ):
        table.add_column(column, justify="right")
    for (_, _, _, k, every), row in zip(jobs, rows, strict=True):
        cells = []
        for name in ("lookahead", *BASELINES):
            miss = f" [{row['misses'][name]} miss]" if row["misses"][name] else ""
            cells.append(f"{row['ratio_to_optimal'][name]:.3f}{miss}")
        table.add_row(
            str(k),
            str(every),
            row["label"],
            f"{row['ratio']}",
            str(row["windows"]),
            f"{row['optimal']:.2f}",
            *cells,
            f"{row['replans_per_run']:.0f}",
            f"{row['p50_ms']:.1f}",
            f"{row['p99_ms']:.1f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
