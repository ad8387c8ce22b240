"""When a simulated spot group loses its capacity, with other groups in its zone: derived from files.

The rule is `market.capacity`'s: a zone's spot capacity at an instant is the trace's `available`;
every running spot group holds its `count` of it; a launch gets capacity only if enough is left;
when the trace drops below what is held, the youngest groups are taken back first. So a group is
lost at the first trace step from its launch at which ``available - held_before < count``, where
`held_before` is what the groups launched before it still hold then. A group launched earlier
holds from its launch until its own loss or its end; at the step where it is itself taken back it
still counts (it goes in the same reclaim as every younger group, as `capacity.kept` says).

Why files: the supervisor of a group (a small process with no database connection and no
trace loaded) must stop the workload at the loss itself, and the refresh in any process must
settle the group at the same instant. Both read the same files in the group directories and
call `loss` here, so they agree by construction:

- ``capacity.json`` (the *claim*, written once at launch, under the zone's launch lock): the
  group's count, launch time, the trace's capacity at launch and at every later step where it
  changes (only there can a group be taken back: what older groups hold only ever falls), and
  the ids of the older spot groups of its zone and instance type alive at its launch;
- ``exit.json`` (the supervisor's, at the workload's exit) and ``ended.json`` (written when the
  cloud records a group's end: terminated, failed to start, vanished, exited, taken back): an
  older group's end.

A group ending early only moves younger groups' losses later, never earlier. So the loss a
supervisor is given at launch is the earliest it can be; when that instant comes, the
supervisor derives it again (older groups' ends are known by then) and either stops the
workload or sleeps until the new instant. Times are simulated hours on the cloud's clock; the
claim carries the clock (`epoch_wall`, `speed`) to convert the wall times of `exit.json`.

An older group's end is known only once its file is written: a group whose workload exits a
few milliseconds (wall) before a younger group's loss may not be counted as gone by then. A
group whose records were dropped (a launcher that died before starting anything) held nothing.

Plain JSON and `market.capacity` only: no pandas, numpy or SQLAlchemy (the supervisor imports it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_skynomad.market.capacity import first_loss
from airflow_provider_skynomad.utils.files import atomic_write_json

CLAIM_FILE = "capacity.json"
ENDED_FILE = "ended.json"
EXIT_FILE = "exit.json"  # written by the group's supervisor (launcher.py)
SECONDS_PER_HOUR = 3600.0
_SAME_INSTANT_HOURS = 1e-9  # two groups' steps come from one grid: equal but for float noise


@dataclass(frozen=True)
class Loss:
    """A group's capacity loss: at `hours`, the trace shows `available`, older groups hold `held`."""

    hours: float
    available: int
    held: int


def write_claim(
    group_dir: Path,
    *,
    count: int,
    launched_at_hours: float,
    steps: list[tuple[float, int]],
    older: list[str],
    epoch_wall: float,
    speed: float,
) -> None:
    """Record a spot group's claim on its zone's capacity (see the module docstring)."""
    group_dir.mkdir(parents=True, exist_ok=True)
    claim = {
        "count": count,
        "launched_at_hours": launched_at_hours,
        "steps": [[hours, available] for hours, available in steps],
        "older": list(older),
        "epoch_wall": epoch_wall,
        "speed": speed,
    }
    atomic_write_json(group_dir / CLAIM_FILE, claim, mode=0o644)


def mark_ended(group_dir: Path, at_hours: float, capacity_loss: bool) -> None:
    """Record the end the cloud settled for a spot group: its capacity is free from `at_hours` on.

    Derived from these same files, it is what they say, only quicker to read: younger groups'
    derivations stop here instead of deriving this group's fate again from the groups before it.
    """
    if (group_dir / CLAIM_FILE).exists():
        ended = {"ended_at_hours": at_hours, "capacity_loss": capacity_loss}
        atomic_write_json(group_dir / ENDED_FILE, ended, mode=0o644)


def has_claim(group_dir: Path) -> bool:
    return (group_dir / CLAIM_FILE).exists()


