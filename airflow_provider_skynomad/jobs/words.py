"""Small plain-words helpers about a decision and a record, for the task's log.

Why apart: the worker and the controller's steps both say them, and neither owns them.
"""

from __future__ import annotations

from airflow_provider_skynomad.jobs.record import JobRecord
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Decision, Mode


def decision_words(decision: Decision, view: MarketView | None = None) -> str:
    """The planner's choice in plain words (the log says it beside a move or a release)."""
    first = decision.first
    if first is None:
        wanted = decision.wants
        if wanted is not None and view is not None and wanted in view.keys:
            wanted = view.markets[view.index(wanted)].zone
        until = f"spot in {wanted} is worth taking" if wanted else "a market is worth its price"
        return f"spot here is not worth its price now: going idle until {until}"
    return "on-demand keeps the deadline safe" if first.mode is Mode.ON_DEMAND else "a better spot market"


def wanted_market(decision: Decision) -> str | None:
    """The spot market a job left idle waits for: the planner's claim, or its first spot choice refused."""
    if decision.wants is not None:
        return decision.wants
    first = decision.first
    return first.market if first is not None and first.mode is Mode.SPOT else None


def percent_done(record: JobRecord, progress) -> str | None:
    """`progress` hours as a share of the job's work, for a log line (None when unknown)."""
    if progress is None:
        return None
    return f"{100.0 * float(progress) / record.job.work_hours:.0f}%"


def where(record: JobRecord) -> str:
    """Where the job stands, for the log line a reconnecting retry writes."""
    if record.group is not None:
        return f"group {list(record.group.instance_ids)} in {record.group.zone}"
    if record.pending is not None:
        return f"launch {record.pending.request.client_token} in {record.pending.request.zone} in flight"
    return "idle"
