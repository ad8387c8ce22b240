"""The controller's step clock: when the trigger looks, how late a look is, when it publishes.

Why one object: the trigger's loop keeps a fixed schedule per job (offset by a stable phase, so a
triggerer's many jobs don't all look at one instant), measures how late each change is carried
out (the job plans with that lag), and publishes the live status on two clocks (wall seconds, and
cloud hours on an accelerated clock). Those rules and their constants live here, beside each
other; the trigger only asks. Standard library only: the triggerer imports this on its event loop.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

PUBLISH_EVERY_SECONDS = 10.0  # wall seconds between two live-status rows (`jobs.live`) at most
PUBLISH_EVERY_CLOUD_HOURS = 0.1  # and at least this often on the cloud's clock (an accelerated one)
PUBLISH_MIN_SECONDS = 1.0
SOONEST_SHARE = 10  # a look is never sooner than a tenth of a step after the last one's end


def step_wall_seconds(wall_per_hour: float, step_hours: float, max_wall_seconds: float | None) -> float:
    """Wall seconds of one decision step on the connection's cloud clock (capped by the operator's
    ``max_wall_seconds_per_step``, so a slow simulated clock still looks often enough)."""
    step_wall = wall_per_hour * step_hours
    return step_wall if max_wall_seconds is None else min(step_wall, max_wall_seconds)


def phase_of(job_id: str) -> float:
    """Where in its step a job's looks fall, in (0, 1]: stable per job, so the many jobs of one
    triggerer don't all look at the same instant and queue for its few threads at once."""
    return (1 + zlib.crc32(job_id.encode()) % 1000) / 1000


@dataclass(frozen=True)
class Tick:
    """One look as the clock starts it: how late it is (wall seconds) and whether it publishes."""

    late_seconds: float
    late_hours: float
    publish: bool


@dataclass
class StepClock:
    """One job's look schedule in the trigger (see the module docstring).

    The first look is at once (the worker has just launched, or a retry reconnected); the second
    falls at the job's phase of a step; then a step apart, sooner when the workload should end
    before then. A look that ran long moves the schedule (it is not caught up back to back).
    """

    step_wall: float
    wall_per_hour: float
    phase: float = 1.0
    now: Callable[[], float] = time.monotonic
    due: float = field(init=False)
    offset: float = field(init=False)
    published: float = field(init=False, default=-math.inf)
    took: float = field(init=False, default=0.0)
    started: float = field(init=False, default=0.0)
    publish_every: float = field(init=False)

    def __post_init__(self) -> None:
        self.due = self.now()
        self.offset = self.step_wall * self.phase
        # The job page's figures stay within a tenth of a cloud hour of the truth, on any clock.
        by_cloud = PUBLISH_EVERY_CLOUD_HOURS * self.wall_per_hour
        self.publish_every = max(PUBLISH_MIN_SECONDS, min(PUBLISH_EVERY_SECONDS, by_cloud))

    @classmethod
    def of(cls, job_id: str, *, step_wall: float, wall_per_hour: float) -> StepClock:
        """The clock of job `job_id`, whose step lasts `step_wall` wall seconds."""
        return cls(step_wall=step_wall, wall_per_hour=wall_per_hour, phase=phase_of(job_id))

    def begin(self) -> Tick:
        """A look starts: how late a change made now is carried out, and whether it publishes.

        Late: this look started after its due time (a busy loop), and the last one took this long
        from its look to its last effect (threads, the database, the cloud)."""
        self.started = self.now()
        late = max(0.0, self.started - self.due) + self.took
        return Tick(late, late / self.wall_per_hour, self.started - self.published >= self.publish_every)

    def end(self, tick: Tick, wanted: float) -> float:
        """The look ended, wanting the next one `wanted` wall seconds on: seconds to sleep until it."""
        if tick.publish:
            self.published = self.started
        ended = self.now()
        self.took = ended - self.started
        soonest = ended + min(wanted, self.step_wall / SOONEST_SHARE)
        self.due = max(self.due + min(wanted, self.offset or wanted), soonest)
        self.offset = 0.0  # after the first look, where this job's phase falls; a step apart from then on
        return max(0.0, self.due - self.now())
