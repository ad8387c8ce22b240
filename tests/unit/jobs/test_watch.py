"""A workload at its declared pace is never said to run faster or slower than declared (issue 32, "One
set of numbers"): a checkpoint is dated by when it was written (progress.json's `updated_at`, which
`Cloud.progress` answers as `Checkpointed.at_hours`), not by a look that came late; a stamp that is
not believable dates it by the look, as before."""

from __future__ import annotations

import math

import pytest

from airflow_provider_skynomad.clouds.base import Checkpointed, GroupStatus
from airflow_provider_skynomad.jobs.watch import Watch

STEP = 1.0 / 6.0
CHECKPOINT_EVERY = 0.25  # hours of work between the workload's checkpoints
COLD_START = 0.2


def _drive(job, cloud, real_work_hours: float, late: set[int], dated: bool, until: float = 8.0):
    """Step the controller; the workload checkpoints every CHECKPOINT_EVERY hours of work, and the
    looks numbered in `late` are skipped (a busy triggerer), so the next one sees an old checkpoint.
    `dated`: the cloud says when each checkpoint was written, as the agent stamps it."""
    controller = job.controller()
    done, t, n = 0.0, 0.0, 0
    token, started = cloud.launches[-1].client_token, 0.0
    written, written_at = 0.0, None
    while t < until:
        t += STEP
        n += 1
        group = controller.steps.record.group
        if group is not None and group.client_token != token:
            token, started = group.client_token, t - STEP
        if group is not None and cloud.status[token] is GroupStatus.RUNNING:
            done += max(0.0, t - max(started + COLD_START, t - STEP))
        newest = math.floor(done / CHECKPOINT_EVERY + 1e-9) * CHECKPOINT_EVERY
        if newest > written:  # the work runs at one hour an hour: it reached `newest` this long ago
            written, written_at = newest, t - (done - newest)
        fraction = min(1.0, written / real_work_hours)
        cloud.hours = t
        cloud.progress_fraction = Checkpointed(fraction, written_at) if dated and written_at is not None else fraction
        if done >= real_work_hours:
            cloud.status[token] = GroupStatus.SUCCEEDED
        if n in late:
            continue
        outcome = controller.step().outcome
        if outcome is not None:
            return outcome, job.record()
    raise AssertionError("the job never ended")


def _said(record) -> list[float]:
    return [n["ratio"] for n in record.timeline if n["event"] == "pace"]


def test_a_checkpoint_read_late_does_not_make_a_workload_at_its_declared_pace_look_faster(started, cloud):
    """Looks 3..6 and 8..9 do not come (a busy triggerer): the first look after them sees a checkpoint
    written up to an hour before. Dated by that look, a 2 h workload at its declared 2 h was said to
    run 25 % faster; dated by its own stamp, it is not."""
    job = started(work_hours=2.0, deadline_hours=10.0)
    outcome, record = _drive(job, cloud, real_work_hours=2.0, late={3, 4, 5, 6, 8, 9}, dated=True)
    assert outcome.kind.value == "finished"
    assert all(abs(ratio - 1.0) <= 0.05 for ratio in _said(record)), _said(record)
    if record.pace is not None and record.pace.measured:
        assert record.pace.work_hours_estimate == pytest.approx(2.0, rel=0.05), record.pace


def test_a_workload_slower_than_declared_is_still_measured_from_stamped_checkpoints(started, cloud):
    job = started(work_hours=4.0, deadline_hours=8.0)  # it really needs 5 h
    outcome, record = _drive(job, cloud, real_work_hours=5.0, late={3, 4, 5, 6, 8, 9}, dated=True, until=12.0)
    assert outcome.kind.value == "finished" and record.summary["deadline_met"], record.summary
    assert _said(record) and _said(record)[-1] == pytest.approx(1.25, abs=0.05), _said(record)


@pytest.mark.parametrize(
    ("stamp", "why"),
    [
        (None, "the store does not say"),
        (+0.5, "in the future: an instance clock ahead of ours"),
        (-5.0, "before the group launched: a checkpoint copied in for it"),
        (math.nan, "not a time"),
    ],
)
def test_a_stamp_that_is_not_believable_dates_the_checkpoint_by_the_look(started, cloud, stamp, why):
    job = started(work_hours=2.0, deadline_hours=10.0)
    watch = Watch.of(job.record())
    look = watch.base.running_since_hours + 1.0
    at = None if stamp is None else watch.job_start_hours + look + stamp
    assert watch.written_at(Checkpointed(0.4, at), look) == look, why
    assert watch.written_at(0.4, look) == look  # a cloud that answers a plain share


def test_a_believable_stamp_dates_the_checkpoint(started, cloud):
    job = started(work_hours=2.0, deadline_hours=10.0)
    watch = Watch.of(job.record())
    look = watch.base.running_since_hours + 1.0
    assert watch.written_at(Checkpointed(0.4, watch.job_start_hours + look - 0.7), look) == pytest.approx(look - 0.7)
