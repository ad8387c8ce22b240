"""An agent with an instance-profile session, as EC2 gives it, under the shipped instance policy.

The session is moto's STS ``AssumeRole`` of the instance role with the instance id as the session
name: its ``aws:userid`` is ``ROLE_ID:INSTANCE_ID``, as AWS documents for an EC2 role session, and
it carries no session tag. moto does not enforce IAM, so every S3 call a client of the instance
makes is first checked against docs/iam/skynomad-instance-policy.json by the evaluator of
test_iam_isolation (with the ``aws:userid`` STS gives for the request's own access key) and
refused with AccessDenied, as S3 would, when the policy refuses it. The agent runs in this process
(its workload is a subprocess), from the very store URIs the controller's boot script gives it.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.unit.clouds.aws.test_iam_isolation import DOCS, allowed

moto = pytest.importorskip("moto")

REGION, ZONE = "us-east-1", "us-east-1a"
MOTO_ACCOUNT = "123456789012"
WORKLOAD = """
import time
from airflow_provider_skynomad.agent.workload import Checkpoints
ckpt = Checkpoints(handle_sigterm=False)
start = ckpt.step
for step in range(start, start + 3):
    ckpt.save(step + 1, 10, lambda d: (d / "model.txt").write_text(str(step + 1)))
    time.sleep(0.3)
"""


def instance_policy() -> dict:
    """The shipped file as a user applies it: moto's account, the fixture's buckets, the default prefix."""
    text = (DOCS / "skynomad-instance-policy.json").read_text()
    text = text.replace("ACCOUNT_ID", MOTO_ACCOUNT).replace("CHECKPOINT_PREFIX", "skynomad")
    return json.loads(text.replace("acme-skynomad-ckpt-", "ckpt-"))


class Enforcer:
    """Checks each S3 call of an instance's client against the policy; records what it decided."""

    ACTIONS = {
        "PutObject": "s3:PutObject",
        "CreateMultipartUpload": "s3:PutObject",
        "UploadPart": "s3:PutObject",
        "CompleteMultipartUpload": "s3:PutObject",
        "GetObject": "s3:GetObject",
        "HeadObject": "s3:GetObject",
        "DeleteObject": "s3:DeleteObject",
    }

    def __init__(self, policy: dict) -> None:
        self.policy = policy
        self.userids: dict[str, str] = {}  # access key id → the session's aws:userid
        self.decided: list[tuple[str, str, str, bool]] = []  # (userid, action, resource, allowed)

    def attach(self, client) -> None:
        client.meta.events.register(
            "before-parameter-build.s3", lambda model, params, **_: self.check(client, model, params)
        )

    def check(self, client, model, params) -> None:
        userid = self.userids.get(client._request_signer._credentials.access_key)
        context = {"s3:ResourceAccount": MOTO_ACCOUNT, **({"aws:userid": userid} if userid else {})}
        bucket = params.get("Bucket", "")
        if model.name in ("ListObjectsV2", "ListObjects"):
            checks = [("s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": params.get("Prefix", "")})]
        elif model.name == "DeleteObjects":
            objects = params["Delete"]["Objects"]
            checks = [("s3:DeleteObject", f"arn:aws:s3:::{bucket}/{o['Key']}", {}) for o in objects]
        else:
            checks = [(self.ACTIONS.get(model.name, f"s3:{model.name}"), f"arn:aws:s3:::{bucket}/{params['Key']}", {})]
        for action, resource, extra in checks:
            ok = allowed(self.policy, action, resource, **context, **extra)
            self.decided.append((userid or "", action, resource, ok))
            if not ok:
                error = {"Error": {"Code": "AccessDenied", "Message": f"{action} on {resource} refused"}}
                raise ClientError(error, model.name)


