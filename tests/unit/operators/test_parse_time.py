"""Parsing the example DAGs looks up no connection and opens no database, and is fast beside load.

The dag-processor parses every DAG file under a 30 s import timeout, again and again. A parse
that asks Airflow for a connection is a round trip to its metadata database (on a busy box with
SQLite, seconds or a "database is locked"), and one that reads the market table waits on the
market database. So the `skynomad_default` connection here points at a PostgreSQL that accepts
and never answers (a listening socket that counts who connects): a parse that tried it would hang
there. Each parse runs in a fresh interpreter, as the dag-processor's does, with Airflow's
connection lookups replaced by counters.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_DAGS = ROOT / "example_dags"

PARSE = r"""
import json, sys, time
from airflow.sdk.bases.hook import BaseHook
from airflow.sdk.definitions.connection import Connection

lookups = []

def refuse(name):
    def looked_up(*args, **kwargs):
        lookups.append(name)
        raise RuntimeError(f"{name} at parse time")
    return looked_up

BaseHook.get_connection = classmethod(refuse("BaseHook.get_connection"))
BaseHook.aget_connection = classmethod(refuse("BaseHook.aget_connection"))
Connection.get = classmethod(refuse("Connection.get"))

from airflow.dag_processing.dagbag import DagBag

started = time.monotonic()
bag = DagBag(dag_folder=sys.argv[1], safe_mode=False, load_op_links=False)
elapsed = time.monotonic() - started
print(json.dumps({
    "dags": sorted(bag.dag_ids),
    "errors": {k: str(v)[-2000:] for k, v in bag.import_errors.items()},
    "lookups": lookups,
    "seconds": elapsed,
}))
"""


@pytest.fixture
def silent_database():
    """A localhost port that accepts connections and never answers; yields (port, connections seen)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    seen: list = []

    def accept():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            seen.append(conn)  # held open, never answered

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    server.close()
    for conn in seen:
        conn.close()


def test_the_example_dags_parse_fast_and_try_no_connection_and_no_database(silent_database, tmp_path):
    port, seen = silent_database
    home = tmp_path / "skynomad-home"
    connection = {
        "conn_type": "skynomad",
        "host": "127.0.0.1",
        "port": port,
        "login": "skynomad",
        "schema": "market",
        "extra": {"cloud": "simulated", "speed": 300, "cloud_options": {"trace_start": 90}},
    }
    env = {
        **os.environ,
        "AIRFLOW_CONN_SKYNOMAD_DEFAULT": json.dumps(connection),
        "SKYNOMAD_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", PARSE, str(EXAMPLE_DAGS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["errors"] == {}
    assert report["dags"] == ["skynomad_existing_pipeline", "skynomad_fine_tune", "skynomad_probe"]
    assert report["lookups"] == []  # no connection asked of Airflow
    assert seen == []  # nobody knocked at the market database
    assert not home.exists() or not any(home.rglob("*.db"))  # nor opened the embedded SQLite one
    # Airflow gives a file 30 s (dagbag_import_timeout); three files take a fraction of it even beside load.
    print(f"parsed the example DAGs in {report['seconds']:.2f} s")
    assert report["seconds"] < 10.0, report["seconds"]
