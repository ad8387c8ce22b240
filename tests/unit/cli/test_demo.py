"""`skynomad demo`: every flag checked before anything is deleted, only its own directory cleared,
and the whole demo run from a wheel installed outside the repository."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

from airflow_provider_skynomad import __version__
from airflow_provider_skynomad.cli import demo, main

ROOT = Path(__file__).resolve().parents[3]


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


# --------------------------------------------------------------------------- from a wheel

# Records every file the demo's processes open or list under the checkout, except the environment
# the dependencies come from: the wheel's run must need nothing from the repository.
SITECUSTOMIZE = """
import os, sys
_root = os.environ.get("SKYNOMAD_TEST_CHECKOUT")
_allowed = os.environ.get("SKYNOMAD_TEST_ALLOWED", "")
_log = os.environ.get("SKYNOMAD_TEST_OPEN_LOG")
_busy = []

def _hook(event, args):
    if _busy or event not in ("open", "os.listdir", "os.scandir", "sqlite3.connect") or not args:
        return
    path = args[0]
    if not isinstance(path, (str, bytes, os.PathLike)):
        return
    path = os.path.abspath(os.fsdecode(path))
    if path.startswith(_root + os.sep) and not path.startswith(_allowed + os.sep):
        _busy.append(1)
        try:
            with open(_log, "a") as f:
                f.write(f"{os.getpid()} {event} {path}\\n")
        finally:
            _busy.pop()

if _root and _log:
    sys.addaudithook(_hook)
"""


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


@pytest.mark.slow
def test_demo_runs_from_a_wheel_outside_the_repository(tmp_path):
    """Build the wheel, install it in a fresh venv that borrows only the dependencies, run the demo there."""
    started = time.monotonic()
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w",
         str(wheels), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("airflow_provider_skynomad-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        files = set(archive.namelist())
        metadata = archive.read(f"airflow_provider_skynomad-{__version__}.dist-info/METADATA").decode()
    assert f"Version: {__version__}" in metadata.splitlines()
    assert {
        "airflow_provider_skynomad/example_dags/skynomad_fine_tune.py",
        f"airflow_provider_skynomad/data/{demo.TRACE}",
    } <= files
    hard = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert not [line for line in hard if "providers-amazon" in line or "providers-google" in line], hard
    assert not [f for f in files if "__pycache__" in f or f.startswith(("tests/", "example_dags/"))]

    # A venv of the base interpreter, the wheel installed into it, then the dependencies of this
    # environment made visible through a .pth file (a plain path: this environment's own .pth files,
    # such as the editable install's, are not processed, so the checkout stays off sys.path).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(_python(venv)), "install", "--no-deps", "--no-index", "-q",
         str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    site = Path(
        subprocess.run(
            [str(_python(venv)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    dependencies = sysconfig.get_paths()["purelib"]
    (site / "_skynomad_test_dependencies.pth").write_text(dependencies + "\n")
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    log = tmp_path / "opened-in-checkout.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(
        SKYNOMAD_TEST_CHECKOUT=str(ROOT),
        SKYNOMAD_TEST_ALLOWED=str(Path(sys.prefix).resolve()),
        SKYNOMAD_TEST_OPEN_LOG=str(log),
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    )
    probe = (
        "import importlib.metadata as m, airflow_provider_skynomad as p; "
        "from airflow_provider_skynomad.get_provider_info import get_provider_info as g; "
        "print(p.__file__); print(m.version('airflow-provider-skynomad')); print(g()['versions'][0])"
    )
    where = subprocess.run(
        [str(_python(venv)), "-c", probe], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )
    assert where.returncode == 0, where.stderr[-3000:]
    module_file, installed_version, provider_version = where.stdout.split()
    assert Path(module_file).is_relative_to(site)
    assert installed_version == provider_version == __version__

    # the detector works: reading the checkout's README from that venv is recorded
    peek = f"open({str(ROOT / 'README.md')!r}).read()"
    subprocess.run([str(_python(venv)), "-c", peek], cwd=cwd, env=env, check=True, timeout=120)
    assert str(ROOT / "README.md") in log.read_text()
    log.unlink()

    demo_started = time.monotonic()
    done = subprocess.run(
        [str(venv / "bin" / "skynomad"), "demo", "--work-hours", "1", "--speed", "600"],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=300,
    )  # fmt: skip
    demo_seconds = time.monotonic() - demo_started
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert f"SkyNomad demo in {cwd / '.skynomad' / 'demo'}" in done.stdout
    assert "skynomad_probe: success" in done.stdout and "skynomad_fine_tune: success" in done.stdout
    assert "deadline 10.00 h: met" in done.stdout
    assert "final model bit-identical to an uninterrupted run: True" in done.stdout
    assert (cwd / ".skynomad" / "demo" / demo.MARKER).is_file()
    opened = log.read_text() if log.exists() else ""
    assert opened == "", f"the demo read from the checkout:\n{opened[:3000]}"
    print(f"wheel demo: {demo_seconds:.1f} s (whole test {time.monotonic() - started:.1f} s)")
