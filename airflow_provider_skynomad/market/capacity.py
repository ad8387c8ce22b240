"""Spot capacity that several groups share: who gets a launch, who is taken back, when.

A zone's spot capacity at a moment is what the trace shows `available` there. Every running spot
group holds its `count` of it. The rule, the same for the simulated cloud (`clouds.simulated`) and
the fleet simulator (`simulation.fleet`), so that what is benchmarked is what the cloud does:

- **A launch gets capacity only if enough is left**: ``available - held >= count``.
- **When capacity drops below what is held, the youngest groups go first.** Groups keep their
  capacity in launch order (the oldest first) as long as the running total fits; the first group
  that does not fit and every group launched after it are taken back. Clouds reclaim recently
  granted spot capacity first in practice too (an older instance has survived the reclaims so far);
  more to the point, the rule makes a group's fate depend only on groups launched before it, so a
  new launch never shortens anyone else's life.

Pure functions over plain numbers; no I/O. No numpy at import either: the simulated cloud's
group supervisor (one small process per group) applies `first_loss` itself, and loads only this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Holding:
    """One spot group's claim on a zone's capacity: launched at `since` (any ordered clock), `count` instances.

    `key` breaks ties between groups launched at the same moment (e.g. the group id).
    """

    key: str
    since: float
    count: int


def left(available: int, holdings: Sequence[Holding]) -> int:
    """Capacity a new launch could get now (never below 0)."""
    return max(0, int(available) - sum(h.count for h in holdings))


def kept(available: int, holdings: Sequence[Holding]) -> list[Holding]:
    """The holdings that keep their capacity when the zone has `available`: the oldest prefix that fits."""
    total, keep = 0, []
    for holding in sorted(holdings, key=lambda h: (h.since, h.key)):
        total += holding.count
        if total > available:
            break
        keep.append(holding)
    return keep


def taken_back(available: int, holdings: Sequence[Holding]) -> list[Holding]:
    """The holdings the cloud takes back when the zone has `available` (the youngest first)."""
    keep = {h.key for h in kept(available, holdings)}
    return [h for h in holdings if h.key not in keep]


def first_loss(available: Sequence[int], held_before: Sequence[int], count: int) -> int | None:
    """Index of the first step at which a group of `count` loses its capacity, or None if it never does.

    :param available: the zone's capacity at each step from the group's launch on.
    :param held_before: at each step, what the groups launched before it still hold then (each
        until its own loss or end); by the rule above nothing launched later matters.

    Arrays (numpy) are compared in one vectorised step; plain sequences one step at a time.
    """
    if hasattr(available, "__array__") or hasattr(held_before, "__array__"):
        import numpy as np  # only callers that already hold arrays pay for it

        hit = np.flatnonzero(np.asarray(available) - np.asarray(held_before) < count)
        return int(hit[0]) if hit.size else None
    for step, (have, held) in enumerate(zip(available, held_before, strict=True)):
        if have - held < count:
            return step
    return None
