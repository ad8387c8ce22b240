"""Under Airflow's task runner a job that cannot start ends in one ERROR line, with no traceback and
no retry (operators/skynomad.py: `Stop`, `StopIsFinal`).

Airflow 3.3's task runner logs every exception with its traceback ("Task failed with exception"),
`AirflowFailException` included; only `SystemExit` is one line ("Task exited"). Before, the README's
standalone recipe's first runs ended in a traceback for a stale market table.
"""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest
from airflow.sdk import RetryPolicy

from airflow_provider_skynomad.cli.demo import run_dag_test
from airflow_provider_skynomad.operators.skynomad import Stop, StopIsFinal
from tests.support.fakes import FakeCloud

from .conftest import DAGS_FOLDER, seed_market


@pytest.fixture
def stale_cloud(airflow_db, skynomad_home, gcp_frame, monkeypatch):
    now = gcp_frame["observed_at"].min() + pd.Timedelta(hours=60)
    seed_market(gcp_frame, until=now + pd.Timedelta(seconds=1))
    fake = FakeCloud(now, hours=5.0)  # the newest row is 5 h old: over max_market_age (2 h)
    monkeypatch.setattr("airflow_provider_skynomad.operators.skynomad.make_cloud", lambda config: fake)
    monkeypatch.setattr("airflow_provider_skynomad.hooks.skynomad.make_cloud", lambda config: fake)
    return fake


def test_a_stale_market_table_fails_the_task_in_one_error_line_without_a_traceback(stale_cloud, capfd):
    spec = importlib.util.spec_from_file_location("test_dag_one_line", DAGS_FOLDER / "skynomad_one_line.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    state, run_id = run_dag_test(module.dag)
    out = capfd.readouterr().out
    assert state == "failed", out[-3000:]
    assert "new_state=failed" in out and "up_for_retry" not in out, out[-3000:]  # no retry spent on it
    errors = [line for line in out.splitlines() if "the market table is stale" in line]
    assert len(errors) == 1 and "run the skynomad_probe DAG" in errors[0], out[-3000:]
    assert "Traceback" not in out and "Task failed with exception" not in out, out[-3000:]
    assert "Task exited" in out  # Airflow's own line for it
    assert stale_cloud.launches == []


def test_a_stop_is_not_retried_and_other_failures_follow_the_tasks_own_policy():
    class Always(RetryPolicy):  # any user policy
        def evaluate(self, exception, try_number, max_tries, context=None):
            return "theirs"

    policy = StopIsFinal(Always())
    assert policy.evaluate(Stop(1), 1, 3).action.value == "fail"
    assert policy.evaluate(RuntimeError("cloud"), 1, 3) == "theirs"
    assert StopIsFinal().evaluate(RuntimeError("cloud"), 1, 3).action.value == "default"
