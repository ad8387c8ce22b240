"""The exact offline optimum: dynamic programming with perfect knowledge of availability and prices.

Same cost model and decision step as the simulator: at every step the job may keep its
group, go idle, or launch spot (where the market has capacity) or on-demand in any market,
paying a cold start (plus checkpoint transfer time when moving) and S·egress on moves;
spot is lost when its market loses capacity. The state is (location/mode, remaining warm-up,
progress) with progress counted in quanta q = gcd(step, warm-ups) seconds, so the optimum
is exact whenever the durations are whole seconds. If that lattice would be too fine
(> `max_levels` levels) the quantum is coarsened *optimistically* (warm-ups rounded down,
progress per step rounded up), which keeps the result a lower bound, just a looser one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce

import numpy as np

from ..market.egress import EgressModel
from ..market.grid import MarketGrid
from ..planner.job import JobSpec
from .simulator import window_ticks

SPOT, ON_DEMAND = 0, 1


@dataclass(frozen=True)
class Optimum:
    cost_usd: float
    feasible: bool
    quantum_seconds: int
    exact: bool


def _seconds(hours: float) -> int:
    return int(round(hours * 3600))


def optimal_cost(
    job: JobSpec,
    grid: MarketGrid,
    start_tick: int = 0,
    egress_usd_per_gb: np.ndarray | None = None,
    max_levels: int = 6000,
) -> Optimum:
    """Minimum cost of finishing `job` by its deadline on the window starting at `start_tick`."""
    ticks = window_ticks(job, grid.step_hours)
    if start_tick < 0 or start_tick + ticks > grid.ticks:
        raise ValueError(f"window of {ticks} steps from tick {start_tick} does not fit the trace's {grid.ticks} steps")
    markets = len(grid.markets)
    egress = egress_usd_per_gb if egress_usd_per_gb is not None else EgressModel().matrix(grid.markets)

    step_s = _seconds(grid.step_hours)
    cold_s = _seconds(job.cold_start_hours)
    move_s = cold_s + _seconds(job.transfer_hours(True))
    work_s = job.work_hours * 3600
    quantum = reduce(math.gcd, [step_s, cold_s, move_s]) or step_s
    exact = True
    if work_s / quantum > max_levels:
        exact = False
        quantum = int(math.ceil(work_s / max_levels))
    step_q = -(-step_s // quantum)  # progress per step rounded up (optimistic)
    cold_q, move_q = cold_s // quantum, move_s // quantum  # warm-ups rounded down (optimistic)
    levels = int(math.ceil(work_s / quantum - 1e-9))

    # Remaining warm-up values a group can have at the start of a step.
    warmups = sorted({w for start in (cold_q, move_q) for w in range(start, -1, -step_q)} | {0})
    slot = {w: j for j, w in enumerate(warmups)}
    gain = np.array([max(0, step_q - w) for w in warmups])
    after = np.array([slot[max(0, w - step_q)] for w in warmups])

    inf = np.inf
    # idle[loc, p]: loc = market index of the checkpoint, or `markets` for "no checkpoint yet".
    idle = np.full((markets + 1, levels), inf)
    idle[markets, 0] = 0.0
    run = np.full((markets, 2, len(warmups), levels), inf)
    move_cost = np.zeros((markets + 1, markets))
    move_cost[:markets] = job.checkpoint_gb * egress
    moved = np.ones((markets + 1, markets), dtype=bool)
    moved[markets] = False
    moved[np.arange(markets), np.arange(markets)] = False

    best = inf
    usable = grid.usable(job.instances)
    deadline_s = job.deadline_hours * 3600 + 1e-6
    for k in range(ticks):
        g = start_tick + k
        avail = usable[g]
        # Preemption: spot groups in markets without capacity are lost; their checkpoint stays there.
        lost = ~avail
        if lost.any():
            _end(idle, lost, run[lost, SPOT].min(axis=1))
            run[lost, SPOT] = inf
        # Any group can be stopped: the best way to be "free" with the checkpoint at loc.
        free = idle.copy()
        _end(free, slice(None), run.min(axis=(1, 2)))
        # Launch anywhere: min over checkpoint locations of free cost + egress, split by warm-up.
        via = free[:, None, :] + move_cost[:, :, None]  # (loc, market, p)
        for warm, mask in ((cold_q, ~moved), (move_q, moved)):
            launch = np.where(mask[:, :, None], via, inf).min(axis=0)  # (market, p)
            j = slot[warm]
            run[:, ON_DEMAND, j] = np.minimum(run[:, ON_DEMAND, j], launch)
            spot_launch = np.where(avail[:, None], launch, inf)
            run[:, SPOT, j] = np.minimum(run[:, SPOT, j], spot_launch)
        idle = free

        # Run one step: bill, progress, and record finishes within the deadline.
        t0 = k * step_s
        price = np.stack([grid.spot_usd_per_hour[g], grid.on_demand_usd_per_hour[g]], axis=1) * job.instances
        price = price[:, :, None, None]
        new_run = np.full_like(run, inf)
        for j, w in enumerate(warmups):
            d = gain[j]
            cost = run[:, :, j, :]
            if not np.isfinite(cost).any():
                continue
            # Finishing this step from progress p ≥ levels − d: pay only the time needed.
            first = max(0, levels - d)
            if first < levels:
                p = np.arange(first, levels)
                need_s = min(w * quantum, step_s) + (work_s - p * quantum)
                need_s = np.maximum(need_s, 0.0)
                ok = t0 + need_s <= deadline_s
                if ok.any():
                    total = cost[:, :, first:] + price[:, :, 0] * (need_s / 3600.0)
                    best = min(best, float(np.where(ok, total, inf).min()))
            if first > 0:
                new_run[:, :, after[j], d : first + d] = np.minimum(
                    new_run[:, :, after[j], d : first + d],
                    cost[:, :, :first] + price[:, :, 0] * (step_s / 3600.0),
                )
        run = new_run

    return Optimum(cost_usd=best, feasible=math.isfinite(best), quantum_seconds=quantum, exact=exact)


def _end(idle: np.ndarray, where, ended: np.ndarray) -> None:
    """Fold groups that end (lost or stopped) into `idle`: location × progress, last row "no checkpoint".

    `ended` holds the groups' costs (market × progress) for the markets `where`. Their checkpoint
    stays where they ran, except that a group that made no progress leaves no checkpoint at all.
    """
    idle[-1, 0] = min(idle[-1, 0], float(ended[:, 0].min(initial=np.inf)))
    idle[:-1][where, 1:] = np.minimum(idle[:-1][where, 1:], ended[:, 1:])
