"""One launch path (`drive.launch_group`): find by token, copy first when the old group is gone,
launch, end the old group; a move (the old group still runs) copies after the old group stopped."""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.clouds.base import CapacityError, LaunchRequest
from airflow_provider_skynomad.jobs.drive import launch_group


class Recorder:
    """Wraps the fake cloud and writes down the order of its effects."""

    def __init__(self, cloud):
        self.cloud, self.calls = cloud, []

    def __getattr__(self, name):
        attr = getattr(self.cloud, name)
        if name not in ("find", "launch", "terminate", "copy_checkpoint"):
            return attr

        def recorded(*args, **kwargs):
            self.calls.append(name)
            return attr(*args, **kwargs)

        return recorded


def _request(token: str, zone: str = "us-east5-a", spot: bool = True) -> LaunchRequest:
    return LaunchRequest("gcp", zone[:-2], zone, "a3-highgpu-1g", 1, spot, token, job_id="sn-job-1")


def test_the_on_demand_net_with_the_old_group_gone_copies_the_checkpoint_before_the_launch(cloud):
    cloud.progress_fraction = 0.3
    recorder = Recorder(cloud)
    request = _request("sn-job-1-2", spot=False)
    handle, moved = launch_group(recorder, request, old=None, source_zone="us-east4-a", size_gb=50.0, tags=None)
    assert recorder.calls == ["find", "copy_checkpoint", "launch"] and moved == "us-east4-a"
    assert handle.zone == "us-east5-a"


def test_a_spot_relaunch_copies_after_the_launch_so_a_refused_zone_costs_no_copy(cloud):
    cloud.progress_fraction = 0.3
    recorder = Recorder(cloud)
    _, moved = launch_group(
        recorder, _request("sn-job-1-2"), old=None, source_zone="us-east4-a", size_gb=50.0, tags=None
    )
    assert recorder.calls == ["find", "launch", "copy_checkpoint"] and moved == "us-east4-a"
    cloud.full.add("us-east5-b")
    with pytest.raises(CapacityError):
        launch_group(
            cloud, _request("sn-job-1-3", "us-east5-b"), old=None, source_zone="us-east4-a", size_gb=50.0, tags=None
        )
    assert [c[1] for c in cloud.copies] == ["us-east5-a"]


def test_a_move_launches_then_ends_the_old_group_then_copies_what_it_left(cloud):
    cloud.progress_fraction = 0.3
    old = cloud.launch(_request("sn-job-1-1", "us-east4-a"))
    recorder = Recorder(cloud)
    _, moved = launch_group(
        recorder, _request("sn-job-1-2"), old=old, source_zone="us-east4-a", size_gb=50.0, tags=None
    )
    assert recorder.calls == ["find", "launch", "terminate", "copy_checkpoint"] and moved == "us-east4-a"


def test_a_launch_found_by_its_token_is_taken_as_it_is(cloud):
    made = cloud.launch(_request("sn-job-1-2"))
    recorder = Recorder(cloud)
    handle, moved = launch_group(
        recorder, _request("sn-job-1-2"), old=None, source_zone="us-east4-a", size_gb=50.0, tags=None
    )
    assert handle == made and recorder.calls == ["find", "copy_checkpoint"]  # the copy may be missing


def test_no_capacity_leaves_the_old_group_running(cloud):
    old = cloud.launch(_request("sn-job-1-1", "us-east4-a"))
    cloud.full.add("us-east5-a")
    with pytest.raises(CapacityError):
        launch_group(cloud, _request("sn-job-1-2"), old=old, source_zone="us-east4-a", size_gb=50.0, tags=None)
    assert cloud.terminated == [] and cloud.copies == []
