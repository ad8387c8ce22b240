"""The live status grows into the final figure, and a final cost below the last live one is said."""

from __future__ import annotations

import logging

from airflow_provider_skynomad.jobs.publish import LiveStatus


def test_a_final_cost_below_the_last_live_figure_is_noted_and_not_above_it(started, cloud):
    job = started()
    record = job.record()
    status = LiveStatus(cloud, logging.getLogger("test.jobs"))
    assert status.bill_below_live(record, 1.0, {"cost_usd": {"total": 5.0}, "cost_basis": "estimate"}) is None
    live = status.of(record, 1.0)
    assert live["cost_basis"] == status.live_spend[1] and live["spend_usd"] == status.live_spend[0]
    status.live_spend = (5.0, "cloud bill")
    assert status.bill_below_live(record, 1.0, {"cost_usd": {"total": 5.0}, "cost_basis": "estimate"}) is None
    note = status.bill_below_live(record, 1.0, {"cost_usd": {"total": 4.0}, "cost_basis": "estimate"})
    assert note["event"] == "cost revised" and note["live_usd"] == 5.0 and note["final_usd"] == 4.0


def test_a_failed_status_says_why_and_a_final_one_says_whether_the_deadline_was_met(started, cloud):
    job = started()
    record = job.record()
    status = LiveStatus(cloud, logging.getLogger("test.jobs"))
    failed = status.of(record, 1.0, state="failed", reason="the group failed")
    assert failed["state"] == "failed" and failed["reason"] == "the group failed"
    summary = {"cost_usd": {"total": 3.0}, "cost_basis": "estimate", "deadline_met": True}
    final = status.of(record, 2.0, summary)
    assert final["spend_usd"] == 3.0 and final["deadline_met"] is True
    assert status.live_spend == (failed["spend_usd"], failed["cost_basis"])  # the final figure is not a live one
