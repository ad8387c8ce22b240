"""The tiny vocabulary every policy, the simulator and the Airflow trigger share.

A decision is data: an ordered list of options to try for the next step (the first that
launches wins, so failed spot launches cost nothing but teach us the zone is full), plus
zones to probe. Keeping it data means decisions can be logged, tested and replayed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Mode(str, Enum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"


@dataclass(frozen=True)
class Option:
    """Run the gang in `market` (a zone, or zone:instance_type) in `mode`."""

    market: str
    mode: Mode

    def __str__(self) -> str:
        return f"{self.mode.value}({self.market})"

    def to_dict(self) -> dict:
        return {"market": self.market, "mode": self.mode.value}

    @classmethod
    def from_dict(cls, data: dict) -> Option:
        return cls(market=data["market"], mode=Mode(data["mode"]))


IDLE = None  # in Decision.try_in_order: hold no instance (the checkpoint stays where it is)


@dataclass(frozen=True)
class Decision:
    """What to run for the next decision step.

    `try_in_order` is walked front to back: the job's current option always "launches"
    (it is already running, no new cold start), on-demand always launches, spot launches
    only if the market has capacity, `IDLE` always succeeds. If nothing launches the job
    is idle. `probes` are markets to probe (launch and terminate at once) before that.
    `wants` is a spot market the job would rather run in but leaves to its own deployment's
    other jobs for now (it is full of them, or one with less slack waits for it): the driver
    publishes it as the job's claim (market.fleet, mode "waiting").
    """

    try_in_order: tuple[Option | None, ...] = ()
    probes: tuple[str, ...] = ()
    reason: str = ""
    wants: str | None = None

    @property
    def first(self) -> Option | None:
        """The planner's first choice (None: idle)."""
        return self.try_in_order[0] if self.try_in_order else None

    def wants_change(self, running: Option | None) -> bool:
        """The first choice is not what runs: a driver must act (the trigger raises an event)."""
        return self.first != running

    def to_dict(self) -> dict:
        data = {
            "try_in_order": [o.to_dict() if o else None for o in self.try_in_order],
            "probes": list(self.probes),
            "reason": self.reason,
        }
        if self.wants is not None:
            data["wants"] = self.wants
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Decision:
        return cls(
            try_in_order=tuple(Option.from_dict(o) if o else None for o in data["try_in_order"]),
            probes=tuple(data.get("probes", ())),
            reason=data.get("reason", ""),
            wants=data.get("wants"),
        )
