"""GcpCloud through the real ComputeEngineHook with a fake compute_v1 InstancesClient under it.

There is no Compute Engine emulator, so the fake sits at the adapter boundary: the hook's own
request building and operation checks run; only the client object is replaced.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from google.api_core.exceptions import NotFound
from google.cloud import compute_v1

from airflow_provider_skynomad.clouds.base import CapacityError, GroupStatus, LaunchRequest
from airflow_provider_skynomad.clouds.gcp import GcpCloud


class FakeInstancesClient:
    def __init__(self):
        self.instances: dict[tuple[str, str], SimpleNamespace] = {}
        self.inserts: list[dict] = []
        self.full_zones: set[str] = set()

    def insert(self, request, retry=None, timeout=None, metadata=()):
        self.inserts.append(request)
        body = request["instance_resource"]
        if request["zone"] in self.full_zones:
            return SimpleNamespace(name="op", error="ZONE_RESOURCE_POOL_EXHAUSTED: no capacity")
        instance = compute_v1.Instance(body)  # the real message type: what get() and aggregated_list() return
        instance.status = "RUNNING"
        instance.zone = f"https://www.googleapis.com/compute/v1/projects/{request['project']}/zones/{request['zone']}"
        self.instances[(request["zone"], body["name"])] = instance
        return SimpleNamespace(name="op", error=None)

    def aggregated_list(self, request, retry=None, timeout=None, metadata=()):
        """Pairs of (scope, scoped list) as the real pager yields; supports a `labels.key = "value"` filter."""
        key, value = re.fullmatch(r'labels\.(\S+) = "(.*)"', request["filter"]).groups()
        zones = sorted({zone for zone, _ in self.instances})
        for zone in zones:
            listed = [i for (z, _), i in self.instances.items() if z == zone and i.labels.get(key) == value]
            yield f"zones/{zone}", SimpleNamespace(instances=listed)

    def get(self, request, retry=None, timeout=None, metadata=()):
        key = (request["zone"], request["instance"])
        if key not in self.instances:
            raise NotFound(f"instance {request['instance']} not found")
        return self.instances[key]

    def delete(self, request, retry=None, timeout=None, metadata=()):
        key = (request["zone"], request["instance"])
        if key not in self.instances:
            raise NotFound(f"instance {request['instance']} not found")
        del self.instances[key]
        return SimpleNamespace(name="op", error=None)


@pytest.fixture
def gcp():
    from airflow.providers.google.cloud.hooks.compute import ComputeEngineHook

    client = FakeInstancesClient()

    class Hook(ComputeEngineHook):
        def __init__(self):  # no connection lookup: credentials are not needed by the fake
            self.gcp_conn_id = "fake"
            self.impersonation_chain = None
            self._pending_error = None

        def get_compute_instance_client(self):
            return client

        def _wait_for_operation_to_complete(self, project_id, operation_name, zone=None):
            pass

    hook = Hook()
    original_insert = client.insert

    def insert(request, **kwargs):
        op = original_insert(request, **kwargs)
        if op.error:
            raise RuntimeError(f"Error in operation: {op.error}")
        return op

    client.insert = insert
    return GcpCloud(project_id="proj", hook=hook), client


def request(token="sn-ABC_1", spot=True, count=2, zone="us-central1-a", job_id="sn-1"):
    return LaunchRequest(
        "gcp",
        zone.rsplit("-", 1)[0],
        zone,
        "a3-highgpu-1g",
        count,
        spot,
        token,
        command=("python", "-m", "train"),
        tags={"skynomad-job": "SN-1"},
        job_id=job_id,
    )


def test_launch_names_labels_spot_and_idempotency(gcp):
    cloud, client = gcp
    handle = cloud.launch(request())
    assert handle.instance_ids == ("sn-abc-1-0", "sn-abc-1-1")
    body = client.inserts[0]["instance_resource"]
    assert body["scheduling"]["provisioning_model"] == "SPOT"
    assert body["labels"]["skynomad-job"] == "sn-1"
    assert client.inserts[0]["request_id"] and client.inserts[0]["project"] == "proj"
    assert cloud.launch(request()) == handle and len(client.inserts) == 2  # retried: nothing re-sent
    assert cloud.poll(handle) is GroupStatus.RUNNING


def test_stockout_is_a_capacity_error_and_leaves_nothing(gcp):
    cloud, client = gcp
    client.full_zones.add("us-central1-a")
    with pytest.raises(CapacityError, match="ZONE_RESOURCE_POOL_EXHAUSTED"):
        cloud.launch(request())
    assert client.instances == {}


def test_preempted_member_and_clean_finish(gcp):
    cloud, client = gcp
    spot = cloud.launch(request())
    del client.instances[("us-central1-a", spot.instance_ids[1])]  # deleted on preemption
    assert cloud.poll(spot) is GroupStatus.PREEMPTED
    done = cloud.launch(request(token="sn-2", spot=False, count=1))
    client.instances[("us-central1-a", done.instance_ids[0])].status = "TERMINATED"  # powered off at the end
    assert cloud.poll(done) is GroupStatus.SUCCEEDED


def test_terminate_is_safe_twice(gcp):
    cloud, client = gcp
    handle = cloud.launch(request(count=1))
    cloud.terminate(handle)
    cloud.terminate(handle)
    assert client.instances == {}


def test_find_returns_the_launch_of_a_token_without_launching(gcp):
    cloud, client = gcp
    assert cloud.find("sn-ABC_1") is None and client.inserts == []
    handle = cloud.launch(request(count=3))
    other = cloud.launch(request(token="sn-abc-1", zone="europe-west4-b", count=1))  # same instance names
    assert (handle.job_id, handle.region) == ("sn-1", "us-central1")
    assert cloud.find("sn-ABC_1") == handle
    assert cloud.find("sn-abc-1") == other
    del client.instances[("us-central1-a", handle.instance_ids[0])]  # a member deleted on preemption
    assert cloud.find("sn-ABC_1") == handle  # the whole gang still, so poll sees the missing member
    assert cloud.poll(cloud.find("sn-ABC_1")) is GroupStatus.PREEMPTED
    cloud.terminate(handle)
    assert cloud.find("sn-ABC_1") is None
    assert len(client.inserts) == 4  # find never inserted anything


def test_workload_is_told_its_job_and_checkpoints_are_not_moved_yet(gcp):
    cloud, client = gcp
    handle = cloud.launch(request(count=1, job_id="job-a"))
    items = {i["key"]: i["value"] for i in client.inserts[0]["instance_resource"]["metadata"]["items"]}
    assert "export SKYNOMAD_JOB_ID=job-a\n" in items["startup-script"]
    assert items["skynomad-job-id"] == "job-a" and items["skynomad-client-token"] == "sn-ABC_1"
    assert cloud.copy_checkpoint("us-central1-a", "europe-west4-b", 5.0, job_id="job-a") is False
    assert cloud.progress(handle) is None


def test_console_url_of_the_first_instance(gcp):
    cloud, _ = gcp
    handle = cloud.launch(request(count=2))
    assert cloud.console_url(handle) == (
        "https://console.cloud.google.com/compute/instancesDetail/zones/us-central1-a/instances/sn-abc-1-0?project=proj"
    )
    assert cloud.bill() is None and cloud.failure_detail(handle) is None
