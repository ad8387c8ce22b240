"""Availability runs: the lifetimes every forecaster learns from.

A *run* is a maximal stretch of ticks in one market that were seen and usable. It ends in a
preemption only when we saw the market unusable on the very next tick; if the next tick was not
seen (we stopped watching, e.g. migrated away) or the history ends, the run is *censored*: we only
know it lasted at least that long. Mixing those up would make markets we left on purpose look
volatile, which is exactly the bias a lifetime forecast must avoid.

Durations count usable ticks: a group that launched at tick s and was usable through tick e−1 had
`(e − s) · step_hours` of run, and a group `i` ticks old has survived `i` ticks. Runs whose first tick
follows an unseen tick (or the history start) may have begun earlier; they are flagged
`left_truncated` and, as the artifact does, treated as starting when first seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Runs:
    """One entry per run, ordered by market then start tick."""

    market: np.ndarray  # int, column index
    start_tick: np.ndarray  # int, first usable tick
    end_tick: np.ndarray  # int, first tick after the run (may equal the number of ticks)
    preempted: np.ndarray  # bool, True = ended in a seen preemption, False = censored
    left_truncated: np.ndarray  # bool, the run may have started before it was first seen
    step_hours: float

    @property
    def duration_ticks(self) -> np.ndarray:
        return self.end_tick - self.start_tick

    @property
    def duration_hours(self) -> np.ndarray:
        return self.duration_ticks * self.step_hours

    def __len__(self) -> int:
        return int(self.market.shape[0])


def validate_history(usable, seen, step_hours) -> tuple[np.ndarray, np.ndarray, float]:
    """Check the (usable, seen, step_hours) triple every forecaster takes; return typed copies."""
    usable = np.asarray(usable)
    seen = np.asarray(seen)
    if usable.ndim != 2:
        raise ValueError(f"usable must be a 2-D (ticks × markets) matrix, got shape {usable.shape}")
    if seen.shape != usable.shape:
        raise ValueError(
            f"seen has shape {seen.shape} but usable has shape {usable.shape}; "
            "both must be (ticks × markets) over the same history"
        )
    if usable.shape[1] == 0:
        raise ValueError("history has no markets (0 columns); pass at least one market")
    try:
        step_hours = float(step_hours)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"step_hours must be a positive number of hours, got {step_hours!r}") from exc
    if not np.isfinite(step_hours) or step_hours <= 0:
        raise ValueError(f"step_hours must be a positive number of hours, got {step_hours}")
    return usable.astype(bool, copy=False), seen.astype(bool, copy=False), step_hours


def extract_runs(usable, seen, step_hours: float) -> Runs:
    """All availability runs in a (ticks × markets) history, vectorised over markets."""
    usable, seen, step_hours = validate_history(usable, seen, step_hours)
    ticks, _ = usable.shape
    ok = usable & seen
    # Pad with a False row on both sides so every run has a rising and a falling edge.
    padded = np.zeros((ticks + 2, ok.shape[1]), dtype=np.int8)
    padded[1:-1] = ok
    edges = np.diff(padded, axis=0)  # (ticks + 1) × markets; +1 = run starts, −1 = run ended
    # Transposed nonzero walks market by market, so starts and ends pair up in order.
    market, start = np.nonzero(edges.T == 1)
    _, end = np.nonzero(edges.T == -1)
    inside = end < ticks
    preempted = np.zeros(start.shape, dtype=bool)
    preempted[inside] = seen[end[inside], market[inside]]  # seen and (by maximality) not usable
    before = start - 1
    left_truncated = np.ones(start.shape, dtype=bool)
    has_before = before >= 0
    left_truncated[has_before] = ~seen[before[has_before], market[has_before]]
    return Runs(market, start, end, preempted, left_truncated, step_hours)


def run_age_ticks(usable, seen) -> np.ndarray:
    """Per (tick, market): ticks since the current run started (−1 where no run is in progress)."""
    ok = np.asarray(usable, dtype=bool) & np.asarray(seen, dtype=bool)
    ticks = ok.shape[0]
    index = np.arange(ticks)[:, None]
    # Last tick at or before t that was not in a run; the run started one tick later.
    last_break = np.where(ok, -1, index)
    np.maximum.accumulate(last_break, axis=0, out=last_break)
    return np.where(ok, index - last_break - 1, -1)


@dataclass(frozen=True)
class Samples:
    """(tick, market) cells where a run is in progress and its capped remaining life is known."""

    tick: np.ndarray
    market: np.ndarray
    age_ticks: np.ndarray
    remaining_hours: np.ndarray  # min(remaining, cap): the quantity every forecaster predicts


def in_progress_samples(usable, seen, step_hours: float, cap_hours: float) -> Samples:
    """Every cell inside a run whose capped remaining lifetime the history fully determines.

    Remaining life counts the ticks from t to the run's end (≥ 1 for a run in progress). It is known
    when the run ended in a preemption, or lasted at least `cap_hours` beyond t; a run censored
    sooner (we stopped watching, or the history ended) says only "at least", so its cells are
    dropped — keeping them as if they ended would teach the models that censoring is preemption.
    """
    usable, seen, step_hours = validate_history(usable, seen, step_hours)
    ok = usable & seen
    ticks = ok.shape[0]
    index = np.arange(ticks)[:, None]
    # First tick at or after t that is not in a run (ticks if none): where the run ends.
    next_break = np.where(ok, ticks, index)
    next_break = np.minimum.accumulate(next_break[::-1], axis=0)[::-1]
    tick, market = np.nonzero(ok)
    end = next_break[tick, market]
    remaining_ticks = end - tick
    inside = end < ticks
    preempted = np.zeros(end.shape, dtype=bool)
    preempted[inside] = seen[end[inside], market[inside]]
    known = preempted | (remaining_ticks * step_hours >= cap_hours - 1e-9)
    tick, market, remaining_ticks = tick[known], market[known], remaining_ticks[known]
    age = run_age_ticks(usable, seen)[tick, market]
    remaining_hours = np.minimum(remaining_ticks * step_hours, cap_hours)
    return Samples(tick, market, age, remaining_hours)
