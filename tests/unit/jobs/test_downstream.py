"""The downstream reserve's "auto" (jobs/downstream.py): the median, over recent successful runs, of the
longest chain of task durations after the job."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from airflow_provider_skynomad.jobs.downstream import downstream_median_seconds, longest_path_seconds


def dag() -> SimpleNamespace:
    """train → (evaluate → report, export): the longest path after train is the longer of the two branches."""
    report = SimpleNamespace(task_id="report", downstream_list=[])
    evaluate = SimpleNamespace(task_id="evaluate", downstream_list=[report])
    export = SimpleNamespace(task_id="export", downstream_list=[])
    return SimpleNamespace(task_id="train", dag_id="d", downstream_list=[evaluate, export])


def test_the_longest_path_excludes_the_task_itself_and_takes_the_longer_branch():
    train = dag()
    assert longest_path_seconds(train, {"train": 999.0, "evaluate": 30.0, "report": 20.0, "export": 40.0}) == 50.0
    assert longest_path_seconds(train, {"export": 60.0}) == 60.0  # a task without a duration counts 0
    assert longest_path_seconds(SimpleNamespace(task_id="x", downstream_list=[]), {"x": 5.0}) == 0.0


class Ti:
    """A task instance whose previous successful run (one, with no logical date) had these breadcrumbs."""

    def __init__(self, crumbs=None, run=True, fails=False):
        self.crumbs, self.run, self.fails = crumbs or [], run, fails

    def get_previous_dagrun(self, state):
        if self.fails:
            raise RuntimeError("the API server did not answer")
        return SimpleNamespace(run_id="r1", logical_date=None) if self.run else None

    def get_task_breadcrumbs(self, dag_id, run_id):
        return self.crumbs


def test_the_reserve_is_read_from_the_successful_tasks_of_the_previous_run():
    crumbs = [
        {"task_id": "evaluate", "duration": 30.0, "state": "success"},
        {"task_id": "report", "duration": 20.0, "state": "success"},
        {"task_id": "export", "duration": 90.0, "state": "failed"},  # a failed try says nothing of its length
    ]
    assert downstream_median_seconds(dag(), {"ti": Ti(crumbs)}, logging.getLogger("t")) == 50.0


def test_a_job_with_nothing_after_it_reserves_nothing():
    lone = SimpleNamespace(task_id="train", dag_id="d", downstream_list=[])
    assert downstream_median_seconds(lone, {"ti": Ti(fails=True)}, logging.getLogger("t")) == 0.0


@pytest.mark.parametrize(("ti", "said"), [(Ti(run=False), "no earlier successful run"), (Ti(fails=True), "could not")])
def test_no_run_to_learn_from_or_no_answer_reserves_nothing_and_says_so(ti, said, caplog):
    with caplog.at_level(logging.WARNING, logger="t"):
        assert downstream_median_seconds(dag(), {"ti": ti}, logging.getLogger("t")) == 0.0
    assert said in caplog.text
