"""Every Airflow process loads plugins; only the api-server serves the pages: loading the plugin stays light.

That a built wheel ships the page templates: tests/integration/packaging/test_wheel_contents.py."""

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
