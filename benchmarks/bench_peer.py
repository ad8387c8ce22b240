"""Cross-check against the paper artifact's own per-window results (../shared/peer/).

    .venv/bin/python benchmarks/bench_peer.py [--peer ../shared/peer/artifact-results-on-shared-traces.csv]

Reproduces the artifact's setting (its README): 600 s steps from the trace's first row, windows of
312 steps every 72 (GCP: all 11; AWS: 20 of 87 at round(i·86/19)), GCP's 6 zones, d = 0.2 h,
S = 50 GB, $0.02/GB between regions and none within one, GCP prices × 8 (a3-highgpu-8g) with
egress not scaled. Prints, per trace and T/P, the mean optimum and each policy's ratio to it next
to the artifact's, and the largest per-window gap between the two optima.
"""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from airflow_provider_skynomad.market.egress import FlatEgress
from airflow_provider_skynomad.market.grid import build_grid
from airflow_provider_skynomad.market.observations import read_observations
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.planner.registry import get_policy
from airflow_provider_skynomad.simulation.optimal import optimal_cost
from airflow_provider_skynomad.simulation.simulator import simulate

DATA = resources.files("airflow_provider_skynomad") / "data"
DEFAULT_PEER = Path(__file__).resolve().parents[1].parent / "shared" / "peer" / "artifact-results-on-shared-traces.csv"
GCP_ZONES = ["us-central1-a", "us-west1-a", "europe-west1-c", "europe-west3-c", "asia-southeast1-b", "asia-south2-b"]
SETTINGS = {  # trace → (file, zones, price scale, window indices)
    "gcp-h100-2025-first-week": ("gcp-h100-2025-first-week.csv.gz", GCP_ZONES, 8, list(range(11))),
    "aws-v100-2023": ("aws-v100-2023.csv.gz", None, 1, [round(i * 86 / 19) for i in range(20)]),
}
OURS = {"Optimal": "optimal", "SkyNomad": "skynomad", "UP(S)": "eager-failover", "OnDemand": "on-demand"}


def run(trace: str, ratio: float) -> pd.DataFrame:
    file, zones, scale, windows = SETTINGS[trace]
    grid = build_grid(read_observations(DATA / file, zones), step_hours=600 / 3600)
    # Scaling prices ×8 with egress unscaled = per-instance prices with egress ÷ 8, then cost × 8.
    egress = FlatEgress(0.02).matrix(grid.markets) / scale
    job = JobSpec(work_hours=51.8333 / ratio, deadline_hours=51.8333, cold_start_hours=0.2, checkpoint_gb=50)
    rows = []
    for k in windows:
        start = k * 72
        row = {"window_start": grid.time_at(start), "optimal": optimal_cost(job, grid, start, egress).cost_usd * scale}
        for name in ("skynomad", "eager-failover", "on-demand"):
            row[name] = simulate(get_policy(name), job, grid, start, egress).cost_usd * scale
        rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--peer", type=Path, default=DEFAULT_PEER)
    args = parser.parse_args()
    peer = pd.read_csv(args.peer)
    table = Table(title="this project vs the artifact's simulator (ratio = mean cost ÷ that simulator's optimum)")
    for column in (
        "trace",
        "T/P",
        "optimal ours/peer",
        "max window gap",
        "skynomad ours/peer",
        "eager-failover ours / UP(S) peer",
        "on-demand ours/peer",
    ):
        table.add_column(column, justify="right")
    for trace in SETTINGS:
        for ratio in (1.2, 1.5):
            ours = run(trace, ratio)
            theirs = peer[(peer.trace == trace) & (peer.ratio == ratio)].pivot(
                index="window_start", columns="policy", values="cost_usd"
            )
            gap = np.max(np.abs(ours["optimal"].to_numpy() / theirs["Optimal"].to_numpy() - 1))
            opt_ours, opt_peer = ours["optimal"].mean(), theirs["Optimal"].mean()
            cells = [
                f"{ours[OURS[p]].mean() / opt_ours:.3f} / {theirs[p].mean() / opt_peer:.3f}"
                for p in ("SkyNomad", "UP(S)", "OnDemand")
            ]
            table.add_row(trace, f"{ratio}", f"{opt_ours:.2f} / {opt_peer:.2f}", f"{gap:.2%}", *cells)
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
