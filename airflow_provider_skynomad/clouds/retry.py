"""Bounded retries with backoff and jitter for cloud API calls.

Cloud APIs throttle (``RequestLimitExceeded``, HTTP 429), time out and return 5xx errors under
load; each of those may succeed if sent again a moment later, and sending it again is safe
because every call the runtime makes is idempotent: a launch carries its client token (the cloud
answers a repeat with the same group), terminate and copy are safe twice, the rest only read.
`RetryingCloud` wraps any `Cloud` so every caller (worker, trigger, probe DAG, cleanup) gets the
same retries without each call site writing its own loop.

Retries are bounded in number *and* in wall time: a trigger step or a worker visit must not
hang on a dead endpoint. What still fails after them is a `CloudApiError` whose message says in
plain words which call, where, how often it was tried and what the cloud last said, so the job
can fail naming its cause. A `CapacityError` is an answer, not a fault: it is never retried here
(the planner learns from it and tries elsewhere).

AWS's own client retries too (`botocore_retry_config`): botocore's standard/adaptive mode
absorbs short throttling inside one call, these retries the longer stretches between calls.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from airflow_provider_skynomad.clouds.base import CapacityError, Cloud
from airflow_provider_skynomad.clouds.wrapped import ApiCall, WrappedCloud
from airflow_provider_skynomad.exceptions import CloudApiError, TransientCloudError

log = logging.getLogger(__name__)
T = TypeVar("T")

# Error codes AWS and GCP use for "slow down" and "try again" (botocore ClientError codes, HTTP status).
TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "SlowDown",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "Unavailable",
        "RequestTimeout",
        "RequestTimeoutException",
        "EC2ThrottledException",
        "PriorRequestNotComplete",
    }
)
TRANSIENT_HTTP_STATUS = frozenset({429, 500, 502, 503, 504})
# Exception classes (by name: neither botocore nor google-api-core is imported for this) that mean
# the request or its answer was lost on the way.
TRANSIENT_CLASSES = frozenset(
    {
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        "TooManyRequests",
        "ServiceUnavailable",
        "DeadlineExceeded",
        "InternalServerError",
        "BadGateway",
        "GatewayTimeout",
        "RetryError",
    }
)
BOTO_MODES = ("standard", "adaptive")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry one call.

    The delay before retry i is drawn uniformly from [0, min(max_delay, base · 2^i)] ("full
    jitter"): many jobs throttled at the same instant do not come back at the same instant.

    :param attempts: calls in all, the first included (1 = no retry).
    :param base_delay_seconds: the backoff's first ceiling.
    :param max_delay_seconds: the cap of one delay.
    :param budget_seconds: wall time after which no new attempt starts, whatever `attempts` says.
    """

    attempts: int = 4
    base_delay_seconds: float = 0.25
    max_delay_seconds: float = 4.0
    budget_seconds: float = 15.0

    def __post_init__(self) -> None:
        if not (isinstance(self.attempts, int) and self.attempts >= 1):
            raise ValueError(f"attempts must be a whole number ≥ 1, got {self.attempts!r}")
        for name in ("base_delay_seconds", "max_delay_seconds", "budget_seconds"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value < float("inf")):
                raise ValueError(f"{name} must be a finite number ≥ 0, got {value!r}")

    def delay(self, retry: int, draw: Callable[[], float] = random.random) -> float:
        return draw() * min(self.max_delay_seconds, self.base_delay_seconds * 2**retry)


def is_transient(exc: BaseException) -> bool:
    """Whether sending the same call again may succeed (see the module docstring)."""
    if isinstance(exc, CapacityError):
        return False
    if isinstance(exc, (TransientCloudError, TimeoutError, ConnectionError)):
        return True
    if type(exc).__name__ in TRANSIENT_CLASSES:
        return True
    response = getattr(exc, "response", None)  # botocore ClientError
    if isinstance(response, dict):
        error = response.get("Error") or {}
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return error.get("Code") in TRANSIENT_CODES or status in TRANSIENT_HTTP_STATUS
    code = getattr(exc, "code", None)  # google.api_core GoogleAPICallError: the HTTP status
    return isinstance(code, int) and code in TRANSIENT_HTTP_STATUS


def call_with_retries(
    fn: Callable[[], T],
    what: str,
    policy: RetryPolicy = RetryPolicy(),
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    draw: Callable[[], float] = random.random,
) -> T:
    """`fn()`, sent again after a transient failure, at most `policy.attempts` times within its budget.

    :param what: the call in words for messages ("launch in us-east4-a").
    :raises CloudApiError: the last transient failure, once the retries are spent.
    """
    started = clock()
    for attempt in range(1, policy.attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc):
                raise
            spent = clock() - started
            wait = policy.delay(attempt - 1, draw)
            if attempt == policy.attempts or spent + wait > policy.budget_seconds:
                raise CloudApiError(
                    f"the cloud API did not answer {what} after {attempt} attempt(s) over {spent:.1f} s ({_said(exc)})"
                ) from exc
            log.debug("%s failed transiently (%s); attempt %d in %.2f s", what, _said(exc), attempt + 1, wait)
            sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _said(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


class RetryingCloud(WrappedCloud):
    """`inner` with every API call retried per `policy`; anything else is `inner`'s own attribute."""

    def __init__(self, inner: Cloud, policy: RetryPolicy | None = None):
        super().__init__(inner)
        self.policy = policy or RetryPolicy()

    def api(self, call: ApiCall, make: Callable[[], T]) -> T:
        return call_with_retries(make, f"{call.words} ({self.name})", self.policy)


def with_retries(cloud: Cloud, policy: RetryPolicy | None = None) -> Cloud:
    """`cloud` behind `RetryingCloud` (once: an already wrapped cloud is returned as it is)."""
    return cloud if isinstance(cloud, RetryingCloud) else RetryingCloud(cloud, policy)


def botocore_retry_config(connection_config=None, mode: str = "adaptive", max_attempts: int = 6):
    """A botocore `Config` with client-side retries for EC2/S3 hooks.

    The connection's own ``config_kwargs`` (its botocore config, `connection_config`) win where they
    set ``retries``: a user who tuned retries keeps them; everything else of theirs is kept too.
    """
    from botocore.config import Config

    if mode not in BOTO_MODES:
        raise ValueError(f"botocore retry mode must be one of {BOTO_MODES}, got {mode!r}")
    ours = Config(retries={"mode": mode, "max_attempts": int(max_attempts)})
    if connection_config is None:
        return ours
    if getattr(connection_config, "retries", None):
        return connection_config
    return connection_config.merge(ours)
