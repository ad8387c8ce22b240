"""Sampled futures of every market at once, from what the planner may see.

A future is a block of the joint history: the steps that followed a past moment whose joint
up/down state looks like now. Copying whole rows keeps what the markets do together (a
region-wide outage, zones that come back together), which per-market spell models lose.
Past moments are weighted by recency (markets change regime within a week) and by how many
markets they disagree with now, so a drought's future is drawn from past droughts.
"""

from __future__ import annotations

import numpy as np

from airflow_provider_skynomad.forecasts.base import REGIME_HALF_LIFE_HOURS
from airflow_provider_skynomad.market.view import MarketView


class ScenarioSampler:
    """:param half_life_hours: a past moment this much older counts half as much.
    :param mismatch_weight: each market whose state then differs from now divides the weight by e^this.
    :param match_steps: how many of the latest steps a past moment is compared on (1: now only; 2
        also tells a market that just lost capacity from one that has been down a while).
    :param hold_hours: an observation stands for this long; a market unobserved for longer (or never)
        counts as having capacity. A failed launch costs nothing and observes it, so the optimistic
        guess is checked for free, where a pessimistic one would never be revisited.
    """

    def __init__(
        self,
        half_life_hours: float = REGIME_HALF_LIFE_HOURS,
        mismatch_weight: float = 1.0,
        hold_hours: float = 1.0,
        match_steps: int = 1,
    ):
        if half_life_hours <= 0 or mismatch_weight < 0 or hold_hours < 0 or match_steps < 1:
            raise ValueError("half_life_hours must be > 0, mismatch_weight and hold_hours ≥ 0, match_steps ≥ 1")
        self.match_steps = match_steps
        self.half_life_hours = half_life_hours
        self.mismatch_weight = mismatch_weight
        self.hold_hours = hold_hours

    def sample(self, view: MarketView, futures: int, steps: int, rng: np.random.Generator) -> np.ndarray:
        """(futures × steps × markets) usable flags; step 0 is now (markets observed now as observed)."""
        usable, seen = view.usable_history()
        filled = _last_observed(usable, seen, max(0, int(round(self.hold_hours / view.step_hours))))
        now, known = filled[-1], seen[-1]
        ticks = filled.shape[0]
        if ticks < 2:
            return np.broadcast_to(now, (futures, steps, len(now))).copy()
        back = min(self.match_steps, ticks - 1) - 1
        starts = np.arange(back, ticks - 1)  # a start needs at least one step after it (and `back` before)
        age_hours = (ticks - 1 - starts) * view.step_hours
        mismatch = sum((filled[starts - j] != filled[-1 - j]).sum(axis=1) for j in range(back + 1))
        logw = -np.log(2.0) * age_hours / self.half_life_hours - self.mismatch_weight * mismatch
        weights = np.exp(logw - logw.max())
        picks = rng.choice(starts, size=futures, p=weights / weights.sum())
        rows = picks[:, None] + np.arange(steps)[None, :]
        rows = np.minimum(rows, ticks - 1)  # past the history's end a future holds its last row
        out = filled[rows]
        out[:, 0, :] = np.where(known, now, out[:, 0, :])
        return out


def _last_observed(usable: np.ndarray, seen: np.ndarray, hold_ticks: int) -> np.ndarray:
    """Each cell as last observed at most `hold_ticks` before it; older or never observed: capacity."""
    ticks = np.arange(usable.shape[0])[:, None]
    last = np.maximum.accumulate(np.where(seen, ticks, -1), axis=0)
    cols = np.arange(usable.shape[1])[None, :]
    fresh = (last >= 0) & (ticks - last <= hold_ticks)
    return np.where(fresh, usable[np.maximum(last, 0), cols], True)
