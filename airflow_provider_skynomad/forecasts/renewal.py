"""Long-run behaviour of each spot market: mean length of its up and down spells.

The lifetime forecasters answer "how long will *this* group last"; a plan for the rest of
the job needs the rhythm after that: how often a market drops us and how long it stays
away. Both spells are modelled as exponential with rates estimated by events ÷ exposure
(censoring-correct: an unfinished spell adds exposure, no event), weighted so that the last
`half_life_hours` count as much as everything before (markets change regime within a week),
and shrunk toward the pooled mean of all markets with one pseudo-event.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from airflow_provider_skynomad.forecasts.base import REGIME_HALF_LIFE_HOURS, recency_weights


@dataclass(frozen=True)
class Spells:
    up_hours: np.ndarray  # mean length of a spell with capacity, per market
    down_hours: np.ndarray  # mean length of a spell without


PRIOR_UP_HOURS = 6.0  # same prior as the lifetime forecasters (forecasts.base)
PRIOR_DOWN_HOURS = 1.0


def spell_means(
    usable: np.ndarray, seen: np.ndarray, step_hours: float, half_life_hours: float = REGIME_HALF_LIFE_HOURS
) -> Spells:
    """Mean up/down spell per market from (ticks × markets) usable/seen history; unseen cells count for nothing."""
    usable = np.asarray(usable, dtype=bool)
    seen = np.asarray(seen, dtype=bool)
    if usable.shape != seen.shape or usable.ndim != 2:
        raise ValueError(f"usable and seen must be matching 2-D arrays, got {usable.shape} and {seen.shape}")
    if step_hours <= 0 or half_life_hours <= 0:
        raise ValueError("step_hours and half_life_hours must be > 0")
    ticks = usable.shape[0]
    age = (ticks - 1 - np.arange(ticks)) * step_hours
    weight = recency_weights(age, half_life_hours)[:, None]
    up_seen, down_seen = usable & seen, ~usable & seen
    up_exposure = (weight * up_seen).sum(axis=0) * step_hours
    down_exposure = (weight * down_seen).sum(axis=0) * step_hours
    # A spell ends where two consecutive observed ticks differ.
    w = weight[1:]
    up_ends = (w * (up_seen[:-1] & down_seen[1:])).sum(axis=0)
    down_ends = (w * (down_seen[:-1] & up_seen[1:])).sum(axis=0)
    return Spells(
        up_hours=_shrunk(up_exposure, up_ends, PRIOR_UP_HOURS, step_hours),
        down_hours=_shrunk(down_exposure, down_ends, PRIOR_DOWN_HOURS, step_hours),
    )


def _shrunk(exposure: np.ndarray, events: np.ndarray, prior_hours: float, step_hours: float) -> np.ndarray:
    """exposure ÷ events per market, with one pseudo-event at the pooled mean (itself shrunk to the prior)."""
    pooled = (exposure.sum() + prior_hours) / (events.sum() + 1.0)
    return np.maximum((exposure + pooled) / (events + 1.0), step_hours)
