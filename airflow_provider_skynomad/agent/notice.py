"""Where the interruption notice comes from: SIGTERM always, plus the cloud's metadata service.

- ``aws``: IMDSv2 — a session token from ``PUT /latest/api/token``, then
  ``GET /latest/meta-data/spot/instance-action`` (404 = no interruption; 200 = ``{"action",
  "time"}``, the instant the instance goes) and ``GET /latest/meta-data/events/recommendations/
  rebalance`` (200 = an elevated risk: upload a checkpoint now, keep running).
- ``gcp``: ``GET /computeMetadata/v1/instance/preempted`` with ``Metadata-Flavor: Google``
  (``TRUE`` = preempted; the instance has 30 s).
- ``simulated``: the simulated cloud's supervisor sends SIGTERM at the trace's capacity loss and
  SIGKILL after the notice (``SKYNOMAD_NOTICE_SECONDS``, in wall seconds).
- ``none``: SIGTERM only.

The metadata services are polled from a thread, so a long checkpoint upload on the main thread
never delays the reaction: `on_notice` (which forwards SIGTERM to the workload) runs as soon as
the notice is seen. The base URLs come from ``SKYNOMAD_IMDS_ENDPOINT`` and
``SKYNOMAD_GCE_METADATA_ENDPOINT`` so tests can serve the notice from localhost.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime

KINDS = ("aws", "gcp", "simulated", "none")
NOTICE_SECONDS_ENV = "SKYNOMAD_NOTICE_SECONDS"
IMDS_ENV = "SKYNOMAD_IMDS_ENDPOINT"
GCE_METADATA_ENV = "SKYNOMAD_GCE_METADATA_ENDPOINT"
DEFAULT_IMDS = "http://169.254.169.254"
DEFAULT_GCE_METADATA = "http://metadata.google.internal"
DEFAULT_NOTICE_SECONDS = {"aws": 120.0, "gcp": 30.0, "simulated": 30.0, "none": 30.0}
_HTTP_TIMEOUT_SECONDS = 2.0
_IMDS_TOKEN_TTL_SECONDS = 21600


def notice_seconds(kind: str, environ=os.environ) -> float:
    """How long the instance lives after a notice: ``SKYNOMAD_NOTICE_SECONDS`` if set, else the cloud's."""
    text = environ.get(NOTICE_SECONDS_ENV)
    if text is None:
        return DEFAULT_NOTICE_SECONDS[kind]
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"{NOTICE_SECONDS_ENV} must be a number of seconds ≥ 0, got {text!r}")
    return value


class Notice:
    """Set once, by whoever sees the interruption first; `at`/`deadline` are wall times."""

    def __init__(self, seconds: float, on_notice: Callable[[], None] = lambda: None):
        self.seconds = seconds
        self.on_notice = on_notice
        self.event = threading.Event()
        self.at: float | None = None
        self.deadline: float | None = None
        self.source: str | None = None
        self.rebalance_at: float | None = None
        self._once = threading.Lock()

    def give(self, source: str, deadline: float | None = None) -> None:
        """Record the notice (first caller wins; safe from a signal handler) and call `on_notice`."""
        if not self._once.acquire(blocking=False):
            return  # given already, or being given right now
        now = time.time()
        self.at, self.source = now, source
        self.deadline = deadline if deadline is not None and deadline > now else now + self.seconds
        self.event.set()
        self.on_notice()

    def install_signal_handlers(self) -> None:
        """SIGTERM (and SIGINT, for a run by hand) is a notice of `seconds`, whatever the kind.

        The notice is given from a thread of its own, never from a signal handler. A Python handler
        runs on the main thread between two of its bytecodes, possibly while that thread holds a lock
        the notice takes (an Event's, inside `Event.wait` or `clear`: the agent's loop is there 50
        times a second), and would then wait for itself forever, the workload never stopped. So the
        handler does nothing; the interpreter's own C handler writes the signal's number into a pipe
        (`signal.set_wakeup_fd`) as the signal arrives, and the thread reads it. Call from the main
        thread, before the workload starts.
        """
        read_fd, write_fd = os.pipe()  # not inherited by the workload
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        for signum in SIGNALS:
            signal.signal(signum, _caught)
        threading.Thread(target=self._give_on_signals, args=(read_fd,), name="skynomad-signals", daemon=True).start()

    def _give_on_signals(self, read_fd: int) -> None:
        while data := os.read(read_fd, 64):
            for signum in data:
                if signum in SIGNALS:
                    self.give(signal.Signals(signum).name.lower())


SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _caught(signum, frame) -> None:
    """Nothing to do on the main thread: the wakeup pipe carries the signal to `Notice`'s thread."""


class MetadataWatcher:
    """Polls a cloud's metadata service every `poll_seconds` from a daemon thread."""

    def __init__(self, kind: str, notice: Notice, poll_seconds: float, on_rebalance: Callable[[], None], log):
        self.kind, self.notice, self.poll_seconds = kind, notice, poll_seconds
        self.on_rebalance, self.log = on_rebalance, log
        env = IMDS_ENV if kind == "aws" else GCE_METADATA_ENV
        self.base = os.environ.get(env, DEFAULT_IMDS if kind == "aws" else DEFAULT_GCE_METADATA).rstrip("/")
        self._token: str | None = None
        self._last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"skynomad-{kind}-notice", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self.notice.event.is_set():
            try:
                self.check()
                self._last_error = None
            except Exception as exc:  # the service may be down for a moment: say so once, keep polling
                message = f"{type(exc).__name__}: {exc}"
                if message != self._last_error:
                    self.log(f"cannot read the {self.kind} interruption notice from {self.base}: {message}")
                self._last_error = message
            self.notice.event.wait(self.poll_seconds)

    def check(self) -> None:
        """One poll: give the notice (or flag a rebalance) if the service reports one."""
        if self.kind == "aws":
            self._check_aws()
        else:
            self._check_gcp()

    # -- AWS IMDSv2 -------------------------------------------------------------------------

    def _check_aws(self) -> None:
        code, body = self._aws_get("/latest/meta-data/spot/instance-action")
        if code == 200:
            self.notice.give("aws:spot/instance-action", _parse_time(body))
            return
        if self.notice.rebalance_at is None:
            code, _ = self._aws_get("/latest/meta-data/events/recommendations/rebalance")
            if code == 200:
                self.notice.rebalance_at = time.time()
                self.on_rebalance()

    def _aws_get(self, path: str) -> tuple[int, str]:
        for _ in range(2):  # a second time with a fresh token if the first was refused
            if self._token is None:
                code, token = _http(
                    "PUT",
                    self.base + "/latest/api/token",
                    {"X-aws-ec2-metadata-token-ttl-seconds": str(_IMDS_TOKEN_TTL_SECONDS)},
                )
                if code != 200:
                    raise RuntimeError(f"IMDSv2 token request answered {code}")
                self._token = token
            code, body = _http("GET", self.base + path, {"X-aws-ec2-metadata-token": self._token})
            if code != 401:
                return code, body
            self._token = None
        raise RuntimeError(f"IMDSv2 refused a fresh token for {path}")

    # -- GCE metadata -----------------------------------------------------------------------

    def _check_gcp(self) -> None:
        code, body = _http("GET", self.base + "/computeMetadata/v1/instance/preempted", {"Metadata-Flavor": "Google"})
        if code != 200:
            raise RuntimeError(f"instance/preempted answered {code}")
        if body.strip().upper() == "TRUE":
            self.notice.give("gcp:instance/preempted")


def _http(method: str, url: str, headers: dict[str, str]) -> tuple[int, str]:
    """(status, body) of one request; HTTP errors are statuses, not exceptions (404 means "none")."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, method=method, headers=headers, data=b"" if method == "PUT" else None)
    try:
        with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT_SECONDS) as response:
            return response.status, response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def _parse_time(body: str) -> float | None:
    """The wall time of an instance-action's ``time`` (e.g. 2026-12-01T12:00:00Z), None if unreadable."""
    try:
        text = json.loads(body)["time"]
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, KeyError, TypeError, AttributeError):
        print(f"skynomad agent: unreadable spot/instance-action {body[:200]!r}", file=sys.stderr, flush=True)
        return None
