"""Many jobs of one deployment on one trace, competing for its spot capacity.

`simulate` gives each job the whole trace: 200 jobs in a zone whose probe saw 16 free all launch.
Here the jobs step in lock-step on one grid and share each market's capacity by the rule of
market.capacity (a launch gets capacity only if ``available − held ≥ gang``; when capacity drops,
the youngest groups are taken back first), through the same per-job loop as `simulate`
(planner.rollout.JobRun: one accounting of billing, preemption, lost work, pace, lag).

One grid tick:

1. Jobs whose start tick this is join.
2. The rule is applied to every market at once: the groups that no longer fit, the youngest,
   lose their capacity; each running job then checks its group (preempted or not).
3. The active jobs act one at a time, in an order drawn at random each tick (seeded): no job is
   always first, and the order depends on nothing a job publishes, so it favours no one (not
   the job with least slack: that would be a central scheduler). Each job decides from the
   shared facts as they are at that moment: a job that acts later in the tick sees the launches
   of those before it, as it would see a live job-table row published a moment ago. A refused
   spot try falls through to the decision's next option, as in `simulate`.
4. After acting, each job publishes its row (market.fleet): its running spot group (held, with its
   launch order as `since`), or the spot market it waits for (its decision's `wants`, or a first
   choice it was refused), with its slack; then it is billed. A job that finishes, or reaches its
   deadline, releases its capacity.

Each job's own view: the market table's history before its start and its own observations after
(as `simulate`); a job with `sees_fleet` also gets the others' rows (market.fleet.Fleet), a job
without plans as if alone. A failed launch marks the cell observed with the trace's count (the
market's capacity, as a probe of the whole market shows): what the job did not get is what its
fleet holds, which only a fleet-aware job knows.

A fleet of one job is `simulate` exactly (tests/unit/simulation/test_fleet.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from airflow_provider_skynomad.market import capacity as rule
from airflow_provider_skynomad.market.egress import EgressModel
from airflow_provider_skynomad.market.fleet import MODES, Fleet
from airflow_provider_skynomad.market.grid import MarketGrid
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.base import Policy
from airflow_provider_skynomad.planner.crowding import slack_hours
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.pace import Pace
from airflow_provider_skynomad.planner.result import RunResult
from airflow_provider_skynomad.planner.rollout import JobRun, Truth, window_ticks
from airflow_provider_skynomad.simulation.simulator import check_work_ratio

_SPOT, _WAITING, _ON_DEMAND, _IDLE = (MODES.index(m) for m in ("spot", "waiting", "on-demand", "idle"))


@dataclass(frozen=True)
class FleetJob:
    """One job of the fleet: its spec, the grid tick it starts at, its policy, and whether it sees the fleet."""

    job: JobSpec
    start_tick: int
    policy: Policy
    sees_fleet: bool = False
    work_ratio: float = 1.0


@dataclass
class FleetResult:
    """Each job's run, in the order the jobs were given."""

    runs: list[RunResult] = field(default_factory=list)

    @property
    def cost_usd(self) -> float:
        return float(sum(r.cost_usd for r in self.runs))

    @property
    def misses(self) -> int:
        return sum(not r.met_deadline for r in self.runs)

    @property
    def preemptions(self) -> int:
        return sum(r.preemptions for r in self.runs)


class SharedCapacity:
    """The trace's capacity shared by the fleet's spot groups (market.capacity's rule), a `Capacity` for `JobRun`."""

    def __init__(self, grid: MarketGrid, index_of: dict[int, int]):
        self.available = grid.available
        self.holdings: list[dict[int, rule.Holding]] = [{} for _ in grid.markets]
        self.index_of = index_of  # id(run) -> the job's position in the fleet
        self.launches = 0  # launch order: the `since` of the youngest-first rule
        self.lost: set[int] = set()  # jobs whose groups lost their capacity at this tick

    def settle(self, g: int) -> None:
        """Apply the rule to every market at tick `g`: which groups lose their capacity."""
        self.lost = set()
        for i, held in enumerate(self.holdings):
            if held:
                self.lost.update(int(h.key) for h in rule.taken_back(int(self.available[g, i]), list(held.values())))

    def keeps(self, run: JobRun, g: int, i: int) -> bool:
        return self.index_of[id(run)] not in self.lost

    def grants(self, run: JobRun, g: int, i: int) -> bool:
        return rule.left(int(self.available[g, i]), list(self.holdings[i].values())) >= run.n

    def changed(self, run: JobRun, before: Option | None, after: Option | None, g: int) -> None:
        j = self.index_of[id(run)]
        if before is not None and before.mode is Mode.SPOT:
            self.holdings[run.index[before.market]].pop(j, None)
        if after is not None and after.mode is Mode.SPOT:
            self.launches += 1
            self.holdings[run.index[after.market]][j] = rule.Holding(str(j), float(self.launches), run.n)

    def since(self, run: JobRun) -> float | None:
        """Launch order of the run's spot group (None: it holds none)."""
        running = run.state.running
        if running is None or running.mode is not Mode.SPOT:
            return None
        holding = self.holdings[run.index[running.market]].get(self.index_of[id(run)])
        return holding.since if holding is not None else None


