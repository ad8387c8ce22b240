"""Secrets stay secret: a connection seeded with marker secrets, one whole `dag.test()` run, then a
grep of everything the run produced for the markers.

The `skynomad` connection carries a market URL with a password (PostgreSQL, trust auth, so any
password works), its own password field, and tokens and keys in its extra that nothing uses; an
`aws_default` connection carries AWS keys and a session token. After the run, no marker may be in
the task's and the trigger's log lines (dag.test() prints both), in XCom, the task state store or
anything else in Airflow's metadata database and log folder, in the market table, in the simulated
cloud's state (its database, every group's launch record, environment and workload log), in the
job's checkpoints, or in what the `skynomad` CLI prints, including its error messages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, make_url, text

from tests.integration.faults.conftest import HISTORY_HOURS, SPEED, attach_cloud, run_job, synthetic_trace, write_trace
from tests.support.airflow_env import airflow_db, skynomad_home  # noqa: F401 - fixtures

MARKERS = {
    "market_password": "SNSECRETmarketpw7f3a",
    "connection_password": "SNSECRETconnpw91c2",
    "extra_token": "SNSECRETapitoken4d8e",
    "extra_aws_secret": "SNSECRETextraaws55b1",
    "aws_access_key": "AKIASNSECRET0KEY3A9",
    "aws_secret_key": "SNSECRETawssecret6e07",
    "aws_session_token": "SNSECRETsession2b6f",
}


@pytest.fixture
def seeded(airflow_db, skynomad_home, postgres_url, tmp_path, monkeypatch):  # noqa: F811
    market_url = make_url(postgres_url).set(password=MARKERS["market_password"]).render_as_string(hide_password=False)
    frame = synthetic_trace()
    trace = write_trace(frame, tmp_path / "trace.csv")
    skynomad = {
        "conn_type": "skynomad",
        "login": "skynomad",
        "password": MARKERS["connection_password"],
        "extra": {
            "cloud": "simulated",
            "speed": SPEED,
            "trace_path": str(trace),
            "cloud_options": {"trace_start": HISTORY_HOURS},
            "market_url": market_url,
            "api_token": MARKERS["extra_token"],
            "aws_secret_access_key": MARKERS["extra_aws_secret"],
        },
    }
    aws = {
        "conn_type": "aws",
        "login": MARKERS["aws_access_key"],
        "password": MARKERS["aws_secret_key"],
        "extra": {"aws_session_token": MARKERS["aws_session_token"], "region_name": "us-east-1"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SKYNOMAD_DEFAULT", json.dumps(skynomad))
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(aws))
    from airflow_provider_skynomad.market.store.table import MarketTable

    table = MarketTable(market_url)
    table.create()
    table.append(frame)  # the probe DAG's rows, as it would have written them
    table.close()
    return market_url


def leaks(blob: bytes | str, where: str) -> list[str]:
    data = blob.encode("utf-8", "replace") if isinstance(blob, str) else blob
    return [f"{name} in {where}" for name, marker in MARKERS.items() if marker.encode() in data]


def files_under(root: Path) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            try:
                found += leaks(path.read_bytes(), str(path))
            except OSError:
                continue
    return found


def database_rows(url: str) -> list[str]:
    engine = create_engine(url)
    found = []
    try:
        with engine.connect() as conn:
            for name in inspect(conn).get_table_names():
                rows = conn.execute(text(f'SELECT * FROM "{name}"')).fetchall()
                found += leaks("\n".join(repr(tuple(r)) for r in rows), f"table {name}")
    finally:
        engine.dispose()
    return found


def cli_at_once(*commands: list[str]) -> list[str]:
    """What each `skynomad` command printed (stdout + stderr), in order. Each runs in its own fresh
    interpreter, as a user runs it; they run side by side, as most of each one's time is its imports."""
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "airflow_provider_skynomad.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        for args in commands
    ]
    try:
        return ["".join(run.communicate(timeout=120)) for run in runs]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait()


def test_no_marker_secret_in_anything_a_run_produced(seeded, skynomad_home, airflow_db, capfd):  # noqa: F811
    outcome, state = run_job(work_hours=0.5, capfd=capfd)  # how much work it does is not the point
    out = capfd.readouterr().out
    assert state == "success", (outcome, out[-3000:])
    assert "launched" in out and "finished" in out  # the logs were captured, and say what happened
    found = leaks(out, "the task and trigger logs")
    found += files_under(airflow_db)  # metadata DB (XCom, task state store, rendered fields), logs
    found += files_under(skynomad_home)  # the simulated cloud's state, groups' env and logs, checkpoints
    found += database_rows(seeded)  # the market table and its neighbours
    assert attach_cloud(skynomad_home).launches(outcome["job_id"])  # there was something to look at
    unreachable = make_url(seeded).set(port=1).render_as_string(hide_password=False)
    commands = (
        ["market", "show", "--url", seeded],
        ["market", "spend", "--url", seeded],
        ["market", "show", "--url", unreachable],  # an error message names the database, not its password
        ["cleanup", "--dry-run"],
    )
    for args, printed in zip(commands, cli_at_once(*commands), strict=True):
        assert printed.strip(), args
        found += leaks(printed, f"skynomad {' '.join(args[:2])} output")
    assert not found, found
