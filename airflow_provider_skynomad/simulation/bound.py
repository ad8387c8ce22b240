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

The restart bound (`restarts=True`): the same LP, tighter, still a bound. It charges the cold
starts that capacity forces on any run, not only each job's first. With O[t] = Σ_j o[j,t], add
launch variables p[z,t] ≥ y[z,t] − y[z,t−1] and q[t] ≥ O[t] − O[t−1] (p, q ≥ 0; y and O are 0
before the fleet's first tick) and one constraint over the fleet, beside every job's own:

    dt·Σ_j (Σ_t (u[j,t] + o[j,t]) + f_j) ≥ Σ_j W_j + d·(Σ_{z,t} p[z,t] + Σ_t q[t])

with d the least cold start of the fleet. Why every run without misses is still a feasible point.
Call a group one uninterrupted stay of a job in one market and mode (a segment). First drop, from
the run, every group that ended before its warm-up did (preempted, or stopped by its job, in its
cold start): it made no progress, so the job's work is unchanged, its cost and the capacity it
held only go, and every constraint that held still holds (the finishing group is never dropped:
work is made only after the warm-up). In what is left every group is billed its whole warm-up,
at least d, before its work, so job j with G_j groups is billed at least W_j + d·G_j hours, and
the fleet at least Σ_j W_j + d·G with G = Σ_j G_j. Now map the run to the LP as above (each job's
last tick, every group's share of it, to f_j). A group is billed one interval of time, so its
share of tick t, h(t), rises from 0 to at most 1, stays, and falls back (a trapezoid; a group that
starts and ends within one tick, as one preempted after its cold start but within the tick would,
is one rise and one fall), and cutting off the job's last tick leaves a prefix of it: the sum of
its rises, Σ_t max(0, h(t) − h(t−1)), is its peak, at most 1. y[z,·] is the sum of the h of the
groups in z, O the sum of those on on-demand (in any market: the LP prices them all at the
cheapest), and the rises of a sum are at most the sum of the rises, so p[z,t] = max(0, y[z,t] −
y[z,t−1]) and q[t] likewise sum to at most G, and the constraint holds. Where one group leaves a
market and another enters it in the same tick (a finisher's capacity taken by a newcomer, a job
going to on-demand as another leaves it) the net rise undercounts the launches, which only loosens
the bound; nothing needs whole ticks or the order of acts within a tick (shares change within a
tick as they please). Moves between spot and on-demand are charged where they change a total (a
job leaving z for on-demand raises O); a swap, one job z → on-demand while another on-demand → z,
is not: charging it would need which job holds which market, the disaggregated form.
Transfers, egress and a move's extra warm-up are still left out. The LP's shares are fractions, so
a rise may charge a fraction of a cold start: a market held at 8/9 of a gang before a dip costs
8/9 of one when it comes back (tests/unit/simulation/test_bound.py).
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
    launches: float = 0.0  # the restart bound's Σ p + Σ q at its optimum (0 for the bound)


@dataclass(frozen=True)
class _Setting:
    """What both LPs read: the fleet's gang, step, windows, and per tick of its span the prices and capacity."""

    n: int
    dt: float
    windows: list[tuple[int, int]]  # (start tick, ticks) per job
    first: int
    span: int
    spot: np.ndarray  # span × markets, 0 where the market has no price
    usable_price: np.ndarray
    capacity: np.ndarray  # gangs per market and tick
    on_demand: np.ndarray  # the cheapest on-demand price per tick
    markets: int


def _setting(jobs: Sequence[tuple[JobSpec, int]], grid: MarketGrid) -> _Setting:
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
    spot = grid.spot_usd_per_hour[first:last]
    usable_price = np.isfinite(spot)
    capacity = np.where(usable_price, grid.available[first:last] // n, 0).astype(float)
    spot = np.where(usable_price, spot, 0.0)
    on_demand = np.nanmin(np.where(np.isfinite(grid.on_demand_usd_per_hour), grid.on_demand_usd_per_hour, np.nan), 1)
    markets = grid.available.shape[1]
    return _Setting(n, dt, windows, first, last - first, spot, usable_price, capacity, on_demand[first:last], markets)


def _free_tick_price(setting: _Setting, t: np.ndarray) -> float:
    """Per gang-hour, the price of a job's tick outside capacity: the cheapest spot (or on-demand) of its window."""
    cheapest = np.nanmin(np.where(setting.usable_price[t], setting.spot[t], np.inf))
    return min(cheapest, float(np.min(setting.on_demand[t]))) if math.isfinite(cheapest) else 0.0


def fleet_lower_bound(jobs: Sequence[tuple[JobSpec, int]], grid: MarketGrid, restarts: bool = False) -> FleetBound:
    """The LP bound (module docstring) for `jobs` = (spec, start tick) on `grid`; all specs share one gang size.

    :param restarts: the restart bound (module docstring): also charge a cold start for every rise of a
        market's gangs or of the fleet's on-demand gangs.
    """
    if not jobs:
        return FleetBound(0.0, 0.0, 0.0, 0.0, True)
    setting = _setting(jobs, grid)
    if restarts:
        return _restart_bound(jobs, setting)
    n, dt, windows, first, span = setting.n, setting.dt, setting.windows, setting.first, setting.span
    spot, capacity = setting.spot, setting.capacity
    on_demand, markets = setting.on_demand, setting.markets

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
        cost[f0 + j] = _free_tick_price(setting, t) * n * dt
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

    x = _solve(cost, upper, (rows_ub, cols_ub, vals_ub, b_ub, r_ub), (rows_eq, cols_eq, vals_eq, span), "bound")
    return _split(cost, x, n_y, f0)


def _restart_bound(jobs: Sequence[tuple[JobSpec, int]], setting: _Setting) -> FleetBound:
    """The restart bound (module docstring), in the form solved.

    Per job only its activity a[j,t] = u[j,t] + o[j,t] (0 ≤ a ≤ 1, a bound on the variable, not a row): the
    cost reads only y and O, and any a with Σ_j a[j,t] = Σ_z y[z,t] + O[t] splits back into u and o (each
    job's a in the tick's proportions of spot and on-demand), so this is the LP of the docstring exactly,
    with half the variables and none of its per-job rows per tick.
    """
    n, dt, windows, first, span, markets = (
        setting.n,
        setting.dt,
        setting.windows,
        setting.first,
        setting.span,
        setting.markets,
    )
    cold = min(spec.cold_start_hours for spec, _ in jobs)
    n_y = span * markets
    ticks_, cells = np.arange(span), np.arange(n_y)
    tt = cells // markets
    # Variable layout: y[t, z], O[t], p[t, z], q[t], then per job its a[t] over its window, then f_j.
    big_o, p0 = n_y, n_y + span
    q0 = p0 + n_y
    offsets, n_var = [], q0 + span
    for _, ticks in windows:
        offsets.append(n_var)
        n_var += ticks
    f0 = n_var
    n_var += len(jobs)

    cost = np.zeros(n_var)
    cost[:n_y] = (setting.spot * n * dt).ravel()
    cost[big_o : big_o + span] = setting.on_demand * n * dt
    upper = np.full(n_var, np.inf)
    upper[:n_y] = setting.capacity.ravel()
    upper[q0 + span :] = 1.0
    rows_ub, cols_ub, vals_ub, b_ub = [], [], [], []
    rows_eq, cols_eq, vals_eq = [], [], []
    r_ub = 0
    for j, ((spec, _), (start, ticks), off) in enumerate(zip(jobs, windows, offsets, strict=True)):
        local = np.arange(ticks)
        t = start - first + local
        cost[f0 + j] = _free_tick_price(setting, t) * n * dt
        # −dt·(Σ a + f) ≤ −(W + d)
        rows_ub.append(np.full(ticks + 1, r_ub))
        cols_ub.append(np.concatenate([off + local, [f0 + j]]))
        vals_ub.append(np.full(ticks + 1, -dt))
        b_ub.append(np.array([-(spec.work_hours + spec.cold_start_hours)]))
        r_ub += 1
        # Σ_j a[j, t] − Σ_z y[t, z] − O[t] = 0 per tick: the job side
        rows_eq.append(t)
        cols_eq.append(off + local)
        vals_eq.append(np.ones(ticks))
    rows_eq += [tt, ticks_]
    cols_eq += [cells, big_o + ticks_]
    vals_eq += [-np.ones(n_y), -np.ones(span)]
    # y[t, z] − y[t−1, z] − p[t, z] ≤ 0
    later = cells[cells >= markets]
    rows_ub += [r_ub + cells, r_ub + later, r_ub + cells]
    cols_ub += [cells, later - markets, p0 + cells]
    vals_ub += [np.ones(n_y), -np.ones(later.size), -np.ones(n_y)]
    b_ub.append(np.zeros(n_y))
    r_ub += n_y
    # O[t] − O[t−1] − q[t] ≤ 0
    rows_ub += [r_ub + ticks_, r_ub + ticks_[1:], r_ub + ticks_]
    cols_ub += [big_o + ticks_, big_o + ticks_[:-1], q0 + ticks_]
    vals_ub += [np.ones(span), -np.ones(span - 1), -np.ones(span)]
    b_ub.append(np.zeros(span))
    r_ub += span
    # −dt·(Σ y + Σ O + Σ_j f_j) + d·(Σ p + Σ q) ≤ −Σ_j W_j (Σ y + Σ O = Σ_{j,t} a: the fleet's hours)
    rows_ub.append(np.full(q0 + span + len(jobs), r_ub))
    cols_ub.append(np.concatenate([np.arange(q0 + span), f0 + np.arange(len(jobs))]))
    vals_ub.append(np.concatenate([np.full(p0, -dt), np.full(n_y + span, cold), np.full(len(jobs), -dt)]))
    b_ub.append(np.array([-sum(spec.work_hours for spec, _ in jobs)]))
    r_ub += 1

    x = _solve(cost, upper, (rows_ub, cols_ub, vals_ub, b_ub, r_ub), (rows_eq, cols_eq, vals_eq, span), "restart bound")
    return _split(cost, x, n_y, f0, None if x is None else float(np.sum(x[p0 : q0 + span])))


def _solve(cost: np.ndarray, upper: np.ndarray, ub: tuple, eq: tuple, name: str) -> np.ndarray | None:
    """Both LPs' last step: the sparse rows as built, solved by HiGHS; None when infeasible (a job no run can finish).

    `ub` is (rows, columns, values, right-hand sides, row count) of the ≤ rows, `eq` (rows, columns, values,
    row count) of the = 0 rows, each a list of arrays as the builders append them.
    """
    rows_ub, cols_ub, vals_ub, b_ub, r_ub = ub
    rows_eq, cols_eq, vals_eq, r_eq = eq
    n_var = len(cost)
    a_ub = coo_matrix(
        (np.concatenate(vals_ub), (np.concatenate(rows_ub), np.concatenate(cols_ub))), shape=(r_ub, n_var)
    ).tocsr()
    a_eq = coo_matrix(
        (np.concatenate(vals_eq), (np.concatenate(rows_eq), np.concatenate(cols_eq))), shape=(r_eq, n_var)
    ).tocsr()
    solved = linprog(
        cost,
        A_ub=a_ub,
        b_ub=np.concatenate(b_ub),
        A_eq=a_eq,
        b_eq=np.zeros(r_eq),
        bounds=np.stack([np.zeros(n_var), upper], axis=1),
        method="highs-ipm",
    )
    if solved.status == 2:
        return None
    if solved.status != 0:
        raise RuntimeError(f"the fleet's {name} LP did not solve: {solved.message}")
    return solved.x


def _split(cost: np.ndarray, x: np.ndarray | None, n_y: int, f0: int, launches: float | None = None) -> FleetBound:
    """The optimum `x` (spot cells first, the free ticks from `f0`) as a FleetBound; infeasible when None."""
    if x is None:
        return FleetBound(math.inf, math.inf, math.inf, math.inf, False)
    spot_usd = float(cost[:n_y] @ x[:n_y])
    free_usd = float(cost[f0:] @ x[f0:])
    total = float(cost @ x)
    return FleetBound(total, spot_usd, total - spot_usd - free_usd, free_usd, True, launches or 0.0)