def loss(group_dir: Path) -> Loss | None:
    """The group's capacity loss as known now (None: none in this trace, or the group has no claim).

    A loss at or before now is final; a later one can still move later (an older group may end first).
    """
    return _Derivation(group_dir.parent).loss(group_dir.name)


def loss_wall(group_dir: Path) -> float | None:
    """`loss` as a wall time (what the supervisor sleeps until)."""
    found = loss(group_dir)
    if found is None:
        return None
    claim = _read_json(group_dir / CLAIM_FILE)
    return claim["epoch_wall"] + found.hours * SECONDS_PER_HOUR / claim["speed"]


class _Derivation:
    """One derivation over the group directories under `groups_dir`, each group's result computed once."""

    def __init__(self, groups_dir: Path):
        self.groups_dir = groups_dir
        self._losses: dict[str, Loss | None] = {}

    def loss(self, group_id: str) -> Loss | None:
        if group_id not in self._losses:
            self._losses[group_id] = self._derive(group_id)
        return self._losses[group_id]

    def _derive(self, group_id: str) -> Loss | None:
        claim = _read_json(self.groups_dir / group_id / CLAIM_FILE)
        if claim is None:
            return None
        older = [(self._end(h), self._count(h)) for h in claim["older"]]
        steps = claim["steps"]
        held = [_held(older, hours, first=i == 0) for i, (hours, _) in enumerate(steps)]
        step = first_loss([available for _, available in steps], held, claim["count"])
        if step is None:
            return None
        hours, available = steps[step]
        return Loss(hours, int(available), held[step])

    def _count(self, group_id: str) -> int:
        claim = _read_json(self.groups_dir / group_id / CLAIM_FILE)
        return 0 if claim is None else int(claim["count"])

    def _end(self, group_id: str) -> tuple[float, bool] | None:
        """When an older group stops holding, and whether by losing its capacity (None: it holds on).

        Once the cloud has recorded a group's end (`ended.json`) that is its end; until then it is
        the first of its workload's exit and its own loss.
        """
        group_dir = self.groups_dir / group_id
        claim = _read_json(group_dir / CLAIM_FILE)
        if claim is None:
            return (float("-inf"), False)  # dropped before anything ran: it never held anything
        ended = _read_json(group_dir / ENDED_FILE)
        if ended is not None:
            return (float(ended["ended_at_hours"]), bool(ended.get("capacity_loss")))
        ends: list[tuple[float, bool]] = []
        exited = _read_json(group_dir / EXIT_FILE)
        if exited is not None:
            hours = (float(exited["ended_at_wall"]) - claim["epoch_wall"]) * claim["speed"] / SECONDS_PER_HOUR
            ends.append((max(hours, claim["launched_at_hours"]), False))
        lost = self.loss(group_id)
        if lost is not None:
            ends.append((lost.hours, True))
        return min(ends, key=lambda e: (e[0], not e[1])) if ends else None


def _held(older: list[tuple[tuple[float, bool] | None, int]], hours: float, first: bool) -> int:
    """What the older groups hold at a step: those not ended by then, and (after the launch step)
    those taken back at this very step, which go in the same reclaim as the younger ones."""

    def holds(end: tuple[float, bool] | None) -> bool:
        if end is None or end[0] > hours:
            return True
        taken_back_now = end[1] and not first and abs(end[0] - hours) <= _SAME_INSTANT_HOURS
        return taken_back_now

    return sum(count for end, count in older if holds(end))


def _read_json(path: Path) -> dict | None:
    """A small state file, or None when absent; claims never change once written, so they are cached."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    if path.name == CLAIM_FILE:
        return _read_claim(str(path), stat.st_mtime_ns, stat.st_size)
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


_claims: dict[tuple[str, int, int], dict] = {}
_CLAIMS_KEPT = 4096


def _read_claim(path: str, mtime_ns: int, size: int) -> dict | None:
    key = (path, mtime_ns, size)
    claim = _claims.get(key)
    if claim is None:
        try:
            with open(path) as handle:
                claim = json.load(handle)
        except FileNotFoundError:
            return None
        if len(_claims) >= _CLAIMS_KEPT:
            _claims.clear()
        _claims[key] = claim
    return claim
