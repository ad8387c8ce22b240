"""`skynomad evaluate` (docs/evaluate.md): bad input → clear message, exit 2, nothing written; a good run.

The installed `skynomad` entry point, run as a process: tests/integration/cli/test_entry_point.py."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from airflow_provider_skynomad.cli import main
from airflow_provider_skynomad.market.observations import COLUMNS
from tests.support.evaluate_traces import JOB, ZONES, strict_json, trace_lines, write_trace

RESULT_FIELDS = {"cost_usd", "met_deadline", "migrations", "spot_hours", "on_demand_hours", "egress_usd", "probe_usd"}
SUMMARY_FIELDS = {"mean_cost_usd", "misses", "mean_migrations"}


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """cli.main in-process → (exit code, stdout, stderr); argparse's own exits count as codes too."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def evaluate(trace, tmp_path, *extra: str) -> list[str]:
    return [
        "evaluate",
        "--trace",
        str(trace),
        *JOB,
        "--window-step-hours",
        "2",
        "--output",
        str(tmp_path / "out.json"),
        "--plot",
        str(tmp_path / "out.png"),
        *extra,
    ]


def assert_nothing_written(tmp_path: Path) -> None:
    assert not (tmp_path / "out.json").exists()
    assert not (tmp_path / "out.png").exists()


# --------------------------------------------------------------------------- a good run


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("good")
    trace = write_trace(tmp, trace_lines())
    out, png = tmp / "results.json", tmp / "costs.png"
    code = main(
        ["evaluate", "--trace", str(trace), *JOB, "--window-step-hours", "2", "--output", str(out), "--plot", str(png)]
    )
    return code, trace, out, png


def test_good_run_exits_zero_and_writes_both_files(good_run):
    code, _, out, png = good_run
    assert code == 0
    assert out.exists() and png.exists()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 1000


def test_good_run_json_has_the_design_shape(good_run):
    _, trace, out, _ = good_run
    report = strict_json(out.read_text())
    assert {"job", "trace", "windows", "summary"} <= set(report)
    assert report["job"]["work_hours"] == 1.0 and report["job"]["deadline_hours"] == 1.5
    assert report["job"]["cold_start_hours"] == 0.2 and report["job"]["checkpoint_gb"] == 10
    assert report["trace"]["path"] == str(trace)
    zones = [z for _, z in ZONES]
    assert sorted(report["trace"]["zones"]) == sorted(zones)
    # 6 h trace, 1.5 h windows every 2 h: starts at 0, 2, 4 h.
    assert [w["start"] for w in report["windows"]] == [
        "2025-10-04T00:00:00Z",
        "2025-10-04T02:00:00Z",
        "2025-10-04T04:00:00Z",
    ]
    names = {"skynomad", "optimal", "on-demand", "eager-failover", *(f"uniform-progress[{z}]" for z in zones)}
    for window in report["windows"]:
        pd.Timestamp(window["start"])  # ISO
        assert set(window["results"]) == names
        for name, result in window["results"].items():
            expected = {"cost_usd", "met_deadline"} if name == "optimal" else RESULT_FIELDS
            assert expected <= set(result), (name, result)
            assert result["met_deadline"] is True  # feasible job: nobody misses
            assert result["cost_usd"] >= 0
            assert window["results"]["optimal"]["cost_usd"] <= result["cost_usd"] + 1e-6
    summary = report["summary"]
    assert {
        "skynomad",
        "optimal",
        "on-demand",
        "eager-failover",
        "uniform-progress-best",
        "uniform-progress-mean",
    } <= set(summary)
    assert not any(name.startswith("uniform-progress[") for name in summary)
    for name, row in summary.items():
        assert set(row) >= SUMMARY_FIELDS, name
        assert row["misses"] == 0
    costs = [w["results"]["skynomad"]["cost_usd"] for w in report["windows"]]
    assert summary["skynomad"]["mean_cost_usd"] == pytest.approx(np.mean(costs), abs=1e-5)
    per_zone = [np.mean([w["results"][f"uniform-progress[{z}]"]["cost_usd"] for w in report["windows"]]) for z in zones]
    assert summary["uniform-progress-best"]["mean_cost_usd"] == pytest.approx(min(per_zone), abs=1e-5)
    assert summary["uniform-progress-mean"]["mean_cost_usd"] == pytest.approx(np.mean(per_zone), abs=1e-5)


