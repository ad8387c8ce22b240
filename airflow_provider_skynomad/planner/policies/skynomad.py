"""SkyNomad: pick, every step, the option whose progress is worth most over its price.

Pieces (each tested alone): the safety net (planner.safety), the value of progress V
(planner.progress), utility with η and amortised egress (planner.utility), a lifetime
forecast per market (forecasts), a lookahead home for the rest of the job (planner.plans),
hysteresis against flapping, price-aware migration, and probes of stale cheap markets.
Options are tried in utility order, so a full zone costs one free failed launch and the
next-best option is taken at once.

With a fleet in the view (market.fleet: this deployment's other jobs), the job plans for the
capacity left to it (planner.crowding): a spot market whose left is short of the gang is not an
option now, a group's expected stay is what the youngest-first rule leaves it, and it yields a
market to jobs with less slack that wait for it. When the best spot market is one it leaves to
others, the decision says so (`Decision.wants`), and the driver publishes that claim. The safety
net is untouched: on-demand is never crowded out. Without a fleet nothing of this runs.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import IDLE, Decision, Mode, Option
from airflow_provider_skynomad.planner.crowding import Crowding, crowding, just_back, thin_hop_stay_hours
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.payback import Payback, keeps_on_demand, stop_pays, weigh
from airflow_provider_skynomad.planner.plans import spot_plans
from airflow_provider_skynomad.planner.policies.lifetimes import LifetimeCache
from airflow_provider_skynomad.planner.progress import market_value, slack_urgency, supply_price, value_of_progress
from airflow_provider_skynomad.planner.safety import (
    cheapest_on_demand,
    is_safe,
    outlives_warmup,
    slack_pays_fewer_starts,
    spare_slack_hours,
)
from airflow_provider_skynomad.planner.utility import MODES, Scored, Scores, migration_pays, score_all

VALUES = ("supply", "slack", "barrier")
THIN_SLACK_STARTS = 3.0  # slack is thin (for `residence`) when the spare slack pays for fewer cold starts
THIN_HOP_STARTS = 7.0  # alone on on-demand, `thin_hops` bars short hops while the spare slack pays for fewer starts
THIN_HOP_SLACK_HOURS = 1.0  # ... and is under this many hours

logger = logging.getLogger(__name__)


class SkyNomadPolicy:
    """:param forecaster: a fitted-on-demand lifetime forecaster factory name or instance (see forecasts).
    :param hysteresis_fraction: a switch must gain this share of C_od per hour (anti-flapping).
    :param probe_interval_hours: re-probe a cheaper market whose last observation is older than this
        (2.0 is the paper's cadence). Off by default: failed launches are free observations and the
        probe DAG keeps the shared market table fresh, so a job's own probes did not pay for
        themselves on any shared trace (benchmarks/results/planner-experiments.md).
    :param recent_hours: with value="slack" or "barrier", a market seen with capacity this recently
        sets the reference of V (what progress will likely cost later).
    :param refit_hours: refit the lifetime forecaster on the history this often.
    :param lifetime_cap_hours: the longest expected stay the planner credits a spot market with; it is
        also the horizon over which a move's egress and cold start are amortised. The artifact used
        2 h; that is shorter than a stable market's real stay, so every move away from a flaky zone
        looked too expensive (benchmarks/results/planner-experiments.md has the ablation).
    :param value: "supply" (default): V anchored at the dearest spot price the job must accept to
        finish in time (planner.progress.supply_price), rising to the paper's log barrier as slack
        runs short; "slack": the same, anchored at the cheapest spot price seen in `recent_hours`;
        "barrier": the paper's V floored at that recent price.
    :param scarce_restarts_cap_hours: off by default (None). When set, a longer lifetime cap used
        while the slack pays for too few restarts to cover the remaining work with stays of
        `lifetime_cap_hours` (E56 in benchmarks/results/planner-experiments.md: it helps at T/P 1.05
        but its effect is not monotone in the cap, so no value is the default).
    :param home: look ahead to the rest of the job (planner.plans): a cheaper spot market where
        the remaining work is expected to fit, waiting out its outages, becomes the home, and a
        move there spreads its egress over the remaining work instead of one expected stay.
    :param payback: a new spot launch must pay for the restart its stay's end brings, and in a fleet
        an on-demand group is not stopped to wait (planner.payback); False tries every launch whose
        utility beats what runs and stops on-demand whenever waiting looks worth more (an ablation).
    :param residence: while slack is thin, a launch from idle or on-demand that moves the checkpoint is
        admitted by its egress spread over the checkpoint's expected residence in the new market
        (`_residence`: the remaining work shared among the placements the slack still pays for), not
        over one forecast stay; it is tried after the spot options admitted as before and before
        on-demand. Aimed at the 500 GB rows of bench_robustness, where every other zone scored below
        waiting or on-demand (benchmarks/results/robustness.md). A job alone only (`_resides`).
    :param thin_hops: while the spare slack pays for fewer than `THIN_HOP_STARTS` cold starts and is under
        `THIN_HOP_SLACK_HOURS`, a job alone on on-demand leaves it for spot only for a stay expected to last
        `THIN_HOP_STAY_HOURS` (or the rest of the job), and never for a launch ranked below a shorter one
        (`_thin_hop_left_out`; the fleet's bar, planner.crowding). It closes bench_robustness's d = 0.05 h
        AWS T/P 1.02 row, where the job flipped between on-demand and spot groups lost within minutes
        until its slack was gone (benchmarks/results/planner-experiments.md, E70).
    """

    name = "skynomad"

    def __init__(
        self,
        forecaster="nelson-aalen",
        hysteresis_fraction: float = 0.02,
        probe_interval_hours: float | None = None,
        recent_hours: float = 2.0,
        refit_hours: float = 1.0,
        lifetime_cap_hours: float = 4.0,
        value: str = "supply",
        home: bool = True,
        scarce_restarts_cap_hours: float | None = None,
        payback: bool = True,
        residence: bool = True,
        thin_hops: bool = True,
    ):
        self.home = home
        if value not in VALUES:
            raise ValueError(f"value must be one of {', '.join(VALUES)}, got {value!r}")
        self.value = value
        self.hysteresis_fraction = hysteresis_fraction
        self.probe_interval_hours = probe_interval_hours
        self.recent_hours = recent_hours
        self.lifetimes = LifetimeCache(forecaster, refit_hours, lifetime_cap_hours)
        self.payback = payback
        self.residence = residence
        self.thin_hops = thin_hops
        self._declined: str | None = None  # the launch last declined, so the log says so once, not every step
        self.scarce = (
            None
            if scarce_restarts_cap_hours is None
            else LifetimeCache(forecaster, refit_hours, scarce_restarts_cap_hours)
        )

    def decide(self, job: JobSpec, state: JobState, view: MarketView, now: float) -> Decision:
        """Score every option, settle V, then list what to try: better options first, what runs (or the net) last."""
        state = state.advance(elapsed_hours=now)
        cheapest_od = float(np.min(view.on_demand_usd_per_hour)) * job.instances
        crowd = crowding(job, state, view) if view.fleet is not None else None
        home = self._home(job, state, view) if self.home else None
        scores, residency, admit = self._score(job, state, view, home, crowd)
        value, why = self._value(job, state, view, scores, cheapest_od, crowd)
        tries, here = self._tries(job, state, view, scores, residency, value, cheapest_od, crowd, admit)
        reason = f"V={value:.2f} $/h ({why}), U_here={here:.2f}" + (f", home {home.market}" if home is not None else "")
        tried = {o.market for o in tries if o is not None}
        probes = tuple(m for m in self._probes(job, state, view) if m not in tried)
        wants = self._wants(job, state, view, scores, value, tries, crowd) if crowd is not None else None
        return Decision(tuple(tries), probes=probes, reason=reason, wants=wants)

    def weigh(self, job: JobSpec, state: JobState, view: MarketView) -> tuple[Scores, float]:
        """Every option's utility terms and V, as `decide` weighs them at `state` (the fleet left out).

        Public so that a decision can be explained (`planner.explain`: the CLI, the job page) from
        the policy's own scoring, without reaching into its steps.
        """
        cheapest_od = float(np.min(view.on_demand_usd_per_hour)) * job.instances
        home = self._home(job, state, view) if self.home else None
        scores, _, _ = self._score(job, state, view, home)
        value, _ = self._value(job, state, view, scores, cheapest_od)
        return scores, value

    def _score(
        self, job: JobSpec, state: JobState, view: MarketView, home: Option | None, crowd: Crowding | None = None
    ) -> tuple[Scores, np.ndarray, Scores | None]:
        """Every option's U terms (planner.utility) from this step's lifetime forecasts, each cell's residency,
        and with `residence` (`_resides`) the same terms with moves' egress spread over the residence.

        The home market keeps the checkpoint for the rest of the job: its egress is paid once.
        With a fleet, each spot stay is the share the youngest-first rule leaves it (planner.crowding).
        """
        n_markets = len(view.keys)
        ages = np.zeros(n_markets)
        current = state.running
        if current is not None and current.mode is Mode.SPOT:
            ages[view.index(current.market)] = state.age_hours()
        lifetimes = self._lifetimes_for(job, state, view).expected_remaining_hours(view, ages)
        if crowd is not None:
            lifetimes = lifetimes * crowd.lifetime_share
        residency = np.zeros((n_markets, len(MODES)))
        if home is not None:
            residency[view.index(home.market), MODES.index(home.mode)] = job.work_hours - state.progress_hours
        od_stay = float(np.max(lifetimes))  # we leave on-demand about when the best spot market would last
        scores = score_all(job, state, view, lifetimes, od_stay, residency)
        admit = None
        if self._resides(job, state, view):
            resident = residency.copy()
            spot = MODES.index(Mode.SPOT)
            resident[:, spot] = np.maximum(resident[:, spot], self._residence(job, state, view))
            admit = score_all(job, state, view, lifetimes, od_stay, resident)
        return scores, residency, admit

    def _resides(self, job: JobSpec, state: JobState, view: MarketView) -> bool:
        """With `residence`, while slack is thin, a launch from idle or on-demand that moves the checkpoint is
        admitted by its egress over the checkpoint's expected residence (`_residence`).

        Thin: the spare slack pays for fewer than `THIN_SLACK_STARTS` cold starts, when a wait or a
        stay on on-demand is what spends the last restarts. With more, waiting a step for a market
        that comes back costs little, and spot → spot moves keep one stay's horizon (spread over
        the residence they chase every cheaper market). Alone only: in a fleet the capacity a move
        lands in is shared, and bench_fleet's GCP N = 50 fleet went 1.664 → 1.667 × its bound.
        """
        running = state.running
        if not self.residence or state.checkpoint_market is None or view.fleet is not None:
            return False
        if running is not None and running.mode is Mode.SPOT:
            return False
        return slack_pays_fewer_starts(job, state, view, THIN_SLACK_STARTS)

    def _thin_hop_left_out(
        self, job: JobSpec, state: JobState, view: MarketView, scores: Scores, utilities: np.ndarray
    ) -> np.ndarray:
        """Per market, with `thin_hops`: the spot launches a job alone on on-demand does not leave it for.

        While the spare slack pays for fewer than `THIN_HOP_STARTS` cold starts and is under
        `THIN_HOP_SLACK_HOURS`, a launch from on-demand is left out when its expected stay is shorter
        than `THIN_HOP_STAY_HOURS` or the rest of the job (planner.crowding.thin_hop_stay_hours: the
        fleet's bar), and so is every launch utility ranks below such a short one: the bar keeps the job
        on on-demand, it does not send it to a worse market instead (a detour that on AWS T/P 1.05 took
        a market lost within its cold start). Each hop spends a cold start of the few left; on-demand
        keeps them for a stay that pays. The hours cap keeps the bar off slow starts with slack for a
        few of them: there a job on on-demand observes no market, its forecasts do not recover, and
        the bar held a 500 GB job on on-demand for 13 h (benchmarks/results/planner-experiments.md, E70).
        """
        out = np.zeros(len(view.keys), dtype=bool)
        current = state.running
        if not self.thin_hops or current is None or current.mode is not Mode.ON_DEMAND:
            return out
        spare = spare_slack_hours(job, state, view)
        if spare >= THIN_HOP_SLACK_HOURS or not slack_pays_fewer_starts(job, state, view, THIN_HOP_STARTS):
            return out
        spot = utilities[:, MODES.index(Mode.SPOT)]
        short = scores.stay_hours[:, MODES.index(Mode.SPOT)] < thin_hop_stay_hours(job, state, view)
        return short | (spot < float(np.max(spot[short], initial=-np.inf)))

    def _residence(self, job: JobSpec, state: JobState, view: MarketView) -> float:
        """Hours of work the checkpoint is expected to stay in a market it moves to: at least the remaining
        work shared among the placements the slack still pays for.

        Each placement after this one starts with a restart, which spends a cold start of the spare
        slack (planner.safety.spare_slack_hours), so with R restarts left the job has at most 1 + R
        placements, and on average one holds the checkpoint for W ÷ (1 + R) hours of work W. The
        checkpoint's egress is paid once for all the stays it serves there. With slack for many
        restarts this is shorter than one forecast stay and changes nothing; with slack for a few,
        a move that pays its egress over several stays is no longer scored as if it paid it per stay.
        """
        remaining = job.work_hours - state.progress_hours
        if job.cold_start_hours <= 0:
            return 0.0
        restarts = spare_slack_hours(job, state, view) / job.cold_start_hours
        return remaining / (1.0 + restarts)

    def _lifetimes_for(self, job: JobSpec, state: JobState, view: MarketView) -> LifetimeCache:
        """The usual forecasts, or with `scarce_restarts_cap_hours` the longer-capped ones when restarts are scarce.

        Scarce: the restarts the slack still pays for (slack above the net's reserve ÷ d), each
        followed by a stay of the usual cap, cannot cover the remaining work; a stay's worth past
        the usual cap then counts (benchmarks/results/planner-experiments.md, E56).
        """
        if self.scarce is None:
            return self.lifetimes
        restarts = spare_slack_hours(job, state, view) / max(job.cold_start_hours, 1e-9)
        scarce = restarts * self.lifetimes.cap_hours < job.work_hours - state.progress_hours
        return self.scarce if scarce else self.lifetimes

    def _value(
        self,
        job: JobSpec,
        state: JobState,
        view: MarketView,
        scores: Scores,
        cheapest_od: float,
        crowd: Crowding | None = None,
    ) -> tuple[float, str]:
        """V, what an hour of progress is worth now, and how it was settled (for the decision's reason).

        V never drops below what progress will most likely cost later (plus the hysteresis
        premium): pausing while ahead of schedule only pays when something cheaper is coming.
        The reference never exceeds C_od, so on its own it never makes on-demand worth launching.
        """
        barrier = value_of_progress(job, state, cheapest_od, view.step_hours)
        if self.value == "supply":
            anchor = self._supply(job, state, view, scores, cheapest_od, crowd)
        else:
            anchor = self._floor(state, view, scores)
        reference = min((1.0 + self.hysteresis_fraction) * anchor, cheapest_od)
        if self.value != "barrier" and anchor > 0:
            value = market_value(max(barrier, reference), reference, slack_urgency(job, state))
        else:
            value = max(barrier, reference)
        return value, f"barrier {barrier:.2f}, reference {reference:.2f}"

    def _tries(
        self,
        job: JobSpec,
        state: JobState,
        view: MarketView,
        scores: Scores,
        residency: np.ndarray,
        value: float,
        cheapest_od: float,
        crowd: Crowding | None = None,
        admit: Scores | None = None,
    ) -> tuple[list[Option | None], float]:
        """Options to try in order (those beating what we have now by the margin, best first), and U of now.

        What we have now is the running group, or idle (see `_waiting`), unless it is no longer
        safe; then the list ends with the safety net. With a fleet, spot markets not launchable
        now (planner.crowding) are left out, and on-demand too until the job's slack is thin; once
        it is thin, an on-demand group is left only for a spot stay of `THIN_HOP_STAY_HOURS` or more,
        or one that lasts to the job's end (planner.crowding.thin_hop_stay_hours), in a market not
        seen down in the last `THIN_HOP_SETTLE_HOURS` (planner.crowding.just_back).
        With `admit` (`residence`), an option is admitted by the better of its two utilities; those
        its per-stay utility admits are tried in the usual order, and moves that pay their egress
        only over the residence after the spot options among them and before on-demand (nothing
        after on-demand is ever tried).
        """
        current = state.running
        utilities = scores.utility(value)
        if crowd is not None:
            utilities[~crowd.launchable, MODES.index(Mode.SPOT)] = -np.inf
            if not crowd.on_demand_open:
                utilities[:, MODES.index(Mode.ON_DEMAND)] = -np.inf
            elif current is not None and current.mode is Mode.ON_DEMAND:
                short = scores.stay_hours[:, MODES.index(Mode.SPOT)] < thin_hop_stay_hours(job, state, view)
                utilities[short | just_back(view), MODES.index(Mode.SPOT)] = -np.inf
        else:
            utilities[self._thin_hop_left_out(job, state, view, scores, utilities), MODES.index(Mode.SPOT)] = -np.inf
        idle_safe = is_safe(job, state, view, IDLE)
        if current is not None:
            safe_here = is_safe(job, state, view, current)
            here = scores.scored(current, value) if safe_here else Scored(current, -math.inf, 0.0)
            margin = self.hysteresis_fraction * cheapest_od  # switching away from a running group
            utilities[scores.cell(current)] = -np.inf  # staying is `here`, not a candidate
        else:
            here = Scored(IDLE, self._waiting(job, state, view, scores, value) if idle_safe else -math.inf, 0.0)
            margin = 0.0
        bar = max(here.utility_usd_per_hour + margin, 0.0)
        admitted = utilities if admit is None else np.maximum(utilities, admit.utility(value))
        admitted = np.where(np.isfinite(utilities), admitted, -np.inf)
        ranked: list[tuple[float, Scored]] = []
        resident: list[tuple[float, Scored]] = []  # admitted only by their egress over the residence
        declined: list[Payback] = []
        # Market by market, spot before on-demand: ties keep that order after the sort below.
        for i, j in zip(*np.nonzero(admitted > bar), strict=True):
            option = Option(view.keys[i], MODES[j])
            candidate = scores.scored(option, value, (i, j))
            if admit is not None and admitted[i, j] > utilities[i, j]:
                candidate = admit.scored(option, value, (i, j))
            if not self._move_pays(job, view, current, candidate, residency[i, j]):
                continue
            if is_safe(job, state, view, option) and outlives_warmup(job, state, view, option):
                weighed = weigh(job, state, view, candidate, bar) if self.payback else None
                if weighed is not None and not weighed.pays:
                    declined.append(weighed)
                    continue
                plain = float(utilities[i, j])
                (ranked if plain > bar else resident).append((plain, candidate))
        ranked.sort(key=lambda entry: entry[0], reverse=True)
        better = _before_on_demand([c for _, c in ranked], sorted((c for _, c in resident), key=_utility, reverse=True))
        tries = [s.option for s in better]
        self._say_declined(declined, better)

        if math.isfinite(here.utility_usd_per_hour):
            idle_gain = -here.utility_usd_per_hour  # going idle is worth 0
            idle_margin = self.hysteresis_fraction * cheapest_od
            if self.payback:
                stops = stop_pays(job, state, view, idle_gain, idle_margin) and not keeps_on_demand(state, view)
            else:
                stops = idle_gain > idle_margin
            if current is not None and stops and idle_safe:
                tries.append(IDLE)  # what we run costs more than its progress is worth
            else:
                tries.append(current)
        else:
            tries.append(cheapest_on_demand(job, state, view))  # the safety net
        return _first_sure(tries), here.utility_usd_per_hour

    def _say_declined(self, declined: list[Payback], better: list[Scored]) -> None:
        """Log a launch the payback rule declined when it would have come first: plain words once, numbers always."""
        if not declined:
            self._declined = None
            return
        top = max(declined, key=lambda p: p.plain_usd_per_hour)
        if better and better[0].utility_usd_per_hour >= top.plain_usd_per_hour:
            return  # a better option is tried anyway: the decline changed nothing
        logger.debug("declined %s", top.numbers())
        if self._declined != str(top.option):
            logger.info("%s", top.words())
            self._declined = str(top.option)

    def _wants(
        self,
        job: JobSpec,
        state: JobState,
        view: MarketView,
        scores: Scores,
        value: float,
        tries: list[Option | None],
        crowd: Crowding,
    ) -> str | None:
        """The spot market this job would take but leaves to its fleet now: the best one not launchable, if it
        beats the first option tried and is safe to take (the job's claim, market.fleet "waiting")."""
        spot = scores.utility(value)[:, MODES.index(Mode.SPOT)]
        blocked = np.where(crowd.launchable, -np.inf, spot)
        i = int(np.argmax(blocked))
        if not np.isfinite(blocked[i]) or blocked[i] <= 0:
            return None
        first = tries[0] if tries else None
        if first is not None and blocked[i] <= scores.scored(first, value).utility_usd_per_hour:
            return None
        option = Option(view.keys[i], Mode.SPOT)
        return option.market if is_safe(job, state, view, option) else None

    def _waiting(self, job: JobSpec, state: JobState, view: MarketView, scores: Scores, value: float) -> float:
        """U of idling: 0, or while the checkpoint's market is down, its U once back, spread over the wait.

        Resuming where the checkpoint is pays no egress, so after a short outage waiting can beat
        moving to a market that is up now: over one cycle (mean down spell D, then the stay L̄)
        waiting yields U·L̄/(D + L̄) per hour. The wait spends slack, so it counts only as far as
        the slack one more step of waiting leaves is unlikely to bind (× (1 − urgency) then): with
        little slack the job takes what runs.
        """
        market = state.checkpoint_market
        if market is None:
            return 0.0
        down = float(self._waits(view)[view.index(market)])
        if down == 0.0:
            return 0.0  # up now: resuming there is a candidate of its own
        back = scores.scored(Option(market, Mode.SPOT), value)
        if not back.utility_usd_per_hour > 0:
            return 0.0
        cycle = back.stay_hours / (down + back.stay_hours)
        after = state.advance(elapsed_hours=state.elapsed_hours + view.step_hours)
        return (1.0 - slack_urgency(job, after)) * back.utility_usd_per_hour * cycle

    def _supply(
        self,
        job: JobSpec,
        state: JobState,
        view: MarketView,
        scores: Scores,
        cheapest_od: float,
        crowd: Crowding | None = None,
    ) -> float:
        """The dearest cost per progress hour the job must accept to finish in time on spot (progress.supply_price).

        Up shares are the markets' long-run ones (forecasts.renewal): a market down right now
        still supplies its share of the time left. With a fleet, only the share it has room for
        this job (planner.crowding).
        """
        spells = self.lifetimes.spells(view)
        up_share = spells.up_hours / (spells.up_hours + spells.down_hours)
        if crowd is not None:
            up_share = up_share * crowd.up_share
        spot = scores.cost_per_progress_hour(Mode.SPOT)
        remaining = job.work_hours - state.progress_hours
        hours_left = job.deadline_hours - state.elapsed_hours - job.cold_start_hours
        return supply_price(spot, up_share, remaining, hours_left, cheapest_od)

    def _floor(self, state: JobState, view: MarketView, scores: Scores) -> float:
        """Cheapest cost per progress hour among the running group and spot markets seen with capacity lately.

        A market that just preempted us counts too: waiting for it to come back (no egress) is
        often cheaper than moving, and it is retried for free every step meanwhile.
        """
        recent = view.usable_within(self.recent_hours)
        spot = scores.cost_per_progress_hour(Mode.SPOT)
        best = float(np.min(spot[recent], initial=math.inf))
        if state.running is not None:
            i = view.index(state.running.market)
            best = min(best, float(scores.cost_per_progress_hour(state.running.mode)[i]))
        return best if math.isfinite(best) else 0.0

    def _home(self, job: JobSpec, state: JobState, view: MarketView) -> Option | None:
        """The spot market where the rest of the job costs least, if it fits and is cheaper than where we are.

        Only a cheaper market qualifies: committing to a dearer "stable" one is what the
        safety net and the per-stay utility already weigh, and with little slack a plan's
        estimate is too noisy to commit on.
        """
        if state.checkpoint_market is None:
            return None  # the first launch moves nothing
        spells = self.lifetimes.spells(view)
        wait = self._waits(view)
        if state.running is not None and state.running.mode is Mode.SPOT:
            wait[view.index(state.running.market)] = 0.0
        costs, fits = spot_plans(job, state, view, spells, wait)
        best = int(np.argmin(costs))
        cheaper = view.spot_usd_per_hour[best] < view.spot_usd_per_hour[view.index(state.checkpoint_market)]
        return Option(view.keys[best], Mode.SPOT) if fits[best] and cheaper else None

    def _waits(self, view: MarketView) -> np.ndarray:
        """Expected hours until each market has capacity: 0 where seen up now, else its mean down spell.

        A market not seen up now counts as down (renewal spells are never shorter than a step).
        """
        age, was_up = view.last_seen
        return np.where(was_up & (age == 0), 0.0, self.lifetimes.spells(view).down_hours)

    def _move_pays(
        self, job: JobSpec, view: MarketView, current: Option | None, candidate: Scored, residency_hours: float
    ) -> bool:
        if current is None or current.mode is not Mode.SPOT or candidate.option.mode is not Mode.SPOT:
            return True
        horizon = max(candidate.stay_hours, residency_hours)
        return migration_pays(job, view, current.market, candidate.option.market, horizon)

    def _probes(self, job: JobSpec, state: JobState, view: MarketView) -> tuple[str, ...]:
        """Stale markets cheaper than what we pay now: worth one minute of spot to learn about them."""
        current = state.running
        if self.probe_interval_hours is None or not is_safe(job, state, view, IDLE):
            return ()  # on the safety net: nothing learnt now could be used
        if current is None:
            ceiling = np.inf
        else:
            prices = view.spot_usd_per_hour if current.mode is Mode.SPOT else view.on_demand_usd_per_hour
            ceiling = prices[view.index(current.market)]
        age_ticks, _ = view.last_seen
        stale = age_ticks * view.step_hours > self.probe_interval_hours
        cheaper = view.spot_usd_per_hour < ceiling
        return tuple(view.keys[i] for i in np.flatnonzero(stale & cheaper))


def _utility(scored: Scored) -> float:
    return scored.utility_usd_per_hour


def _before_on_demand(ranked: list[Scored], moves: list[Scored]) -> list[Scored]:
    """`ranked` with `moves` put just before its first on-demand option (at the end if it has none)."""
    at = next((k for k, s in enumerate(ranked) if s.option.mode is Mode.ON_DEMAND), len(ranked))
    return ranked[:at] + moves + ranked[at:]


def _first_sure(tries: list[Option | None]) -> list[Option | None]:
    """Cut the list after the first entry that cannot fail (idle, on-demand): nothing after it is tried."""
    out = []
    for option in tries:
        out.append(option)
        if option is None or option.mode is Mode.ON_DEMAND:
            break
    return out
