"""One set of numbers: the all-on-demand comparison on one basis (the work measured) in the live
status, the job page and the summary; the live spend from the source the final figure comes from,
never above it without the job saying why."""

from __future__ import annotations

import logging

import pytest

from tests.support.fakes import FakeCloud
from tests.support.paced_workload import PacedWorkload

COLD_START = 0.2  # the `started` fixture's declared cold start


def _run(job, cloud, real_work_hours: float, until: float = 12.0):
    """Step and publish the controller as its trigger does; the workload runs at its real pace on
    whatever group runs. (outcome, the record at the end, every status published, in order)."""
    controller = job.controller()
    statuses: list[dict] = []
    store = controller.steps.run.store
    publish = store.save_status
    store.save_status = lambda status: (statuses.append(dict(status)), publish(status))[1]
    workload = PacedWorkload(cloud, real_work_hours, COLD_START)
    while workload.t < until:
        workload.tick()
        workload.work(controller.steps.record.group)
        look = controller.step()
        if look.outcome is not None:
            return look.outcome, job.record(), statuses
        controller.publish()
    raise AssertionError("the job never ended")


class BillingCloud(FakeCloud):
    """A fake cloud with a bill: each group billed at `usd_per_hour` from launch to its end (or now),
    a price the market table never showed (the bill follows the cloud's prices, not the planner's);
    like the simulated cloud it describes one group's cost so far, and bills the job."""

    usd_per_hour = 7.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started_at: dict[str, float] = {}
        self.ended_at: dict[str, float] = {}
        self.bill_fails = False

    def launch(self, request):
        handle = super().launch(request)
        self.started_at.setdefault(request.client_token, self.hours)
        return handle

    def terminate(self, handle):
        super().terminate(handle)
        self.ended_at.setdefault(handle.client_token, self.hours)

    def describe(self, handle):
        hours = self.ended_at.get(handle.client_token, self.hours) - self.started_at[handle.client_token]
        return {"usd": hours * self.usd_per_hour}

    def bill(self, tags=None):
        if self.bill_fails:
            raise RuntimeError("the billing API did not answer")
        hours = sum(self.ended_at.get(t, self.hours) - s for t, s in self.started_at.items())
        return {
            "spot_usd": hours * self.usd_per_hour,
            "on_demand_usd": 0.0,
            "egress_usd": 0.0,
            "probe_usd": 0.0,
            "spot_hours": hours,
            "on_demand_hours": 0.0,
        }


def test_all_on_demand_is_on_the_measured_work_live_on_the_page_and_in_the_summary(started, cloud):
    from airflow_provider_skynomad.plugin.facts import job_facts

    job = started(work_hours=4.0, deadline_hours=8.0)  # it really needs 5 h
    outcome, record, statuses = _run(job, cloud, real_work_hours=5.0)
    assert outcome.kind.value == "finished"
    rate = record.on_demand_usd_per_hour
    assert rate > 0
    measured = record.pace.work_hours_estimate
    assert measured == pytest.approx(5.0, rel=0.03)
    final = record.summary["all_on_demand_cost_usd"]
    assert final == pytest.approx(rate * (measured + COLD_START), abs=0.01)  # the work measured, not 4 h
    assert final > record.all_on_demand_usd  # the declared work's figure, kept in the record
    live = [s for s in statuses if s["state"] != "finished"]
    # Once the checkpoints measured the work, the live figure is the final's basis: they agree.
    assert live[-1]["all_on_demand_usd"] == pytest.approx(final, abs=0.02), (live[-1], final)
    # The job page shows the status's figure while the job runs, the summary's at the end.
    record_dict = record.to_dict()
    running = {**record_dict, "finished": False, "summary": None}
    assert job_facts(running, live[-1]).all_on_demand_usd == pytest.approx(live[-1]["all_on_demand_usd"], abs=0.005)
    page = job_facts(record_dict, statuses[-1])
    assert page.all_on_demand_usd == pytest.approx(final, abs=0.005)
    assert page.on_demand_points[-1] == (pytest.approx(measured + COLD_START, abs=0.01), pytest.approx(final))


def test_the_live_spend_never_passes_the_final_estimate_on_a_cloud_without_a_bill(started, cloud):
    job = started(work_hours=4.0, deadline_hours=8.0)
    _, record, statuses = _run(job, cloud, real_work_hours=4.0)
    assert record.summary["cost_basis"] == "estimate"
    spends = [s["spend_usd"] for s in statuses if s["state"] != "finished"]
    assert spends == sorted(spends) and spends[-1] <= record.summary["cost_usd"]["total"]
    assert {s["cost_basis"] for s in statuses} == {"estimate"}


@pytest.fixture
def billing(tmp_path, monkeypatch, gcp_frame, now):
    """`cloud`, with a bill (BillingCloud)."""
    from .conftest import use_cloud

    return use_cloud(BillingCloud(now), tmp_path, monkeypatch, gcp_frame, now)


def test_the_live_spend_is_the_clouds_bill_so_far_and_grows_into_the_final_bill(billing, caplog):
    from tests.unit.jobs.conftest import Started

    job = Started(billing, work_hours=2.0, deadline_hours=6.0)
    try:
        with caplog.at_level(logging.INFO, logger="test.jobs"):
            _, record, statuses = _run(job, billing, real_work_hours=2.0)
    finally:
        job.close()
    final = record.summary["cost_usd"]["total"]
    assert record.summary["cost_basis"] == "cloud_bill"
    live = [s for s in statuses if s["state"] != "finished"]
    assert live and {s["cost_basis"] for s in live} == {"cloud_bill"}
    spends = [s["spend_usd"] for s in live]
    assert spends == sorted(spends) and spends[-1] <= final
    # The cloud's price, not the planner's launch-time one: 7 $/h for the hours billed so far.
    assert spends[-1] == pytest.approx(live[-1]["elapsed_hours"] * BillingCloud.usd_per_hour, abs=0.08)
    assert "so far (the cloud's bill; all on-demand" in caplog.text
    assert not [n for n in record.timeline if n["event"] == "cost revised"]


def test_a_final_cost_below_the_live_figure_says_why(billing, caplog):
    """The bill was read while the job ran, not at its end: the final figure falls back to the
    estimate at launch-time prices, below the bill said live, and the job says so."""
    from tests.unit.jobs.conftest import Started

    job = Started(billing, work_hours=2.0, deadline_hours=6.0)
    controller = job.controller()
    steps = controller.steps
    finish = steps.finish

    def finish_without_a_bill(at):
        billing.bill_fails = True
        return finish(at)

    steps.finish = finish_without_a_bill
    job.controller = lambda: controller
    try:
        with caplog.at_level(logging.INFO, logger="test.jobs"):
            _, record, statuses = _run(job, billing, real_work_hours=2.0)
    finally:
        job.close()
    live = [s for s in statuses if s["state"] != "finished"][-1]
    summary = record.summary
    assert summary["cost_basis"] == "estimate" and summary["cost_usd"]["total"] < live["spend_usd"]
    (note,) = [n for n in record.timeline if n["event"] == "cost revised"]
    assert note["live_usd"] == live["spend_usd"] and note["final_usd"] == summary["cost_usd"]["total"]
    said = (
        f"the final cost ${summary['cost_usd']['total']:.2f} (estimated at launch-time prices) is below the "
        f"${live['spend_usd']:.2f} said while the job ran (the cloud's bill)"
    )
    assert said in caplog.text
