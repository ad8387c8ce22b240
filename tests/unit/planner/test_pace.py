"""The job's pace learnt from its checkpoints (planner/pace.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.planner.pace import Pace, PaceByType, PaceError


def checkpoints(declared: float, real: float, every_hours: float, until_hours: float, noise: float = 0.0, seed=0):
    """The pace after a checkpoint every `every_hours` of productive time of a job of `real` hours."""
    rng = np.random.default_rng(seed)
    pace, hours, done = Pace(declared), 0.0, 0.0
    while hours < until_hours - 1e-9:
        hours += every_hours
        done = min(1.0, done + every_hours / real * (1.0 + noise * rng.standard_normal() / math.sqrt(every_hours)))
        pace = pace.observed(hours, done)
    return pace


def test_before_any_checkpoint_the_declared_work_is_planned():
    pace = Pace(36.0)
    assert pace.work_hours_estimate == pace.work_hours_bound == 36.0
    assert pace.remaining_work_hours() == 36.0
    assert pace.slower_than_declared() is None
    job = JobSpec(work_hours=36.0, deadline_hours=51.83)
    assert pace.planning_job(job) is job


def test_a_pace_as_declared_moves_nothing():
    pace = checkpoints(36.0, 36.0, 0.5, 10.0)
    assert pace.work_hours_bound == 36.0
    assert pace.slower_than_declared() is None
    assert pace.remaining_work_hours() == pytest.approx(26.0)


def test_the_bound_tightens_as_checkpoints_arrive():
    bounds = [checkpoints(36.0, 45.0, 0.5, hours).work_hours_bound for hours in (0.5, 1, 2, 4, 8, 16, 32)]
    assert all(b >= 45.0 for b in bounds)  # never below what was measured
    assert all(a > b for a, b in zip(bounds, bounds[1:], strict=False))  # tighter with every hour of evidence
    assert bounds[-1] == pytest.approx(45.0, rel=0.01)


def test_slower_than_declared_is_said_once_the_evidence_holds():
    assert checkpoints(36.0, 37.8, 0.5, 0.5).slower_than_declared() is None  # 5 % after half an hour: unsure
    assert checkpoints(36.0, 37.8, 0.5, 4.0).slower_than_declared() == pytest.approx(1.05)
    assert checkpoints(36.0, 45.0, 0.5, 0.5).slower_than_declared() == pytest.approx(1.25)
    assert checkpoints(36.0, 45.0, 0.5, 4.0).faster_than_declared() is None


def test_faster_than_declared_never_passes_100_percent():
    pace = checkpoints(36.0, 28.8, 0.4, 28.8).observed(28.8, 1.02)  # a workload reporting past its end
    assert pace.fraction == 1.0
    assert pace.remaining_work_hours() == 0.0
    assert pace.progress_hours() == pytest.approx(pace.work_hours_bound)
    assert pace.faster_than_declared() == pytest.approx(0.8, rel=0.02)


def test_faster_is_trusted_only_as_far_as_the_evidence_goes():
    early = checkpoints(36.0, 35.0, 0.5, 0.5)
    assert early.work_hours_bound == 36.0  # the upper bound is still above the declared work
    later = checkpoints(36.0, 35.0, 0.5, 8.0)
    assert 35.0 < later.work_hours_bound < 36.0
    assert checkpoints(36.0, 28.8, 0.5, 0.5).work_hours_bound < 36.0  # 20 % faster shows at once


def test_the_time_since_the_last_checkpoint_is_not_slowness():
    """Totals are read at checkpoints: hourly checkpoints give the same estimate as ten-minute ones."""
    hourly = checkpoints(36.0, 45.0, 1.0, 6.0)
    often = checkpoints(36.0, 45.0, 1 / 6, 6.0)
    assert hourly.work_hours_estimate == pytest.approx(often.work_hours_estimate) == pytest.approx(45.0)


def test_a_scattered_pace_keeps_a_wider_margin():
    steady = checkpoints(36.0, 45.0, 0.5, 10.0)
    noisy = checkpoints(36.0, 45.0, 0.5, 10.0, noise=0.3)
    assert noisy.spread > steady.spread
    assert noisy.work_hours_bound / noisy.work_hours_estimate > steady.work_hours_bound / steady.work_hours_estimate


def test_the_bound_is_continuous_and_increasing_in_the_measured_work():
    bounds = [Pace(36.0).observed(4.0, 4.0 / real).work_hours_bound for real in np.linspace(30.0, 50.0, 401)]
    steps = np.diff(bounds)
    assert (steps >= 0).all()
    assert steps.max() < 0.5  # no jump where the evidence turns significant


def test_lost_work_resets_the_totals_without_polluting_the_scatter():
    pace = Pace(10.0).observed(2.0, 0.2).observed(1.5, 0.15)  # back to an older checkpoint
    assert (pace.productive_hours, pace.fraction, pace.checkpoints, pace.intervals) == (1.5, 0.15, 2, 1)


def test_planning_job_plans_with_the_bound():
    job = JobSpec(work_hours=36.0, deadline_hours=51.83)
    pace = checkpoints(36.0, 45.0, 0.5, 4.0)
    planned = pace.planning_job(job)
    assert planned.work_hours == pace.work_hours_bound > 45.0
    assert planned.deadline_hours == job.deadline_hours


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: Pace(0.0), "declared_work_hours"),
        (lambda: Pace(math.nan), "declared_work_hours"),
        (lambda: Pace(1.0).observed(math.nan, 0.1), "productive_hours"),
        (lambda: Pace(1.0).observed(-1.0, 0.1), "productive_hours"),
        (lambda: Pace(1.0).observed(1.0, math.nan), "fraction"),
        (lambda: Pace(1.0).observed(1.0, -0.1), "fraction"),
        (lambda: Pace(1.0, fraction=1.5), "fraction"),
    ],
)
def test_bad_input_is_refused_with_its_name(build, match):
    with pytest.raises(PaceError, match=match):
        build()


def test_per_type_paces_share_the_work_and_keep_their_speed():
    paces = PaceByType(36.0).observed("a3-highgpu-1g", 4.0, 4.0 / 45.0)
    assert paces.pace_of("a3-highgpu-1g").work_hours_estimate == pytest.approx(45.0)
    assert paces.pace_of("a2-ultragpu-1g").work_hours_estimate == pytest.approx(45.0)  # none of its own: pooled
    paces = paces.observed("a2-ultragpu-1g", 4.0, 4.0 / 72.0)
    assert paces.pace_of("a2-ultragpu-1g").work_hours_estimate == pytest.approx(72.0)
    assert paces.fraction == pytest.approx(4 / 45 + 4 / 72)
    assert paces.remaining_work_hours("a3-highgpu-1g") == pytest.approx(
        (1 - paces.fraction) * paces.work_hours_bound("a3-highgpu-1g")
    )
