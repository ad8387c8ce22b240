"""Bounded retries (clouds/retry.py) and the fault injector (clouds/faults.py), without Airflow runs."""

from __future__ import annotations

import pytest

from airflow_provider_skynomad.clouds.base import CapacityError, LaunchRequest
from airflow_provider_skynomad.clouds.faults import FaultPlan, FaultyCloud
from airflow_provider_skynomad.clouds.retry import (
    CloudApiError,
    RetryingCloud,
    RetryPolicy,
    TransientCloudError,
    botocore_retry_config,
    call_with_retries,
    is_transient,
)
from tests.support.fakes import FakeCloud

POLICY = RetryPolicy(attempts=4, base_delay_seconds=1.0, max_delay_seconds=3.0, budget_seconds=100.0)


class Flaky:
    def __init__(self, failures: list[BaseException]):
        self.failures = list(failures)
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


def test_a_transient_failure_is_sent_again_after_a_jittered_backoff():
    slept = []
    call = Flaky([TransientCloudError("429"), TimeoutError("read timeout")])
    assert call_with_retries(call, "a launch", POLICY, sleep=slept.append, draw=lambda: 1.0) == "ok"
    assert call.calls == 3
    assert slept == [1.0, 2.0]  # full jitter's ceiling doubles: base · 2^i
    half = []
    call_with_retries(Flaky([TransientCloudError("x")] * 3), "a", POLICY, sleep=half.append, draw=lambda: 0.5)
    assert half == [0.5, 1.0, 1.5]  # capped at max_delay_seconds (3.0) · draw


def test_what_is_not_transient_is_raised_at_once_and_capacity_is_an_answer():
    for exc in (ValueError("bad request"), CapacityError("no capacity")):
        call = Flaky([exc])
        with pytest.raises(type(exc)):
            call_with_retries(call, "a launch", POLICY, sleep=lambda s: None)
        assert call.calls == 1


def test_retries_are_bounded_in_number_and_in_wall_time_and_say_why_in_words():
    call = Flaky([TransientCloudError("Rate exceeded")] * 10)
    with pytest.raises(
        CloudApiError, match=r"did not answer a launch in us-east4-a after 4 attempt\(s\).*Rate exceeded"
    ):
        call_with_retries(call, "a launch in us-east4-a", POLICY, sleep=lambda s: None, draw=lambda: 1.0)
    assert call.calls == 4
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    tight = RetryPolicy(attempts=100, base_delay_seconds=1.0, max_delay_seconds=1.0, budget_seconds=2.5)
    call = Flaky([TransientCloudError("x")] * 100)
    with pytest.raises(CloudApiError):
        call_with_retries(call, "a", tight, sleep=sleep, clock=lambda: now[0], draw=lambda: 1.0)
    assert call.calls == 3  # 0 s, 1 s, 2 s; a fourth would start past the 2.5 s budget


def test_aws_and_gcp_throttling_and_timeouts_are_transient():
    from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

    def client_error(code, status=400):
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "RunInstances")

    assert is_transient(client_error("RequestLimitExceeded"))
    assert is_transient(client_error("Throttling"))
    assert is_transient(client_error("Whatever", 503))
    assert not is_transient(client_error("InvalidParameterValue"))
    assert not is_transient(client_error("InsufficientInstanceCapacity"))  # capacity: the adapter's CapacityError
    assert is_transient(EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com"))
    assert is_transient(ReadTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com"))
    api_core = pytest.importorskip("google.api_core.exceptions")
    assert is_transient(api_core.TooManyRequests("quota"))
    assert is_transient(api_core.ServiceUnavailable("busy"))
    assert not is_transient(api_core.NotFound("no such zone"))


def request(token="job-1", zone="us-central1-a", spot=True):
    return LaunchRequest("gcp", "us-central1", zone, "a3-highgpu-1g", 1, spot, token, job_id="job")


def test_a_launch_whose_reply_was_lost_is_retried_with_its_token_and_starts_one_group():
    inner = FakeCloud("2025-10-04T00:00:00Z")
    plan = FaultPlan()
    plan.add("launch", "lost_reply", times=1)
    cloud = RetryingCloud(FaultyCloud(inner, plan), RetryPolicy(base_delay_seconds=0.0))
    handle = cloud.launch(request())
    assert plan.injected("launch", "lost_reply") == 1 and plan.calls["launch"] == 2
    assert len(inner.launches) == 1 and list(inner.groups.values()) == [handle]


def test_faults_match_their_method_zone_mode_and_counts():
    inner = FakeCloud("2025-10-04T00:00:00Z")
    plan = FaultPlan()
    plan.add("launch", "capacity", zones={"us-east4-a"}, spot=False, skip=1, times=1)
    cloud = FaultyCloud(inner, plan)
    cloud.launch(request("t1", "us-east4-a", spot=True))  # spot: not this rule's
    cloud.launch(request("t2", "us-east4-a", spot=False))  # skipped once
    with pytest.raises(CapacityError, match="on-demand"):
        cloud.launch(request("t3", "us-east4-a", spot=False))
    cloud.launch(request("t4", "us-east4-a", spot=False))  # times=1: spent
    assert plan.injected() == 1
    with pytest.raises(ValueError, match="unknown fault kind"):
        plan.add("poll", "meteor")


def test_the_wrappers_pass_everything_else_through_to_the_cloud():
    inner = FakeCloud("2025-10-04T00:00:00Z")
    cloud = RetryingCloud(FaultyCloud(inner, FaultPlan()))
    assert cloud.name == "fake" and cloud.full is inner.full  # an attribute only the inner cloud has
    assert cloud.now_timestamp() == inner.now_timestamp()


def test_the_aws_hooks_clients_get_adaptive_retries_unless_the_connection_sets_its_own():
    from botocore.config import Config

    ours = botocore_retry_config()
    assert ours.retries == {"mode": "adaptive", "max_attempts": 6}
    theirs = Config(retries={"mode": "standard", "max_attempts": 2}, connect_timeout=7)
    assert botocore_retry_config(theirs) is theirs
    merged = botocore_retry_config(Config(connect_timeout=7))
    assert merged.connect_timeout == 7 and merged.retries["mode"] == "adaptive"
    with pytest.raises(ValueError, match="retry mode"):
        botocore_retry_config(mode="legacy")


def test_aws_clouds_ec2_client_is_built_with_the_retry_config(monkeypatch):
    pytest.importorskip("airflow.providers.amazon")
    from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = AwsCloud(aws_conn_id=None).ec2("us-east-1")
    retries = client.meta.config.retries
    assert retries["mode"] == "adaptive" and retries["total_max_attempts"] == 7  # botocore counts the first call
