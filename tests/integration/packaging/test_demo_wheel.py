"""The whole `skynomad demo` run from a wheel installed outside the repository (a minute or more: it
builds the wheel, makes a venv, migrates Airflow's database and runs the fine-tune DAG)."""

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
from airflow_provider_skynomad.cli import demo

ROOT = Path(__file__).resolve().parents[3]

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
        [str(venv / "bin" / "skynomad"), "demo", "--work-hours", "1", "--speed", "1200"],
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
