"""`skynomad demo`: every flag checked before anything is deleted, only its own directory cleared.
The whole demo run from a wheel installed outside the repository: tests/integration/packaging/."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from airflow_provider_skynomad.cli import demo, main


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def no_airflow(monkeypatch):
    """Fail the test if the demo gets as far as starting `airflow db migrate` or its child."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"the demo started {args[0]!r} although its input was refused")

    monkeypatch.setattr(demo.subprocess, "run", refuse)


# --------------------------------------------------------------------------- refused, untouched


def test_a_directory_it_did_not_make_is_refused_untouched(tmp_path, capsys, no_airflow):
    workdir = tmp_path / "mine"
    (workdir / "sub").mkdir(parents=True)
    (workdir / "notes.txt").write_text("my notes")
    (workdir / "sub" / "data.bin").write_bytes(b"\x00\x01")
    before = snapshot(workdir)
    code, out, err = run(["demo", "--dir", str(workdir)], capsys)
    assert code == 2, err
    assert f"skynomad demo: error: --dir {workdir}: not empty and not made by `skynomad demo`" in err
    assert demo.MARKER in err and "refusing to clear it" in err
    assert snapshot(workdir) == before and not (workdir / demo.MARKER).exists()


def test_a_file_given_as_dir_is_refused(tmp_path, capsys, no_airflow):
    target = tmp_path / "a-file"
    target.write_text("keep")
    code, _, err = run(["demo", "--dir", str(target)], capsys)
    assert code == 2 and "exists and is not a directory" in err, err
    assert target.read_text() == "keep"


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--work-hours", "9.8"], "--work-hours must be < 9.8"),
        (["--work-hours", "40"], "fine-tune DAG's deadline is 10 h"),
        (["--trace-start-hours", "175"], "--trace-start-hours must be ≤ 169.667"),
        (["--trace-start-hours", "1e6"], "the bundled trace gcp-h100-2025-first-week.csv.gz covers 179.667 h"),
        (["--speed", "-5"], "--speed must be > 0"),
        (["--speed", "nan"], "not a finite number"),
        (["--work-hours", "abc"], "invalid number value"),
    ],
)
def test_bad_flags_leave_an_earlier_demo_directory_untouched(tmp_path, capsys, no_airflow, flags, needle):
    workdir = tmp_path / "demo"
    workdir.mkdir()
    (workdir / demo.MARKER).write_text("made by an earlier run")
    (workdir / "result.txt").write_text("an earlier run's output")
    before = snapshot(workdir)
    code, _, err = run(["demo", "--dir", str(workdir), *flags], capsys)
    assert code == 2 and needle in err, err
    assert snapshot(workdir) == before


def test_its_own_directory_is_cleared_and_marked_before_airflow_starts(tmp_path, capsys, monkeypatch):
    workdir = tmp_path / "demo"
    (workdir / "airflow" / "logs").mkdir(parents=True)
    (workdir / demo.MARKER).write_text("made by an earlier run")
    (workdir / "airflow" / "logs" / "old.log").write_text("old")
    outside = tmp_path / "outside.txt"
    outside.write_text("not the demo's")
    (workdir / "link").symlink_to(outside)
    started = []

    def fake_run(argv, **kwargs):
        started.append(argv)
        assert sorted(os.listdir(workdir)) == sorted([demo.MARKER, "airflow"])  # cleared, marked, then run
        assert kwargs["env"]["AIRFLOW_HOME"] == str(workdir / "airflow")
        return subprocess.CompletedProcess(argv, 1, "", "migrate failed on purpose")

    monkeypatch.setattr(demo.subprocess, "run", fake_run)
    code, _, err = run(["demo", "--dir", str(workdir), "--work-hours", "1"], capsys)
    assert code == 1 and "airflow db migrate` failed" in err
    assert started and started[0][1:] == ["-m", "airflow", "db", "migrate"]
    assert outside.read_text() == "not the demo's"  # a symlink in its directory is removed, not followed
    assert (workdir / demo.MARKER).is_file()


@pytest.mark.parametrize("exists", [False, True], ids=["new", "empty"])
def test_a_new_or_empty_directory_is_used_and_marked(tmp_path, exists):
    workdir = tmp_path / "a" / "b"
    if exists:
        workdir.mkdir(parents=True)
    demo.check_workdir(workdir)
    demo.recreate_workdir(workdir)
    assert sorted(os.listdir(workdir)) == sorted([demo.MARKER, "airflow"])
    demo.check_workdir(workdir)  # and the next run may clear it


def test_a_directory_that_cannot_be_created_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(demo.UsageError, match="cannot be created"):
        demo.check_workdir(tmp_path / "file" / "demo")
