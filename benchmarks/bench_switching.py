"""Policy switching (`skynomad-switching`) on the tight rows: skynomad, it and eager-failover ÷ the exact optimum.

    .venv/bin/python benchmarks/bench_switching.py                              # E65's table (~25 min on 2 cores)
    .venv/bin/python benchmarks/bench_switching.py --shapes gang4 --ratios 1.05
    .venv/bin/python benchmarks/bench_switching.py --params '{"futures": 16}'

Rows: bench_robustness.py's job shapes and the cost table's (d 0.2 h, S 50 GB, one instance) on the
same traces and 10 windows, at T/P 1.02 and 1.05 by default (where skynomad can cost more than
eager-failover). Per row: mean cost ÷ the optimum's mean cost, ▲ where above eager-failover, late
runs, the comparisons the switching policy made (each rolls both policies out on K sampled futures)
and the wall time of one comparison at p50 / p99.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from bench_lookahead import time_calls
from bench_policies import DEADLINE_HOURS, JOB_SHAPE, TRACES, load_grid
from bench_robustness import SHAPES
from rich.console import Console
from rich.table import Table

from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.simulation.evaluate import Evaluation
from airflow_provider_skynomad.simulation.optimal import optimal_cost
from airflow_provider_skynomad.simulation.simulator import simulate

ROWS = {"cost table (d 0.2 h, S 50 GB)": {}, **SHAPES}
SHORT = dict(zip(("base", "fast", "slow500", "gang4", "gang8", "bw500"), ROWS, strict=True))
POLICIES = ("skynomad", "skynomad-switching", "eager-failover")
console = Console(width=170)


def row(args) -> dict:
    shape_name, label, ratio, params, windows = args
    file, zones, _ = TRACES[label]
    grid = load_grid(file, zones)
    egress = EgressModel().matrix(grid.markets)
    shape = {**JOB_SHAPE, **ROWS[shape_name]}
    job = JobSpec(work_hours=DEADLINE_HOURS / ratio, deadline_hours=DEADLINE_HOURS, **shape)
    starts = Evaluation(job, grid, egress, policies=("optimal",), max_windows=windows).windows()
    costs = {name: [] for name in (*POLICIES, "optimal")}
    late, comparisons, compare_ms = 0, 0, []
    for start in starts:
        costs["optimal"].append(optimal_cost(job, grid, start, egress).cost_usd)
        for name in POLICIES:
            policy = get_policy(name, **(params if name == "skynomad-switching" else {}))
            if name == "skynomad-switching":
                time_calls(policy, "_compare", compare_ms)
            result = simulate(policy, job, grid, start, egress)
            costs[name].append(result.cost_usd)
            late += not result.met_deadline
            comparisons += getattr(policy, "comparisons", 0)
    optimum = float(np.mean(costs["optimal"]))
    ratios = {name: float(np.mean(costs[name])) / optimum for name in POLICIES}
    return {
        "shape": shape_name,
        "trace": label,
        "ratio": ratio,
        **ratios,
        "late": late,
        "comparisons": comparisons,
        "ms": compare_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="*", default=list(SHORT), choices=list(SHORT))
    parser.add_argument("--ratios", nargs="*", type=float, default=[1.02, 1.05])
    parser.add_argument("--traces", nargs="*", default=list(TRACES), choices=list(TRACES))
    parser.add_argument("--windows", type=int, default=10)
    parser.add_argument("--params", default="{}", help="JSON: SwitchingPolicy parameters")
    args = parser.parse_args()
    params = json.loads(args.params)
    rows = [(SHORT[s], label, ratio) for s in args.shapes for label in args.traces for ratio in args.ratios]
    jobs = [(*r, params, args.windows) for r in rows]
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(row, jobs))
    table = Table(title=f"skynomad, skynomad-switching and eager-failover ÷ optimal ({args.windows} windows per row)")
    for column in ("job shape", "trace", "T/P", *POLICIES, "late", "comparisons", "ms p50 / p99"):
        table.add_column(column, justify="right")
    above = dict.fromkeys(POLICIES[:2], 0)
    all_ms = []
    for r in results:
        eager = r["eager-failover"]
        marks = {}
        for name in POLICIES[:2]:
            up = r[name] > eager + 1e-9
            above[name] += up
            marks[name] = f"{r[name]:.3f}{' ▲' if up else ''}"
        all_ms += r["ms"]
        ms = f"{np.percentile(r['ms'], 50):.0f} / {np.percentile(r['ms'], 99):.0f}" if r["ms"] else "–"
        table.add_row(
            r["shape"],
            r["trace"],
            f"{r['ratio']}",
            marks["skynomad"],
            marks["skynomad-switching"],
            f"{eager:.3f}",
            f"{r['late']}",
            f"{r['comparisons']}",
            ms,
        )
    console.print(table)
    console.print(
        f"rows above eager-failover (▲): skynomad {above['skynomad']}, skynomad-switching "
        f"{above['skynomad-switching']} of {len(results)}; one comparison p50 {np.percentile(all_ms, 50):.0f} ms, "
        f"p99 {np.percentile(all_ms, 99):.0f} ms"
        if all_ms
        else f"rows above eager-failover (▲): skynomad {above['skynomad']}, skynomad-switching "
        f"{above['skynomad-switching']} of {len(results)}; no comparison made"
    )


if __name__ == "__main__":
    main()
