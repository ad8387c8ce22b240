"""Policy switching: while restarts are scarce, follow skynomad or eager-failover, whichever sampled futures favour.

With the slack for only a few restarts left, a window is decided by whether one or two launches
hold, and each of skynomad's rules and eager-failover's wins where its choice held
(benchmarks/results/planner-experiments.md, E58–E64). Instead of a third rule, this compares the two policies
themselves: it samples K futures of every market (forecasts.scenarios: blocks of the joint
history, so a region that is being squeezed is squeezed in the futures too), runs both
policies from the current job state to the end of each future through the one accounting
every policy is costed by, the simulator's included (planner.rollout: it lives in the planner,
below simulation, for this), and follows the one with the lower mean cost. This is policy
switching (Chang, Givan and Chong, 2004): under the sampled model it is never worse than the
better of the two, so it buys the insurance the deadline-tight rows need without a constant tuned
to them.

It only compares when it matters: while the slack pays for enough restarts (the same
criterion as E59), or while both policies would do the same thing, skynomad decides alone. A
verdict holds while nothing changes (the running group, the markets seen up, the prices) and
for at most `replan_steps` steps, as the lookahead's ranking does.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass

import numpy as np

from airflow_provider_skynomad.forecasts.scenarios import ScenarioSampler
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision, Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.lookahead import _signature, still_current
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from airflow_provider_skynomad.planner.policies.uniform_progress import EagerFailoverPolicy
from airflow_provider_skynomad.planner.rollout import rollout
from airflow_provider_skynomad.planner.safety import spare_slack_hours

logger = logging.getLogger(__name__)

HISTORY_HOURS = 24.0  # history a rollout's policies get before the job's start (they plan with today's fit)
ROLLOUT_STEP_HOURS = 1 / 6  # rollouts decide every 10 minutes at most: on a 3-minute grid they cost 3× less


@dataclass
class _Verdict:
    tick: int
    source: object
    signature: tuple
    follow: str  # "skynomad" or "eager-failover"


class SwitchingPolicy:
    """:param futures: K, sampled futures per comparison.
    :param replan_steps: a verdict is kept at most this many decision steps.
    :param seed: futures are drawn from a generator seeded with (seed, tick).
    :param evidence: eager-failover is followed only when its mean saving over the futures exceeds
        this many standard errors of that mean (paired: both policies see the same futures); a
        smaller difference is the futures' noise, and skynomad, the default, keeps the step.
    :param hold_hours, mismatch_weight, match_steps: the futures' sampler (forecasts.scenarios). Past
        moments are compared on the last two steps, so a market that has just lost capacity draws
        futures from past moments where it had just lost it, and each market that differs divides
        a moment's weight by e³ (measured on one row, GCP 13 zones T/P 1.02: e¹ and the last step
        only drew futures from unlike moments; benchmarks/results/planner-experiments.md, E65).
    :param skynomad: parameters of the skynomad policy it follows by default.
    """

    name = "skynomad-switching"

    def __init__(
        self,
        futures: int = 8,
        replan_steps: int = 6,
        seed: int = 0,
        evidence: float = 1.0,
        hold_hours: float = 1.0,
        mismatch_weight: float = 3.0,
        match_steps: int = 2,
        **skynomad,
    ):
        if futures < 1 or replan_steps < 1:
            raise ValueError("futures and replan_steps must be ≥ 1")
        self.futures = futures
        self.replan_steps = replan_steps
        self.seed = seed
        self.evidence = evidence
        self.sampler = ScenarioSampler(hold_hours=hold_hours, mismatch_weight=mismatch_weight, match_steps=match_steps)
        self.skynomad = SkyNomadPolicy(**skynomad)
        self.failover = EagerFailoverPolicy()
        self._verdict: _Verdict | None = None
        self.comparisons = 0  # how many times futures were rolled out (benchmarks read it)

    def decide(self, job: JobSpec, state: JobState, view: MarketView, now: float) -> Decision:
        state = state.advance(elapsed_hours=now)
        ours = self.skynomad.decide(job, state, view, now)
        if not self._scarce(job, state, view):
            return ours
        theirs = self.failover.decide(job, state, view, now)
        if _likely_taken(ours, view) == _likely_taken(theirs, view):
            return ours
        follow = self._follow(job, state, view)
        if follow == "skynomad":
            return ours
        reason = f"eager-failover's rule, cheaper on sampled futures ({ours.reason})"
        return Decision(theirs.try_in_order, reason=reason)

    def _scarce(self, job: JobSpec, state: JobState, view: MarketView) -> bool:
        """The restarts the slack still pays for, each followed by a typical stay, cannot cover the work left."""
        remaining = job.work_hours - state.progress_hours
        restarts = spare_slack_hours(job, state, view) / max(job.cold_start_hours, view.step_hours)
        spells = self.skynomad.lifetimes.spells(view)
        cheap = view.spot_usd_per_hour < np.min(view.on_demand_usd_per_hour)
        stay = float(np.median(spells.up_hours[cheap])) if cheap.any() else 0.0
        return restarts * stay < remaining

    def _follow(self, job: JobSpec, state: JobState, view: MarketView) -> str:
        signature = _signature(state, view)
        v = self._verdict
        if still_current(v, view, signature, self.replan_steps):
            return v.follow
        follow = self._compare(job, state, view)
        self._verdict = _Verdict(view.tick, view.source_id, signature, follow)
        return follow

    def _compare(self, job: JobSpec, state: JobState, view: MarketView) -> str:
        """Both policies from `state` on the same K futures; the one with the lower mean cost of the rest."""
        self.comparisons += 1
        dt = view.step_hours
        steps = max(1, math.ceil((job.deadline_hours - state.elapsed_hours) / dt - 1e-9)) + 1
        rng = np.random.default_rng([self.seed, view.tick])
        futures = self.sampler.sample(view, self.futures, steps, rng)
        ours = copy.copy(self.skynomad)
        ours.lifetimes = self.skynomad.lifetimes.frozen(view)  # the rollouts plan with today's fit
        ours.scarce = None
        costs = np.zeros((2, len(futures)))
        all_on_demand = (job.work_hours + job.cold_start_hours) * float(np.min(view.on_demand_usd_per_hour))
        late = 10.0 * all_on_demand * job.instances
        keep = int(round(state.elapsed_hours / dt)) + math.ceil(HISTORY_HOURS / dt)
        every = max(1, int(round(ROLLOUT_STEP_HOURS / dt)))
        for k, future in enumerate(futures):
            grid, seen, tick = view.extended(future, keep, every)
            for j, policy in enumerate((ours, self.failover)):
                run = rollout(policy, job, grid, tick, state, seen.copy(), view.egress_usd_per_gb)
                costs[j, k] = run.cost_usd if run.met_deadline else late  # the net makes this rare
        gain = costs[0] - costs[1]  # what following eager-failover saves, future by future
        error = float(np.std(gain, ddof=1) / math.sqrt(len(gain))) if len(gain) > 1 else 0.0
        logger.debug(
            "rollouts over %d futures: skynomad %.2f USD, eager-failover %.2f USD (± %.2f)",
            len(gain),
            costs[0].mean(),
            costs[1].mean(),
            error,
        )
        return "eager-failover" if float(np.mean(gain)) > self.evidence * error else "skynomad"


def _likely_taken(decision: Decision, view: MarketView) -> Option | None:
    """The entry the decision most likely ends up running: spot markets seen without capacity at this
    step or the last are skipped (trying them is a free failure), so two lists that differ only there agree.
    """
    age, was_up = view.last_seen
    for option in decision.try_in_order:
        if option is not None and option.mode is Mode.SPOT:
            i = view.index(option.market)
            if age[i] <= 1 and not was_up[i]:
                continue
        return option
    return None
