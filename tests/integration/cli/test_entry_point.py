"""The installed `skynomad` entry point runs `skynomad evaluate` as a process: a good run writes its
report, a missing trace exits 2 naming it. The command in-process: tests/unit/cli/test_cli.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.evaluate_traces import JOB, strict_json, trace_lines, write_trace


def test_installed_entry_point_runs_evaluate(tmp_path):
    exe = Path(sys.executable).parent / "skynomad"
    if not exe.exists():
        pytest.skip(f"{exe} not installed (pip install -e .)")
    trace = write_trace(tmp_path, trace_lines(hours=3))
    out = tmp_path / "r.json"
    env = {**os.environ, "COLUMNS": "120"}
    done = subprocess.run(
        [str(exe), "evaluate", "--trace", str(trace), *JOB, "--policies", "on-demand,optimal", "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    report = strict_json(out.read_text())
    assert set(report["summary"]) >= {"on-demand", "optimal"}
    bad = subprocess.run(
        [str(exe), "evaluate", "--trace", str(tmp_path / "absent.csv"), *JOB],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert bad.returncode == 2 and "absent.csv" in bad.stderr
