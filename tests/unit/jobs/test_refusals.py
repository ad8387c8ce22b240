"""Refused spot launches take cloud time; the job must not pay for them with its deadline."""

from airflow_provider_skynomad.clouds.base import CapacityError


def _every_spot_refusal_takes(cloud, hours: float) -> None:
    """Every spot launch is refused, and each refusal moves the cloud's clock (an API round trip on a
    crowded account, at a fast simulated clock)."""
    launch = cloud.launch

    def refusing(request):
        if request.spot:
            cloud.launches.append(request)
            cloud.hours += hours
            raise CapacityError(f"{request.zone} full")
        return launch(request)

    cloud.launch = refusing


def test_when_the_refusals_used_up_the_slack_the_job_starts_on_demand_at_once(started, cloud):
    _every_spot_refusal_takes(cloud, 0.25)
    job = started(work_hours=6.0, deadline_hours=7.5)
    record = job.record()
    spot_tries = [r for r in cloud.launches if r.spot]
    assert len(spot_tries) >= 2, "the planner should have tried spot first"
    assert record.group is not None and not record.group.spot  # on-demand now, not idle until the next step
    assert record.on_safety_net
    pressure = [n for n in record.timeline if n["event"] == "deadline pressure"]
    assert pressure and pressure[-1]["at_hours"] > 0.0  # said at the moment it was found, after the tries
    assert record.segments[-1].start_hours == pressure[-1]["at_hours"]


def test_refusals_that_leave_waiting_safe_leave_the_job_idle(started, cloud):
    _every_spot_refusal_takes(cloud, 0.0)
    job = started(work_hours=6.0, deadline_hours=12.0)
    record = job.record()
    assert record.group is None and not record.on_safety_net
    assert not [n for n in record.timeline if n["event"] == "deadline pressure"]