@pytest.fixture
def aws(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", "aws://")
    with moto.mock_aws():
        yield


@contextmanager
def as_instance(monkeypatch, enforcer: Enforcer, instance_id: str):
    """This process as `instance_id`: its instance-profile session's keys in the environment, and
    every client made meanwhile checked by `enforcer`. Yields the session's aws:userid."""
    import botocore.session

    from tests.support.aws_fixtures import PROFILE

    role = boto3.client("iam").get_role(RoleName=PROFILE)["Role"]
    session = boto3.client("sts").assume_role(RoleArn=role["Arn"], RoleSessionName=instance_id)
    keys = session["Credentials"]
    userid = session["AssumedRoleUser"]["AssumedRoleId"]
    assert userid == f"{role['RoleId']}:{instance_id}"  # ROLE_ID:INSTANCE_ID, as EC2's role sessions
    enforcer.userids[keys["AccessKeyId"]] = userid
    real = botocore.session.Session.create_client

    def create_client(self, *args, **kwargs):
        made = real(self, *args, **kwargs)
        if made.meta.service_model.service_name == "s3":
            enforcer.attach(made)
        return made

    with monkeypatch.context() as m:
        m.setenv("AWS_ACCESS_KEY_ID", keys["AccessKeyId"])
        m.setenv("AWS_SECRET_ACCESS_KEY", keys["SecretAccessKey"])
        m.setenv("AWS_SESSION_TOKEN", keys["SessionToken"])
        m.setattr(botocore.session.Session, "create_client", create_client)
        m.setattr(boto3, "DEFAULT_SESSION", None)  # a fresh default session reads these keys, as on the instance
        yield userid


def agent_args(script: str) -> list[str]:
    """``run --store ... [--restore-from ...]`` as the boot script gives them to the agent."""
    line = next(line for line in script.splitlines() if "airflow_provider_skynomad.agent run" in line)
    words = shlex.split(line.split(" --work-dir ")[0].split("\n")[-1])
    return words[words.index("run") :]


def agent_key(script: str) -> str:
    """The job's key as the boot script hands it to the agent's command alone (hex)."""
    from airflow_provider_skynomad.agent.signing import KEY_ENV

    line = next(line for line in script.splitlines() if "airflow_provider_skynomad.agent run" in line)
    return next(w for w in shlex.split(line) if w.startswith(f"{KEY_ENV}=")).split("=", 1)[1]


def run_agent(script: str, work: Path, run_id: str) -> int:
    import os

    from airflow_provider_skynomad.agent.cli import main
    from airflow_provider_skynomad.agent.signing import KEY_ENV

    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    os.environ[KEY_ENV] = agent_key(script)  # the agent reads it, then drops it from its environment
    try:
        argv = [*agent_args(script), "--work-dir", str(work), "--run-id", run_id, "--poll-seconds", "0.05"]
        return main([*argv, "--", sys.executable, "-c", WORKLOAD])
    finally:
        os.environ.pop(KEY_ENV, None)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_break_6_an_agent_with_an_instance_profile_session_keeps_its_checkpoints_and_no_one_elses(
    aws, monkeypatch, tmp_path
):
    from airflow_provider_skynomad.agent.store import CheckpointStore
    from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud
    from airflow_provider_skynomad.clouds.base import LaunchRequest
    from tests.support.aws_fixtures import BUCKET, SIGNING_SECRET, account

    acct = account({REGION: [ZONE]})
    cloud = AwsCloud(  # the controller: the deployment's rights, and the secret each job's key comes from
        checkpoint_bucket=BUCKET, checkpoint_signing_secret=SIGNING_SECRET, **acct.cloud_options()
    )
    enforcer = Enforcer(instance_policy())
    job = "sn-0123456789abcdef-1"

    def launch(token: str):
        request = LaunchRequest(
            "aws", REGION, ZONE, "g4dn.xlarge", 1, True, token, command=("python", "train.py"), job_id=job
        )
        return cloud.launch(request), cloud.user_data(request)

    first, script = launch("tok-a")
    assert "--restore-from" not in script  # nothing to restore yet
    with as_instance(monkeypatch, enforcer, first.instance_ids[0]) as user_a:
        assert run_agent(script, tmp_path / "a", "tok-a") == 0
    own_a = f"s3://ckpt-us-east-1/skynomad/{job}/{user_a}"
    assert cloud.progress(first) == pytest.approx(0.3)  # the controller finds the instance's own store
    written = {(a, r.rsplit("/", 1)[-1]) for u, a, r, ok in enforcer.decided if ok and a != "s3:ListBucket"}
    assert {("s3:PutObject", "MANIFEST.json"), ("s3:PutObject", "tok-a.json"), ("s3:PutObject", "model.txt")} <= written
    assert all(ok for *_, ok in enforcer.decided), [d for d in enforcer.decided if not d[3]]
    assert any(a == "s3:DeleteObject" for u, a, r, ok in enforcer.decided if u == user_a)  # it pruned its own
    assert any(a == "s3:ListBucket" for u, a, r, ok in enforcer.decided if u == user_a)

    second, script = launch("tok-b")
    assert f"--restore-from {own_a} " in script  # the newest checkpoint at launch: instance A's
    with as_instance(monkeypatch, enforcer, second.instance_ids[0]) as user_b:
        assert run_agent(script, tmp_path / "b", "tok-b") == 0
        assert all(ok for *_, ok in enforcer.decided), [d for d in enforcer.decided if not d[3]]
        # Another instance's prefix, the job's owner record, another deployment's prefix: refused.
        others = CheckpointStore(own_a)
        for attempt in (
            lambda: others.backend.put_bytes(b'{"step": 10, "total_steps": 10}', "progress.json"),
            lambda: others.backend.delete(["checkpoints/0000000003/MANIFEST.json"]),
            lambda: CheckpointStore(f"s3://ckpt-us-east-1/skynomad/{job}").backend.put_bytes(
                b"{}", "skynomad-owner.json"
            ),
            lambda: CheckpointStore(f"s3://ckpt-us-east-1/skynomad-staging/{job}/{user_b}").backend.put_bytes(
                b"{}", "progress.json"
            ),
            lambda: CheckpointStore(f"s3://ckpt-us-east-1/skynomad-staging/{job}").read_progress(),
        ):
            with pytest.raises(ClientError, match="AccessDenied"):
                attempt()
    refused = [(a, r) for u, a, r, ok in enforcer.decided if not ok]
    assert len(refused) == 5 and all(u == user_b for u, *_, ok in enforcer.decided[-5:]), refused
    run_b = cloud.store.run_record(REGION, f"{job}/{user_b}", "tok-b")
    run_a = cloud.store.run_record(REGION, f"{job}/{user_a}", "tok-a")
    assert run_b["outcome"] == "finished" and run_b["restored_step"] == run_a["step"] == 3  # A's last checkpoint
    assert cloud.progress(second) == pytest.approx(0.6)  # restored 3, then 3 more steps
    assert cloud.store.newest_store(REGION, job)[0] == f"{job}/{user_b}"
    assert cloud.store.read_json(REGION, f"{job}/{user_a}", "progress.json")["step"] == 3  # A's untouched

    # An instance of another job may write under its own name in this job's prefix (the policy names
    # the session, not the job): a store full of claims signed with its own job's key counts for nothing.
    third, script = launch("tok-c")
    with as_instance(monkeypatch, enforcer, "i-0anotherjobs") as user_c:
        from airflow_provider_skynomad.agent.signing import derive_job_key
        from airflow_provider_skynomad.agent.snapshot import hash_all

        planted = CheckpointStore(
            f"s3://ckpt-us-east-1/skynomad/{job}/{user_c}", key=derive_job_key(SIGNING_SECRET, "sn-0123456789abcdef-2")
        )
        staged = tmp_path / "planted"
        staged.mkdir()
        (staged / "model.txt").write_text("forged")
        planted.continue_after(99)  # numbered far above anything this job wrote
        planted.upload_checkpoint(staged, hash_all(staged), 10, 10)
        planted.write_run("tok-c", {"outcome": "finished", "exit_code": 0, "stderr_tail": []})
    planted_calls = [ok for u, a, r, ok in enforcer.decided if u == user_c and a == "s3:PutObject"]
    assert planted_calls and all(planted_calls)  # the policy lets it: only the signature refuses it
    assert cloud.store.newest_store(REGION, job)[0] == f"{job}/{user_b}"  # not the planted checkpoint 100
    assert cloud.store.progress(REGION, f"{job}/{user_c}") is None
    assert cloud.store.run_record(REGION, f"{job}/{user_c}", "tok-c") is None
    fourth, script = launch("tok-d")
    assert f"--restore-from s3://ckpt-us-east-1/skynomad/{job}/{user_b} " in script
    assert cloud.progress(third) == pytest.approx(0.6)  # before its rank 0 wrote: the checkpoint it restores from
