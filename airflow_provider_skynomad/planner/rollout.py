"""One job's steps on a market grid, and what they cost: the accounting every policy is costed by.

Time moves in decision steps on the market grid. At each step (`JobRun`): a running spot group
whose market lost capacity is preempted (losing the progress since its last periodic checkpoint
when the job checkpoints periodically and the notice leaves no time for a final one); the policy
decides from what it may know (a MarketView with only the cells the job observed); probes are paid;
options are tried in order; the step is billed, cold starts included, and progress is made. The
same accounting is what the optimum (simulation.optimal) minimises.

With `job.reaction_hours` > 0 a run plays Airflow's split: the trigger asks the planner each step
and raises an event when it wants a change (or the group is lost); the worker carries the change
out, or decides after a preemption, that many steps later (rounded up). Meanwhile what runs keeps
running.

Why this is in the planner, below simulation: a planner that compares policies on sampled futures
(policies/switching.py) must cost them by exactly the accounting the benchmarks use, so what is
compared is what is benchmarked. That accounting needs only the market (grid, view, egress) and
the planner's own vocabulary (decisions, job spec and state, the pace), so it lives here, and the
simulation package builds on it: simulation.simulator replays one job over a trace window
(what the policy may see: the market table's history, a probe DAG's table; the job's real work),
simulation.fleet interleaves many jobs sharing capacity through a `Capacity`. A rollout
(`rollout`) is the same loop for a job already under way.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple, Protocol

import numpy as np

from airflow_provider_skynomad.market.grid import MarketGrid
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision, Mode, Option
from airflow_provider_skynomad.planner.base import Policy
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.pace import Pace
from airflow_provider_skynomad.planner.result import RunResult, Segment
from airflow_provider_skynomad.planner.timeline import SegmentEnd

EPS = 1e-9


def window_ticks(job: JobSpec, step_hours: float) -> int:
    """Decision steps needed to reach the deadline (the last one may be partial)."""
    return max(1, math.ceil(job.deadline_hours / step_hours - EPS))


class _Ledger:
    """Bills segments and keeps the result's totals consistent with them.

    A segment is one uninterrupted run of one option; the loop closes it with why it ended.
    """

    def __init__(self):
        self.result = RunResult(met_deadline=False, finish_hours=None)
        self.open: Segment | None = None

    def bill(self, option: Option, start: float, hours: float, usd: float) -> None:
        if self.open is None:
            self.open = Segment(str(option), start, start, 0.0)
        elif self.open.option != str(option) or abs(self.open.end_hours - start) > EPS:
            # Every change of what runs closes the segment with its cause first (preempted, moved, idle).
            raise RuntimeError(f"{option} billed from {start:.4f} h while {self.open} is open: a change was not closed")
        r = self.result
        if option.mode is Mode.SPOT:
            r.spot_usd += usd
            r.spot_hours += hours
        else:
            r.on_demand_usd += usd
            r.on_demand_hours += hours
        self.open.end_hours = start + hours
        self.open.usd += usd

    def close(self, why: SegmentEnd) -> None:
        if self.open is not None:
            self.open.ended_by = why
            self.result.segments.append(self.open)
            self.open = None


class Truth:
    """The job's real work and the pace its checkpoints showed so far (the policy sees only the latter).

    The groups make one real hour of work per productive hour, so the checkpointed progress is
    also the productive time whose work the checkpoints hold.
    """

    def __init__(self, work_hours: float, pace: Pace | None):
        self.work_hours = work_hours
        self.pace = pace
        self.saved_hours = 0.0

    def checkpointed(self, state: JobState) -> None:
        saved = state.progress_hours - state.unsaved_hours
        if self.pace is not None and saved > self.saved_hours + EPS:
            self.pace = self.pace.observed(saved, saved / self.work_hours)
        self.saved_hours = saved

    def as_planned(self, job: JobSpec, state: JobState) -> tuple[JobSpec, JobState]:
        """The job and state the policy sees: the work at the pace's bound, progress = fraction × bound."""
        if self.pace is None:
            scale = job.work_hours / self.work_hours  # the declared work, believed
            planned = job
        else:
            planned = self.pace.planning_job(job)
            scale = planned.work_hours / self.work_hours
        if scale == 1.0:
            return planned, state
        return planned, state.advance(
            progress_hours=state.progress_hours * scale, unsaved_hours=state.unsaved_hours * scale
        )


def rollout(
    policy: Policy,
    job: JobSpec,
    grid: MarketGrid,
    tick: int,
    state: JobState,
    seen: np.ndarray,
    egress_usd_per_gb: np.ndarray,
) -> RunResult:
    """Run `policy` from `state` at grid tick `tick` (the job `state.elapsed_hours` old) to the end.

    The same loop as simulation.simulator's `simulate`, for a job already under way: a planner that
    compares policies on sampled futures (planner.policies.switching) costs them through exactly
    this accounting.
    The result bills only what happens from `tick` on; `seen` is marked as the job observes.
    """
    dt = grid.step_hours
    first = int(round(state.elapsed_hours / dt))
    if first > tick:
        raise ValueError(f"a job {state.elapsed_hours:g} h old cannot be at tick {tick} of a {dt:g} h grid")
    return run_steps(policy, job, grid, tick - first, first, state, seen, egress_usd_per_gb, None)


