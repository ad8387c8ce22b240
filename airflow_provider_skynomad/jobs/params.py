"""The operator's arguments as the job runtime takes them: checked after templating, typed.

A wrong argument fails the task at once with a `SkyNomadInputError` naming it (an
`AirflowFailException`: no retries), before anything is launched or written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta

from .errors import SkyNomadInputError

MAX_ENV_BYTES = 16 * 1024  # the env is kept in task state and trigger kwargs: small, and never a secret store


@dataclass(frozen=True)
class JobParams:
    """What the operator was given, after templating (hours are cloud hours)."""

    work_hours: float
    command: tuple[str, ...]
    env: dict[str, str]
    instances: int
    cold_start_hours: float
    checkpoint_gb: float
    policy: str
    policy_params: dict
    decision_step_minutes: float
    market_lookback_hours: float
    max_market_age: timedelta
    zones: list[str] | None = None
    regions: list[str] | None = None
    clouds: list[str] | None = None
    instance_types: object = None
    accelerator: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    max_wall_seconds_per_step: float | None = None
    on_deadline_miss: str = "fail"
    status_every_steps: int = 6

    @property
    def step_hours(self) -> float:
        return float(self.decision_step_minutes) / 60.0


def validate_params(op) -> JobParams:
    """The operator's arguments, checked after templating; a clear `SkyNomadInputError` otherwise."""
    command = op.command
    if isinstance(command, str):
        raise SkyNomadInputError(
            f"command must be a list of arguments, got the string {command!r}; to run it through a shell, "
            f'pass ["bash", "-c", {command!r}]'
        )
    if command is not None:
        command = tuple(str(part) for part in command)
        if not command:
            raise SkyNomadInputError("command is empty; pass the workload's argv, or None for the bundled workload")
    instances = op.instances
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise SkyNomadInputError(f"instances must be a whole number ≥ 1, got {instances!r}")
    step = _number("decision_step_minutes", op.decision_step_minutes, low=0.1, high=24 * 60)
    lookback = _number("market_lookback_hours", op.market_lookback_hours, low=1.0 / 60, high=24 * 90)
    cap = op.max_wall_seconds_per_step
    if cap is not None:
        cap = _number("max_wall_seconds_per_step", cap, low=0.0, high=24 * 3600)
    env = {str(k): str(v) for k, v in (op.env or {}).items()}
    if sum(len(k) + len(v) for k, v in env.items()) > MAX_ENV_BYTES:
        raise SkyNomadInputError(
            f"env holds more than {MAX_ENV_BYTES // 1024} KiB; pass large inputs through files or the checkpoint"
        )
    if op.on_deadline_miss not in ("fail", "warn"):
        raise SkyNomadInputError(f'on_deadline_miss must be "fail" or "warn", got {op.on_deadline_miss!r}')
    if not isinstance(op.status_every_steps, int) or op.status_every_steps < 1:
        raise SkyNomadInputError(f"status_every_steps must be a whole number ≥ 1, got {op.status_every_steps!r}")
    try:
        work_hours = float(op.work_hours)
        cold_start_hours = float(op.cold_start_hours)
        checkpoint_gb = float(op.checkpoint_gb)
    except (TypeError, ValueError) as exc:
        raise SkyNomadInputError(f"work_hours, cold_start_hours and checkpoint_gb must be numbers: {exc}") from None
    return JobParams(
        work_hours=work_hours,
        command=command or (),
        env=env,
        instances=instances,
        cold_start_hours=cold_start_hours,
        checkpoint_gb=checkpoint_gb,
        policy=op.policy,
        policy_params=dict(op.policy_params),
        decision_step_minutes=step,
        market_lookback_hours=lookback,
        max_market_age=op.max_market_age,
        zones=op.zones,
        regions=op.regions,
        clouds=op.clouds,
        instance_types=op.instance_types,
        accelerator=op.accelerator,
        tags=dict(op.tags),
        max_wall_seconds_per_step=cap,
        on_deadline_miss=op.on_deadline_miss,
        status_every_steps=op.status_every_steps,
    )


def _number(name: str, value, *, low: float, high: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SkyNomadInputError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise SkyNomadInputError(f"{name} must be a finite number between {low:g} and {high:g}, got {value!r}")
    return number
