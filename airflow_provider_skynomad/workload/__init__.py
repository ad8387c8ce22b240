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
