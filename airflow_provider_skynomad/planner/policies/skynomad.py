"""SkyNomad: pick, every step, the option whose progress is worth most over its price.

Pieces (each tested alone): the safety net (planner.safety), the value of progress V
(planner.progress), utility with η and amortised egress (planner.utility), a lifetime
forecast per market (forecasts), hysteresis against flapping, price-aware migration, and
probes of stale cheap markets. The order in which options are tried is the utility order,
so a full zone costs one free failed launch and the next-best option is taken at once.
"""

from __future__ import annotations

import math

import numpy as np

from ...market.view import MarketView
from ..actions import IDLE, Decision, Mode, Option
from ..job import JobSpec, JobState
from ..progress import reference_price, value_of_progress
from ..safety import cheapest_on_demand, is_safe
from ..utility import Scored, migration_pays, score
from .lifetimes import LifetimeCache


class SkyNomadPolicy:
    """:param forecaster: a fitted-on-demand lifetime forecaster factory name or instance (see forecasts).
    :param hysteresis_fraction: a switch must gain this share of C_od per hour (anti-flapping).
    :param probe_interval_hours: re-probe a cheaper market whose last observation is older than this.
    :param refit_hours: refit the lifetime forecaster on the history this often.
    """

    name = "skynomad"

    def __init__(
        self,
        forecaster="nelson-aalen",
        hysteresis_fraction: float = 0.02,
        probe_interval_hours: float = 2.0,
        refit_hours: float = 1.0,
    ):
        self.hysteresis_fraction = hysteresis_fraction
        self.probe_interval_hours = probe_interval_hours
        self.lifetimes = LifetimeCache(forecaster, refit_hours)

    def decide(self, job: JobSpec, state: JobState, view: MarketView, now: float) -> Decision:
        state = state.advance(elapsed_hours=now)
        current = state.running
        n_markets = len(view.keys)
        cheapest_od = float(np.min(view.on_demand_usd_per_hour)) * job.instances
        value = value_of_progress(job, state, cheapest_od, view.step_hours)
        floor = reference_price(view, job.instances, self.probe_interval_hours)
        if floor is not None:
            value = max(value, floor)

        ages = np.zeros(n_markets)
        if current is not None and current.mode is Mode.SPOT:
            ages[view.index(current.market)] = state.age_hours()
        lifetimes = self.lifetimes.expected_remaining_hours(view, ages)

        def scored(option: Option) -> Scored:
            return score(job, state, view, option, value, float(lifetimes[view.index(option.market)]))

        # What we have now: the running group, or idle (worth 0) — unless it is no longer safe.
        if current is not None:
            here = scored(current) if is_safe(job, state, view, current) else Scored(current, -math.inf, 0.0)
        else:
            here = Scored(IDLE, 0.0 if is_safe(job, state, view, IDLE) else -math.inf, 0.0)
        bar = here.utility_usd_per_hour + self.hysteresis_fraction * cheapest_od

        better: list[Scored] = []
        for key in view.keys:
            for mode in (Mode.SPOT, Mode.ON_DEMAND):
                option = Option(key, mode)
                if option == current:
                    continue
                candidate = scored(option)
                if candidate.utility_usd_per_hour <= max(bar, 0.0):
                    continue
                if not self._move_pays(job, view, current, candidate):
                    continue
                if is_safe(job, state, view, option):
                    better.append(candidate)
        better.sort(key=lambda s: s.utility_usd_per_hour, reverse=True)
        tries = [s.option for s in better]

        if math.isfinite(here.utility_usd_per_hour):
            idle_gain = -here.utility_usd_per_hour  # going idle is worth 0
            if current is not None and idle_gain > self.hysteresis_fraction * cheapest_od and is_safe(
                job, state, view, IDLE
            ):
                tries.append(IDLE)  # what we run costs more than its progress is worth
            else:
                tries.append(current)
        else:
            tries.append(cheapest_on_demand(job, state, view))  # the safety net
        reason = f"V={value:.2f} $/h, U_here={here.utility_usd_per_hour:.2f}"
        tries = _first_sure(tries)
        tried = {o.market for o in tries if o is not None}
        probes = tuple(m for m in self._probes(job, state, view) if m not in tried)
        return Decision(tuple(tries), probes=probes, reason=reason)

    def _move_pays(self, job: JobSpec, view: MarketView, current: Option | None, candidate: Scored) -> bool:
        if current is None or current.mode is not Mode.SPOT or candidate.option.mode is not Mode.SPOT:
            return True
        return migration_pays(job, view, current.market, candidate.option.market, candidate.stay_hours)

    def _probes(self, job: JobSpec, state: JobState, view: MarketView) -> tuple[str, ...]:
        """Stale markets cheaper than what we pay now: worth one minute of spot to learn about them."""
        current = state.running
        if current is None:
            ceiling = np.inf
        else:
            prices = view.spot_usd_per_hour if current.mode is Mode.SPOT else view.on_demand_usd_per_hour
            ceiling = prices[view.index(current.market)]
        age_ticks, _ = view.last_seen
        stale = age_ticks * view.step_hours > self.probe_interval_hours
        cheaper = view.spot_usd_per_hour < ceiling
        return tuple(view.keys[i] for i in np.flatnonzero(stale & cheaper))


def _first_sure(tries: list[Option | None]) -> list[Option | None]:
    """Cut the list after the first entry that cannot fail (idle, on-demand): nothing after it is tried."""
    out = []
    for option in tries:
        out.append(option)
        if option is None or option.mode is Mode.ON_DEMAND:
            break
    return out
