"""A lower bound on what any fleet of jobs sharing one trace's spot capacity can pay: a linear program.

Why it is a bound. Take any run of the fleet (simulation.fleet) in which every job meets its
deadline. Job j (work W_j, cold start d, gang n, window of ticks from its start a_j) is billed,
tick by tick, for some share of the tick on spot in some market z and some share on on-demand,
never more than the whole tick, and over its window for at least W_j + d hours (its work and its
first cold start; every later cold start, egress and probes only add). Its spot shares at tick t
are billed at spot[z, t], its on-demand ones at least at the cheapest on-demand price of t. A
market holds at most ⌊available[z, t] ÷ n⌋ gangs during a tick (market.capacity: a launch gets
capacity only when that much is left, and the youngest groups go first when it drops) with one
exception: a job that finishes in tick t releases its group within t, and a job acting later in
the same tick may launch into it, so the finisher's last tick is billed beside a group the
capacity already counts. Each job finishes once, so giving each job one tick that does not count
against capacity, priced at the cheapest spot price of its window, covers it. The run is then a
feasible point of

    minimise  Σ_{j,z,t} spot[z,t]·n·dt·s[j,z,t] + Σ_{j,t} od[t]·n·dt·o[j,t] + Σ_j c_j·n·dt·f_j
    s.t.      Σ_z s[j,z,t] + o[j,t] ≤ 1                  (each job, each tick of its window)
              dt·(Σ_{z,t} s[j,z,t] + Σ_t o[j,t] + f_j) ≥ W_j + d
              Σ_j s[j,z,t] ≤ ⌊available[z,t] ÷ n⌋          (each market, each tick)
              0 ≤ s, o;  0 ≤ f_j ≤ 1

so its cost is at least the LP's. It leaves out every cold start after the first, egress, probes,
whole ticks and foresight (shares of a tick, any market at any tick): no run without misses costs
less, and the distance from a run to it is an upper bound on what a better policy could save.

The form solved is aggregated: jobs of one fleet share a gang size, so which job holds which
market does not matter, only how many gangs each market holds. With u[j,t] = Σ_z s[j,z,t] and
y[z,t] = Σ_j s[j,z,t], the constraints become u + o ≤ 1, Σ_j u[j,t] = Σ_z y[z,t], y ≤ capacity;
any (u, y) with equal totals per tick splits back into shares s (a transportation problem with
equal supply and demand), and the cost is the same, so the optimum is. HiGHS (scipy's
`linprog`) solves it in seconds at 200 jobs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from airflow_provider_skynomad.market.grid import MarketGrid
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.planner.rollout import window_ticks


@dataclass(frozen=True)
class FleetBound:
    """The LP's optimum and how it splits: what the bound pays on spot, on on-demand and for the free ticks."""

    cost_usd: float
    spot_usd: float
    on_demand_usd: float
    free_tick_usd: float
    feasible: bool


