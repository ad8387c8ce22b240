"""A policy replayed on a trace window: `simulate`, what each benchmark and `skynomad evaluate` runs.

The steps and their accounting (preemption, lost work, probes, tries, billing, the reaction lag)
are planner.rollout's `JobRun`, the one accounting every policy is costed by, a switching
planner's rollouts included; this module sets up what a job over a trace window may see: the
market table's history before the window (or every market, or a probe DAG's table inside it), and
the job's real work.

The job's real work may differ from its declared `work_hours` (`work_ratio` R: real = R × declared).
The loop then keeps the truth in real hours and shows the policy the job as the runtime does, through
`planner.pace.Pace`: the pace learnt from the checkpoints so far, the planning job at its bound
and progress = checkpointed fraction × bound. It does so at R = 1 too (where it changes nothing), so
what is benchmarked is what runs. With lost work the optimum (simulation.optimal) is a lower bound
(see there).

The loop's names are re-exported here, where they were before planner/rollout.py.
"""

from __future__ import annotations

import math

import numpy as np

from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.market.grid import MarketGrid
from airflow_provider_skynomad.planner.base import Policy
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.pace import Pace
from airflow_provider_skynomad.planner.result import RunResult
from airflow_provider_skynomad.planner.rollout import (  # noqa: F401 - re-exported: imported from here before
    EPS,
    Capacity,
    JobRun,
    TraceCapacity,
    Truth,
    _Ledger,
    reaction_steps,
    rollout,
    run_steps,
    window_ticks,
)

_Truth = Truth  # its name here before planner/rollout.py


def simulate(
    policy: Policy,
    job: JobSpec,
    grid: MarketGrid,
    start_tick: int = 0,
    egress_usd_per_gb: np.ndarray | None = None,
    history: bool = True,
    observe_all: bool = False,
    table_probe_hours: float | None = None,
    work_ratio: float = 1.0,
    measure_pace: bool = True,
) -> RunResult:
    """Run `policy` on the window starting at grid tick `start_tick`.

    :param history: the policy sees the market table's observations before the window
        (what the probe DAG collected); inside the window it sees only what it observed.
    :param observe_all: a diagnostic: the policy sees every market at every step, as if a probe
        DAG watched them all continuously at no cost to the job (what observation alone could buy).
    :param table_probe_hours: what the planner sees under Airflow: the shared market table, where
        a probe DAG (whose cost no single job pays) writes every market every this many hours
        inside the window and the last row holds until the next; the job's own observations stay exact.
    :param work_ratio: R, the job's real work ÷ its declared `work_hours` (> 0; 1 = as declared).
    :param measure_pace: False shows the policy the declared work and progress = fraction × declared,
        as the runtime did before it measured its pace: an ablation, to show what measuring buys.
    """
    check_work_ratio(work_ratio)
    if observe_all and table_probe_hours is not None:
        raise ValueError("observe_all and table_probe_hours are two different information models: pick one")
    if table_probe_hours is not None and not 0 < table_probe_hours < math.inf:
        raise ValueError(f"table_probe_hours must be a number > 0, got {table_probe_hours}")
    ticks = window_ticks(job, grid.step_hours)
    if start_tick < 0 or start_tick + ticks > grid.ticks:
        raise ValueError(f"window of {ticks} steps from tick {start_tick} does not fit the trace's {grid.ticks} steps")
    egress = egress_usd_per_gb if egress_usd_per_gb is not None else EgressModel().matrix(grid.markets)
    seen = np.zeros(grid.available.shape, dtype=bool)
    if observe_all:
        seen[:] = True  # the view still slices at the current tick: nothing after it is seen
    elif history:
        seen[:start_tick] = True
    table = None
    if table_probe_hours is not None:
        every = max(1, int(round(table_probe_hours / grid.step_hours)))
        rows = np.arange(grid.ticks)
        probed = np.where(rows < start_tick, rows, start_tick + (rows - start_tick) // every * every)
        table = grid.available[probed]  # row g shows the probe DAG's latest round at or before g

    truth = Truth(job.work_hours * work_ratio, Pace(job.work_hours) if measure_pace else None)
    return run_steps(policy, job, grid, start_tick, 0, JobState(), seen, egress, table, truth)


def check_work_ratio(work_ratio: float) -> float:
    """R must be a finite number > 0 (real work = R × declared)."""
    if not (isinstance(work_ratio, (int, float)) and math.isfinite(work_ratio) and work_ratio > 0):
        raise ValueError(f"the actual work ratio must be a finite number > 0, got {work_ratio}")
    return float(work_ratio)
