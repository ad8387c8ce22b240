"""AWS end to end on localhost: moto in server mode (EC2 + S3), the real operator through ``dag.test()``.

Every instance the job launches really runs: an "instance runner" watches moto's EC2 for new
running instances, decodes each one's user data (the boot script, clouds/aws/boot.py) and runs it
as a local bash process, with ``AWS_ENDPOINT_URL`` = moto, the keys of its own instance-profile
session (moto's STS ``AssumeRole`` of the instance role named by the instance id: its
``aws:userid`` is ``ROLE_ID:INSTANCE_ID``, the name of the only prefix the instance policy lets it
write), its own IMDS stub (tests/support/metadata_stub.py) and a ``shutdown`` on PATH that records
the instance powering itself off. What
EC2 would do on its own, the runner does through moto's in-process backend: an instance whose
boot script powered off ends with ``Client.InstanceInitiatedShutdown``; one whose agent exited 3
after the interruption notice is reclaimed with ``Server.SpotInstanceTermination``. An instance's
user data runs `BOOT_SECONDS` after it shows as running (EC2 boots take tens of seconds; the job
copies the checkpoint right after a launch returns, as it would on EC2).

The scenario: the planner launches in us-east-1 (the cheaper spot market); a retried launch with the
same client token returns the same group; the tags are on the instances; the IMDS stub serves a spot
interruption notice → the agent uploads its last checkpoint to S3 → the instance is reclaimed → the
planner retries us-east-1 while the market rows it has read still show it cheap (a refused launch is
free), EC2 refuses it for capacity (from the notice on, moto's us-east-1 refuses launches and the
market rows show no capacity there) → the job relaunches in us-west-2 → the newest checkpoint is
copied to us-west-2's bucket → the job finishes with the model bit-identical to an uninterrupted
local run. Printed: notice → last checkpoint uploaded, preemption → relaunch, and the EC2/S3 calls
the Airflow side made per decision step (counted by a botocore event hook).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

moto = pytest.importorskip("moto")

HERE = Path(__file__).resolve().parent
from tests.support import metadata_stub  # noqa: E402
from tests.support.aws_fixtures import BUCKET, PROFILE, SIGNING_SECRET, account, client  # noqa: E402
from tests.support.network import free_port

from .conftest import DAGS_FOLDER  # noqa: E402

EAST, WEST = "us-east-1", "us-west-2"
ZONE_A, ZONE_B = "us-east-1a", "us-west-2a"
INSTANCE_TYPE = "g4dn.xlarge"
WORK_HOURS = 0.0075  # 27 s of work on the wall clock: 20 steps of 1.35 s (workload.default_steps)
STEP_SECONDS = 6.0  # decision_step_minutes=0.1 in the DAG
NOTICE_AFTER_STEP = 4  # the notice comes once this many steps are checkpointed in us-east-1
BOOT_SECONDS = 3.0  # an instance's boot before its user data runs (EC2: tens of seconds)
PROBE_SECONDS = 0.5  # from the notice on, the probe rows of the outage come this often (OutageProbes)


def load_dag(name: str):
    spec = importlib.util.spec_from_file_location(f"test_dag_{name}", DAGS_FOLDER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def market_rows(at: pd.Timestamp, zone: str, available: int, spot_usd: float) -> dict:
    return {
        "observed_at": at,
        "cloud": "aws",
        "region": zone[:-1],
        "zone": zone,
        "instance_type": INSTANCE_TYPE,
        "accelerator": "T4",
        "accelerator_count": 1,
        "requested": 1,
        "available": available,
        "spot_price": spot_usd,
        "on_demand_price": 5.0,  # dear: the job goes to the other region's spot, not on-demand
    }


def seed_market(until: pd.Timestamp) -> None:
    """Six hours of probes every 10 min: spot in both zones, us-east-1a the cheaper."""
    from airflow_provider_skynomad.market.store.table import MarketTable

    times = pd.date_range(end=until, periods=36, freq="10min")
    rows = [market_rows(t, ZONE_A, 1, 0.16) for t in times] + [market_rows(t, ZONE_B, 1, 0.25) for t in times]
    table = MarketTable()
    table.create()
    table.append(pd.DataFrame(rows))
    table.close()


class OutageProbes:
    """What the probe DAG sees once us-east-1a reclaimed the job's instance: no spot capacity there,
    and dear (us-west-2a as before). A round of rows every `PROBE_SECONDS` until the run ends, as
    probes would keep coming.

    One round would not do: the planner's grid takes a row at the first decision tick at or after
    it, the last row of a market in a tick winning, and the job writes its own observations (the
    preemption, each refused launch) at the price it saw last. One of those landing in the notice's
    tick would then hide the dear price for good, and the job would wait for us-east-1a's cheap
    spot until its deadline."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="outage-probes", daemon=True)

    def start(self) -> None:
        if not self._thread.is_alive():
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _loop(self) -> None:
        from airflow_provider_skynomad.market.store.table import MarketTable

        table = MarketTable()
        try:
            while True:
                at = pd.Timestamp.now(tz="UTC")
                table.append(pd.DataFrame([market_rows(at, ZONE_A, 0, 2.0), market_rows(at, ZONE_B, 1, 0.25)]))
                if self._stop.wait(PROBE_SECONDS):
                    return
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(exc))
        finally:
            table.close()


