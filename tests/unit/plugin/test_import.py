"""Every Airflow process loads plugins; only the api-server serves the pages: loading the plugin stays light."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_loading_the_plugin_imports_neither_the_page_code_nor_the_api_servers_security():
    probe = (
        "import sys, json; import airflow_provider_skynomad.plugin; "
        "print(json.dumps([m for m in ('sklearn', 'pandas', 'airflow.api_fastapi.core_api.security', "
        "'airflow_provider_skynomad.plugin.pages', 'airflow_provider_skynomad.plugin.overview') if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


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
