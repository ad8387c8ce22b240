"""The simulated cloud's accelerated clock, shared by every process through one persisted epoch.

Simulated time = `start + (wall − epoch_wall) · speed`. The operator launches in a worker,
the trigger polls in the triggerer, a retried task reconnects later: all of them must see
the same simulated instant, so the epoch is written once into the state directory and
read by everyone (same host, same wall clock).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from airflow_provider_skynomad.clouds.simulated.store import exclusive
from airflow_provider_skynomad.utils.files import atomic_write_json

SECONDS_PER_HOUR = 3600.0
CONFIG_FILE = "cloud.json"


@dataclass(frozen=True)
class SimClock:
    """`speed` simulated seconds pass per wall second; hour 0 is `start` (a trace timestamp)."""

    epoch_wall: float
    speed: float
    start: pd.Timestamp

    def hours_at_wall(self, wall: float) -> float:
        """Simulated hours since `start` at wall time `wall` (seconds since the Unix epoch)."""
        return (wall - self.epoch_wall) * self.speed / SECONDS_PER_HOUR

    def wall_at_hours(self, hours: float) -> float:
        """Wall time at which the simulated clock reads `hours`."""
        return self.epoch_wall + hours * SECONDS_PER_HOUR / self.speed

    def wall_seconds(self, simulated_hours: float) -> float:
        """Wall seconds that `simulated_hours` take on this clock."""
        return simulated_hours * SECONDS_PER_HOUR / self.speed

    def now_hours(self) -> float:
        return self.hours_at_wall(time.time())

    def timestamp_at(self, hours: float) -> pd.Timestamp:
        """The trace instant at `hours`, rounded to the microsecond (float hours carry rounding noise)."""
        return self.start + pd.Timedelta(microseconds=round(hours * SECONDS_PER_HOUR * 1e6))

    def now(self) -> pd.Timestamp:
        """The simulated instant, as a trace timestamp."""
        return self.timestamp_at(self.now_hours())

    def sleep_until(self, hours: float) -> None:
        """Block until the simulated clock reads at least `hours` (returns at once if it already does)."""
        while True:
            remaining = self.wall_at_hours(hours) - time.time()
            if remaining <= 0:
                return
            time.sleep(remaining)


class SteppedClock:
    """A clock its caller moves (`hours = ...`), for replaying a day of 10-minute probe runs in
    seconds: a benchmark or test puts it in place of a cloud's `clock`."""

    def __init__(self, start: pd.Timestamp):
        self.start, self.hours = start, 0.0

    def now_hours(self) -> float:
        return self.hours

    def hours_at_wall(self, wall: float) -> float | None:
        """None: a clock its caller moves has no wall time, so no instance's stamp can be put on it."""
        return None

    def now(self) -> pd.Timestamp:
        return (self.start + pd.Timedelta(hours=self.hours)).floor("us")


def open_shared_clock(state_dir: Path, settings: dict) -> dict:
    """Create `cloud.json` with `settings`, the epoch (now) and the cloud's id, or check `settings` against it.

    The first process to open a state directory fixes the epoch; every later one reads it.
    Disagreeing settings (another speed or trace) would silently show two different clocks, so
    they are an error that says how to attach instead.
    """
    path = state_dir / CONFIG_FILE
    with exclusive(state_dir / "cloud.lock"):
        if not path.exists():
            atomic_write_json(path, {**settings, "epoch_wall": time.time(), "cloud_id": uuid.uuid4().hex})
        config = json.loads(path.read_text())
    differ = [f"{k}={config.get(k)!r} (asked {v!r})" for k, v in settings.items() if config.get(k) != v]
    if differ:
        raise ValueError(
            f"{state_dir} holds a simulated cloud created with other settings: {', '.join(differ)}; "
            "pass the same settings, use SimulatedCloud.attach(state_dir), or choose another state_dir"
        )
    return config


def read_shared_settings(state_dir: Path) -> dict:
    path = state_dir / CONFIG_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no simulated cloud here; create one with SimulatedCloud(trace_path, state_dir)"
        )
    return json.loads(path.read_text())
