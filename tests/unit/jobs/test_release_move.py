"""A release the planner chose says why, and the launch elsewhere that follows says where the job left,
in the log and on the job page; ``migrations`` stay the moves that carried a checkpoint (each one's
egress is billed), so a release before any checkpoint is not counted as one."""

from __future__ import annotations

import logging

from airflow_provider_skynomad.jobs.summary import summarize
from airflow_provider_skynomad.planner.actions import Decision, Mode, Option
from airflow_provider_skynomad.planner.timeline import NoteKind, SegmentEnd
from airflow_provider_skynomad.plugin.facts import job_facts


def test_a_planner_release_says_why_and_a_launch_elsewhere_after_it_says_where_the_job_left(started, caplog):
    job = started(work_hours=4.0)
    run = job.controller().steps.run
    record = run.record
    view = run.view()
    here = record.group.zone
    elsewhere = next(m for m in view.markets if m.zone != here)
    caplog.set_level(logging.INFO, logger="test.jobs")

    run.carry_out(view, Decision((None,), reason="idle", wants=elsewhere.key), 1.0)
    assert record.group is None
    released = [r.getMessage() for r in caplog.records if "released the group" in r.getMessage()]
    assert released == [
        f"[t=1.00 h] released the group in {here}: spot here is not worth its price now: going idle until "
        f"spot in {elsewhere.zone} is worth taking"
    ]

    run.carry_out(view, Decision((Option(elsewhere.key, Mode.SPOT),), reason="launch"), 1.2)
    assert record.group is not None and record.group.zone == elsewhere.zone
    launched = [r.getMessage() for r in caplog.records if "launched spot" in r.getMessage()]
    assert launched and launched[-1].endswith(f", after the planner released the group in {here}")
    assert record.migrations == 0 and record.egress_usd == 0.0  # no checkpoint was carried
    assert summarize(record, 1.5)["migrations"] == 0
    facts = job_facts(record.to_dict())
    assert facts.migrations == 0
    assert [(m["zone"], m["kind"]) for m in facts.markers] == [(here, "migrated")]
    assert "going idle until" in facts.markers[0]["why"]


def test_a_release_then_a_launch_in_the_same_zone_is_no_move(started):
    job = started(work_hours=4.0)
    run = job.controller().steps.run
    record = run.record
    view = run.view()
    market = record.state.running.market
    run.carry_out(view, Decision((None,), reason="idle"), 1.0)
    run.carry_out(view, Decision((Option(market, Mode.SPOT),), reason="launch"), 1.2)
    assert record.group is not None
    assert record.migrations == 0
    assert job_facts(record.to_dict()).markers == []


def test_the_note_that_ends_a_segment_names_it_and_the_page_reads_why_from_it(started):
    """A release and the launch that replaces a group each name the segment they ended; a launch the
    deadline forced says so as its cause, and the page's marker says it without matching times."""
    job = started(work_hours=4.0)
    run = job.controller().steps.run
    record = run.record
    view = run.view()
    here, market = record.group.zone, record.state.running.market
    record.on_safety_net = True  # deadline pressure put the job on the net before this switch
    run.carry_out(view, Decision((Option(market, Mode.ON_DEMAND),), reason="net"), 1.0)
    (replacing,) = [n for n in record.timeline if n.get("ends_segment") is not None]
    assert NoteKind.of(replacing) in (NoteKind.LAUNCH, NoteKind.MIGRATE)
    assert replacing["ends_segment"] == 0 and replacing["cause"] == NoteKind.DEADLINE_PRESSURE
    assert record.segments[0].end is SegmentEnd.MIGRATED
    record.on_safety_net = False
    run.carry_out(view, Decision((None,), reason="idle"), 2.0)
    release = next(n for n in reversed(record.timeline) if NoteKind.of(n) is NoteKind.RELEASE)
    assert release["ends_segment"] == 1 and "cause" not in release
    facts = job_facts(record.to_dict())
    assert [(m["zone"], m["kind"], m["why"]) for m in facts.markers] == [
        (here, "migrated", "switched to on-demand to stay on time")
    ]
