"""Deterministic mini-batch training that checkpoints after every step and resumes from it.

`SGDClassifier.partial_fit` over scikit-learn's bundled digits (no download), one fixed
mini-batch per step. Why it resumes bit-identically:

- the batch of step k is a pure function of (seed, k) — a per-epoch permutation seeded by
  (seed, epoch) — so no RNG state has to survive a kill;
- the estimator's `random_state` is an int, so every `partial_fit` call reseeds identically;
- all learned state (weights, `t_`, learning-rate schedule) lives in the pickled estimator,
  written after every step with write-to-temp + `os.replace`, so a SIGKILL at any instant
  leaves either the previous or the new checkpoint, never a torn one;
- every step, interrupted run or not, continues from the estimator *unpickled from the
  checkpoint bytes it just wrote*. Equal values are not enough for equal pickle bytes (an
  unpickled array carries its own dtype object where a fresh one shares numpy's, which
  changes pickle's memo references), so an uninterrupted run is made a chain of resumes:
  step k+1 is a function of checkpoint k's bytes alone, and equal bytes follow by induction.

The progress file is replaced after the checkpoint it describes, so it never claims more
than the checkpoint holds. Pacing sleeps towards deadlines measured from the run's start:
under the simulated cloud that is the end of the cold start (`SKYNOMAD_WORKLOAD_START_WALL`,
set by its launcher), so interpreter and scikit-learn start-up is absorbed instead of
stretching the simulated work; run by hand, it is when the first step begins.

Usage::

    python -m airflow_provider_skynomad.workload.train --checkpoint-dir DIR --total-steps N \\
        (--seconds-per-step S | --work-hours H) [--seed 0]

Exit codes: 0 done (`model.pkl` written), 2 bad arguments or a checkpoint of another job.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np

from airflow_provider_skynomad.exceptions import CheckpointMismatch
from airflow_provider_skynomad.utils.files import atomic_write

CHECKPOINT_FILE = "checkpoint.pkl"
PROGRESS_FILE = "progress.json"
MODEL_FILE = "model.pkl"
BATCH_SIZE = 64
CLASSES = np.arange(10)
CHECKPOINT_FORMAT = 1


def load_data() -> tuple[np.ndarray, np.ndarray]:
    """Digits scaled to [0, 1]; bundled with scikit-learn, so nothing is downloaded."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (digits.data / 16.0).astype(np.float64), digits.target.astype(np.int64)


def batch_indices(step: int, n_samples: int, seed: int) -> np.ndarray:
    """Rows of step `step`: a pure function of (seed, step), so resuming needs no RNG state."""
    per_epoch = n_samples // BATCH_SIZE
    epoch, position = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n_samples)
    return order[position * BATCH_SIZE : (position + 1) * BATCH_SIZE]


def new_model(seed: int):
    from sklearn.linear_model import SGDClassifier

    return SGDClassifier(loss="log_loss", alpha=1e-4, learning_rate="optimal", random_state=seed)


def load_checkpoint(checkpoint_dir: Path, total_steps: int, seed: int):
    """(model, step) from the directory's checkpoint, or (None, 0) when there is none."""
    path = checkpoint_dir / CHECKPOINT_FILE
    if not path.exists():
        return None, 0
    with path.open("rb") as handle:
        state = pickle.load(handle)
    expected = {"format": CHECKPOINT_FORMAT, "total_steps": total_steps, "seed": seed}
    found = {key: state.get(key) for key in expected}
    if found != expected:
        raise CheckpointMismatch(
            f"{path}: checkpoint was written with {found}, this run has {expected}; "
            "resume with the same settings or point --checkpoint-dir at an empty directory"
        )
    return state["model"], int(state["step"])


def save_checkpoint(checkpoint_dir: Path, model, step: int, total_steps: int, seed: int):
    """Write checkpoint then progress; return the model as a resume would load it (see module docstring)."""
    state = {"format": CHECKPOINT_FORMAT, "model": model, "step": step, "total_steps": total_steps, "seed": seed}
    blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    atomic_write(checkpoint_dir / CHECKPOINT_FILE, blob)
    progress = {"step": step, "total_steps": total_steps}
    atomic_write(checkpoint_dir / PROGRESS_FILE, json.dumps(progress).encode())
    return pickle.loads(blob)["model"]


