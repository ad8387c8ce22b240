"""A job on a busy box keeps a deadline on-demand could keep: the README recipe's missed 9.2 h run.

The recipe (a CPU burner beside `airflow standalone`, the simulated cloud at 300x) ran 9.2 h of
work against a 10 h deadline: the worker launched spot with 0.6 h of slack, the controller's
first look came 0.48 h later (the hand-off to the triggerer), the on-demand rescue's cold start
took 0.27 h instead of the declared 0.2, and the workload's final write took 0.15 h more: the
job finished at 10.16 h. Here the same delays are injected on the fake cloud: the worker's own
start takes a busy box's time, the first look comes as late, the controller's looks run a lag
late, every group warms up longer than declared and the workload writes its result after its
last checkpoint.
"""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.planner.actions import Mode
from tests.support.paced_workload import STEP, PacedWorkload

WORKER_START = 0.35  # cloud hours the worker takes from its start to its first decision (~4 s at 300x)
HAND_OFF = 0.48  # the controller's first look, after the worker's decision
LAG = 0.19  # how late the controller's looks act
FIRST_WARMUP = 0.5  # the worker's group: its launch and start-up on the busy box (no checkpoint at 0.48 h)
COLD_START = 0.27  # every later group's real warm-up (declared: 0.2 h)
RESULT_WRITE = 0.15  # from the last checkpoint to the workload's exit


@pytest.fixture
def busy_worker(cloud, monkeypatch):
    """The worker's own start takes `WORKER_START` of cloud time (reading the markets on a busy box)."""
    from airflow_provider_skynomad.jobs import worker

    select = worker.select_markets

    def slow(*args, **kwargs):
        cloud.hours += WORKER_START
        return select(*args, **kwargs)

    monkeypatch.setattr(worker, "select_markets", slow)


class BusyWorkload(PacedWorkload):
    """The paced workload, whose first group warms up for `FIRST_WARMUP` and every later one for `COLD_START`."""

    def work(self, group) -> None:
        if group is not None and group.client_token != self.token:
            self.cold_start = COLD_START
        super().work(group)


def _drive(job, cloud):
    """The controller as the trigger steps it on a busy box; (outcome, record)."""
    start = cloud.hours
    workload = BusyWorkload(cloud, 9.2, FIRST_WARMUP, finish_hours=RESULT_WRITE)
    workload.t = workload.started = start
    controller = job.controller()
    workload.step, late = HAND_OFF, 0.0
    while workload.t < start + 12.0:
        workload.tick()
        workload.work(controller.steps.record.group)
        look = controller.step(late, late * 12.0)
        if look.outcome is not None:
            return look.outcome, job.record()
        late = LAG
        # The trigger looks again sooner when the workload should end before the next step.
        end = controller.watch.expected_end_hours
        until_end = STEP if end is None else end - (workload.t - start)
        workload.step = min(STEP, max(STEP / 10.0, until_end))
    raise AssertionError("the job never ended")


def test_a_thin_slack_job_on_a_busy_box_starts_on_demand_and_meets_its_deadline(started, cloud, busy_worker):
    job = started(work_hours=9.2, deadline_hours=10.0)
    first = cloud.launches[0]
    assert not first.spot  # too thin for spot to gain anything after the hand-off: on-demand at once
    record = job.record()
    assert record.on_safety_net and record.state.running.mode is Mode.ON_DEMAND
    pressure = [n for n in record.timeline if n["event"] == "deadline pressure"]
    assert [n.get("first_launch") for n in pressure] == [True]  # said as a start on on-demand, not a move
    outcome, record = _drive(job, cloud)
    assert outcome.kind.value == "finished" and record.summary["deadline_met"], record.summary
    assert len(cloud.launches) == 1


def test_a_job_with_room_for_spot_still_starts_on_spot_on_a_busy_box(started, cloud, busy_worker):
    job = started(work_hours=8.0, deadline_hours=10.0)
    assert cloud.launches[0].spot and not job.record().on_safety_net
