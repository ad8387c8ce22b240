"""Compute Engine at the adapter boundary (there is no emulator), and GCS on the real emulator.

`FakeCompute` keeps instances in memory as real ``compute_v1.Instance`` messages (a body with a
wrong field name fails as it would against the API), records every request, honours
``request_id`` (a re-sent insert creates nothing), answers label filters and the
``compute.instances.preempted`` operation filter, and can "boot" an inserted instance by running
its startup script as a local process. `FakeGceHook` is the real ComputeEngineHook (its request
building runs) with only the clients and the operation wait replaced.

`gcs_emulator()` starts the ``gcp-storage-emulator`` package on a free localhost port.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from airflow.exceptions import AirflowException
from google.api_core.exceptions import NotFound
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from airflow_provider_skynomad.clouds.gcp.hook import GceHook
from tests.support.network import free_port

COMPUTE = "https://www.googleapis.com/compute/v1"


@contextmanager
def gcs_emulator(buckets=()):
    """The GCS emulator on localhost; STORAGE_EMULATOR_HOST is set while it runs. Yields its URL."""
    from gcp_storage_emulator.server import create_server

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    url = f"http://127.0.0.1:{port}"
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = url
    try:
        client = anonymous_storage_client()
        for name in buckets:
            client.create_bucket(name)
        yield url
    finally:
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = previous
        server.stop()


def anonymous_storage_client():
    from google.cloud import storage

    return storage.Client(project="proj", credentials=AnonymousCredentials())


class EmulatorGcsHook:
    """The google provider's GCSHook on an anonymous client (no connection lookup)."""

    def __new__(cls):
        from airflow.providers.google.cloud.hooks.gcs import GCSHook

        class Hook(GCSHook):
            def __init__(self):
                self._conn = anonymous_storage_client()

            def get_conn(self):
                return self._conn

        return Hook()


def _labels_filter(text: str) -> dict[str, str]:
    return dict(re.findall(r'labels\.(\S+) = "([^"]*)"', text or ""))


