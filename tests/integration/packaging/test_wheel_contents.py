"""A wheel built from the checkout (`pip wheel`) ships every page template of the plugin: the pages are
files beside the code, and a wheel without them serves no page at all. Loading the plugin stays light:
tests/unit/plugin/test_import.py."""

from __future__ import annotations

import subprocess
import sys


def test_the_wheel_ships_every_page_template(tmp_path):
    """The pages are templates/ files beside the code: a wheel without them serves no page at all."""
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    templates = root / "airflow_provider_skynomad" / "plugin" / "templates"
    wanted = {f"airflow_provider_skynomad/plugin/templates/{p.name}" for p in templates.iterdir()}
    assert {"base.html", "job.html", "markets.html", "dashboard.html", "charts.html"} <= {
        p.name for p in templates.iterdir()
    }
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(root),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    assert wanted <= set(zipfile.ZipFile(wheel).namelist())
