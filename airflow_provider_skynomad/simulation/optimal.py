"""The exact offline optimum: dynamic programming with perfect knowledge of availability and prices.

Same cost model and decision step as the simulator: at every step the job may keep its
group, go idle, or launch spot (where the market has capacity) or on-demand in any market,
paying a cold start (plus checkpoint transfer time when moving) and S·egress on moves;
spot is lost when its market loses capacity. The state is (location/mode, remaining warm-up,
progress) with progress counted in quanta q = gcd(step, warm-ups), computed in whole
milliseconds, so every reachable progress value is a lattice point and the optimum is exact for
any step, work and cold start given to the millisecond.

What keeps a fine lattice fast is the *band*: at step k a state whose remaining work no longer
fits before the deadline (p·q < P − (T − t)) can never finish, and one above t − d cannot be
reached, so each step only touches the levels in between, about (T − P) ÷ q of them, not P ÷ q.

When even the band would exceed `max_band_levels` (e.g. a step and cold start in odd seconds
make q 1 s), the quantum is coarsened to step ÷ m and two DPs bracket the optimum: warm-ups
rounded down give a lower bound, warm-ups rounded up (and a checkpoint assumed wherever a group
ran) give the cost of a schedule that is feasible in the real model, an upper bound.
`Optimum.cost_usd` is then the lower bound, `upper_usd` the upper one and `gap` their distance.

A job whose preemptions lose work (periodic checkpoints, no final one on notice) adds the progress
since the group's last checkpoint to the state, in the same quanta (the interval joins the gcd):
a preemption moves the group back by it, a stop the job chooses saves it. Where that lattice would
be too fine, the lossless job's optimum is a lower bound with no upper end of its own (`upper_usd`
inf); `skynomad evaluate` closes the bracket with the cheapest on-time run of any policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import reduce

import numpy as np

from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.market.grid import MarketGrid
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.planner.rollout import window_ticks

SPOT, ON_DEMAND = 0, 1
MAX_BAND_LEVELS = 12_000  # progress levels the DP holds at once: ~10 s for 52 h × 13 zones at the worst band
GAP_WARNING = 0.001  # evaluate warns when a bracket is wider than this share of its lower bound


@dataclass(frozen=True)
class Optimum:
    """The optimum (exact) or a certified bracket [cost_usd, upper_usd] around it (not exact)."""

    cost_usd: float  # the optimum, or a lower bound on it when not exact
    feasible: bool  # the lower bound is finite (when exact: the deadline can be met)
    quantum_seconds: float
    exact: bool
    upper_usd: float | None = None  # when not exact: the cost of a feasible schedule (inf if none was found)

    @property
    def gap(self) -> float:
        """(upper − lower) ÷ lower: 0 when exact, inf when no feasible schedule was found."""
        if self.exact or not self.feasible:
            return 0.0
        upper = self.upper_usd if self.upper_usd is not None else math.inf
        return (upper - self.cost_usd) / self.cost_usd if self.cost_usd > 0 else 0.0


@dataclass(frozen=True)
class _Lattice:
    quantum_s: float
    step_q: int  # progress quanta of a step without warm-up
    cold_q: int
    move_q: int
    levels: int  # quanta of the whole work (rounded up)
    banded: bool  # step_q·q equals the step, so the band's lower edge is valid
    checkpoint_where_run: bool  # a group that made no progress (on the lattice) still leaves a checkpoint


def _ms(hours: float) -> int | None:
    """Hours as whole milliseconds, or None when they are not."""
    ms = hours * 3_600_000
    whole = round(ms)
    return whole if abs(ms - whole) <= 1e-6 * max(1.0, abs(ms)) else None


def _band(job: JobSpec, quantum_s: float) -> int:
    """Levels the DP holds at once: the slack T − P over q, never more than the whole work."""
    slack_s = max(0.0, (job.deadline_hours - job.work_hours) * 3600)
    return min(math.ceil(job.work_hours * 3600 / quantum_s), math.ceil(slack_s / quantum_s) + 2)


def _lattices(
    job: JobSpec, step_hours: float, max_levels: int | None, max_band_levels: int
) -> tuple[_Lattice, _Lattice | None]:
    """The exact lattice (and None), or the optimistic and pessimistic lattices of a bracket."""
    step_s = step_hours * 3600
    cold_h, move_h = job.cold_start_hours, job.launch_hours(True)
    work_s = job.work_hours * 3600
    whole = [_ms(h) for h in (step_hours, cold_h, move_h)]
    if all(w is not None for w in whole):
        quantum = (reduce(math.gcd, whole) or whole[0]) / 1000.0
        levels = math.ceil(work_s / quantum - 1e-9)
        if (max_levels is None or levels <= max_levels) and _band(job, quantum) <= max_band_levels:
            step_q = round(step_s / quantum)
            cold_q, move_q = round(cold_h * 3600 / quantum), round(move_h * 3600 / quantum)
            return _Lattice(quantum, step_q, cold_q, move_q, levels, True, False), None
    # Coarsen to step ÷ m (progress per step stays exact), m as large as the budgets allow.
    m = max_band_levels * step_s / max(1.0, (job.deadline_hours - job.work_hours) * 3600 + 2 * step_s)
    if max_levels is not None:
        m = min(m, max_levels * step_s / work_s)
    m = int(math.floor(m)) if max_levels is not None else max(1, int(math.floor(m)))
    if m >= 1:
        quantum, step_q = step_s / m, m
    else:  # coarser than one step (only with a tiny max_levels): progress per step rounded up / down
        quantum = math.ceil(work_s / max_levels)
        step_q = 0
    levels = math.ceil(work_s / quantum - 1e-9)
    cold, move = cold_h * 3600 / quantum, move_h * 3600 / quantum
    down, up = (math.ceil(step_s / quantum), math.floor(step_s / quantum)) if not step_q else (step_q, step_q)
    lower = _Lattice(quantum, down, math.floor(cold + 1e-9), math.floor(move + 1e-9), levels, m >= 1, False)
    upper = _Lattice(quantum, up, math.ceil(cold - 1e-9), math.ceil(move - 1e-9), levels, True, True)
    return lower, upper


def _lossy_lattice(
    job: JobSpec, step_hours: float, max_levels: int | None, max_band_levels: int
) -> tuple[_Lattice, int] | None:
    """The exact lattice with the checkpoint interval in its quantum, and the interval in quanta; None if too fine."""
    whole = [_ms(h) for h in (step_hours, job.cold_start_hours, job.launch_hours(True), job.checkpoint_interval_hours)]
    if any(w is None for w in whole):
        return None
    quantum = reduce(math.gcd, whole) / 1000.0
    interval_q = round(job.checkpoint_interval_hours * 3600 / quantum)
    levels = math.ceil(job.work_hours * 3600 / quantum - 1e-9)
    if (max_levels is not None and levels > max_levels) or _band(job, quantum) * interval_q > max_band_levels:
        return None
    step_q = round(step_hours * 3600 / quantum)
    cold_q, move_q = round(job.cold_start_hours * 3600 / quantum), round(job.launch_hours(True) * 3600 / quantum)
    return _Lattice(quantum, step_q, cold_q, move_q, levels, True, False), interval_q


def optimal_cost(
    job: JobSpec,
    grid: MarketGrid,
    start_tick: int = 0,
    egress_usd_per_gb: np.ndarray | None = None,
    max_levels: int | None = None,
    max_band_levels: int = MAX_BAND_LEVELS,
) -> Optimum:
    """Minimum cost of finishing `job` by its deadline on the window starting at `start_tick`.

    :param max_levels: cap on progress levels over the whole work (coarsens the lattice; for tests).
    :param max_band_levels: cap on progress levels held at once (the time budget); past it the
        result is a bracket, `Optimum.exact` False.
    """
    ticks = window_ticks(job, grid.step_hours)
    if start_tick < 0 or start_tick + ticks > grid.ticks:
        raise ValueError(f"window of {ticks} steps from tick {start_tick} does not fit the trace's {grid.ticks} steps")
    egress = egress_usd_per_gb if egress_usd_per_gb is not None else EgressModel().matrix(grid.markets)
    if job.loses_work:
        lattice = _lossy_lattice(job, grid.step_hours, max_levels, max_band_levels)
        if lattice is not None:
            exact, interval_q = lattice
            best = _solve(job, grid, start_tick, ticks, egress, exact, interval_q)
            return Optimum(cost_usd=best, feasible=math.isfinite(best), quantum_seconds=exact.quantum_s, exact=True)
        # Too fine a lattice for the unsaved progress as state: solve the job whose preemptions lose
        # nothing. Every schedule costs at least as much when they do, so this is a lower bound; the
        # caller brackets it with the cost of any schedule that met the deadline.
        saved = optimal_cost(replace(job, checkpoint_interval_hours=0.0), grid, start_tick, egress, max_levels)
        return replace(saved, exact=False, upper_usd=math.inf)
    lower, upper = _lattices(job, grid.step_hours, max_levels, max_band_levels)
    best = _solve(job, grid, start_tick, ticks, egress, lower)
    if upper is None:
        return Optimum(cost_usd=best, feasible=math.isfinite(best), quantum_seconds=lower.quantum_s, exact=True)
    high = _solve(job, grid, start_tick, ticks, egress, upper) if math.isfinite(best) else math.inf
    return Optimum(best, math.isfinite(best), lower.quantum_s, exact=False, upper_usd=max(high, best))


def _solve(
    job: JobSpec, grid: MarketGrid, start_tick: int, ticks: int, egress: np.ndarray, lat: _Lattice, interval_q: int = 0
) -> float:
    """The DP on one lattice: min cost over (market, mode, warm-up left, unsaved progress, progress) step by step.

    `interval_q` > 0: the job checkpoints every that many quanta of a group's progress and a
    preemption takes back what the group made since its last checkpoint (its "unsaved" quanta, 0
    for on-demand, which is never lost, and for every stop the job chooses, which saves first).
    """
    markets = len(grid.markets)
    q, step_q, levels = lat.quantum_s, lat.step_q, lat.levels
    if step_q < 1:
        return math.inf
    step_s = grid.step_hours * 3600
    work_s = job.work_hours * 3600
    deadline_s = job.deadline_hours * 3600 + 1e-6
    unsaved = max(interval_q, 1)  # unsaved-progress slots; 1 (always 0) when nothing can be lost

    # Remaining warm-up values a group can have at the start of a step.
    warmups = sorted({w for first in (lat.cold_q, lat.move_q) for w in range(first, -1, -step_q)} | {0})
    slot = {w: j for j, w in enumerate(warmups)}
    gain = [max(0, step_q - w) for w in warmups]
    after = [slot[max(0, w - step_q)] for w in warmups]

    inf = np.inf
    # idle[loc, p]: loc = market index of the checkpoint, or `markets` for "no checkpoint yet".
    idle = np.full((markets + 1, levels), inf)
    idle[markets, 0] = 0.0
    run = np.full((markets, 2, len(warmups), unsaved, levels), inf)
    spare = np.full_like(run, inf)
    fee = job.checkpoint_gb * np.asarray(egress, dtype=float)
    stay_fee = np.diag(fee).copy()  # launching where the checkpoint is (normally 0)
    move_fee = fee.copy()
    np.fill_diagonal(move_fee, inf)  # moves only: a launch where the checkpoint is pays a cold start
    cold_j, move_j = slot[lat.cold_q], slot[lat.move_q]

    best = inf
    usable = grid.usable(job.instances)
    spot_price = grid.spot_usd_per_hour * job.instances
    od_price = grid.on_demand_usd_per_hour * job.instances
    hi = 1  # levels [lo, hi) can hold a finite cost this step
    for k in range(ticks):
        g = start_tick + k
        t0 = k * step_s
        lo = max(0, math.floor((work_s - deadline_s + t0) / q) - 1) if lat.banded else 0
        if lo >= hi:
            break  # nothing left can finish in time
        band = slice(lo, hi)
        avail = usable[g]
        # Any group can be stopped (a spot group without capacity must be): the best way to be free.
        # A preempted spot group falls back by its unsaved progress; below the band nothing can finish.
        ended = run[:, :, :, 0, band].min(axis=(1, 2))
        if interval_q:
            ended = np.minimum(ended, run[:, ON_DEMAND, :, :, band].min(axis=(1, 2)))
            up = run[avail, SPOT, :, :, band].min(axis=(1, 2))
            ended[avail] = np.minimum(ended[avail], up)
            down = np.flatnonzero(~avail)
            width = hi - lo
            for u in range(1, min(unsaved, width)):
                lost = run[down, SPOT, :, u, lo + u : hi].min(axis=1)
                ended[down, : width - u] = np.minimum(ended[down, : width - u], lost)
        idle_band = idle[:, band]
        if lo == 0:
            # A group that made no progress leaves no checkpoint (pessimistic lattice: it may have one).
            if lat.checkpoint_where_run:
                np.minimum(idle_band[:markets], ended, out=idle_band[:markets])
            else:
                idle_band[markets, 0] = min(idle_band[markets, 0], float(ended[:, 0].min()))
                np.minimum(idle_band[:markets, 1:], ended[:, 1:], out=idle_band[:markets, 1:])
        else:
            np.minimum(idle_band[:markets], ended, out=idle_band[:markets])
        run[~avail, SPOT, :, :, band] = inf

        # Launch anywhere: where the checkpoint is (or none yet) with a cold start, elsewhere with a move.
        stay = np.minimum(idle_band[:markets] + stay_fee[:, None], idle_band[markets][None, :])
        moved = (idle_band[:markets, None, :] + move_fee[:, :, None]).min(axis=0)
        for j, launch in ((cold_j, stay), (move_j, moved)):
            np.minimum(run[:, ON_DEMAND, j, 0, band], launch, out=run[:, ON_DEMAND, j, 0, band])
            spot = run[:, SPOT, j, 0, band]
            np.minimum(spot, np.where(avail[:, None], launch, inf), out=spot)

        # Run one step: bill, progress, and record finishes within the deadline.
        price = np.stack([spot_price[g], od_price[g]], axis=1)[:, :, None, None]
        nxt_hi = min(levels, hi + step_q)
        spare[:, :, :, :, lo:nxt_hi] = inf
        for j, w in enumerate(warmups):
            d = gain[j]
            cost = run[:, :, j, :, band]
            # Finishing this step from progress p ≥ levels − d: pay only the time needed.
            first = max(lo, levels - d)
            if first < hi:
                p = np.arange(first, hi)
                need_s = np.maximum(min(w * q, step_s) + (work_s - p * q), 0.0)
                ok = t0 + need_s <= deadline_s
                if ok.any():
                    total = cost[..., first - lo :] + price * (need_s / 3600.0)
                    best = min(best, float(np.where(ok, total, inf).min()))
            stop = min(hi, levels - d)
            if stop > lo:
                billed = cost[..., : stop - lo] + price * (step_s / 3600.0)
                if interval_q and d % unsaved:
                    # Spot's unsaved progress grows by d quanta, a checkpoint every interval; on-demand saves.
                    billed[:, SPOT] = np.roll(billed[:, SPOT], d % unsaved, axis=1)
                target = spare[:, :, after[j], :, lo + d : stop + d]
                np.minimum(target, billed, out=target)
        run, spare = spare, run
        hi = nxt_hi
    return float(best)
