"""Shared helpers for planner and simulation tests: synthetic market grids and hypothesis strategies.

Grids are built directly as `MarketGrid` (no CSV round trip) so property tests stay fast.
Imported by tests/unit/planner/* (same directory) and tests/unit/simulation/* (tests/unit/simulation/conftest.py
puts this directory on sys.path); the unusual name avoids clashing with other `helpers` modules.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import strategies as st

from airflow_provider_skynomad.market.grid import Market, MarketGrid
from airflow_provider_skynomad.planner.job import JobSpec

STEP_HOURS = 1.0 / 6.0  # 10-minute decision steps
START = pd.Timestamp("2025-10-04T00:00:00Z")

# (cloud, region, zone): two zones share a region, the rest are in other regions/continents.
PLACES = [
    ("gcp", "us-central1", "us-central1-a"),
    ("gcp", "us-central1", "us-central1-b"),
    ("gcp", "europe-west1", "europe-west1-c"),
    ("gcp", "asia-south2", "asia-south2-b"),
]


def markets(n: int) -> tuple[Market, ...]:
    return tuple(Market(key=z, cloud=c, region=r, zone=z, instance_type="a3-highgpu-1g") for c, r, z in PLACES[:n])


def make_grid(
    available,
    spot,
    on_demand,
    step_hours: float = STEP_HOURS,
    market_list: tuple[Market, ...] | None = None,
) -> MarketGrid:
    """A grid from a (ticks × markets) availability matrix (bool or int) and prices.

    `spot`/`on_demand` may be scalars, per-market vectors or full (ticks × markets) matrices.
    """
    available = np.asarray(available)
    if available.dtype == bool:
        available = available.astype(np.int64)
    ticks, n = available.shape
    spot = np.broadcast_to(np.asarray(spot, dtype=float), (ticks, n)).copy()
    on_demand = np.broadcast_to(np.asarray(on_demand, dtype=float), (ticks, n)).copy()
    return MarketGrid(START, step_hours, market_list or markets(n), available.astype(np.int64), spot, on_demand)


def flat_egress(n: int, usd_per_gb: float = 0.02) -> np.ndarray:
    matrix = np.full((n, n), usd_per_gb)
    np.fill_diagonal(matrix, 0.0)
    return matrix


@st.composite
def jobs(draw, feasible: bool = True, instances: int = 1, whole_steps: bool = False) -> JobSpec:
    """Small jobs: P 1–4 h, T/P 1.05–2 (and T ≥ P + d when `feasible`), d 0.1–0.3 h.

    Durations are whole seconds multiples of 36 s (0.01 h) so the optimum stays exact.
    `whole_steps` rounds the deadline up to a whole number of 10-minute steps.
    """
    work = draw(st.integers(100, 400)) / 100.0
    cold = draw(st.integers(10, 30)) / 100.0
    ratio = draw(st.integers(105, 200)) / 100.0
    deadline = round(work * ratio, 2)
    if feasible and deadline < work + cold:
        deadline = work + cold  # the float sum itself, so JobSpec.feasible holds exactly
    if whole_steps:
        deadline = math.ceil(deadline / STEP_HOURS - 1e-9) * STEP_HOURS
    gb = draw(st.sampled_from([0.0, 10.0, 50.0]))
    return JobSpec(
        work_hours=work, deadline_hours=deadline, cold_start_hours=cold, checkpoint_gb=gb, instances=instances
    )


@st.composite
def grids(draw, ticks: int, n_markets=(2, 4), max_gang: int = 1) -> MarketGrid:
    """Random availability (runs of capacity, not i.i.d. noise) and prices on `ticks` 10-minute steps."""
    n = draw(st.integers(*n_markets)) if isinstance(n_markets, tuple) else n_markets
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # Per market: probability of staying in the current state, so availability comes in runs.
    avail = np.zeros((ticks, n), dtype=np.int64)
    for j in range(n):
        p_up = rng.uniform(0.0, 1.0)
        stickiness = rng.uniform(0.5, 0.98)
        state = rng.random() < p_up
        for k in range(ticks):
            if rng.random() > stickiness:
                state = rng.random() < p_up
            avail[k, j] = rng.integers(max_gang, max_gang + 3) if state else rng.integers(0, max_gang)
    on_demand = rng.uniform(2.0, 12.0, size=n)
    spot_base = on_demand * rng.uniform(0.15, 0.9, size=n)
    # Prices drift a little over time (±20 %), on-demand stays constant per market.
    drift = 1.0 + 0.2 * np.sin(np.arange(ticks)[:, None] / rng.uniform(3, 30, size=n) + rng.uniform(0, 6, size=n))
    spot = np.round(spot_base * drift, 4) if draw(st.booleans()) else np.broadcast_to(spot_base, (ticks, n))
    return make_grid(avail, spot, on_demand)


def segment_market(label: str) -> str:
    """'spot(us-central1-a)' → 'us-central1-a'."""
    return label[label.index("(") + 1 : -1]


def segment_mode(label: str) -> str:
    return label[: label.index("(")]
