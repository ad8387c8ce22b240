"""A localhost stand-in for the AWS instance metadata service (IMDSv2) and the GCE metadata server.

The workload agent reads its interruption notice from these services (docs/agent.md); tests point it
here with ``SKYNOMAD_IMDS_ENDPOINT`` / ``SKYNOMAD_GCE_METADATA_ENDPOINT`` set to ``stub.url``. The stub
checks what the real services check, so an agent that forgets the IMDSv2 token or the
``Metadata-Flavor`` header fails against it as it would on an instance:

- ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds`` → a token (400 without it);
- ``GET /latest/meta-data/spot/instance-action`` → 404 until `set_aws_notice`, then
  ``{"action": ..., "time": ...}``; 401 without a valid ``X-aws-ec2-metadata-token``;
- ``GET /latest/meta-data/events/recommendations/rebalance`` → 404 until `set_rebalance`, then
  ``{"noticeTime": ...}``; same token check;
- ``GET /computeMetadata/v1/instance/preempted`` → ``FALSE`` until `set_gcp_preempted`, then ``TRUE``;
  403 without ``Metadata-Flavor: Google``.

Usage (``from tests.support import metadata_stub``)::

    stub = metadata_stub.MetadataStub().start()
    env = {"SKYNOMAD_IMDS_ENDPOINT": stub.url, "SKYNOMAD_GCE_METADATA_ENDPOINT": stub.url}
    ...
    stub.set_aws_notice()            # a spot interruption two minutes from now
    ...
    stub.stop()

`requests` counts the requests served per path (e.g. to assert the agent polled), `rejected` the
ones refused for a missing token or header.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_PATH = "/latest/api/token"
INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
GCP_PREEMPTED_PATH = "/computeMetadata/v1/instance/preempted"
AWS_NOTICE_SECONDS = 120


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class MetadataStub:
    """Both metadata services on one ``http://127.0.0.1:<free port>`` (`url`), served from a thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: set[str] = set()
        self._instance_action: dict | None = None
        self._rebalance: dict | None = None
        self._gcp_preempted = False
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.requests: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> MetadataStub:
        """Listen on a free localhost port; returns self (so ``stub = MetadataStub().start()``)."""
        if self._server is not None:
            return self
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metadata-stub", daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:40123`` (no trailing slash)."""
        if self._server is None:
            raise RuntimeError("MetadataStub.url: call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        """Stop serving and free the port (idempotent)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> MetadataStub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what the services say ----------------------------------------------------------------

    def set_aws_notice(self, action: str = "terminate", time: datetime | str | None = None) -> None:
        """Serve a spot interruption notice: `action` (terminate, stop, hibernate) at `time`
        (default: `AWS_NOTICE_SECONDS` from now, as EC2 gives it)."""
        if time is None:
            time = datetime.now(UTC) + timedelta(seconds=AWS_NOTICE_SECONDS)
        with self._lock:
            self._instance_action = {"action": action, "time": time if isinstance(time, str) else _iso(time)}

    def set_rebalance(self, time: datetime | str | None = None) -> None:
        """Serve a rebalance recommendation (an elevated risk of interruption; default: noticed now)."""
        time = datetime.now(UTC) if time is None else time
        with self._lock:
            self._rebalance = {"noticeTime": time if isinstance(time, str) else _iso(time)}

    def set_gcp_preempted(self, preempted: bool = True) -> None:
        """Make ``instance/preempted`` answer TRUE (or FALSE again)."""
        with self._lock:
            self._gcp_preempted = bool(preempted)

    def clear(self) -> None:
        """No notice of any kind (tokens already issued stay valid)."""
        with self._lock:
            self._instance_action = self._rebalance = None
            self._gcp_preempted = False

    # -- the HTTP side --------------------------------------------------------------------------

    def _handler_class(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):  # noqa: A002 - the base class's name
                pass  # quiet: tests read `requests` instead

            def _send(self, code: int, body: str = "", content_type: str = "text/plain") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _path(self) -> str:
                return self.path.split("?", 1)[0]

            def do_PUT(self):
                path = self._path()
                with stub._lock:
                    stub.requests[path] += 1
                if path != TOKEN_PATH:
                    return self._send(404, "not found")
                if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    with stub._lock:
                        stub.rejected[path] += 1
                    return self._send(400, "missing X-aws-ec2-metadata-token-ttl-seconds")
                token = secrets.token_urlsafe(24)
                with stub._lock:
                    stub._tokens.add(token)
                self._send(200, token)

            def do_GET(self):
                path = self._path()
                with stub._lock:
                    stub.requests[path] += 1
                    action, rebalance, preempted = stub._instance_action, stub._rebalance, stub._gcp_preempted
                    token_ok = self.headers.get("X-aws-ec2-metadata-token") in stub._tokens
                if path in (INSTANCE_ACTION_PATH, REBALANCE_PATH):
                    if not token_ok:
                        with stub._lock:
                            stub.rejected[path] += 1
                        return self._send(401, "unauthorized: IMDSv2 needs a token")
                    found = action if path == INSTANCE_ACTION_PATH else rebalance
                    if found is None:
                        return self._send(404, "not found")
                    return self._send(200, json.dumps(found), "application/json")
                if path == GCP_PREEMPTED_PATH:
                    if self.headers.get("Metadata-Flavor") != "Google":
                        with stub._lock:
                            stub.rejected[path] += 1
                        return self._send(403, "missing Metadata-Flavor: Google")
                    return self._send(200, "TRUE" if preempted else "FALSE")
                self._send(404, "not found")

        return Handler
