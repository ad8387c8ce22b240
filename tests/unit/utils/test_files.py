"""atomic_write: a reader sees the old file or the new one, never half, and a failed write leaves no debris."""

from __future__ import annotations

import json
import os
import stat

import pytest

from airflow_provider_skynomad.utils import files
from airflow_provider_skynomad.utils.files import atomic_write, atomic_write_json


def test_a_write_replaces_the_file_with_the_asked_permissions(tmp_path):
    path = tmp_path / "checkpoint.pkl"
    atomic_write(path, b"old")
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    atomic_write_json(tmp_path / "state.json", {"b": 1, "a": [2]})
    assert json.loads((tmp_path / "state.json").read_text()) == {"a": [2], "b": 1}
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pkl", "state.json"]  # no temp files left


def test_a_write_that_fails_keeps_the_old_file_and_removes_its_temp(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    atomic_write(path, b"step 4")

    def killed(src, dst):
        raise KeyboardInterrupt  # a kill between the write and the rename

    monkeypatch.setattr(files.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, b"step 5")
    monkeypatch.setattr(files.os, "replace", os.replace)
    assert path.read_bytes() == b"step 4"
    assert [p.name for p in tmp_path.iterdir()] == ["progress.json"]
