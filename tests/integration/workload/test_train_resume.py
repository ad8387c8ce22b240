"""The training workload resumes after SIGKILL, anywhere, and ends with the same model bit for bit.

Real workload processes (`python -m airflow_provider_skynomad.workload.train`), killed at arbitrary
moments and resumed in another directory, compared with an uninterrupted run; and the pacing by the
simulated clock's speed. What needs no process: tests/unit/workload/test_train.py.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from airflow_provider_skynomad.workload import train_command
from airflow_provider_skynomad.workload.train import (
    CHECKPOINT_FILE,
    MODEL_FILE,
    PROGRESS_FILE,
    seconds_per_step_for,
    train,
)

TOTAL_STEPS = 120
MODULE = "airflow_provider_skynomad.workload.train"


def _cli(checkpoint_dir: Path, *extra: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    argv = [sys.executable, "-m", MODULE, "--checkpoint-dir", str(checkpoint_dir), "--total-steps", str(TOTAL_STEPS)]
    return subprocess.Popen(argv + list(extra), env={**os.environ, **(env or {})}, **kwargs)


def _progress(checkpoint_dir: Path) -> dict | None:
    try:
        return json.loads((checkpoint_dir / PROGRESS_FILE).read_text())
    except FileNotFoundError:
        return None


def _kill_after_step(process: subprocess.Popen, checkpoint_dir: Path, step: int, timeout_s: float = 60) -> int:
    """SIGKILL `process` once its progress file reaches `step`; return the step it had reached."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        progress = _progress(checkpoint_dir)
        if progress and progress["step"] >= step:
            process.send_signal(signal.SIGKILL)
            process.wait()
            return _progress(checkpoint_dir)["step"]
        assert process.poll() is None, f"workload exited early with {process.returncode}"
        time.sleep(0.005)
    process.kill()
    raise AssertionError(f"workload did not reach step {step} in {timeout_s}s")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> bytes:
    """model.pkl of one uninterrupted CLI run."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    assert _cli(directory).wait(timeout=120) == 0
    return (directory / MODEL_FILE).read_bytes()


def _assert_same_model(model_bytes: bytes, reference: bytes) -> None:
    ours, theirs = pickle.loads(model_bytes), pickle.loads(reference)
    assert np.array_equal(ours.coef_, theirs.coef_)
    assert np.array_equal(ours.intercept_, theirs.intercept_)
    assert ours.t_ == theirs.t_
    assert model_bytes == reference


def test_uninterrupted_run_writes_model_progress_and_checkpoint(tmp_path, reference):
    model = train(tmp_path, TOTAL_STEPS)
    assert _progress(tmp_path) == {"step": TOTAL_STEPS, "total_steps": TOTAL_STEPS}
    assert (tmp_path / CHECKPOINT_FILE).exists()
    _assert_same_model((tmp_path / MODEL_FILE).read_bytes(), reference)
    assert model.score(*_digits()) > 0.8  # it really learns, so a broken loop cannot pass as "deterministic"


def _digits():
    from airflow_provider_skynomad.workload.train import load_data

    return load_data()


def test_killed_and_resumed_in_another_directory_is_bit_identical(tmp_path, reference):
    first, second = tmp_path / "zone-a", tmp_path / "zone-b"
    reached = _kill_after_step(_cli(first, "--seconds-per-step", "0.01"), first, 30)
    assert 30 <= reached < TOTAL_STEPS
    assert not (first / MODEL_FILE).exists()
    shutil.copytree(first, second)
    assert _cli(second).wait(timeout=120) == 0
    assert _progress(second)["step"] == TOTAL_STEPS
    _assert_same_model((second / MODEL_FILE).read_bytes(), reference)


def test_repeated_kills_in_place_and_across_directories_are_bit_identical(tmp_path, reference):
    """Kill twice at arbitrary moments (possibly mid-write), one step apart, hopping directories."""
    directories = [tmp_path / f"zone-{i}" for i in range(3)]
    directories[0].mkdir()
    for i, target in enumerate((12, 13)):
        reached = _kill_after_step(_cli(directories[i], "--seconds-per-step", "0.005"), directories[i], target)
        assert reached < TOTAL_STEPS
        shutil.copytree(directories[i], directories[i + 1])
    assert _cli(directories[-1]).wait(timeout=120) == 0
    _assert_same_model((directories[-1] / MODEL_FILE).read_bytes(), reference)


def test_resume_after_last_checkpoint_only_writes_the_model(tmp_path, reference):
    train(tmp_path, TOTAL_STEPS)
    (tmp_path / MODEL_FILE).unlink()  # as if killed between the last checkpoint and model.pkl
    assert _cli(tmp_path).wait(timeout=120) == 0
    _assert_same_model((tmp_path / MODEL_FILE).read_bytes(), reference)


def test_work_hours_are_paced_by_the_simulated_clock_speed(tmp_path):
    """4 simulated hours at 36 000× real time → 0.4 wall seconds of paced steps.

    Also checks the checkpoint directory comes from SKYNOMAD_CHECKPOINT_DIR (as the cloud sets it).
    """
    assert seconds_per_step_for(4.0, 40, 36000.0) == pytest.approx(0.01)
    started = time.time()
    env = {
        "SKYNOMAD_SIM_SPEED": "36000",
        "SKYNOMAD_CHECKPOINT_DIR": str(tmp_path),
        "SKYNOMAD_WORKLOAD_START_WALL": str(started),
    }
    argv = list(train_command(total_steps=40, work_hours=4.0))
    assert subprocess.run(argv, env={**os.environ, **env}, timeout=120).returncode == 0
    assert time.time() - started >= 0.4
    assert _progress(tmp_path)["step"] == 40