class FakeCompute:
    """In-memory Compute Engine for one project."""

    def __init__(self, project: str = "proj"):
        self.project = project
        self.instances: dict[tuple[str, str], compute_v1.Instance] = {}
        self.inserts: list[dict] = []  # every insert request, as the hook sent it
        self.created: list[dict] = []  # the inserts that created an instance (not deduplicated by request_id)
        self.created_wall: list[float] = []  # time.time() of each of `created`
        self.request_ids: dict[str, str] = {}  # request_id -> operation name
        self.operations: dict[str, dict] = {}  # name -> {"error": ...}
        self.zone_operations: list[compute_v1.Operation] = []
        self.full_zones: set[str] = set()
        self.capacity: dict[str, int] = {}  # zone -> instances it can still grant (absent: unlimited)
        self.templates: set[str] = set()  # global template names
        self.region_templates: set[tuple[str, str]] = set()
        self.images: set[str] = set()  # "project/name" or "project/family/F"
        self.subnetworks: set[tuple[str, str]] = set()
        self.machine_types: set[str] | None = None  # None: every machine type exists
        self.calls: Counter[str] = Counter()
        self.on_insert = None  # callable(zone, instance) after an instance is created
        # zone -> the statuses a new instance there goes through: the first at the insert, then one more
        # per `get` (absent: RUNNING at once)
        self.boot_statuses: dict[str, list[str]] = {}
        self.silent_zones: set[str] = set()  # inserts there neither create nor fail: no answer
        self.deleted_statuses: list[str] = []  # each deleted instance's status when it was deleted
        self._lock = threading.RLock()
        self._ops = 0
        self._next_statuses: dict[tuple[str, str], list[str]] = {}

    # -- what the tests do to it --------------------------------------------------------------

    def preempt(self, zone: str, name: str) -> None:
        """What Compute Engine does to a spot VM: log the preemption operation and stop the VM."""
        with self._lock:
            instance = self.instances[(zone, name)]
            instance.status = "STOPPING"
            self.zone_operations.append(
                compute_v1.Operation(
                    name=f"op-preempted-{name}",
                    operation_type="compute.instances.preempted",
                    target_link=f"{COMPUTE}/projects/{self.project}/zones/{zone}/instances/{name}",
                    zone=f"{COMPUTE}/projects/{self.project}/zones/{zone}",
                    status="DONE",
                )
            )

    def remove(self, zone: str, name: str) -> None:
        with self._lock:
            self.instances.pop((zone, name), None)

    def set_status(self, zone: str, name: str, status: str) -> None:
        with self._lock:
            if (zone, name) in self.instances:
                self.instances[(zone, name)].status = status

    # -- the API ------------------------------------------------------------------------------

    def _op(self, error: str | None = None, done: bool = True) -> SimpleNamespace:
        self._ops += 1
        name = f"operation-{self._ops}"
        self.operations[name] = {"error": error, "done": done}
        return SimpleNamespace(name=name)

    def insert(self, request, **_):
        self.calls["instances.insert"] += 1
        with self._lock:
            self.inserts.append(request)
            rid = request.get("request_id")
            if rid and rid in self.request_ids:
                return SimpleNamespace(name=self.request_ids[rid])  # the same operation again: nothing new
            zone, body = request["zone"], request["instance_resource"]
            left = self.capacity.get(zone)
            if zone in self.silent_zones:
                return self._op(done=False)
            if zone in self.full_zones or left == 0:
                return self._op("ZONE_RESOURCE_POOL_EXHAUSTED")
            template = request.get("source_instance_template")
            if template and template.rsplit("/", 1)[-1] not in self.templates | {n for _, n in self.region_templates}:
                return self._op(f"RESOURCE_NOT_FOUND: template {template}")
            if (zone, body["name"]) in self.instances:
                return self._op(f"alreadyExists: instance {body['name']} already exists")
            instance = compute_v1.Instance(body)  # the real message: an unknown field fails here
            statuses = list(self.boot_statuses.get(zone, ["RUNNING"]))
            instance.status = statuses.pop(0)
            self._next_statuses[(zone, body["name"])] = statuses
            instance.zone = f"{COMPUTE}/projects/{request['project']}/zones/{zone}"
            instance.self_link = f"{instance.zone}/instances/{body['name']}"
            self.instances[(zone, body["name"])] = instance
            self.created.append(request)
            self.created_wall.append(time.time())
            if left is not None:
                self.capacity[zone] = left - 1
            op = self._op()
            if rid:
                self.request_ids[rid] = op.name
        if self.on_insert is not None:
            self.on_insert(zone, instance)
        return op

    def get(self, request, **_):
        self.calls["instances.get"] += 1
        with self._lock:
            key = (request["zone"], request["instance"])
            if key not in self.instances:
                raise NotFound(f"instance {request['instance']} not found")
            instance = self.instances[key]
            if self._next_statuses.get(key):  # the VM boots on between reads: each read sees the next status
                instance.status = self._next_statuses[key].pop(0)
            return compute_v1.Instance.deserialize(compute_v1.Instance.serialize(instance))

    def delete(self, request, **_):
        self.calls["instances.delete"] += 1
        with self._lock:
            key = (request["zone"], request["instance"])
            if key not in self.instances:
                raise NotFound(f"The resource 'instances/{request['instance']}' was not found")
            self.deleted_statuses.append(str(self.instances[key].status))
            del self.instances[key]
            return self._op()

    def list(self, request, **_):
        self.calls["instances.list"] += 1
        wanted = _labels_filter(request.get("filter"))
        with self._lock:
            return [
                i
                for (zone, _), i in sorted(self.instances.items())
                if zone == request["zone"] and all(i.labels.get(k) == v for k, v in wanted.items())
            ]

    def aggregated_list(self, request, **_):
        self.calls["instances.aggregatedList"] += 1
        wanted = _labels_filter(request.get("filter"))
        with self._lock:
            zones = sorted({zone for zone, _ in self.instances})
            pages = []
            for zone in zones:
                listed = [
                    i
                    for (z, _), i in sorted(self.instances.items())
                    if z == zone and all(i.labels.get(k) == v for k, v in wanted.items())
                ]
                pages.append((f"zones/{zone}", SimpleNamespace(instances=listed)))
        return iter(pages)

    def list_operations(self, request, **_):
        self.calls["zoneOperations.list"] += 1
        found = dict(re.findall(r'(operationType|targetLink) = "([^"]*)"', request.get("filter") or ""))
        zone = f"{COMPUTE}/projects/{request['project']}/zones/{request['zone']}"
        with self._lock:
            return [
                op
                for op in self.zone_operations
                if op.zone == zone
                and op.operation_type == found.get("operationType", op.operation_type)
                and op.target_link == found.get("targetLink", op.target_link)
            ]

    def get_operation(self, request, **_):
        """A zone operation as Compute Engine reports it: DONE or RUNNING, with its errors."""
        self.calls["zoneOperations.get"] += 1
        found = self.operations[request["operation"]]
        operation = compute_v1.Operation(name=request["operation"], status="DONE" if found["done"] else "RUNNING")
        if found["error"]:
            code = found["error"].split(":")[0]
            operation.error = compute_v1.Error(errors=[compute_v1.Errors(code=code, message=found["error"])])
        return operation

    def get_template(self, request, **_):
        self.calls["instanceTemplates.get"] += 1
        if "region" in request:
            if (request["region"], request["instance_template"]) not in self.region_templates:
                raise NotFound(f"template {request['instance_template']} not found")
        elif request["instance_template"] not in self.templates:
            raise NotFound(f"template {request['instance_template']} not found")
        return compute_v1.InstanceTemplate(name=request["instance_template"])

    def get_image(self, request, **_):
        key = f"{request['project']}/family/{request['family']}" if "family" in request else None
        key = key or f"{request['project']}/{request['image']}"
        if key not in self.images:
            raise NotFound(f"image {key} not found")
        return compute_v1.Image(name=key)

    def get_subnetwork(self, request, **_):
        if (request["region"], request["subnetwork"]) not in self.subnetworks:
            raise NotFound(f"subnetwork {request['subnetwork']} not found")
        return compute_v1.Subnetwork(name=request["subnetwork"])

    def get_machine_type(self, request, **_):
        if self.machine_types is not None and request["machine_type"] not in self.machine_types:
            raise NotFound(f"machine type {request['machine_type']} not found in {request['zone']}")
        return compute_v1.MachineType(name=request["machine_type"])

    # -- clients ------------------------------------------------------------------------------

    def client(self, name: str):
        methods = {
            "InstancesClient": {
                "insert": self.insert,
                "get": self.get,
                "delete": self.delete,
                "list": self.list,
                "aggregated_list": self.aggregated_list,
            },
            "ZoneOperationsClient": {"list": self.list_operations, "get": self.get_operation},
            "InstanceTemplatesClient": {"get": self.get_template},
            "RegionInstanceTemplatesClient": {"get": self.get_template},
            "ImagesClient": {"get": self.get_image, "get_from_family": self.get_image},
            "SubnetworksClient": {"get": self.get_subnetwork},
            "MachineTypesClient": {"get": self.get_machine_type},
        }[name]
        return SimpleNamespace(**methods)


