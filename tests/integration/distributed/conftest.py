"""The distributed harness's modules (cluster, faults, invariants) import each other by plain name,
as the benchmark imports them: this folder goes on sys.path. Services a cluster needs (Redis on
127.0.0.1:6379, PostgreSQL's server binaries for a private server) are checked here: missing, the
test skips, or fails in CI (CI=true)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _missing() -> str | None:
    from cluster import PG_BIN

    if PG_BIN is None or not (PG_BIN / "initdb").exists():
        return "PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "runuser (to run the private PostgreSQL server as the postgres user)"
    try:
        import redis

        redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=3).ping()
    except Exception as exc:  # noqa: BLE001 - any failure means no usable broker
        return f"Redis at 127.0.0.1:6379 ({exc})"
    return None


@pytest.fixture
def cluster_services():
    missing = _missing()
    if missing:
        if _in_ci():
            pytest.fail(f"the distributed test needs {missing} in CI")
        pytest.skip(f"needs {missing}")
