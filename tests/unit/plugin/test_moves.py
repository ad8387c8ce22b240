"""A job page counts its moves as its Gantt draws them (▶), and keeps the decision behind each move in its table.

The recipe's run found a job switched from spot to on-demand whose Gantt said "ended: migrated" with a ▶,
while its card said "moves 0" (the runtime's `migrations` count only moves that copied a checkpoint)
and its "Last decisions" had lost the decision that caused the switch.
"""

from __future__ import annotations

from tests.support.plugin_seed import finished_record, running_record

from .test_hostile_fields import inert_text


def _switched_to_on_demand(later_decisions: int) -> tuple[dict, dict]:
    """A job on spot in us-east4-a that deadline pressure put on on-demand there at 0.5 h, after which
    the planner decided `later_decisions` more times (each kept it where it was)."""
    from airflow_provider_skynomad.jobs.record import JobRecord, Segment
    from airflow_provider_skynomad.planner.timeline import NoteKind, SegmentEnd

    data, status = running_record("sn-switched0000001", zone="us-east4-a")
    record = JobRecord.from_dict(data)
    record.timeline.insert(1, {"at_hours": 0.0, "event": "decide", "want": "spot(us-east4-a)", "reason": "V=8.63"})
    record.segments[-1].close(0.5, SegmentEnd.MIGRATED)
    record.note(0.5, NoteKind.DEADLINE_PRESSURE, why="on-demand keeps the deadline safe")
    record.note(0.5, NoteKind.DECIDE, want="on-demand(us-east4-a)", reason="V=40.72 (the switch)")
    record.note(0.5, NoteKind.LAUNCH, zone="us-east4-a", mode="on-demand", usd_per_h=10.3, ends_segment=0,
                cause=NoteKind.DEADLINE_PRESSURE.value)  # fmt: skip
    record.segments.append(Segment("m", "us-east4-a", "us-east4", "on-demand", 0.5, 10.3, 0.2, ["i-10"]))
    for k in range(later_decisions):
        record.note(1.0 + 0.3 * k, NoteKind.DECIDE, want="on-demand(us-east4-a)", reason=f"V=41.{k:02d} (stay)")
    return record.to_dict(), status


def test_a_switch_from_spot_to_on_demand_is_a_move_on_the_card_as_on_the_gantt():
    from airflow_provider_skynomad.plugin.facts import job_facts

    record, status = _switched_to_on_demand(later_decisions=1)
    facts = job_facts(record, status)
    assert [m["kind"] for m in facts.markers] == ["migrated"]  # the Gantt's ▶
    assert facts.moves == 1
    assert facts.migrations == 0  # no checkpoint was copied: the runtime's count stays its own


def test_the_decision_that_moved_the_job_stays_in_last_decisions_after_many_more():
    from airflow_provider_skynomad.plugin.facts import LAST_DECISIONS, job_facts

    record, status = _switched_to_on_demand(later_decisions=LAST_DECISIONS + 3)
    decisions = job_facts(record, status).decisions
    reasons = [d["reason"] for d in decisions]
    assert "V=40.72 (the switch)" in reasons
    assert len(decisions) == LAST_DECISIONS + 1 and reasons[-1] == f"V=41.{LAST_DECISIONS + 2:02d} (stay)"
    assert [d["at_hours"] for d in decisions] == sorted(d["at_hours"] for d in decisions)
    assert [d["moved"] for d in decisions] == [True] + [False] * LAST_DECISIONS


def test_the_job_page_says_the_moves_the_gantt_draws_and_marks_the_decision_that_moved_it():
    from airflow_provider_skynomad.plugin.facts import job_facts
    from airflow_provider_skynomad.plugin.pages import job_page

    record, status = _switched_to_on_demand(later_decisions=1)
    text = " ".join(inert_text(job_page("t", "deferred", job_facts(record, status))).split())
    assert "preemptions ✕ / moves ▶ 0 / 1" in text
    assert "on-demand(us-east4-a) (moved the job ▶) V=40.72 (the switch)" in text
    assert "spot(us-east4-a) V=8.63" in text  # the first decision, which moved nothing


def test_a_finished_job_counts_the_preemption_and_the_move_its_gantt_shows():
    from airflow_provider_skynomad.plugin.facts import job_facts

    facts = job_facts(finished_record())
    assert [m["kind"] for m in facts.markers] == ["preempted", "migrated"]
    assert (facts.preemptions, facts.moves) == (1, 1)
    assert [d["moved"] for d in facts.decisions] == [False, True]
