"""The job's live status: where it stands and what it has spent so far, as the dashboard and page show it.

Why its own module: the live figure must grow into the final one. Where the cloud bills (the
simulated cloud) the spend so far is the cloud's own cost of each of the job's groups plus the
recorded egress and probes; elsewhere it is the estimate at launch-time prices, which is then the
final figure's basis too. A final cost below the last live figure is said, with why.
"""

from __future__ import annotations

from airflow_provider_skynomad.jobs.narrate import live_status
from airflow_provider_skynomad.jobs.record import JobRecord
from airflow_provider_skynomad.jobs.summary import CLOUD_BILL, summarize
from airflow_provider_skynomad.planner.timeline import NoteKind


class LiveStatus:
    """Builds a job's live status; remembers the last spend it said (and its basis) for the final bill."""

    def __init__(self, cloud, log):
        self.cloud, self.log = cloud, log
        self.live_spend: tuple[float, str] | None = None  # the last spend published and its basis

    def of(self, record: JobRecord, elapsed: float, summary: dict | None = None, *, state=None, reason=None) -> dict:
        """The status row at `elapsed`: the final figures when `summary` is given, else the spend so far."""
        if summary is not None:
            spend, basis = summary["cost_usd"]["total"], summary["cost_basis"]
        else:
            spend, basis = self.spend_so_far(record, elapsed)
            self.live_spend = (spend, basis)
        status = live_status(record, elapsed, spend)
        status["cost_basis"] = basis
        if summary is not None:
            status["deadline_met"] = summary["deadline_met"]
        if state is not None:
            status["state"] = state
        if reason is not None:
            status["reason"] = reason  # why it failed, for the dashboard's row
        return status

    def spend_so_far(self, record: JobRecord, elapsed: float) -> tuple[float, str]:
        """(USD, basis) spent so far, from the prices the final figure comes from (module docstring);
        `describe` reads one group's row, where the whole bill reads every probe the deployment made."""
        estimate = summarize(record, elapsed)
        describe = getattr(self.cloud, "describe", None)
        if describe is None or not record.groups_used:
            return estimate["cost_usd"]["total"], estimate["cost_basis"]
        try:
            groups_usd = sum(float(describe(handle)["usd"]) for handle in record.groups_used)
        except Exception as exc:  # noqa: BLE001 - a status line must never fail the job
            self.log.debug("could not read the cloud's cost so far of job %s: %s", record.job_id, exc)
            return estimate["cost_usd"]["total"], estimate["cost_basis"]
        return round(groups_usd + record.egress_usd + record.probe_usd, 2), CLOUD_BILL

    def bill_below_live(self, record: JobRecord, at: float, summary: dict) -> dict | None:
        """A "cost revised" note when the final cost is below the last figure said while the job ran
        (their sources differ), for the caller to say; None otherwise."""
        if self.live_spend is None:
            return None
        live_usd, live_basis = self.live_spend
        if summary["cost_usd"]["total"] >= live_usd - 0.005:
            return None
        return record.note(
            at,
            NoteKind.COST_REVISED,
            live_usd=round(live_usd, 2),
            live_basis=live_basis,
            final_usd=summary["cost_usd"]["total"],
            final_basis=summary["cost_basis"],
        )
