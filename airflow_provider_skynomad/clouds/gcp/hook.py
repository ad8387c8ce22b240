"""The google provider's ComputeEngineHook plus the few Compute Engine clients it does not hand out.

`GcpCloud` inserts, reads and deletes instances through the hook's own verbs; the extra clients
(zone operations for preemptions, regional templates, machine types, images, subnetworks for
`check`) are built the way the hook builds its instance client: the connection's credentials and
the provider's client info. Clients are cached on the hook, so one decision step opens no new
HTTP session. Tests subclass this and override `get_compute_client` (every client goes through it).
"""

from __future__ import annotations

from typing import Any

from airflow.providers.google.cloud.hooks.compute import ComputeEngineHook


class GceHook(ComputeEngineHook):
    """ComputeEngineHook with `get_compute_client(name)`: any ``google.cloud.compute_v1`` client by class name."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._compute_clients: dict[str, Any] = {}

    def get_compute_client(self, name: str):
        """A cached ``compute_v1.<name>`` (e.g. ``ZoneOperationsClient``) on the connection's credentials."""
        if name not in self._compute_clients:
            from google.cloud import compute_v1

            cls = getattr(compute_v1, name)
            self._compute_clients[name] = cls(credentials=self.get_credentials(), client_info=self.client_info)
        return self._compute_clients[name]

    def get_compute_instance_client(self):
        """The hook's InstancesClient, cached (the provider builds a new one per call)."""
        return self.get_compute_client("InstancesClient")

    def get_compute_instance_template_client(self):
        """The hook's InstanceTemplatesClient, cached."""
        return self.get_compute_client("InstanceTemplatesClient")
