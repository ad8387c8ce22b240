"""Other job shapes than the cost table's: is any run late, and where does eager-failover beat skynomad?

The cost targets are set for one job shape (d = 0.2 h, S = 50 GB, one instance). A user's job
may start slowly, carry a large checkpoint, need a gang, or move its checkpoint at a finite
bandwidth; the deadline guarantee must hold for all of them, and the table shows honestly
where the planner's cost advantage over eager-failover holds and where it does not.

    .venv/bin/python benchmarks/bench_robustness.py     # ~7 min on 2 cores

Same traces and deadline as bench_policies (a), T/P ∈ {1.02, 1.05, 1.2}, 10 windows per trace.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

from bench_policies import TRACES, console, evaluate
from rich.table import Table

SHAPES = {
    "fast start, no checkpoint (d 0.05 h, S 0)": {"cold_start_hours": 0.05, "checkpoint_gb": 0},
    "slow start, big checkpoint (d 0.5 h, S 500 GB)": {"cold_start_hours": 0.5, "checkpoint_gb": 500},
    "gang of 4 (d 0.2 h, S 50 GB)": {"instances": 4},
    "500 GB at 100 GB/h (moves take 5 h more)": {"checkpoint_gb": 500, "bandwidth_gb_per_hour": 100.0},
}
RATIOS = (1.02, 1.05, 1.2)
POLICIES = ("skynomad", "optimal", "eager-failover", "uniform-progress", "on-demand")


def main() -> None:
    jobs = [
        (label, ratio, 10, POLICIES, {}, shape) for shape in SHAPES.values() for label in TRACES for ratio in RATIOS
    ]
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(evaluate, jobs))
    table = Table(title="skynomad and eager-failover ÷ optimal on other job shapes (10 windows per row)")
    for column in ("job shape", "trace", "T/P", "skynomad", "eager-failover", "late runs (any policy)"):
        table.add_column(column, justify="right")
    names = {id(shape): name for name, shape in SHAPES.items()}
    above, late = 0, 0
    for (_, _, _, _, _, shape), (label, ratio, summary, _) in zip(jobs, results, strict=True):
        sky, eager = summary["skynomad"]["ratio_to_optimal"], summary["eager-failover"]["ratio_to_optimal"]
        misses = sum(row["misses"] for row in summary.values())
        above += sky > eager
        late += misses
        mark = " ▲" if sky > eager else ""
        table.add_row(names[id(shape)], label, f"{ratio}", f"{sky:.3f}{mark}", f"{eager:.3f}", f"{misses:g}")
    console.print(table)
    console.print(
        f"late runs in all: {late:g}; rows where skynomad costs more than eager-failover (▲): {above} of {len(results)}"
    )


if __name__ == "__main__":
    main()
