"""What the job says: one small narration per kind of timeline note, and a plain fallback for any other."""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.jobs.narrate import SAYINGS, say
from airflow_provider_skynomad.planner.timeline import NoteKind

# One note of every kind, as the runtime writes it.
NOTES = {
    NoteKind.START: {"work_h": 4.0, "deadline_h": 10.0, "zones": 3, "policy": "skynomad"},
    NoteKind.DECIDE: {"want": "idle", "reason": "V=1"},
    NoteKind.STAY: {"zone": "m"},
    NoteKind.LAUNCH: {"mode": "spot", "zone": "a", "usd_per_h": 2.1, "left": "b", "ends_segment": 0},
    NoteKind.MIGRATE: {"mode": "spot", "zone": "a", "usd_per_h": 2.1, "from": "b", "why": "cheaper"},
    NoteKind.RELEASE: {"zone": "a", "why": "going idle", "ends_segment": 0},
    NoteKind.PREEMPTED: {"zone": "a", "progress": "35%"},
    NoteKind.NO_CAPACITY: {"mode": "spot", "zone": "a"},
    NoteKind.CLOUD_API: {"mode": "spot", "zone": "a", "error": "throttled"},
    NoteKind.STALE_MARKET: {"words": "the market table is late"},
    NoteKind.IDLE: {"reason": "planner chose idle"},
    NoteKind.PROBE: {"zone": "a", "available": 2},
    NoteKind.DEADLINE_PRESSURE: {"why": "a preempted 2 times in 1 h"},
    NoteKind.REACTION_LAG: {"hours": 0.2, "wall_seconds": 3.0, "planned_hours": 0.5},
    NoteKind.SLOW_START: {"hours": 0.4, "declared": 0.2},
    NoteKind.PACE: {"ratio": 1.25, "left_h": 6.0, "declared_left_h": 4.8, "planning_ratio": 1.25},
    NoteKind.DEADLINE_RISK: {"finish_h": 12.0, "deadline_h": 10.0, "cause": "time lost"},
    NoteKind.COST_REVISED: {"final_usd": 1.0, "final_basis": "cloud_bill", "live_usd": 2.0, "live_basis": None},
    NoteKind.FINISHED: {},
    NoteKind.FAILED: {"reason": "exit 1"},
}


def test_every_kind_has_a_narration():
    assert set(SAYINGS) == set(NoteKind)
    assert set(NOTES) == set(NoteKind)


@pytest.mark.parametrize("kind", [kind for kind in NoteKind if not kind.quiet])
def test_each_told_kind_is_said_in_words_not_as_its_fields(kind):
    line = say({"at_hours": 1.234, "event": kind.value, **NOTES[kind]})
    assert line.startswith("[t=1.23 h] ")
    assert "=" not in line.removeprefix("[t=1.23 h] "), line  # no key=value dump
    assert "ends_segment" not in line


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        (NoteKind.LAUNCH, "launched spot in a at $2.10/h, after the planner released the group in b"),
        (NoteKind.MIGRATE, "moved to a (spot, $2.10/h), checkpoint copied from b: cheaper"),
        (NoteKind.RELEASE, "released the group in a: going idle"),
        (NoteKind.DEADLINE_PRESSURE, "deadline pressure: moving to on-demand now to stay on time (a preempted 2"),
        (NoteKind.DEADLINE_RISK, "(the time preemptions, relaunches and waiting already cost)"),
        (NoteKind.PACE, "the workload runs 25 % slower than declared: about 6.0 h of work left, not 4.8 h; planning"),
    ],
)
def test_a_kind_is_said_by_its_own_function(kind, words):
    assert words in say({"at_hours": 0.0, "event": kind.value, **NOTES[kind]})


def test_deadline_pressure_at_the_first_launch_says_the_job_starts_on_on_demand():
    note = {"at_hours": 0.0, "event": "deadline pressure", "why": "the slack is too thin", "first_launch": True}
    assert say(note) == "[t=0.00 h] deadline pressure: starting on on-demand to stay on time (the slack is too thin)"


def test_a_quiet_kind_is_shown_as_its_fields():
    assert say({"at_hours": 2.0, "event": "decide", "want": "idle", "reason": "V=1"}) == (
        "[t=2.00 h] decide want=idle reason=V=1"
    )


@pytest.mark.parametrize(
    ("item", "line"),
    [
        ({"at_hours": 9.1, "event": "workload output", "tail": ["boom"]}, "[t=9.10 h] workload output tail=['boom']"),
        ({"at_hours": 9.2, "event": "gone"}, "[t=9.20 h] gone"),
    ],
)
def test_a_kind_this_version_does_not_know_is_shown_plainly(item, line):
    assert say(item) == line


def test_a_new_on_demand_group_s_slack_counts_what_is_left_of_its_start_up():
    from airflow_provider_skynomad.jobs.narrate import where_it_stands
    from airflow_provider_skynomad.planner.actions import Mode, Option
    from airflow_provider_skynomad.planner.job import JobSpec, JobState

    job = JobSpec(work_hours=10.0, deadline_hours=16.0, cold_start_hours=0.2)
    launched = JobState(elapsed_hours=4.0, progress_hours=4.0).launched(Option("m", Mode.ON_DEMAND), 4.0, 0.3)

    def slack(elapsed: float) -> float:
        return where_it_stands("j", job, launched, None, 16.0, elapsed)["slack_hours"]

    assert slack(4.0) == pytest.approx(16.0 - 4.0 - 6.0 - 0.3)  # the whole start-up (with its transfer) to pay
    assert slack(4.1) == pytest.approx(16.0 - 4.1 - 6.0 - 0.2)
    assert slack(4.5) == pytest.approx(16.0 - 4.5 - 6.0)  # started: nothing more to pay