def train(
    checkpoint_dir: str | Path,
    total_steps: int,
    seconds_per_step: float = 0.0,
    seed: int = 0,
    started_at_wall: float | None = None,
):
    """Run (or resume) to `total_steps`; return the final model, also written to `model.pkl`.

    Step j of this run (counting from the resume point) finishes no earlier than
    `started_at_wall + (j + 1) · seconds_per_step`.
    """
    checkpoint_dir = Path(checkpoint_dir)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    features, labels = load_data()
    wait_for_restore()
    model, step = load_checkpoint(checkpoint_dir, total_steps, seed)
    if model is None:
        model = new_model(seed)
    started_at_wall = time.time() if started_at_wall is None else started_at_wall
    first_step = step
    while step < total_steps:
        rows = batch_indices(step, len(labels), seed)
        model.partial_fit(features[rows], labels[rows], classes=CLASSES)
        step += 1
        wait_seconds = started_at_wall + (step - first_step) * seconds_per_step - time.time()
        if wait_seconds > 0:
            time.sleep(wait_seconds)
        model = save_checkpoint(checkpoint_dir, model, step, total_steps, seed)
    atomic_write(checkpoint_dir / MODEL_FILE, pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL))
    return model


def wait_for_restore(poll_seconds: float = 0.005) -> None:
    """Started by the agent before it restored the checkpoint (the simulated cloud overlaps start-up
    with the cold start): read the checkpoint only once the agent says it is in place."""
    marker = os.environ.get("SKYNOMAD_RESTORED_MARKER")
    if not marker:
        return
    while not os.path.exists(marker):
        time.sleep(poll_seconds)


def seconds_per_step_for(work_hours: float, total_steps: int, speed: float) -> float:
    """Wall seconds per step so that the whole run costs `work_hours` on a clock running `speed`× real time."""
    return work_hours * 3600.0 / total_steps / speed


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m " + __spec__.name if __spec__ else "train", description=__doc__)
    parser.add_argument(
        "--checkpoint-dir",
        default=os.environ.get("SKYNOMAD_CHECKPOINT_DIR"),
        help="where checkpoint.pkl, progress.json and model.pkl live (default: $SKYNOMAD_CHECKPOINT_DIR)",
    )
    parser.add_argument("--total-steps", type=int, required=True)
    pace = parser.add_mutually_exclusive_group()
    pace.add_argument("--seconds-per-step", type=float, help="wall seconds per step (default 0: as fast as possible)")
    pace.add_argument(
        "--work-hours",
        type=float,
        help="simulated hours of the whole run; the pace is derived from $SKYNOMAD_SIM_SPEED (default 1 = real time)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.checkpoint_dir:
        parser.error("--checkpoint-dir is required (or set SKYNOMAD_CHECKPOINT_DIR)")
    if args.total_steps < 1:
        parser.error(f"--total-steps must be ≥ 1, got {args.total_steps}")
    if args.work_hours is not None:
        if args.work_hours < 0:
            parser.error(f"--work-hours must be ≥ 0, got {args.work_hours}")
        speed_text = os.environ.get("SKYNOMAD_SIM_SPEED", "1")
        try:
            speed = float(speed_text)
        except ValueError:
            parser.error(f"SKYNOMAD_SIM_SPEED must be simulated seconds per wall second, got {speed_text!r}")
        if speed <= 0:
            parser.error(f"SKYNOMAD_SIM_SPEED must be > 0, got {speed}")
        args.seconds_per_step = seconds_per_step_for(args.work_hours, args.total_steps, speed)
    if args.seconds_per_step is None:
        args.seconds_per_step = 0.0
    if args.seconds_per_step < 0:
        parser.error(f"--seconds-per-step must be ≥ 0, got {args.seconds_per_step}")
    return args


def _run_started_at_wall() -> float | None:
    """The launcher's planned start of this run when known, else None (pace from the first step)."""
    try:
        return float(os.environ["SKYNOMAD_WORKLOAD_START_WALL"])
    except (KeyError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        train(args.checkpoint_dir, args.total_steps, args.seconds_per_step, args.seed, _run_started_at_wall())
    except CheckpointMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
