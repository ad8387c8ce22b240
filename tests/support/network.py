"""Local ports and Airflow's REST API, for the tests that start servers of their own."""

from __future__ import annotations

import json
import socket
import time
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AirflowApi:
    """Airflow's REST API on 127.0.0.1 as the UI calls it (the simple auth manager, every user an
    admin): a run triggered here starts at once, where `airflow dags trigger` would start a CLI
    process that imports Airflow. The token is fetched on the first call."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"
        self._token: str | None = None

    def healthy(self) -> bool:
        """Whether the api-server answers its health check now."""
        try:
            urllib.request.urlopen(f"{self.base}/api/v2/monitor/health", timeout=5).close()
        except OSError:
            return False
        return True

    def wait_until_up(self, timeout: float, logs=lambda: "") -> None:
        """Until the api-server answers; RuntimeError with `logs()` (its services' log tails) after `timeout` s."""
        stop = time.monotonic() + timeout
        while not self.healthy():
            if time.monotonic() >= stop:
                raise RuntimeError(f"the api-server did not answer in {timeout:.0f} s\n{logs()}")
            time.sleep(1)

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        if self._token is None:
            with urllib.request.urlopen(f"{self.base}/auth/token", timeout=30) as answer:
                self._token = json.load(answer)["access_token"]
        request = urllib.request.Request(
            f"{self.base}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.load(answer)

    def trigger(self, dag_id: str, conf: dict | None = None, run_id: str | None = None) -> str:
        """A manual run of `dag_id` with `conf` (under `run_id` when given); its run id."""
        body = {"logical_date": None, "conf": conf or {}}
        if run_id:
            body["dag_run_id"] = run_id
        return self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)["dag_run_id"]
