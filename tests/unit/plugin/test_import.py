"""Every Airflow process loads plugins; only the api-server serves the pages: loading the plugin stays light.

That a built wheel ships the page templates: tests/integration/packaging/test_wheel_contents.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_loading_the_plugin_imports_neither_the_page_code_nor_the_api_servers_security():
    modules = (
        "sklearn",
        "pandas",
        "airflow.api_fastapi.core_api.security",
        "airflow_provider_skynomad.plugin.pages",
        "airflow_provider_skynomad.plugin.overview",
    )
    assert loaded_after("import airflow_provider_skynomad.plugin", modules) == []


def test_the_jobs_dashboard_and_job_pages_do_not_load_the_forecasters():
    """A cold api-server's first dashboard load imported sklearn and scipy (the markets page's forecasters)
    through the connection lookup and the page module: 1,465 modules, 36.9 s on a busy 2-core box. The job
    pages' code (what a dashboard or job page request imports) leaves them to the markets page."""
    imports = (
        "import airflow_provider_skynomad.plugin; "
        "from airflow_provider_skynomad.plugin import app, connections, facts, jobs, pages; "
        "import airflow_provider_skynomad.jobs.live, airflow_provider_skynomad.jobs.table"
    )
    modules = (
        "sklearn",
        "scipy",
        "airflow_provider_skynomad.forecasts",
        "airflow_provider_skynomad.plugin.overview",
        "airflow_provider_skynomad.plugin.markets",
    )
    assert loaded_after(imports, modules) == []


def loaded_after(imports: str, modules: tuple[str, ...]) -> list[str]:
    """Which of `modules` a fresh interpreter has loaded once it ran `imports`."""
    probe = f"import sys, json; {imports}; print(json.dumps([m for m in {modules!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
