"""Scenario lookahead: solve a few sampled futures exactly over the next hours, take the first step best on average.

At a replan the policy samples K futures of every market (forecasts.scenarios), solves each
from the current job state with a small DP over (step, what runs or where the checkpoint
idles, warm-up left, progress gained), and ranks first actions by their mean cost over the K
futures (sample average approximation). The DP's horizon is a few hours; past it the rest
of the work is priced at what spot supplies in time (progress.supply_price), plus the
on-demand premium on the share of the job's slack spent by then, and on-demand with a cold
start once no spot step would be safe any more. Actions the safety net would refuse are refused
inside the DP too, and the real net (planner.safety) filters the final list, so the deadline
guarantee is the shared one.

Between replans it keeps its ranking. It replans on an event (the running group gone, a
market's observed state or a spot price changed) and at least every `replan_steps` steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce

import numpy as np

from airflow_provider_skynomad.forecasts.scenarios import ScenarioSampler
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import IDLE, Decision, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.progress import supply_price
from airflow_provider_skynomad.planner.safety import (
    EPS_HOURS,
    cheapest_on_demand,
    is_safe,
    outlives_warmup,
    rescue_lead_hours,
)

MAX_STEP_QUANTA = 12  # progress quanta per step; a finer gcd is coarsened (warm-ups rounded up)


@dataclass
class _Plan:
    tick: int
    source: object
    signature: tuple
    ranked: list[Option | None]


class LookaheadPolicy:
    """:param futures: K, sampled futures per replan.
    :param horizon_hours: how far ahead each future is solved exactly.
    :param replan_steps: replan at least this often (in decision steps) without an event.
    :param seed: futures are drawn from a generator seeded with (seed, tick): the same inputs give
        the same decision.
    """

    name = "lookahead"

    def __init__(
        self,
        futures: int = 16,
        horizon_hours: float = 2.0,
        replan_steps: int = 6,
        seed: int = 0,
        sampler: ScenarioSampler | None = None,
    ):
        if futures < 1 or horizon_hours <= 0 or replan_steps < 1:
            raise ValueError("futures and replan_steps must be ≥ 1 and horizon_hours > 0")
        self.futures = futures
        self.horizon_hours = horizon_hours
        self.replan_steps = replan_steps
        self.seed = seed
        self.sampler = sampler or ScenarioSampler()
        self._plan: _Plan | None = None
        self.replans = 0  # how many times the DP ran (benchmarks and tests read it)

    def decide(self, job: JobSpec, state: JobState, view: MarketView, now: float) -> Decision:
        state = state.advance(elapsed_hours=now)
        signature = _signature(state, view)
        plan = self._plan
        if not still_current(plan, view, signature, self.replan_steps):
            ranked = self._rank(job, state, view)
            self._plan = plan = _Plan(view.tick, view.source_id, signature, ranked)
            self.replans += 1
            reason = "lookahead: replanned"
        else:
            reason = "lookahead: plan kept"
        return Decision(tuple(_tries(job, state, view, plan.ranked)), reason=reason)

    def _rank(self, job: JobSpec, state: JobState, view: MarketView) -> list[Option | None]:
        """What to try, best first: spot launches that beat the best sure choice, then that choice.

        A launch is ranked by its mean cost over the futures as if it gets capacity (a failed
        launch costs nothing: the next entry is tried); the sure choice at the end (on-demand,
        idle, what runs) by its mean cost.
        """
        dt = view.step_hours
        left = math.ceil((job.deadline_hours - state.elapsed_hours) / dt - EPS_HOURS)
        steps = max(1, min(math.ceil(self.horizon_hours / dt - EPS_HOURS), left))
        rng = np.random.default_rng([self.seed, view.tick])
        futures = self.sampler.sample(view, self.futures, steps, rng)
        mean = _Solver(job, state, view, futures).first_actions().mean(axis=0)
        m = len(view.keys)
        options = [*[Option(k, Mode.SPOT) for k in view.keys], *[Option(k, Mode.ON_DEMAND) for k in view.keys], IDLE]
        sure = [i for i, o in enumerate(options) if o is None or o.mode is Mode.ON_DEMAND or o == state.running]
        fallback = min(sure, key=lambda i: mean[i])
        spots = [i for i in range(m) if i not in sure and np.isfinite(mean[i]) and mean[i] < mean[fallback]]
        spots.sort(key=lambda i: mean[i])
        return [options[i] for i in (*spots, fallback) if np.isfinite(mean[i])]


def still_current(kept, view: MarketView, signature: tuple, max_steps: int) -> bool:
    """A kept plan (anything with `tick`, `source`, `signature`) still answers this step: same
    history, made fewer than `max_steps` steps ago, and no event since (`_signature`)."""
    return (
        kept is not None
        and kept.source == view.source_id
        and 0 <= view.tick - kept.tick < max_steps
        and kept.signature == signature
    )


def _signature(state: JobState, view: MarketView) -> tuple:
    """What an event changes: the running group, the markets observed up now, the spot prices."""
    age, was_up = view.last_seen
    up_now = tuple(bool(u) for u in (was_up & (age == 0)))
    prices = tuple(np.round(view.spot_usd_per_hour, 6))
    return (state.running, state.last_preempted_market, up_now, prices)


def _tries(job: JobSpec, state: JobState, view: MarketView, ranked: list[Option | None]) -> list[Option | None]:
    """The ranking as a try list: options the net allows, cut after the first that cannot fail; the net last."""
    out: list[Option | None] = []
    for option in ranked:
        if not (is_safe(job, state, view, option) and outlives_warmup(job, state, view, option)):
            continue
        out.append(option)
        if option is None or option.mode is Mode.ON_DEMAND or option == state.running:
            return out
    if is_safe(job, state, view, IDLE):
        out.append(IDLE)
    else:
        out.append(cheapest_on_demand(job, state, view))
    return out


class _Solver:
    """The DP of one replan over K futures at once (axis 0 of every array).

    Options are numbered spot 0..M−1 then on-demand M..2M−1; a free job (idle or just stopped)
    is indexed by where its checkpoint is, M for none yet. Progress is counted in quanta gained
    since now. Simplifications against the simulator, all confined to the horizon: a stop or a
    preemption keeps the checkpoint where the group ran, and periodic-checkpoint losses are left to the net.
    """

    def __init__(self, job: JobSpec, state: JobState, view: MarketView, futures: np.ndarray):
        self.job, self.state, self.view, self.futures = job, state, view, futures
        n = job.instances
        self.m = len(view.keys)
        self.dt = view.step_hours
        spot = np.where(np.isfinite(view.spot_usd_per_hour), view.spot_usd_per_hour, np.inf) * n
        od = np.where(np.isfinite(view.on_demand_usd_per_hour), view.on_demand_usd_per_hour, np.inf) * n
        self.prices = np.concatenate([spot, od])
        self.od_min = float(np.min(od))
        step_s = self.dt * 3600
        whole = [_ms(h) for h in (self.dt, job.launch_hours(False), job.launch_hours(True))]
        quantum = reduce(math.gcd, whole) / 1000.0 if all(w is not None for w in whole) and any(whole) else step_s
        if step_s / quantum > MAX_STEP_QUANTA:
            quantum = step_s / MAX_STEP_QUANTA
        self.q_hours = quantum / 3600
        self.step_q = round(step_s / quantum)
        warm = state.warmup_left_hours if state.running is not None else 0.0
        firsts = {self._quanta(job.launch_hours(False)), self._quanta(job.launch_hours(True)), self._quanta(warm)}
        self.warmups = sorted({w for f in firsts for w in range(f, -1, -self.step_q)} | {0})
        self.slot = {w: j for j, w in enumerate(self.warmups)}
        self.remaining = job.work_hours - state.progress_hours
        self.levels = min(self._quanta(self.remaining), futures.shape[1] * self.step_q) + 1
        fee = job.checkpoint_gb * np.asarray(view.egress_usd_per_gb, dtype=float)
        # launch fee and warm-up slot from each checkpoint place (M: none) to each option
        self.fee = np.zeros((self.m + 1, 2 * self.m))
        self.fee[: self.m] = np.concatenate([fee, fee], axis=1)
        same = np.zeros((self.m + 1, 2 * self.m), dtype=bool)
        same[np.arange(self.m), np.arange(self.m)] = same[np.arange(self.m), self.m + np.arange(self.m)] = True
        same[self.m] = True
        self.same = same

    def _quanta(self, hours: float) -> int:
        return math.ceil(hours / self.q_hours - 1e-6)

    def _terminal(self, t_end: float) -> np.ndarray:
        """Cost of the rest of the work after the horizon, per progress level gained.

        The rest is priced at what spot supplies in time, plus the on-demand premium on the
        share of the job's slack already spent: slack spent now is what a later outage would
        have needed, so waiting is charged for it, and on-demand with a cold start once no spot
        step would be safe any more.
        """
        job = self.job
        gained = np.arange(self.levels) * self.q_hours
        rest = np.maximum(self.remaining - gained, 0.0)
        lead = rescue_lead_hours(job, self.view)
        up_share = np.clip(self.futures.mean(axis=(0, 1)), 0.01, 0.99)
        spot = self.prices[: self.m]
        hours_left = job.deadline_hours - t_end - job.cold_start_hours
        total_slack = max(job.deadline_hours - job.work_hours - job.cold_start_hours - lead, EPS_HOURS)
        out = np.empty(self.levels)
        for g, r in enumerate(rest):
            if r <= 0:
                out[g] = 0.0
            elif hours_left - r < lead:
                out[g] = self.od_min * (r + job.cold_start_hours)  # no spot step is safe any more
            else:
                supply = supply_price(spot, up_share, r, hours_left, self.od_min)
                spent = min(1.0, max(0.0, 1.0 - (hours_left - r - lead) / total_slack))
                out[g] = r * (supply + (self.od_min - supply) * spent)
        return out

    def first_actions(self) -> np.ndarray:
        """(K × 2M+1) cost of each first action (spot, on-demand, idle) in each future; inf where not allowed."""
        job, state, m, dt = self.job, self.state, self.m, self.dt
        k_futures, steps, _ = self.futures.shape
        levels, slots = self.levels, len(self.warmups)
        t0 = state.elapsed_hours
        term = self._terminal(t0 + steps * dt)
        cont = np.broadcast_to(term, (k_futures, 2 * m, slots, levels)).copy()  # running, at step k+1
        free = np.broadcast_to(term, (k_futures, m + 1, levels)).copy()
        gained = np.arange(levels) * self.q_hours
        lead = rescue_lead_hours(job, self.view)
        cold_slot = self.slot[self._quanta(job.launch_hours(False))]
        move_slot = self.slot[self._quanta(job.launch_hours(True))]
        for k in range(steps - 1, -1, -1):
            t = t0 + k * dt
            avail = self.futures[:, k, :]
            run = self._run_step(cont, t, gained, lead)  # (K, 2M, W, G): run option from slot w this step
            idle_ok = t + lead + (self.remaining - gained) + job.cold_start_hours <= job.deadline_hours + EPS_HOURS
            idle = np.where(idle_ok, free, np.inf)
            launch_ok = np.concatenate([avail, np.ones_like(avail)], axis=1)  # (K, 2M)
            stay = np.where(launch_ok[:, :, None], run[:, :, cold_slot], np.inf)
            move = np.where(launch_ok[:, :, None], run[:, :, move_slot], np.inf)
            best = idle.copy()
            for loc in range(m + 1):
                cost = np.where(self.same[loc][None, :, None], stay, move) + self.fee[loc][None, :, None]
                np.minimum(best[:, loc], cost.min(axis=1), out=best[:, loc])
            if k == 0:
                return self._first(run, idle, cold_slot, move_slot)
            # at step k a group in market x continues, or is stopped/preempted: free where it ran
            here = np.concatenate([best[:, :m], best[:, :m]], axis=1)[:, :, None, :]
            keep = np.minimum(run, here)
            lost = ~np.concatenate([avail, np.ones_like(avail)], axis=1)
            cont = np.where(lost[:, :, None, None], here, keep)
            free = best
        raise AssertionError("unreachable")

    def _run_step(self, cont: np.ndarray, t: float, gained: np.ndarray, lead: float) -> np.ndarray:
        """Cost of running each option for this step from each (warm-up slot, progress), then cont."""
        job, m, dt = self.job, self.m, self.dt
        out = np.full(cont.shape, np.inf)
        mode_spot = np.arange(2 * m) < m
        for j, w in enumerate(self.warmups):
            warm_h = w * self.q_hours
            gain_q = max(0, self.step_q - w)
            gain_h = max(0.0, dt - warm_h)
            after = self.slot[max(0, w - self.step_q)]
            left = self.remaining - gained  # (G,)
            finish = left <= gain_h + 1e-9
            need = np.minimum(warm_h, dt) + left
            on_time = t + need <= job.deadline_hours + EPS_HOURS
            spot_safe = t + lead + (left - gain_h) + job.cold_start_hours <= job.deadline_hours + EPS_HOURS
            nxt = np.full(cont.shape[:2] + (len(gained),), np.inf)
            shift = np.arange(len(gained)) + gain_q
            inside = shift < len(gained)
            nxt[:, :, inside] = cont[:, :, after, shift[inside]]
            step_cost = self.prices[None, :, None] * dt + nxt
            done_cost = np.where(on_time, self.prices[None, :, None] * need[None, None, :], np.inf)
            cost = np.where(finish[None, None, :], done_cost, step_cost)
            allowed = np.where(mode_spot[:, None], spot_safe[None, :] | finish[None, :], True)
            od_on_time = t + warm_h + left <= job.deadline_hours + EPS_HOURS
            allowed = allowed & np.where(mode_spot[:, None], True, od_on_time[None, :])
            out[:, :, j] = np.where(allowed[None], cost, np.inf)
        return out

    def _first(self, run: np.ndarray, idle: np.ndarray, cold_slot: int, move_slot: int) -> np.ndarray:
        """Each first action's cost from the real state, a spot launch's as if it gets capacity."""
        state, view, m = self.state, self.view, self.m
        loc = view.index(state.checkpoint_market) if state.checkpoint_market is not None else m
        k_futures = run.shape[0]
        out = np.full((k_futures, 2 * m + 1), np.inf)
        for x in range(2 * m):
            option = Option(view.keys[x % m], Mode.SPOT if x < m else Mode.ON_DEMAND)
            if option == state.running:
                value = run[:, x, self.slot[self._quanta(state.warmup_left_hours)], 0]
            else:
                moved = not self.same[loc, x]
                value = run[:, x, move_slot if moved else cold_slot, 0] + self.fee[loc, x]
            out[:, x] = value
        out[:, 2 * m] = idle[:, loc, 0]
        return out


def _ms(hours: float) -> int | None:
    """Hours as whole milliseconds, or None when they are not."""
    ms = hours * 3_600_000
    whole = round(ms)
    return whole if abs(ms - whole) <= 1e-6 * max(1.0, abs(ms)) else None
