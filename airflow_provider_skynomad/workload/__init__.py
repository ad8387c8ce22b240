"""A real, small workload for the demo and the tests: a deterministic training loop that checkpoints.

It stands in for a fine-tuning job: it is killed on preemption and resumed elsewhere from its
last checkpoint, and must end with the same model, bit for bit, as an uninterrupted run.
This package's `__init__` stays free of scikit-learn so that building a command is cheap;
the loop itself lives in `train`.
"""

from __future__ import annotations

import sys

TRAIN_MODULE = "airflow_provider_skynomad.workload.train"


def train_command(
    total_steps: int,
    work_hours: float | None = None,
    seconds_per_step: float | None = None,
    seed: int = 0,
    python: str = sys.executable,
) -> tuple[str, ...]:
    """The argv of the training workload, for `LaunchRequest.command`.

    Give `work_hours` to let the (simulated) cloud pace it: the workload reads the clock speed
    from `SKYNOMAD_SIM_SPEED` so one step costs `work_hours / total_steps` simulated hours.
    Give `seconds_per_step` for a fixed wall-clock pace instead. The checkpoint directory
    comes from `SKYNOMAD_CHECKPOINT_DIR`, which the cloud sets per zone.
    """
    if (work_hours is None) == (seconds_per_step is None):
        raise ValueError("give exactly one of work_hours and seconds_per_step")
    argv = [python, "-m", TRAIN_MODULE, "--total-steps", str(int(total_steps)), "--seed", str(int(seed))]
    if work_hours is not None:
        argv += ["--work-hours", repr(float(work_hours))]
    else:
        argv += ["--seconds-per-step", repr(float(seconds_per_step))]
    return tuple(argv)


# -- the operator's default workload ------------------------------------------------------------

STEPS_PER_WORK_HOUR = 10  # one checkpoint every 6 cloud minutes


def default_steps(work_hours: float) -> int:
    """Checkpoint granularity of the bundled workload: every 6 cloud minutes, 20 to 400 steps.

    Each step writes and fsyncs a checkpoint (~25 ms here), so at one simulated hour per wall
    second a step must be at least tens of milliseconds long or the workload falls behind.
    """
    return int(min(400, max(20, round(float(work_hours) * STEPS_PER_WORK_HOUR))))


def default_workload(work_hours: float, total_steps: int | None = None) -> list[str]:
    """The bundled training loop paced to `work_hours` of cloud time: `SkyNomadOperator`'s default ``command``."""
    total_steps = default_steps(work_hours) if total_steps is None else total_steps
    return [
        sys.executable,
        "-m",
        TRAIN_MODULE,
        "--total-steps",
        str(total_steps),
        "--work-hours",
        repr(float(work_hours)),
    ]