def run_steps(
    policy: Policy,
    job: JobSpec,
    grid: MarketGrid,
    start_tick: int,
    first_step: int,
    state: JobState,
    seen: np.ndarray,
    egress: np.ndarray,
    table: np.ndarray | None,
    truth: Truth | None = None,
) -> RunResult:
    """The loop: steps `first_step`.. of the window starting at grid tick `start_tick`, from `state`.

    `truth` None (a rollout inside a policy): the job is exactly as `job` says.
    """
    run = JobRun(policy, job, grid, start_tick, first_step, state, seen, egress, table, truth)
    for k in range(first_step, run.ticks):
        run.check(k)
        run.act(k)
        if run.bill(k):
            break
    return run.close()


class Capacity(Protocol):
    """Who gets spot capacity: the trace alone (one job), or the trace shared by a fleet (simulation.fleet)."""

    def keeps(self, run: JobRun, g: int, i: int) -> bool:
        """The run's spot group in market `i` still has its capacity at grid tick `g`."""
        ...

    def grants(self, run: JobRun, g: int, i: int) -> bool:
        """A spot launch of the run's gang in market `i` at grid tick `g` gets capacity."""
        ...

    def changed(self, run: JobRun, before: Option | None, after: Option | None, g: int) -> None:
        """The run stopped `before` and now runs `after` (either may be None) from grid tick `g`."""
        ...


class TraceCapacity:
    """One job alone: a market has capacity for the gang when the trace shows `available ≥ N`."""

    def __init__(self, usable: np.ndarray):
        self.usable = usable

    def keeps(self, run: JobRun, g: int, i: int) -> bool:
        return bool(self.usable[g, i])

    def grants(self, run: JobRun, g: int, i: int) -> bool:
        return bool(self.usable[g, i])

    def changed(self, run: JobRun, before: Option | None, after: Option | None, g: int) -> None:
        pass


class JobRun:
    """One job's loop, a step at a time: the one accounting every simulated job goes through.

    A step is `check` (a running spot group without capacity is preempted), `act` (the policy
    decides, or a lagged decision is carried out) and `bill` (the step is billed and progress
    made). `run_steps` runs one job through it (simulation.simulator's `simulate`, and `rollout`);
    the fleet simulator (simulation.fleet) interleaves many, with a `Capacity` that shares the
    trace among them. Billing, preemption, lost work, pace and truth, and the reaction lag live
    here only.
    """

    def __init__(
        self,
        policy: Policy,
        job: JobSpec,
        grid: MarketGrid,
        start_tick: int,
        first_step: int,
        state: JobState,
        seen: np.ndarray,
        egress: np.ndarray,
        table: np.ndarray | None,
        truth: Truth | None = None,
        capacity: Capacity | None = None,
    ):
        self.policy, self.grid, self.start_tick, self.state = policy, grid, start_tick, state
        self.seen, self.egress, self.table, self.truth = seen, egress, table, truth
        self.dt = grid.step_hours
        self.n = job.instances
        self.usable = grid.usable(self.n)
        self.capacity = capacity if capacity is not None else TraceCapacity(self.usable)
        self.index = {key: i for i, key in enumerate(grid.keys)}
        self.ticks = min(window_ticks(job, self.dt), grid.ticks - start_tick)
        self.lag = reaction_steps(job, self.dt)
        if self.lag:
            job = replace(job, reaction_hours=self.lag * self.dt)  # the policy plans with the lag it will get
        self.job = job
        # (step it is carried out at, decision or decide then)
        self.pending: tuple[int, Decision | None] | None = None
        self.work = truth.work_hours if truth is not None else job.work_hours
        self.ledger = _Ledger()
        self.decision: Decision | None = None  # the latest decision carried out (None: none this step)

    @property
    def result(self) -> RunResult:
        return self.ledger.result

    def planned(self, state: JobState) -> tuple[JobSpec, JobState]:
        """The job and `state` as the policy sees them (the pace's bound; exactly as they are without a truth)."""
        return self.truth.as_planned(self.job, state) if self.truth is not None else (self.job, state)

    def decide(self, state: JobState, view: MarketView, t: float) -> Decision:
        seen_job, seen_state = self.planned(state)
        return self.policy.decide(seen_job, seen_state, view, t)

    def check(self, k: int) -> None:
        """Step `k` begins: the running group is observed, and a spot group without capacity is preempted."""
        state, job, result = self.state, self.job, self.ledger.result
        g = self.start_tick + k
        if state.running is not None:
            i = self.index[state.running.market]
            self.seen[g, i] = True
            if state.running.mode is Mode.SPOT and not self.capacity.keeps(self, g, i):
                result.preemptions += 1
                self.ledger.close(SegmentEnd.PREEMPTED)
                if job.loses_work:
                    result.lost_work_hours += state.unsaved_hours
                    state = state.lost()
                lost = state.running
                state = state.advance(running=None, warmup_left_hours=0.0, last_preempted_market=state.running.market)
                self.capacity.changed(self, lost, None, g)
                if self.lag and self.pending is None:
                    self.pending = (k + self.lag, None)  # the worker wakes `lag` later and decides then
        self.state = state

    def act(self, k: int, fleet=None) -> None:
        """The policy decides at step `k` (with the lag: a decision made earlier is carried out), seeing `fleet`."""
        g, t = self.start_tick + k, k * self.dt
        state = self.state.advance(elapsed_hours=t)
        if fleet is None:
            view = MarketView(self.grid, g, self.n, self.seen, self.egress, self.table)
        else:
            view = MarketView(self.grid, g, self.n, self.seen, self.egress, self.table, fleet=fleet)
        decision = None
        if self.pending is not None:
            if k >= self.pending[0]:
                decision = self.pending[1] if self.pending[1] is not None else self.decide(state, view, t)
                self.pending = None
        else:
            fresh = self.decide(state, view, t)
            if not self.lag or k == 0:  # the first decision is made and carried out by the same worker
                decision = fresh
            elif fresh.wants_change(state.running):
                self.pending = (k + self.lag, fresh)  # the trigger's event; the worker carries it out `lag` later
        self.decision = decision
        if decision is not None:
            step = _Step(self.grid, g, t, self.usable, self.seen, self.index, self.egress)
            state = _carry_out(decision, state, self.job, step, self.ledger, self)
        self.state = state

    def bill(self, k: int) -> bool:
        """Bill step `k` and make its progress; True when the job finished in it."""
        state, result = self.state, self.ledger.result
        if state.running is None:
            return False
        dt, job, work = self.dt, self.job, self.work
        g, t = self.start_tick + k, k * dt
        i = self.index[state.running.market]
        prices = self.grid.spot_usd_per_hour if state.running.mode is Mode.SPOT else self.grid.on_demand_usd_per_hour
        price = prices[g, i] * self.n
        warm = min(state.warmup_left_hours, dt)
        remaining = work - state.progress_hours
        used = dt if dt - warm < remaining - EPS else warm + remaining
        self.ledger.bill(state.running, t, used, price * used)
        state = state.progressed(
            state.progress_hours + used - warm,
            warmup_left_hours=state.warmup_left_hours - warm,
            unsaved_hours=job.unsaved_after(state.unsaved_hours, used - warm),
        )
        if self.truth is not None:
            self.truth.checkpointed(state)
        self.state = state
        if used < dt or state.progress_hours >= work - EPS:
            result.finish_hours = t + used
            return True
        return False

    def close(self) -> RunResult:
        """The run is over (finished, or out of window): close the books."""
        result, state = self.ledger.result, self.state
        self.ledger.close(SegmentEnd.FINISHED if result.finish_hours is not None else SegmentEnd.DEADLINE)
        result.met_deadline = result.finish_hours is not None and result.finish_hours <= self.job.deadline_hours + 1e-6
        result.unfinished_work_hours = max(0.0, self.work - state.progress_hours)
        return result