def test_good_run_prints_a_table_of_policies(tmp_path, capsys):
    trace = write_trace(tmp_path, trace_lines())
    code, out, _ = run(
        [
            "evaluate",
            "--trace",
            str(trace),
            *JOB,
            "--window-step-hours",
            "2",
            "--policies",
            "on-demand,optimal",
            "--zones",
            "us-central1-a,europe-west1-c",
        ],
        capsys,
    )
    assert code == 0
    assert "on-demand" in out and "optimal" in out
    assert "skynomad" not in out


def test_zone_filter_policies_and_max_windows(tmp_path, capsys):
    trace = write_trace(tmp_path, trace_lines())
    code, _, err = run(
        evaluate(
            trace,
            tmp_path,
            "--zones",
            "us-central1-b,europe-west1-c",
            "--policies",
            "uniform-progress,optimal",
            "--max-windows",
            "2",
        ),
        capsys,
    )
    assert code == 0, err
    report = strict_json((tmp_path / "out.json").read_text())
    assert report["trace"]["zones"] == ["europe-west1-c", "us-central1-b"] or sorted(report["trace"]["zones"]) == [
        "europe-west1-c",
        "us-central1-b",
    ]
    assert len(report["windows"]) == 2
    assert [w["start"] for w in report["windows"]] == ["2025-10-04T00:00:00Z", "2025-10-04T04:00:00Z"]
    assert set(report["windows"][0]["results"]) == {
        "optimal",
        "uniform-progress[us-central1-b]",
        "uniform-progress[europe-west1-c]",
    }


def test_gzipped_trace(tmp_path, capsys):
    import gzip

    path = tmp_path / "trace.csv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("\n".join(trace_lines()) + "\n")
    code, _, err = run(evaluate(path, tmp_path, "--policies", "on-demand"), capsys)
    assert code == 0, err
    assert (tmp_path / "out.json").exists()


# --------------------------------------------------------------------------- bad traces


def _replace(lines: list[str], index: int, column: str, value: str) -> list[str]:
    lines = list(lines)
    parts = lines[index].split(",")
    parts[COLUMNS.index(column)] = value
    lines[index] = ",".join(parts)
    return lines


def _bad_traces() -> list[tuple[str, list[str], str | None, str | None]]:
    good = trace_lines()
    header_without = ",".join(c for c in COLUMNS if c != "on_demand_price")
    missing = [header_without] + [",".join(line.split(",")[:-1]) for line in good[1:]]
    unsorted = list(good)
    unsorted[4], unsorted[7] = unsorted[7], unsorted[4]  # zone 1 at 10 min before zone 1 at 0 min (lines 5, 8)
    duplicate = list(good)
    duplicate.insert(5, good[4])  # line 6 repeats line 5 (us-central1-a at 00:10)
    return [
        ("missing column", missing, "line 1", "on_demand_price"),
        ("unparsable time", _replace(good, 9, "observed_at", "2025-13-45T99:00:00Z"), "line 10", "observed_at"),
        ("negative spot price", _replace(good, 12, "spot_price", "-2.5"), "line 13", "spot_price"),
        ("missing on-demand price", _replace(good, 12, "on_demand_price", ""), "line 13", "on_demand_price"),
        ("available > requested", _replace(good, 20, "available", "17"), "line 21", "available"),
        ("unsorted", unsorted, "line 8", "observed_at"),
        ("duplicate", duplicate, "line 6", "observed_at"),
    ]


@pytest.mark.parametrize("label, lines, where, column", _bad_traces(), ids=[b[0] for b in _bad_traces()])
def test_bad_trace_is_a_clear_error_with_exit_2_and_nothing_written(tmp_path, capsys, label, lines, where, column):
    trace = write_trace(tmp_path, lines)
    code, out, err = run(evaluate(trace, tmp_path), capsys)
    assert code == 2, (label, err)
    assert "error" in err.lower()
    assert str(trace) in err, err
    assert where in err, err
    assert column in err, err
    assert "Traceback" not in err
    assert_nothing_written(tmp_path)


def test_zone_filter_that_matches_nothing(tmp_path, capsys):
    trace = write_trace(tmp_path, trace_lines())
    code, _, err = run(evaluate(trace, tmp_path, "--zones", "mars-north1-a"), capsys)
    assert code == 2
    assert "mars-north1-a" in err and str(trace) in err
    assert "us-central1-a" in err  # says what the trace does have
    assert_nothing_written(tmp_path)


