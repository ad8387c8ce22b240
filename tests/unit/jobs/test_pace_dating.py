"""A workload at its declared pace is never said to run more than 10 % off (issue 32, "One set of
numbers"): checkpoints written between looks, and a look that comes late, date nothing by the look."""

from __future__ import annotations

import math

from airflow_provider_skynomad.clouds.base import GroupStatus

STEP = 1.0 / 6.0
CHECKPOINT_EVERY = 0.25  # hours of work between the workload's checkpoints
COLD_START = 0.2


def _drive(job, cloud, real_work_hours: float, late: set[int], until: float = 8.0):
    """Step the controller; the workload checkpoints every CHECKPOINT_EVERY hours of work, and the
    looks numbered in `late` are skipped (a busy triggerer), so the next one sees an old checkpoint."""
    controller = job.controller()
    done, t, n = 0.0, 0.0, 0
    token, started = cloud.launches[-1].client_token, 0.0
    while t < until:
        t += STEP
        n += 1
        group = controller.runner.record.group
        if group is not None and group.client_token != token:
            token, started = group.client_token, t - STEP
        if group is not None and cloud.status[token] is GroupStatus.RUNNING:
            done += max(0.0, t - max(started + COLD_START, t - STEP))
        written = math.floor(done / CHECKPOINT_EVERY + 1e-9) * CHECKPOINT_EVERY
        cloud.hours, cloud.progress_fraction = t, min(1.0, written / real_work_hours)
        if done >= real_work_hours:
            cloud.status[token] = GroupStatus.SUCCEEDED
        if n in late:
            continue
        outcome = controller.step().outcome
        if outcome is not None:
            return outcome, job.record()
    raise AssertionError("the job never ended")


def test_a_workload_at_its_declared_pace_is_never_said_more_than_ten_percent_off(started, cloud):
    job = started(work_hours=2.0, deadline_hours=10.0)
    outcome, record = _drive(job, cloud, real_work_hours=2.0, late={3, 4, 5, 6, 8, 9})
    assert outcome.kind.value == "finished"
    said = [n for n in record.timeline if n["event"] == "pace"]
    assert all(abs(n["ratio"] - 1.0) <= 0.10 for n in said), said
    if record.pace is not None and record.pace.measured:
        assert abs(record.pace.work_hours_estimate / 2.0 - 1.0) <= 0.10, record.pace