def reaction_steps(job: JobSpec, step_hours: float) -> int:
    """The job's reaction lag in whole decision steps (rounded up: an event waits for the next step)."""
    return math.ceil(job.reaction_hours / step_hours - EPS) if job.reaction_hours > 0 else 0


class _Step(NamedTuple):
    """The market at one decision step, as the simulator (not the policy) sees it."""

    grid: MarketGrid
    g: int  # grid tick
    t: float  # hours since the job started
    usable: np.ndarray
    seen: np.ndarray  # marked as the job observes markets
    index: dict[str, int]
    egress: np.ndarray


def _carry_out(
    decision: Decision, state: JobState, job: JobSpec, step: _Step, ledger: _Ledger, run: JobRun
) -> JobState:
    """Pay the decision's probes, try its options in order, launch the first that gets capacity."""
    result, n = ledger.result, job.instances
    grid, g, t, usable, seen, index, egress = step
    for key in decision.probes:
        i = index[key]
        seen[g, i] = True
        if run.capacity.grants(run, g, i):
            result.probe_usd += job.probe_hours * n * grid.spot_usd_per_hour[g, i]

    chosen = None
    for option in decision.try_in_order:
        if option is None or option == state.running or option.mode is Mode.ON_DEMAND:
            chosen = option
            break
        i = index[option.market]
        seen[g, i] = True
        if run.capacity.grants(run, g, i):
            chosen = option
            break

    if chosen != state.running:
        ledger.close(SegmentEnd.MOVED if chosen is not None else SegmentEnd.IDLE)
        run.capacity.changed(run, state.running, chosen, g)
        if chosen is not None:
            source = state.checkpoint_market
            moved = state.moves_checkpoint(chosen.market)
            if source is not None:
                result.egress_usd += job.checkpoint_gb * egress[index[source], index[chosen.market]]
            result.migrations += int(moved)
            result.launches += 1
            state = state.launched(chosen, t, job.launch_hours(moved))
        else:
            state = state.advance(running=None, warmup_left_hours=0.0, unsaved_hours=0.0)  # it saves, then stops
    return state