def test_nonexistent_trace(tmp_path, capsys):
    code, _, err = run(evaluate(tmp_path / "nope.csv", tmp_path), capsys)
    assert code == 2
    assert "nope.csv" in err and "no such" in err.lower()
    assert_nothing_written(tmp_path)


def test_unknown_policy(tmp_path, capsys):
    trace = write_trace(tmp_path, trace_lines())
    code, _, err = run(evaluate(trace, tmp_path, "--policies", "skynomad,cheapest-ever"), capsys)
    assert code == 2
    assert "cheapest-ever" in err
    assert "eager-failover" in err  # lists the valid names
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--work-hours", "-1"], "work_hours"),
        (["--deadline-hours", "0"], "deadline_hours"),
        (["--cold-start-hours", "-0.1"], "cold_start_hours"),
        (["--instances", "0"], "instances"),
        (["--window-step-hours", "0"], "window-step-hours"),
        (["--max-windows", "0"], "max-windows"),
        (["--step-minutes", "-5"], "step-minutes"),
        (["--egress-usd-per-gb", "-0.01"], "egress"),
        (["--bandwidth-gb-per-second", "0"], "--bandwidth-gb-per-second"),
        (["--reaction-minutes", "-1"], "--reaction-minutes"),
        (["--market-table-minutes", "0"], "--market-table-minutes"),
        (["--market-table-minutes", "inf"], "--market-table-minutes"),
        (["--reaction-minutes", "inf"], "not a finite number"),  # used to end in an OverflowError traceback
        (["--window-step-hours", "inf"], "not a finite number"),
        (["--checkpoint-gb", "inf"], "not a finite number"),  # used to report costs of nan
        (["--work-hours", "nan"], "not a finite number"),
        (["--work-hours", "ten"], "invalid number value"),
        (["--deadline-hours", "100"], "shorter than one job window"),  # trace too short for one window
    ],
)
def test_bad_job_or_flags(tmp_path, capsys, flags, needle):
    trace = write_trace(tmp_path, trace_lines())
    code, _, err = run(evaluate(trace, tmp_path, *flags), capsys)
    assert code == 2, err
    assert needle in err, err
    assert "Traceback" not in err
    assert_nothing_written(tmp_path)


def test_bandwidth_is_given_in_gb_per_second_and_slows_migrations(tmp_path):
    from airflow_provider_skynomad.cli import build_parser
    from airflow_provider_skynomad.cli.evaluate import _prepare

    trace = write_trace(tmp_path, trace_lines())
    argv = ["evaluate", "--trace", str(trace), *JOB, "--bandwidth-gb-per-second", "0.01"]
    evaluation, _ = _prepare(build_parser().parse_args(argv))
    assert evaluation.job.bandwidth_gb_per_hour == pytest.approx(36.0)
    assert evaluation.job.transfer_hours(moved=True) == pytest.approx(10 / 36.0)  # 10 GB checkpoint


def test_reaction_lag_is_given_in_minutes_and_delays_what_the_policies_do(tmp_path, capsys):
    trace = write_trace(tmp_path, trace_lines())
    reports = {}
    for minutes in ("0", "20"):
        out = tmp_path / f"r{minutes}.json"
        argv = [
            "evaluate",
            "--trace",
            str(trace),
            *JOB,
            "--policies",
            "skynomad,eager-failover",
            "--reaction-minutes",
            minutes,
            "--output",
            str(out),
        ]
        code, _, err = run(argv, capsys)
        assert code == 0, err
        reports[minutes] = json.loads(out.read_text())
    assert reports["20"]["job"]["reaction_hours"] == pytest.approx(1 / 3)
    for name in ("skynomad", "eager-failover"):
        assert reports["20"]["summary"][name]["misses"] == 0
    # The lag changes what happens (launches two steps late), not just the job's description.
    runs = {m: [w["results"]["eager-failover"] for w in reports[m]["windows"]] for m in reports}
    assert runs["20"] != runs["0"]


