"""The operator's arguments as the job runtime takes them: checked after templating, typed.

A wrong argument fails the task at once with a `SkyNomadInputError` naming it (an
`AirflowFailException`: no retries), before anything is launched or written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import timedelta

from airflow_provider_skynomad.clouds.boot_env import ENV_NAME
from airflow_provider_skynomad.jobs.deadline_risk import callback_path
from airflow_provider_skynomad.jobs.errors import SkyNomadInputError
from airflow_provider_skynomad.market.freshness import DEFAULT_MAX_MARKET_AGE

MAX_ENV_BYTES = 16 * 1024  # the env is kept in task state and trigger kwargs: small, and never a secret store
MAX_INSTANCES = 10_000
"""Largest gang: far above any spot pool a zone holds, low enough that costs stay ordinary numbers."""
MAX_HOURS = 24.0 * 366
"""Longest work, cold start or market age a job may name: a year (a deadline job, not a service)."""


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
    checkpoint_interval_hours: float = 0.0
    final_checkpoint_on_notice: bool = False
    on_deadline_risk: str | None = None  # "module:function", called once when even on-demand would be late
    fleet_aware: bool = True  # plan with the deployment's other jobs' holdings (jobs/fleet.py)

    @property
    def step_hours(self) -> float:
        """The decision step in hours: the planner and the cloud clock count in hours, users in minutes."""
        return float(self.decision_step_minutes) / 60.0

    def to_dict(self) -> dict:
        """Plain JSON data (the controller's trigger carries it); `max_market_age` in seconds."""
        data = asdict(self)
        data["command"] = list(self.command)
        data["max_market_age"] = self.max_market_age.total_seconds()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> JobParams:
        """The parameters back from plain data (the trigger's arguments): tuples and timedeltas typed again."""
        data = dict(data)
        data["command"] = tuple(data["command"])
        data["max_market_age"] = timedelta(seconds=float(data["max_market_age"]))
        return cls(**data)


def validate_params(op, default_max_market_age: timedelta | None = None) -> JobParams:
    """The operator's arguments, checked after templating; a clear `SkyNomadInputError` otherwise.

    Why checked here, on the worker: a bad argument must fail the task before anything is written
    or launched, naming the argument. The checks run in the order of the operator's arguments.

    :param default_max_market_age: what an operator given ``max_market_age=None`` uses (the probe
        DAG's pace on the connection's clock, `ProbeSchedule`); without it, the 2 h default.
    """
    command, instances = _command(op.command), _instances(op.instances)
    step = _number("decision_step_minutes", op.decision_step_minutes, low=0.1, high=24 * 60)
    lookback = _number("market_lookback_hours", op.market_lookback_hours, low=1.0 / 60, high=24 * 90)
    cap = op.max_wall_seconds_per_step
    if cap is not None:
        cap = _number("max_wall_seconds_per_step", cap, low=0.0, high=24 * 3600)
    env = _env(op.env)
    if not isinstance(op.on_deadline_miss, str) or op.on_deadline_miss not in ("fail", "warn"):
        raise SkyNomadInputError(f'on_deadline_miss must be "fail" or "warn", got {op.on_deadline_miss!r}')
    every = op.status_every_steps
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise SkyNomadInputError(f"status_every_steps must be a whole number ≥ 1, got {every!r}")
    work = _work(op)
    _check_policy(op)
    age = _max_market_age(op.max_market_age, default_max_market_age)
    if op.accelerator is not None:
        _text("accelerator", op.accelerator)
    _check_instance_types(op.instance_types)
    return JobParams(
        **work,
        command=command or (),
        env=env,
        instances=instances,
        policy=op.policy,
        policy_params={str(k): v for k, v in op.policy_params.items()},
        decision_step_minutes=step,
        market_lookback_hours=lookback,
        max_market_age=age,
        zones=_names("zones", op.zones),
        regions=_names("regions", op.regions),
        clouds=_names("clouds", op.clouds),
        instance_types=op.instance_types,
        accelerator=op.accelerator,
        tags=_mapping("tags", op.tags),
        max_wall_seconds_per_step=cap,
        on_deadline_miss=op.on_deadline_miss,
        status_every_steps=every,
        final_checkpoint_on_notice=op.final_checkpoint_on_notice,
        on_deadline_risk=callback_path(getattr(op, "on_deadline_risk", None)),
        fleet_aware=_flag("fleet_aware", getattr(op, "fleet_aware", True)),
    )


def _instances(instances) -> int:
    """The gang's size: a whole number of instances, at most `MAX_INSTANCES`."""
    if isinstance(instances, bool) or not isinstance(instances, int) or not 1 <= instances <= MAX_INSTANCES:
        raise SkyNomadInputError(f"instances must be a whole number from 1 to {MAX_INSTANCES}, got {instances!r}")
    return instances


def _command(command) -> tuple[str, ...] | None:
    """The workload's argv as a tuple of strings; None for the bundled workload."""
    if isinstance(command, str):
        raise SkyNomadInputError(
            f"command must be a list of arguments, got the string {command!r}; to run it through a shell, "
            f'pass ["bash", "-c", {command!r}]'
        )
    if command is None:
        return None
    if not isinstance(command, (list, tuple)):
        raise SkyNomadInputError(f"command must be a list of arguments, got {type(command).__name__} {command!r}")
    command = tuple(_text("command", part, lines=True) for part in command)
    if not command:
        raise SkyNomadInputError("command is empty; pass the workload's argv, or None for the bundled workload")
    return command


def _env(value) -> dict[str, str]:
    """The workload's environment: shell variable names, small enough for a boot script."""
    env = _mapping("env", value)
    for name in env:
        if not ENV_NAME.fullmatch(name):  # it becomes `export NAME=...` in a boot script (clouds/boot_env.py)
            raise SkyNomadInputError(
                f"env name {name!r} is not a shell variable name: use letters, digits and '_', "
                "not starting with a digit (e.g. MY_SETTING)"
            )
    if sum(len(k) + len(v) for k, v in env.items()) > MAX_ENV_BYTES:
        raise SkyNomadInputError(
            f"env holds more than {MAX_ENV_BYTES // 1024} KiB; pass large inputs through files or the checkpoint"
        )
    return env


def _work(op) -> dict:
    """The work as declared: hours, cold start, checkpoint size and interval (JobParams' fields)."""
    work = {
        "work_hours": _number("work_hours", op.work_hours, low=0.0, high=MAX_HOURS, low_open=True),
        "cold_start_hours": _number("cold_start_hours", op.cold_start_hours, low=0.0, high=MAX_HOURS),
        "checkpoint_gb": _number("checkpoint_gb", op.checkpoint_gb, low=0.0, high=1e9),
        "checkpoint_interval_hours": _number(
            "checkpoint_interval_hours", op.checkpoint_interval_hours, low=0.0, high=MAX_HOURS
        ),
    }
    if not isinstance(op.final_checkpoint_on_notice, bool):
        raise SkyNomadInputError(
            f"final_checkpoint_on_notice must be True or False, got {op.final_checkpoint_on_notice!r}"
        )
    return work


def _check_policy(op) -> None:
    """The policy is named, and its parameters are keyword arguments (the policy itself checks them)."""
    if not isinstance(op.policy, str) or not op.policy.strip():
        raise SkyNomadInputError(f"policy must be a policy's name such as 'skynomad', got {op.policy!r}")
    if not isinstance(op.policy_params, Mapping):
        raise SkyNomadInputError(f"policy_params must be a dict of keyword arguments, got {op.policy_params!r}")


def _max_market_age(age, default: timedelta | None) -> timedelta:
    """The oldest market row the job plans with: the operator's, else the probe DAG's pace, else 2 h."""
    if age is None:
        age = default or DEFAULT_MAX_MARKET_AGE
    if not isinstance(age, timedelta) or not timedelta(0) < age <= timedelta(hours=MAX_HOURS):
        raise SkyNomadInputError(f"max_market_age must be a positive timedelta of at most a year, got {age!r}")
    return age


def _flag(name: str, value) -> bool:
    """A real bool (a templated "false" is not quietly True)."""
    if not isinstance(value, bool):
        raise SkyNomadInputError(f"{name} must be True or False, got {value!r}")
    return value


def _number(name: str, value, *, low: float, high: float, low_open: bool = False) -> float:
    """A finite number in [low, high] ((low, high] with `low_open`); a templated "2.5" counts, True does not."""
    if isinstance(value, bool):
        raise SkyNomadInputError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise SkyNomadInputError(f"{name} must be a number, got {value!r}") from None
    above = number > low if low_open else number >= low
    if not math.isfinite(number) or not above or number > high:
        bounds = f"above {low:g} and at most {high:g}" if low_open else f"between {low:g} and {high:g}"
        raise SkyNomadInputError(f"{name} must be a finite number {bounds}, got {value!r}")
    return number


def _text(name: str, value, lines: bool = False) -> str:
    """A string argument: numbers are taken as written (a templated 3 → "3"), control characters refused
    (tabs and line ends too, unless `lines`: a ``bash -c`` script or an env value may span lines)."""
    if isinstance(value, bool) or value is None or not isinstance(value, (str, int, float)):
        raise SkyNomadInputError(f"{name} must hold text, got {type(value).__name__} {value!r}")
    text = str(value)
    if any((ord(c) < 32 and not (lines and c in "\t\n\r")) or c == "\x7f" for c in text):
        raise SkyNomadInputError(f"{name} holds a control character: {text!r}")
    return text


def _mapping(name: str, value) -> dict[str, str]:
    """``env`` and ``tags``: a dict of text to text (None is empty)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SkyNomadInputError(f"{name} must be a dict of names to text, got {type(value).__name__} {value!r}")
    return {_text(f"{name} name", k): _text(f"{name}[{k!r}]", v, lines=True) for k, v in value.items()}


def _names(name: str, value) -> list[str] | None:
    """``zones``, ``regions``, ``clouds``: None (any) or a list of non-empty names."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise SkyNomadInputError(f"{name} must be a list of names such as ['us-central1-a'], got {value!r}")
    names = [_text(name, v).strip() for v in value]
    if any(not n for n in names):
        raise SkyNomadInputError(f"{name} holds an empty name: {value!r}")
    return names


def _check_instance_types(value) -> None:
    """None, a name, a list of names, or ``{cloud: name or [names]}``."""
    if value is None or (isinstance(value, str) and value.strip()):
        return
    if isinstance(value, (list, tuple, Mapping)) and not value:
        return  # empty: any instance type, as None
    groups = value.values() if isinstance(value, Mapping) else [value]
    if isinstance(value, Mapping):
        for cloud in value:
            _text("instance_types cloud", cloud)
    for group in groups:
        names = [group] if isinstance(group, str) else group
        if not isinstance(names, (list, tuple)) or not names:
            raise SkyNomadInputError(
                "instance_types must be a name, a list of names or {cloud: [names]}, got " + repr(value)
            )
        for item in names:
            if not _text("instance_types", item).strip():
                raise SkyNomadInputError(f"instance_types holds an empty name: {value!r}")