class _Table:
    """The live job table: one row per job, as plain arrays (market column, mode code, count, since, slack)."""

    def __init__(self, n_jobs: int, keys: list[str]):
        self.keys = keys
        self.market = np.full(n_jobs, -1, dtype=np.int64)
        self.mode = np.full(n_jobs, _IDLE, dtype=np.int64)
        self.count = np.ones(n_jobs, dtype=np.int64)
        self.since = np.full(n_jobs, np.inf)
        self.slack = np.zeros(n_jobs)

    def publish(self, j: int, run: JobRun, capacity: SharedCapacity, t: float) -> None:
        state, decision = run.state, run.decision
        self.count[j] = run.n
        planned_job, planned_state = run.planned(state.advance(elapsed_hours=t))
        self.slack[j] = slack_hours(planned_job, planned_state)
        running = state.running
        if running is not None and running.mode is Mode.SPOT:
            self._set(j, run.index[running.market], _SPOT, capacity.since(run))
            return
        wants = None
        if decision is not None:
            wants = decision.wants
            first = decision.first
            if wants is None and first is not None and first.mode is Mode.SPOT and first != running:
                wants = first.market  # a first choice it was refused
        elif self.mode[j] == _WAITING:
            return  # nothing decided this step (a lag): the claim stands
        if wants is not None:
            self._set(j, run.index[wants], _WAITING, t)
        else:
            self._set(j, -1, _ON_DEMAND if running is not None else _IDLE, np.inf)

    def leave(self, j: int) -> None:
        self._set(j, -1, _IDLE, np.inf)

    def _set(self, j: int, market: int, mode: int, since: float | None) -> None:
        self.market[j], self.mode[j] = market, mode
        self.since[j] = np.inf if since is None else since

    def seen_by(self, j: int, active: np.ndarray) -> Fleet:
        """The other active jobs' rows, as job `j`'s view shows them (its own gives its group's launch order)."""
        others = active.copy()
        others[j] = False
        own = self.since[j] if self.mode[j] == _SPOT else None
        return Fleet(
            self.keys,
            self.market[others],
            self.mode[others],
            self.count[others],
            self.since[others],
            self.slack[others],
            own_since=own,
        )


def simulate_fleet(
    jobs: Sequence[FleetJob],
    grid: MarketGrid,
    egress_usd_per_gb: np.ndarray | None = None,
    history: bool = True,
    seed: int = 0,
) -> FleetResult:
    """Run every job of `jobs` on `grid`, sharing its spot capacity (module docstring).

    :param history: each job sees the market table's observations before its own start.
    :param seed: the order jobs act in within a tick (drawn afresh every tick).
    """
    egress = egress_usd_per_gb if egress_usd_per_gb is not None else EgressModel().matrix(grid.markets)
    for spec in jobs:
        check_work_ratio(spec.work_ratio)
        ticks = window_ticks(spec.job, grid.step_hours)
        if spec.start_tick < 0 or spec.start_tick + ticks > grid.ticks:
            raise ValueError(
                f"a window of {ticks} steps from tick {spec.start_tick} does not fit the trace's {grid.ticks} steps"
            )
    index_of: dict[int, int] = {}
    capacity = SharedCapacity(grid, index_of)
    table = _Table(len(jobs), grid.keys)
    runs: list[JobRun | None] = [None] * len(jobs)
    results: list[RunResult | None] = [None] * len(jobs)
    active = np.zeros(len(jobs), dtype=bool)
    rng = np.random.default_rng(seed)
    starts = np.array([spec.start_tick for spec in jobs], dtype=np.int64)
    first, last = (
        int(starts.min(initial=0)),
        max((s.start_tick + window_ticks(s.job, grid.step_hours) for s in jobs), default=0),
    )

    for g in range(first, last):
        for j in np.flatnonzero(starts == g):
            runs[j] = _start(jobs[j], grid, egress, history, capacity)
            index_of[id(runs[j])] = int(j)
            active[j] = True
        if not active.any():
            continue
        capacity.settle(g)
        order = np.flatnonzero(active)
        for j in order:
            run = runs[j]
            before = run.state.running
            run.check(g - jobs[j].start_tick)
            if run.state.running != before:
                table.publish(j, run, capacity, (g - jobs[j].start_tick) * grid.step_hours)
        for j in rng.permutation(order):
            run, k = runs[j], g - jobs[j].start_tick
            run.act(k, table.seen_by(j, active) if jobs[j].sees_fleet else None)
            table.publish(j, run, capacity, k * grid.step_hours)
            if run.bill(k) or k + 1 >= run.ticks:
                capacity.changed(run, run.state.running, None, g)
                table.leave(j)
                active[j] = False
                results[j] = run.close()
    return FleetResult([r for r in results if r is not None])


def _start(spec: FleetJob, grid: MarketGrid, egress: np.ndarray, history: bool, capacity: SharedCapacity) -> JobRun:
    """The job's own loop, as `simulate` builds it (its own observations, its own truth)."""
    seen = np.zeros(grid.available.shape, dtype=bool)
    if history:
        seen[: spec.start_tick] = True
    truth = Truth(spec.job.work_hours * spec.work_ratio, Pace(spec.job.work_hours))
    return JobRun(spec.policy, spec.job, grid, spec.start_tick, 0, JobState(), seen, egress, None, truth, capacity)