def test_market_table_minutes_shows_the_policies_the_probe_dags_table(tmp_path, capsys):
    trace = write_trace(tmp_path, trace_lines(hours=24.0))
    job = ["--work-hours", "6", "--deadline-hours", "9", "--cold-start-hours", "0.2", "--checkpoint-gb", "10"]
    reports = {}
    for flags in ([], ["--market-table-minutes", "10"]):
        out = tmp_path / f"t{len(flags)}.json"
        argv = [
            "evaluate",
            "--trace",
            str(trace),
            *job,
            "--window-step-hours",
            "3",
            "--policies",
            "skynomad",
            "--output",
            str(out),
            *flags,
        ]
        code, _, err = run(argv, capsys)
        assert code == 0, err
        reports[len(flags)] = json.loads(out.read_text())
    assert reports[0]["trace"]["market_table_minutes"] is None
    assert reports[2]["trace"]["market_table_minutes"] == 10
    for report in reports.values():
        assert report["summary"]["skynomad"]["misses"] == 0
    # What the planner is shown changes what it does, not just the report's header.
    runs = {k: [w["results"]["skynomad"]["cost_usd"] for w in reports[k]["windows"]] for k in reports}
    assert runs[2] != runs[0]


def test_timeline_adds_each_runs_segments_and_they_add_up_to_its_cost(tmp_path, capsys):
    trace = write_trace(tmp_path, trace_lines(hours=12.0))
    out = tmp_path / "t.json"
    argv = [
        "evaluate",
        "--trace",
        str(trace),
        *JOB,
        "--window-step-hours",
        "2",
        "--policies",
        "skynomad,eager-failover,optimal",
        "--timeline",
        "--output",
        str(out),
    ]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    report = strict_json(out.read_text())
    segments = 0
    for window in report["windows"]:
        assert "timeline" not in window["results"]["optimal"]  # the optimum is a number, not a run
        for name in ("skynomad", "eager-failover"):
            result = window["results"][name]
            timeline = result["timeline"]
            segments += len(timeline)
            billed = sum(s["usd"] for s in timeline)
            assert billed + result["egress_usd"] + result["probe_usd"] == pytest.approx(result["cost_usd"], abs=1e-5)
            hours = [(s["start_hours"], s["end_hours"]) for s in timeline]
            assert all(a < b for a, b in hours)
            assert all(b1 <= a2 + 1e-9 for (_, b1), (a2, _) in itertools.pairwise(hours))
            assert {s["ended_by"] for s in timeline} <= {"preempted", "moved", "idle", "finished", "deadline"}
            if result["met_deadline"]:
                assert timeline[-1]["ended_by"] == "finished"
    assert segments > 0


def test_timeline_without_output_is_refused_before_running(tmp_path, capsys):
    trace = write_trace(tmp_path, trace_lines())
    code, out, err = run(["evaluate", "--trace", str(trace), *JOB, "--timeline"], capsys)
    assert code == 2 and "--timeline" in err and "--output" in err
    assert out == ""  # nothing ran


def test_output_in_a_missing_directory_is_refused_before_running(tmp_path, capsys):
    trace = write_trace(tmp_path, trace_lines())
    argv = ["evaluate", "--trace", str(trace), *JOB, "--output", str(tmp_path / "no" / "such" / "r.json")]
    code, out, err = run(argv, capsys)
    assert code == 2 and "--output" in err
    assert out == ""  # no table printed: nothing ran


def test_unsupported_plot_format_is_refused_before_anything_is_written(tmp_path, capsys):
    trace = write_trace(tmp_path, trace_lines())
    argv = [
        "evaluate",
        "--trace",
        str(trace),
        *JOB,
        "--policies",
        "on-demand",
        "--output",
        str(tmp_path / "out.json"),
        "--plot",
        str(tmp_path / "out.xyz"),
    ]
    code, out, err = run(argv, capsys)
    assert code == 2 and "xyz" in err
    assert not (tmp_path / "out.json").exists()
    assert out == ""  # refused before running: no table


def test_output_that_is_a_directory_is_a_usage_error(tmp_path, capsys):
    trace = write_trace(tmp_path, trace_lines())
    (tmp_path / "results").mkdir()
    argv = ["evaluate", "--trace", str(trace), *JOB, "--policies", "on-demand", "--output", str(tmp_path / "results")]
    try:
        code, _, err = run(argv, capsys)
    except IsADirectoryError as exc:
        pytest.fail(f"uncaught {exc!r}")
    assert code == 2 and "--output" in err