class CallCounter:
    """Every AWS API call the Airflow side makes, by (service, operation): a botocore ``before-parameter-build``
    hook registered on each client created while counting (the test's own clients are made before)."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self.on = False

    def install(self, monkeypatch) -> None:
        import botocore.session

        real = botocore.session.Session.create_client
        counter = self

        def create_client(session, service_name, *args, **kwargs):
            made = real(session, service_name, *args, **kwargs)

            def record(model, **_):
                if counter.on:
                    counter.calls[(made.meta.service_model.endpoint_prefix, model.name)] += 1

            made.meta.events.register("before-parameter-build", record)
            return made

        monkeypatch.setattr(botocore.session.Session, "create_client", create_client)


class InstanceRunner:
    """Runs each new running instance's user data as a local process (see the module docstring)."""

    def __init__(self, root: Path, env: dict[str, str], s3_east, s3_west, endpoint_url: str) -> None:
        from moto.backends import get_backend
        from moto.core import DEFAULT_ACCOUNT_ID

        self.ec2 = {r: get_backend("ec2")[DEFAULT_ACCOUNT_ID][r] for r in (EAST, WEST)}
        self.root, self.env, self.s3_east, self.s3_west = root, env, s3_east, s3_west
        self.sts, self.iam = client("sts", EAST, endpoint_url), client("iam", EAST, endpoint_url)
        self.userids: dict[str, str] = {}  # instance → its session's aws:userid (ROLE_ID:INSTANCE_ID)
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        (self.bin / "shutdown").write_text('#!/bin/bash\ntouch "$SKYNOMAD_TEST_SHUTDOWN_DIR/$SKYNOMAD_TEST_INSTANCE"\n')
        (self.bin / "shutdown").chmod(0o755)
        self.shutdowns = root / "shutdowns"
        self.shutdowns.mkdir()
        self.procs: dict[str, subprocess.Popen] = {}
        self.stubs: dict[str, metadata_stub.MetadataStub] = {}
        self.seen: dict[str, float] = {}  # instance → wall time it first showed as running (launched)
        self.started: dict[str, tuple[str, float]] = {}  # instance → (region, wall time its process started)
        self.ended: dict[str, tuple[str, float, int]] = {}  # instance → (state reason, wall time, exit code)
        self.notice_at: float | None = None
        self._looked = 0.0
        self.noticed: str | None = None
        self.keys_in_west_at_relaunch: list[str] = []
        self.on_notice = lambda: None
        self.on_reclaimed = lambda: None  # when EC2 reclaims the noticed instance
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="instance-runner", daemon=True)

    def start(self) -> InstanceRunner:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
        for stub in self.stubs.values():
            stub.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(repr(exc))
            time.sleep(0.2)

    def _tick(self) -> None:
        for region, backend in self.ec2.items():
            for inst in list(backend.all_instances()):
                if inst.id not in self.procs and inst._state.name == "running" and inst.user_data is not None:
                    self.seen.setdefault(inst.id, time.time())
                    if time.time() - self.seen[inst.id] >= BOOT_SECONDS:
                        self._boot(region, inst)
                elif inst.id in self.procs and inst.id not in self.ended:
                    self._watch(inst)

    def _boot(self, region: str, inst) -> None:
        if region == WEST:
            listed = self.s3_west.list_objects_v2(Bucket=BUCKET.format(region=WEST), Prefix="skynomad/")
            self.keys_in_west_at_relaunch = sorted(o["Key"] for o in listed.get("Contents", []))
        stub = self.stubs[inst.id] = metadata_stub.MetadataStub().start()
        role = self.iam.get_role(RoleName=PROFILE)["Role"]["Arn"]
        session = self.sts.assume_role(RoleArn=role, RoleSessionName=inst.id)  # what EC2 does for the profile
        self.userids[inst.id] = session["AssumedRoleUser"]["AssumedRoleId"]
        keys = session["Credentials"]
        env = {
            **self.env,
            "AWS_ACCESS_KEY_ID": keys["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": keys["SecretAccessKey"],
            "AWS_SESSION_TOKEN": keys["SessionToken"],
            "SKYNOMAD_IMDS_ENDPOINT": stub.url,
            "SKYNOMAD_TEST_INSTANCE": inst.id,
            "SKYNOMAD_TEST_SHUTDOWN_DIR": str(self.shutdowns),
        }
        log = (self.root / f"{inst.id}.log").open("w")
        self.procs[inst.id] = subprocess.Popen(
            ["bash", "-c", inst.user_data.decode()],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.started[inst.id] = (region, time.time())

    def _watch(self, inst) -> None:
        from moto.ec2.models.instances import StateReason

        proc = self.procs[inst.id]
        region = self.started[inst.id][0]
        if inst._state.name in ("shutting-down", "terminated"):  # terminated through the API: stop the "machine"
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
            self.ended[inst.id] = (inst.state_reason.code, time.time(), proc.wait(30))
            return
        if (
            region == EAST
            and self.notice_at is None
            and time.time() - self._looked > 1
            and self._east_step() >= NOTICE_AFTER_STEP
        ):
            self.notice_at = time.time()
            self.noticed = inst.id
            self.on_notice()
            self.stubs[inst.id].set_aws_notice()
        code = proc.poll()
        if code is None:
            return
        if (self.shutdowns / inst.id).exists():
            reason = (
                "Client.InstanceInitiatedShutdown: Instance initiated shutdown",
                "Client.InstanceInitiatedShutdown",
            )
        elif code == 3:
            reason = ("Server.SpotInstanceTermination: Spot instance termination", "Server.SpotInstanceTermination")
            self.on_reclaimed()
        else:
            reason = ("Server.InternalError: the machine died", "Server.InternalError")
        inst.terminate()
        inst.state_reason = StateReason(*reason)
        self.ended[inst.id] = (reason[1], time.time(), code)

    def _east_step(self) -> float:
        self._looked = time.time()
        east = next(i for i, (r, _) in self.started.items() if r == EAST)
        try:
            progress = self.s3_east.get_object(
                Bucket=BUCKET.format(region=EAST), Key=f"skynomad/{self._job}/{self.userids[east]}/progress.json"
            )
        except Exception:  # noqa: BLE001 - not there yet
            return -1
        return float(json.loads(progress["Body"].read())["step"])

    @property
    def _job(self) -> str:
        inst = self.ec2[EAST].get_instance(next(i for i, (r, _) in self.started.items() if r == EAST))
        return {t["key"]: t["value"] for t in inst.get_tags()}["skynomad:job-id"]


@pytest.fixture
def moto_server(monkeypatch, tmp_path):
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    url = f"http://127.0.0.1:{port}"
    reset = urllib.request.Request(f"{url}/moto-api/reset", method="POST")
    urllib.request.urlopen(reset, timeout=30).read()  # moto's state is per process, not per server
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": EAST,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        json.dumps({"conn_type": "aws", "extra": {"endpoint_url": url, "region_name": EAST}}),
    )
    yield url
    server.stop()


def use_aws_connection(monkeypatch, options: dict) -> None:
    """The default SkyNomad connection on AWS (moto), with the test bucket and a signing secret."""
    extra = {
        "cloud": "aws",
        "checkpoint_bucket": BUCKET,
        "checkpoint_signing_secret": SIGNING_SECRET,
        "cloud_options": options,
    }
    monkeypatch.setenv("AIRFLOW_CONN_SKYNOMAD_DEFAULT", json.dumps({"conn_type": "skynomad", "extra": extra}))


def test_aws_job_survives_a_spot_interruption_and_moves_region(
    airflow_db, skynomad_home, moto_server, tmp_path, monkeypatch
):
    from airflow_provider_skynomad.cli.demo import run_dag_test, task_result
    from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud
    from airflow_provider_skynomad.clouds.base import LaunchRequest
    from airflow_provider_skynomad.workload import default_steps
    from airflow_provider_skynomad.workload.train import MODEL_FILE, train

    acct = account({EAST: [ZONE_A, "us-east-1b"], WEST: [ZONE_B]}, endpoint_url=moto_server)
    options = acct.cloud_options(agent_python=sys.executable, agent_work_dir=str(tmp_path / "disks"))
    use_aws_connection(monkeypatch, options)
    now = pd.Timestamp.now(tz="UTC")
    seed_market(until=now)
    s3_east, s3_west = client("s3", EAST, moto_server), client("s3", WEST, moto_server)
    instance_env = {  # the runner adds each instance's profile session: never in the user data
        "PATH": f"{tmp_path / 'runner' / 'bin'}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "AWS_ENDPOINT_URL": moto_server,
    }
    runner = InstanceRunner(tmp_path / "runner", instance_env, s3_east, s3_west, moto_server)

    probes = OutageProbes()

    from moto.ec2.exceptions import EC2ClientError

    def no_capacity(*args, **kwargs):
        raise EC2ClientError(
            "InsufficientInstanceCapacity",
            f"We currently do not have sufficient {INSTANCE_TYPE} capacity in the Availability Zone you requested.",
        )

    def notice():
        # From the notice on, us-east-1 has no spot capacity: EC2 refuses launches there (as it would).
        monkeypatch.setattr(runner.ec2[EAST], "run_instances", no_capacity)

    # The probe DAG's rows say so once the instance is reclaimed: rows during the notice would have the
    # planner move the job off the noticed group before EC2 takes it (a move, not the preemption this
    # test follows), whenever a busy box delays the agent's exit past a controller's look.
    runner.on_notice = notice
    runner.on_reclaimed = probes.start
    counter = CallCounter()
    counter.install(monkeypatch)
    runner.start()
    counter.on = True
    started = time.time()
    try:
        state, run_id = run_dag_test(load_dag("skynomad_aws_e2e"), run_conf={"work_hours": WORK_HOURS})
    finally:
        counter.on = False
        runner.stop()
        probes.stop()
    job_seconds = time.time() - started
    logs = {p.name: p.read_text()[-3000:] for p in (tmp_path / "runner").glob("*.log")}
    summary = task_result("skynomad_aws_e2e", run_id, "train")
    assert not runner.errors, runner.errors
    assert not probes.errors, probes.errors
    assert state == "success", (summary, logs)

    # Launched in us-east-1 first, then (after the notice) in us-west-2: one instance each, no duplicate.
    regions = [region for region, _ in sorted(runner.started.values(), key=lambda s: s[1])]
    assert regions == [EAST, WEST], (runner.started, logs)
    (east_id,) = [i for i, (r, _) in runner.started.items() if r == EAST]
    (west_id,) = [i for i, (r, _) in runner.started.items() if r == WEST]
    assert runner.ended[east_id][0] == "Server.SpotInstanceTermination" and runner.ended[east_id][2] == 3
    assert runner.ended[west_id][0] == "Client.InstanceInitiatedShutdown" and runner.ended[west_id][2] == 0
    assert summary["preemptions"] >= 1 and summary["migrations"] >= 1, summary

    # Tags on the instances; a retried launch with the first client token returns that same group.
    ec2 = client("ec2", EAST, moto_server)
    (east,) = [i for r in ec2.describe_instances(InstanceIds=[east_id])["Reservations"] for i in r["Instances"]]
    tags = {t["Key"]: t["Value"] for t in east["Tags"]}
    job_id = tags["skynomad:job-id"]
    assert job_id == summary["job_id"]
    assert {"skynomad-job", "skynomad-dag", "skynomad-run", "skynomad-task", "skynomad-try"} <= set(tags)
    assert tags["skynomad-dag"] == "skynomad_aws_e2e" and tags["skynomad-task"] == "train"
    cloud = AwsCloud(checkpoint_bucket=BUCKET, checkpoint_signing_secret=SIGNING_SECRET, **options)
    token = tags["skynomad:client-token"]
    retry = LaunchRequest("aws", EAST, ZONE_A, INSTANCE_TYPE, 1, True, token, command=("true",), job_id=job_id)
    assert cloud.launch(retry).instance_ids == (east_id,)
    assert len(ec2.describe_instances()["Reservations"]) == 1  # nothing new in us-east-1

    # The notice → the last checkpoint in S3 → restored in us-west-2 from the copied checkpoint.
    east_store, west_store = (f"skynomad/{job_id}/{runner.userids[i]}" for i in (east_id, west_id))
    assert runner.userids[east_id].endswith(f":{east_id}")  # each instance wrote under its own session's name
    east_run = json.loads(
        s3_east.get_object(Bucket="ckpt-us-east-1", Key=f"{east_store}/runs/{token}.json")["Body"].read()
    )
    assert east_run["outcome"] == "preempted" and east_run["notice_source"]
    copied = [k for k in runner.keys_in_west_at_relaunch if k.endswith("MANIFEST.json") and "/checkpoints/" in k]
    assert copied, runner.keys_in_west_at_relaunch  # the checkpoint was in us-west-2 before its instance booted
    west_token = {t["Key"]: t["Value"] for t in _described(moto_server, west_id)["Tags"]}["skynomad:client-token"]
    west_run = json.loads(
        s3_west.get_object(Bucket="ckpt-us-west-2", Key=f"{west_store}/runs/{west_token}.json")["Body"].read()
    )
    assert west_run["outcome"] == "finished"
    assert west_run["restored_step"] == east_run["step"] >= NOTICE_AFTER_STEP

    # Bit-identical to an uninterrupted run.
    model = s3_west.get_object(Bucket="ckpt-us-west-2", Key=f"{west_store}/output/{MODEL_FILE}")["Body"].read()
    train(tmp_path / "reference", default_steps(WORK_HOURS), 0.0)
    assert model == (tmp_path / "reference" / MODEL_FILE).read_bytes()
    assert summary["output_dir"] == f"s3://ckpt-us-west-2/{west_store}/output/"

    # Figures.
    preempted_at = runner.ended[east_id][1]
    relaunched_at = runner.seen[west_id]
    steps = job_seconds / STEP_SECONDS
    ec2_calls = sum(n for (service, _), n in counter.calls.items() if service == "ec2")
    s3_calls = sum(n for (service, _), n in counter.calls.items() if service == "s3")
    print(
        f"\nAWS e2e: {job_seconds:.1f} s, ~{steps:.0f} decision steps; notice → last checkpoint uploaded "
        f"{east_run['notice_to_upload_seconds']:.2f} s (agent's record; runner saw the notice at step "
        f"{NOTICE_AFTER_STEP}); preemption → relaunch {relaunched_at - preempted_at:.1f} s"
    )
    print(f"AWS API calls from the Airflow side: EC2 {ec2_calls}, S3 {s3_calls} → per decision step "
          f"EC2 {ec2_calls / steps:.2f}, S3 {s3_calls / steps:.2f}")  # fmt: skip
    for (service, operation), n in sorted(counter.calls.items()):
        print(f"  {service}:{operation} {n}")
    from tests.unit.clouds.aws.test_aws_iam_policy import uncovered  # the policy in docs/ covers every call made

    assert uncovered(counter.calls) == []


def _described(url: str, instance_id: str) -> dict:
    ec2 = client("ec2", WEST, url)
    return [i for r in ec2.describe_instances(InstanceIds=[instance_id])["Reservations"] for i in r["Instances"]][0]


def test_bad_aws_settings_fail_the_task_before_any_launch_naming_each_setting(
    airflow_db, skynomad_home, moto_server, monkeypatch, capfd
):
    """A zone with no subnet, an unknown template and a missing bucket, through the operator."""
    from airflow_provider_skynomad.cli.demo import run_dag_test

    acct = account({EAST: [ZONE_A], WEST: [ZONE_B]}, endpoint_url=moto_server, buckets=False)
    client("s3", EAST, moto_server).create_bucket(Bucket="ckpt-us-east-1")  # us-west-2's is missing
    options = acct.cloud_options(
        launch_template={EAST: "lt-0123456789abcdef0", WEST: acct.templates[WEST]},
        subnets={ZONE_A: acct.subnets[ZONE_A]},  # none for us-west-2a
    )
    use_aws_connection(monkeypatch, options)
    seed_market(until=pd.Timestamp.now(tz="UTC"))
    state, _ = run_dag_test(load_dag("skynomad_aws_e2e"), run_conf={"work_hours": WORK_HOURS})
    out = capfd.readouterr()
    text = out.out + out.err
    assert state == "failed"
    for problem in (
        "cloud_options.launch_template: lt-0123456789abcdef0 does not exist in us-east-1",
        "cloud_options.subnets has no subnet for us-west-2a",
        "checkpoint_bucket: bucket ckpt-us-west-2 (for us-west-2) does not exist",
    ):
        assert problem in text, problem
    for region in (EAST, WEST):  # nothing was launched to find out
        assert client("ec2", region, moto_server).describe_instances()["Reservations"] == []