class FakeGceHook(GceHook):
    """The real hook's verbs over `FakeCompute`; no connection is looked up."""

    def __init__(self, compute: FakeCompute):  # noqa: D107 - the base's __init__ reads a connection
        self.gcp_conn_id = "fake"
        self.impersonation_chain = None
        self.compute = compute

    @property
    def project_id(self):
        return self.compute.project

    def get_credentials(self):
        return AnonymousCredentials()

    def get_compute_client(self, name: str):
        return self.compute.client(name)

    def _wait_for_operation_to_complete(self, project_id, operation_name, zone=None):
        """The real wait's error format, on the fake's operation."""
        error = self.compute.operations[operation_name]["error"]
        if error:
            raise AirflowException(f"400 BAD REQUEST: {{'code': '{error.split(':')[0]}', 'message': '{error}'}}")


class LocalBoot:
    """Boots each inserted instance as a local ``bash -c <startup-script>`` process.

    Each instance gets its own metadata stub (its own ``instance/preempted``) and power-off marker:
    the startup script's power-off command is ``touch "$SKYNOMAD_FAKE_POWER_OFF"``, after which the
    instance is TERMINATED. `preempt` does what Compute Engine does to a spot VM: notice via the
    metadata server, a logged ``compute.instances.preempted`` operation, ~30 s of soft-off, then
    the VM is deleted (``instance_termination_action = DELETE``).

    `boot_seconds`: the script starts that long after the insert (a VM boots for tens of seconds
    before its startup script runs; the job copies the checkpoint right after the insert returns,
    as it would on Compute Engine). 0: at once, inside the insert.
    """

    POWER_OFF = 'touch "$SKYNOMAD_FAKE_POWER_OFF"'

    def __init__(self, compute: FakeCompute, root: Path, env: dict[str, str], stub_factory, boot_seconds: float = 0.0):
        self.compute = compute
        self.root = root
        self.env = env
        self.stub_factory = stub_factory
        self.boot_seconds = boot_seconds
        self.processes: dict[str, subprocess.Popen] = {}
        self.stubs: dict[str, object] = {}
        self.booted_at: dict[str, float] = {}
        self.preempted_at: dict[str, float] = {}
        self.threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # a delayed boot and `stop` do not interleave
        compute.on_insert = self.boot

    def boot(self, zone: str, instance) -> None:
        items = {i.key: i.value for i in instance.metadata.items}
        script = items.get("startup-script")
        if not script:
            return
        if self.boot_seconds <= 0:
            self._run(zone, instance, script)
            return

        def later():
            if self._stopped.wait(self.boot_seconds):
                return
            with self._lock:
                if not self._stopped.is_set() and (zone, instance.name) in self.compute.instances:
                    self._run(zone, instance, script)  # not deleted while it booted

        thread = threading.Thread(target=later, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _run(self, zone: str, instance, script: str) -> None:
        stub = self.stub_factory()
        marker = self.root / f"{instance.name}.off"
        env = {**self.env, "SKYNOMAD_GCE_METADATA_ENDPOINT": stub.url, "SKYNOMAD_FAKE_POWER_OFF": str(marker)}
        log = open(self.root / f"{instance.name}.log", "wb")  # noqa: SIM115 - closed by the watcher
        process = subprocess.Popen(["bash", "-c", script], env=env, stdout=log, stderr=subprocess.STDOUT)
        self.processes[instance.name], self.stubs[instance.name] = process, stub
        self.booted_at[instance.name] = time.monotonic()

        def watch():
            process.wait()
            log.close()
            if marker.exists():
                self.compute.set_status(zone, instance.name, "TERMINATED")

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        self.threads.append(thread)

    def preempt(self, zone: str, name: str, soft_off_seconds: float = 30.0) -> None:
        self.preempted_at[name] = time.monotonic()
        self.stubs[name].set_gcp_preempted()
        self.compute.preempt(zone, name)
        process = self.processes[name]
        try:
            process.wait(timeout=soft_off_seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self.compute.remove(zone, name)

    def stop(self) -> None:
        with self._lock:
            self._stopped.set()
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
        for stub in self.stubs.values():
            stub.stop()