def test_missing_required_flag_is_a_usage_error(tmp_path, capsys):
    code, _, err = run(["evaluate", "--work-hours", "1", "--deadline-hours", "2"], capsys)
    assert code == 2 and "--trace" in err


def test_empty_trace_file_is_a_usage_error(tmp_path, capsys):
    trace = tmp_path / "empty.csv"
    trace.write_text("")
    code, _, err = run(evaluate(trace, tmp_path), capsys)
    assert code == 2 and "Traceback" not in err
    assert_nothing_written(tmp_path)


def test_empty_trace_file_error_names_the_file(tmp_path, capsys):
    trace = tmp_path / "empty.csv"
    trace.write_text("")
    _, _, err = run(evaluate(trace, tmp_path), capsys)
    assert str(trace) in err, err


def test_infeasible_job_is_evaluated_as_misses_with_strict_json(tmp_path, capsys):
    """T < P + d: no plan can make it. evaluate may refuse (exit 2) or report every window as a miss,
    but it must not crash, and any JSON it writes must be valid JSON (no Infinity/NaN)."""
    trace = write_trace(tmp_path, trace_lines())
    argv = [
        "evaluate",
        "--trace",
        str(trace),
        "--work-hours",
        "1.0",
        "--deadline-hours",
        "1.1",
        "--cold-start-hours",
        "0.2",
        "--window-step-hours",
        "2",
        "--output",
        str(tmp_path / "out.json"),
        "--plot",
        str(tmp_path / "out.png"),
    ]
    code, _, err = run(argv, capsys)
    assert "Traceback" not in err
    if code == 2:
        assert "deadline" in err
        assert_nothing_written(tmp_path)
        return
    assert code == 0, err
    report = strict_json((tmp_path / "out.json").read_text())
    for name, row in report["summary"].items():
        assert row["misses"] == len(report["windows"]), name
    for window in report["windows"]:
        assert window["results"]["optimal"]["met_deadline"] is False


def test_zone_first_observed_after_a_window_start_gives_finite_costs(tmp_path, capsys):
    lines = trace_lines()
    late = [lines[0]] + [
        line for line in lines[1:] if not (line.split(",")[3] == "europe-west1-c" and line < "2025-10-04T02:00:00Z")
    ]
    trace = write_trace(tmp_path, late)
    code, _, err = run(evaluate(trace, tmp_path), capsys)
    assert code == 0, err
    report = strict_json((tmp_path / "out.json").read_text())
    for window in report["windows"]:
        for name, result in window["results"].items():
            assert math.isfinite(result["cost_usd"]), (window["start"], name, result)
            assert result["met_deadline"], (window["start"], name)


def test_bundled_gcp_trace_two_zones(tmp_path, capsys):
    from importlib import resources

    trace = resources.files("airflow_provider_skynomad") / "data" / "gcp-h100-2025-first-week.csv.gz"
    code, out, err = run(
        [
            "evaluate",
            "--trace",
            str(trace),
            "--zones",
            "us-central1-a,europe-west1-c",
            "--work-hours",
            "4",
            "--deadline-hours",
            "5",
            "--max-windows",
            "2",
            "--output",
            str(tmp_path / "out.json"),
        ],
        capsys,
    )
    assert code == 0, err
    report = strict_json((tmp_path / "out.json").read_text())
    assert report["trace"]["step_hours"] == pytest.approx(1 / 6)
    assert len(report["windows"]) == 2
    for window in report["windows"]:
        optimum = window["results"]["optimal"]["cost_usd"]
        for name, result in window["results"].items():
            assert result["met_deadline"], name
            assert optimum <= result["cost_usd"] + 1e-6, name


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--speed", "0"], "--speed must be > 0"),
        (["--work-hours", "-1"], "--work-hours must be > 0"),
        (["--trace-start-hours", "-2"], "--trace-start-hours"),
        (["--speed", "inf"], "not a finite number"),
    ],
)
def test_demo_refuses_bad_flags_before_touching_its_directory(tmp_path, capsys, flags, needle):
    workdir = tmp_path / "demo"
    workdir.mkdir()
    (workdir / "keep.txt").write_text("an earlier run")
    code, _, err = run(["demo", "--dir", str(workdir), *flags], capsys)
    assert code == 2 and needle in err, err
    assert (workdir / "keep.txt").read_text() == "an earlier run"  # nothing recreated, nothing lost