def fleet_lower_bound(jobs: Sequence[tuple[JobSpec, int]], grid: MarketGrid) -> FleetBound:
    """The LP bound (module docstring) for `jobs` = (spec, start tick) on `grid`; all specs share one gang size."""
    if not jobs:
        return FleetBound(0.0, 0.0, 0.0, 0.0, True)
    gangs = {spec.instances for spec, _ in jobs}
    if len(gangs) != 1:
        raise ValueError(f"the bound's aggregated form needs one gang size for the whole fleet, got {sorted(gangs)}")
    n = gangs.pop()
    dt = grid.step_hours
    windows = []
    for spec, start in jobs:
        ticks = min(window_ticks(spec, dt), grid.ticks - start)
        if start < 0 or ticks <= 0:
            raise ValueError(f"a job starting at tick {start} does not fit the trace's {grid.ticks} steps")
        windows.append((start, ticks))
    first = min(s for s, _ in windows)
    last = max(s + k for s, k in windows)
    span = last - first
    spot = grid.spot_usd_per_hour[first:last]
    usable_price = np.isfinite(spot)
    capacity = np.where(usable_price, grid.available[first:last] // n, 0).astype(float)
    spot = np.where(usable_price, spot, 0.0)
    on_demand = np.nanmin(np.where(np.isfinite(grid.on_demand_usd_per_hour), grid.on_demand_usd_per_hour, np.nan), 1)
    on_demand = on_demand[first:last]
    markets = grid.available.shape[1]

    # Variable layout: y[t, z] (span × markets), then per job its u[t] and o[t] over its window, then f_j.
    n_y = span * markets
    offsets, n_var = [], n_y
    for _, ticks in windows:
        offsets.append(n_var)
        n_var += 2 * ticks
    f0 = n_var
    n_var += len(jobs)

    cost = np.zeros(n_var)
    cost[:n_y] = (spot * n * dt).ravel()
    upper = np.full(n_var, np.inf)
    upper[:n_y] = capacity.ravel()
    upper[f0:] = 1.0
    rows_ub, cols_ub, vals_ub, b_ub = [], [], [], []
    rows_eq, cols_eq, vals_eq = [], [], []
    r_ub = 0
    for j, ((spec, _), (start, ticks), off) in enumerate(zip(jobs, windows, offsets, strict=True)):
        local = np.arange(ticks)
        t = start - first + local
        u, o = off + local, off + ticks + local
        cost[o] = on_demand[t] * n * dt
        cheapest = np.nanmin(np.where(usable_price[t], spot[t], np.inf))
        cost[f0 + j] = (min(cheapest, float(np.min(on_demand[t]))) if math.isfinite(cheapest) else 0.0) * n * dt
        upper[u], upper[o] = 1.0, 1.0
        # u + o ≤ 1 per tick
        rows = r_ub + local
        rows_ub += [rows, rows]
        cols_ub += [u, o]
        vals_ub += [np.ones(ticks), np.ones(ticks)]
        b_ub.append(np.ones(ticks))
        r_ub += ticks
        # −dt·(Σ u + Σ o + f) ≤ −(W + d)
        rows_ub.append(np.full(2 * ticks + 1, r_ub))
        cols_ub.append(np.concatenate([u, o, [f0 + j]]))
        vals_ub.append(np.full(2 * ticks + 1, -dt))
        b_ub.append(np.array([-(spec.work_hours + spec.cold_start_hours)]))
        r_ub += 1
        # Σ_j u[j, t] − Σ_z y[t, z] = 0 per tick: the job side
        rows_eq.append(t)
        cols_eq.append(u)
        vals_eq.append(np.ones(ticks))
    tt, zz = np.divmod(np.arange(n_y), markets)
    rows_eq.append(tt)
    cols_eq.append(np.arange(n_y))
    vals_eq.append(-np.ones(n_y))

    a_ub = coo_matrix(
        (np.concatenate(vals_ub), (np.concatenate(rows_ub), np.concatenate(cols_ub))), shape=(r_ub, n_var)
    ).tocsr()
    a_eq = coo_matrix(
        (np.concatenate(vals_eq), (np.concatenate(rows_eq), np.concatenate(cols_eq))), shape=(span, n_var)
    ).tocsr()
    solved = linprog(
        cost,
        A_ub=a_ub,
        b_ub=np.concatenate(b_ub),
        A_eq=a_eq,
        b_eq=np.zeros(span),
        bounds=np.stack([np.zeros(n_var), upper], axis=1),
        method="highs-ipm",
    )
    if solved.status == 2:
        return FleetBound(math.inf, math.inf, math.inf, math.inf, False)
    if solved.status != 0:
        raise RuntimeError(f"the fleet bound's LP did not solve: {solved.message}")
    x = solved.x
    spot_usd = float(cost[:n_y] @ x[:n_y])
    free_usd = float(cost[f0:] @ x[f0:])
    total = float(solved.fun)
    return FleetBound(total, spot_usd, total - spot_usd - free_usd, free_usd, True)
