"""The job record at the store's boundary: typed inside, the same plain words outside, old records still read."""

from __future__ import annotations

import json

import pytest

from airflow_provider_skynomad.jobs.record import JobRecord, Segment
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.timeline import NoteKind, SegmentEnd
from airflow_provider_skynomad.plugin.facts import job_facts

# Segments and notes as records were written before the timeline was typed: plain words, no
# ``ends_segment`` on the notes, and a kind this version no longer writes.
OLD_SEGMENTS = [
    {"market": "a:m", "zone": "a", "region": "r", "mode": "spot", "start_hours": 0.0, "usd_per_hour": 2.0,
     "launch_delay_hours": 0.2, "instance_ids": ["i-1"], "end_hours": 1.0, "end": "preempted"},
    {"market": "b:m", "zone": "b", "region": "r", "mode": "spot", "start_hours": 1.1, "usd_per_hour": 2.5,
     "launch_delay_hours": 0.2, "instance_ids": ["i-2"], "end_hours": 2.0, "end": "migrated"},
    {"market": "c:m", "zone": "c", "region": "r", "mode": "on-demand", "start_hours": 2.0, "usd_per_hour": 9.0,
     "launch_delay_hours": 0.3, "instance_ids": ["i-3"], "end_hours": None, "end": None},
]  # fmt: skip
OLD_TIMELINE = [
    {"at_hours": 0.0, "event": "start", "work_h": 4.0, "deadline_h": 10.0, "zones": 3, "policy": "skynomad"},
    {"at_hours": 0.0, "event": "launch", "mode": "spot", "zone": "a", "usd_per_h": 2.0},
    {"at_hours": 1.0, "event": "preempted", "zone": "a", "progress": "20%"},
    {"at_hours": 1.1, "event": "launch", "mode": "spot", "zone": "b", "usd_per_h": 2.5},
    {"at_hours": 1.5, "event": "stale market", "words": "the market table is late"},
    {"at_hours": 2.0, "event": "migrate", "mode": "on-demand", "zone": "c", "usd_per_h": 9.0, "from": "b",
     "why": "b preempted 2 times in 1 h"},
]  # fmt: skip


def old_record() -> dict:
    record = JobRecord(
        job_id="sn-old0000000000001",
        job=JobSpec(work_hours=4.0, deadline_hours=10.0, cold_start_hours=0.2),
        job_start_hours=0.0,
        deadline_hours=10.0,
        zones=["a", "b", "c"],
        instance_types=None,
        policy="skynomad",
        state=JobState(elapsed_hours=2.0, progress_hours=1.5, running=Option("c:m", Mode.ON_DEMAND)),
        all_on_demand_usd=38.0,
    ).to_dict()
    return json.loads(json.dumps({**record, "segments": OLD_SEGMENTS, "timeline": OLD_TIMELINE}))


def test_a_record_written_with_the_old_words_loads_typed_and_is_written_back_the_same():
    stored = old_record()
    record = JobRecord.from_dict(stored)
    assert [s.end for s in record.segments] == [SegmentEnd.PREEMPTED, SegmentEnd.MIGRATED, None]
    assert [NoteKind.of(n) for n in record.timeline][-2:] == [NoteKind.STALE_MARKET, NoteKind.MIGRATE]
    assert json.loads(json.dumps(record.to_dict())) == stored


def test_what_is_written_is_plain_json_words():
    record = JobRecord.from_dict(old_record())
    record.close_segment(3.0, SegmentEnd.FINISHED)
    record.note(3.0, NoteKind.FINISHED)
    data = record.to_dict()
    assert type(data["segments"][-1]["end"]) is str and data["segments"][-1]["end"] == "finished"
    assert type(data["timeline"][-1]["event"]) is str and data["timeline"][-1]["event"] == "finished"


def test_an_old_record_shows_on_the_page_with_plain_reasons_for_its_moves():
    """Its notes name no segment they ended: the page says the move without guessing a reason."""
    facts = job_facts(old_record())
    assert [(m["zone"], m["kind"], m["why"]) for m in facts.markers] == [
        ("a", "preempted", "the cloud took the instances back in a"),
        ("b", "migrated", "moved away from b: the planner found a better place"),
    ]
    assert "[t=1.50 h] the market table is late" in facts.story


def test_a_note_of_a_kind_this_version_does_not_know_shows_its_fields_on_the_page():
    stored = old_record()
    stored["timeline"].append({"at_hours": 2.5, "event": "workload output", "tail": "boom"})
    JobRecord.from_dict(stored)  # loads
    assert job_facts(stored).story[-1] == "[t=2.50 h] workload output tail=boom"


def test_a_segment_end_this_version_does_not_know_is_refused_by_the_runtime():
    stored = old_record()
    stored["segments"][0]["end"] = "vanished"
    with pytest.raises(ValueError, match="vanished"):
        JobRecord.from_dict(stored)


def test_a_segment_closes_with_a_typed_end():
    segment = Segment("a:m", "a", "r", "spot", 1.0, 2.0, 0.2, ["i-1"])
    segment.close(0.5, "released")  # before its start: held at its start
    assert segment.end is SegmentEnd.RELEASED and segment.end_hours == 1.0
