"""The training workload's pure parts: a checkpoint of another run is refused, batches are a pure
function of seed and step, one pace. Its runs killed and resumed bit-identically, as processes:
tests/integration/workload/test_train_resume.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from airflow_provider_skynomad.workload import train_command
from airflow_provider_skynomad.workload.train import CHECKPOINT_FILE, PROGRESS_FILE, batch_indices, main, train


def test_checkpoint_of_another_run_is_refused(tmp_path, capsys):
    train(tmp_path, 3)
    assert main(["--checkpoint-dir", str(tmp_path), "--total-steps", "5"]) == 2
    stderr = capsys.readouterr().err
    assert "total_steps" in stderr and str(tmp_path / CHECKPOINT_FILE) in stderr
    assert json.loads((tmp_path / PROGRESS_FILE).read_text())["step"] == 3  # nothing overwritten


def test_batches_are_a_pure_function_of_seed_and_step():
    assert np.array_equal(batch_indices(100, 1797, 0), batch_indices(100, 1797, 0))
    assert not np.array_equal(batch_indices(100, 1797, 0), batch_indices(100, 1797, 1))
    epoch = np.concatenate([batch_indices(s, 1797, 0) for s in range(1797 // 64)])
    assert len(set(epoch.tolist())) == len(epoch)  # one epoch never repeats a row


def test_train_command_requires_one_pace():
    with pytest.raises(ValueError, match="exactly one"):
        train_command(10)
    assert train_command(10, seconds_per_step=0.5)[-2:] == ("--seconds-per-step", "0.5")
