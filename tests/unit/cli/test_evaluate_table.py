"""The printed evaluate table says whether the optimum is exact or only bracketed, and how widely."""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.cli.evaluate import print_summary


def report(optimal: dict) -> dict:
    summary = {
        "optimal": {"mean_cost_usd": 100.0, "misses": 0, "mean_migrations": 0.0, "ratio_to_optimal": 1.0, **optimal},
        "skynomad": {"mean_cost_usd": 103.0, "misses": 0, "mean_migrations": 1.0, "ratio_to_optimal": 1.03},
    }
    return {"windows": [{}], "wall_seconds": 0.1, "summary": summary}


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """Rich wraps cells to the terminal's width; a wide one keeps each row on one line."""
    monkeypatch.setenv("COLUMNS", "200")


def rows(out: str) -> dict[str, str]:
    return {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 2}


def test_an_exact_optimum_reads_exact_and_no_note(capsys):
    print_summary(report({"exact": True, "max_gap": 0.0, "mean_upper_usd": 100.0}))
    out = capsys.readouterr().out
    assert "optimum gap" in out
    assert "exact" in rows(out)["optimal"]
    assert "exact" not in rows(out)["skynomad"]
    assert "upper bounds" not in out


def test_a_bracketed_optimum_prints_its_widest_gap_and_says_ratios_are_upper_bounds(capsys):
    print_summary(report({"exact": False, "max_gap": 0.0123, "mean_upper_usd": 101.2}))
    out = capsys.readouterr().out
    assert "≤ 1.23%" in rows(out)["optimal"]
    assert "exact" not in rows(out)["optimal"]
    assert "101.20 USD" in out and "upper bounds" in out


def test_a_negative_checkpoint_interval_is_a_usage_error(tmp_path, capsys):
    from airflow_provider_skynomad.cli import main

    argv = ["evaluate", "--trace", str(tmp_path / "t.csv"), "--work-hours", "1", "--deadline-hours", "2"]
    assert main([*argv, "--checkpoint-interval-hours", "-0.5"]) == 2
    assert "--checkpoint-interval-hours must be ≥ 0" in capsys.readouterr().err
