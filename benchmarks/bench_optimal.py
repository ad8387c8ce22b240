"""Wall time of the exact optimum per 52 h window at 13 zones, at decision steps of 195 s, 180 s and 600 s.

    .venv/bin/python benchmarks/bench_optimal.py            # 3 windows per cell (~2 min)
    .venv/bin/python benchmarks/bench_optimal.py --windows 1

The GCP H100 week (13 zones) resampled at each step; T/P ∈ {1.05, 1.2, 2.0} (P = 51.83 h ÷ T/P),
d = 0.2 h, S = 50 GB. 195 s against d = 720 s makes the progress quantum 15 s (the old DP
coarsened it and reported a looser lower bound); 180 s and 600 s make it 180 s and 120 s.
Each row: the lattice quantum, whether the result is exact (else the bracket's gap), mean and
max wall seconds per window. Also the AWS V100 trace (9 zones, 195 s) with 48 h of work, the
case where the coarsened DP was 6 % low. The last rows: 600 s steps with checkpoints every
30 minutes and no final checkpoint on notice (column "ckpt h"), where the DP also carries the
progress not yet checkpointed (15 more levels per progress level at a 120 s quantum).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_policies import DEADLINE_HOURS, console, load_grid
from rich.table import Table

from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.simulation.optimal import optimal_cost
from airflow_provider_skynomad.simulation.simulator import window_ticks

CASES = (
    [
        ("gcp-h100-2025-first-week.csv.gz", "GCP 13 zones", step, ratio, None, 0.0)
        for step in (195, 180, 600)
        for ratio in (1.05, 1.2, 2.0)
    ]
    + [("aws-v100-2023.csv.gz", "AWS 9 zones", 195, None, 48.0, 0.0)]
    + [("gcp-h100-2025-first-week.csv.gz", "GCP 13 zones", 600, ratio, None, 0.5) for ratio in (1.05, 1.2, 2.0)]
)


def main(windows: int) -> None:
    table = Table(title="exact optimum: wall time per 52 h window (ckpt h: checkpoint interval, 0 = saved as made)")
    for column in ("trace", "step s", "P h", "ckpt h", "quantum s", "exact / gap", "mean cost $", "mean s", "max s"):
        table.add_column(column, justify="right")
    grids = {}
    for file, label, step, ratio, work, interval in CASES:
        key = (file, step)
        if key not in grids:
            grids[key] = load_grid(file, None, step_minutes=step / 60)
        grid = grids[key]
        work = work if work is not None else DEADLINE_HOURS / ratio
        job = JobSpec(
            work_hours=work,
            deadline_hours=DEADLINE_HOURS,
            cold_start_hours=0.2,
            checkpoint_gb=50,
            checkpoint_interval_hours=interval,
        )
        egress = EgressModel().matrix(grid.markets)
        last = grid.ticks - window_ticks(job, grid.step_hours)
        starts = np.linspace(0, last, windows).round().astype(int)
        seconds, costs, gaps, exact = [], [], [], True
        for start in starts:
            began = time.perf_counter()
            best = optimal_cost(job, grid, int(start), egress)
            seconds.append(time.perf_counter() - began)
            costs.append(best.cost_usd)
            gaps.append(best.gap)
            exact &= best.exact
            quantum = best.quantum_seconds
        table.add_row(
            label,
            f"{step}",
            f"{work:.2f}",
            f"{interval:g}",
            f"{quantum:g}",
            "exact" if exact else f"gap {max(gaps):.3%}",
            f"{np.mean(costs):.2f}",
            f"{np.mean(seconds):.2f}",
            f"{max(seconds):.2f}",
        )
    console.print(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", type=int, default=3)
    main(parser.parse_args().windows)
