"""The shipped IAM policies refuse what belongs to another instance, job or deployment.

moto does not evaluate IAM policies (no `simulate_custom_policy`), so `allowed` below is a small
evaluator of the policy grammar the files use: Allow/Deny statements, action and resource
wildcards as IAM reads them (``*`` any run of characters, ``/`` included; ``?`` one character;
nothing else special), ``${...}`` variables filled from the request's context (``${aws:userid}``
is the session's ``ROLE_ID:INSTANCE_ID`` for an instance profile; a missing key matches
nothing), and the StringEquals, StringLike and Null condition operators (keys AND-ed, values
OR-ed). An explicit Deny wins; nothing allowed is refused. The GCP credential access boundary is
a CEL expression of ``startsWith`` / ``endsWith`` / ``&&`` / ``||`` / ``!``, evaluated the same way.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[4] / "docs" / "iam"
ACCOUNT, DEPLOYMENT = "111122223333", "prod"
BUCKET = "acme-skynomad-ckpt-us-east-1"


PREFIX = "skynomad/prod"  # the deployment's checkpoint_prefix (CHECKPOINT_PREFIX in the files)


def load(name: str, prefix: str = PREFIX) -> dict:
    text = (DOCS / name).read_text().replace("ACCOUNT_ID", ACCOUNT).replace("DEPLOYMENT_ID", DEPLOYMENT)
    return json.loads(text.replace("CHECKPOINT_PREFIX", prefix))


def _resolve(pattern: str, context: dict) -> str | None:
    """`pattern` with its ${...} variables filled from `context`; None when one is missing."""
    missing = False

    def fill(match):
        nonlocal missing
        if match[1] not in context:
            missing = True
            return ""
        return context[match[1]]

    text = re.sub(r"\$\{([^}]+)\}", fill, pattern)
    return None if missing else text


def _like(value: str, pattern: str) -> bool:
    """IAM's wildcard match: ``*`` any characters (``/`` too), ``?`` one, the rest literal."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, flags=re.S) is not None


def _condition_holds(condition: dict, context: dict) -> bool:
    for operator, tests in condition.items():
        for key, wanted in tests.items():
            values = wanted if isinstance(wanted, list) else [wanted]
            if operator == "Null":
                if (key not in context) != (str(values[0]).lower() == "true"):
                    return False
                continue
            if key not in context:
                return False
            resolved = [_resolve(str(v), context) for v in values]
            if operator == "StringEquals" and context[key] not in resolved:
                return False
            if operator == "StringLike" and not any(r is not None and _like(context[key], r) for r in resolved):
                return False
            if operator not in ("StringEquals", "StringLike"):
                raise AssertionError(f"the evaluator does not know condition operator {operator}")
    return True


def _matches(statement: dict, action: str, resource: str, context: dict) -> bool:
    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    if not any(_like(action, a) for a in actions):
        return False
    patterns = [_resolve(r, context) for r in resources]
    if not any(p is not None and _like(resource, p) for p in patterns):
        return False
    return _condition_holds(statement.get("Condition", {}), context)


def allowed(policy: dict, action: str, resource: str, **context: str) -> bool:
    hits = [s["Effect"] for s in policy["Statement"] if _matches(s, action, resource, context)]
    return "Deny" not in hits and "Allow" in hits


def obj(
    job: str, name: str = "checkpoints/0000000001/MANIFEST.json", bucket: str = BUCKET, prefix: str = PREFIX
) -> str:
    return f"arn:aws:s3:::{bucket}/{prefix}/{job}/{name}"


JOB_A, JOB_B = "sn-aaaaaaaaaaaaaaaa-1", "sn-bbbbbbbbbbbbbbbb-2"
ROLE_ID = "AROAEXAMPLEROLEID0001"  # the instance role's unique id
USER_A, USER_B = f"{ROLE_ID}:i-0aaaaaaaaaaaaaaaa", f"{ROLE_ID}:i-0bbbbbbbbbbbbbbbb"
# An instance-profile session as EC2 gives it: no session tags, aws:userid = ROLE_ID:INSTANCE_ID.
SESSION_A = {"aws:userid": USER_A, "s3:ResourceAccount": ACCOUNT}
WRITES = ["s3:PutObject", "s3:DeleteObject"]


def own(user: str = USER_A, job: str = JOB_A, name: str = "checkpoints/0000000001/MANIFEST.json", **kw) -> str:
    """An object of the instance store `<prefix>/<job>/<user>/` (the agent's own, for `user`'s session)."""
    return obj(job, f"{user}/{name}", **kw)


@pytest.mark.parametrize("action", WRITES)
def test_break_6_an_instance_profile_session_writes_its_own_prefix_and_no_other_instances(action):
    policy = load("skynomad-instance-policy.json")
    for name in ("checkpoints/0000000001/files/model.pkl", "checkpoints/0000000001/MANIFEST.json", "progress.json"):
        assert allowed(policy, action, own(name=name), **SESSION_A)  # untagged: EC2 mints no session tag
    assert allowed(policy, action, own(job=JOB_B), **SESSION_A)  # its name in any job: nobody reads it there
    assert not allowed(policy, action, own(USER_B), **SESSION_A)  # another instance of its job
    assert not allowed(policy, action, own(USER_B, JOB_B), **SESSION_A)  # another job's instance
    assert not allowed(policy, action, obj(JOB_A, "progress.json"), **SESSION_A)  # the job's own prefix
    assert not allowed(policy, action, own(f"{ROLE_ID}:i-0aaaaaaaaaaaaaaa"), **SESSION_A)  # a prefix of its name
    # IAM's `*` spans '/': its name deeper in another's key is not its prefix.
    assert not allowed(policy, action, own(USER_B, name=f"checkpoints/9/{JOB_A}/{USER_A}/x"), **SESSION_A)
    assert not allowed(policy, action, own(USER_B, name=f"x/{PREFIX}/{JOB_A}/{USER_A}/y"), **SESSION_A)
    assert not allowed(policy, action, own(), **{**SESSION_A, "s3:ResourceAccount": "999988887777"})
    assert not allowed(policy, action, own(), **{"s3:ResourceAccount": ACCOUNT})  # a session without a userid


def test_break_6_an_instance_reads_and_lists_within_its_deployments_prefix():
    policy = load("skynomad-instance-policy.json")
    bucket = f"arn:aws:s3:::{BUCKET}"
    assert allowed(policy, "s3:GetObject", own(USER_B, JOB_B), **SESSION_A)  # restore what another wrote
    assert allowed(policy, "s3:GetObject", obj(JOB_A, "skynomad-owner.json"), **SESSION_A)
    assert allowed(policy, "s3:ListBucket", bucket, **SESSION_A, **{"s3:prefix": f"{PREFIX}/{JOB_A}/{USER_B}/"})
    assert not allowed(policy, "s3:ListBucket", bucket, **SESSION_A, **{"s3:prefix": "skynomad/"})
    assert not allowed(policy, "s3:ListBucket", bucket, **SESSION_A)  # the whole bucket


@pytest.mark.parametrize("action", ["s3:GetObject", *WRITES])
def test_break_6_another_deployments_prefix_is_refused(action):
    """Deployment `prod` (prefix skynomad/prod) against `staging` (skynomad/staging) in the same bucket."""
    instance, airflow = load("skynomad-instance-policy.json"), load("skynomad-airflow-policy.json")
    theirs = own(USER_A, prefix="skynomad/staging")  # even under its own session's name
    assert not allowed(instance, action, theirs, **SESSION_A)
    assert not allowed(instance, action, obj(JOB_B, "progress.json", prefix="skynomad/staging"), **SESSION_A)
    assert not allowed(
        instance, action, own(prefix="skynomad/staging", name=f"{PREFIX}/{JOB_A}/{USER_A}/x"), **SESSION_A
    )
    account = {"s3:ResourceAccount": ACCOUNT}
    assert allowed(airflow, action, own(), **account)
    assert not allowed(airflow, action, theirs, **account)
    assert not allowed(airflow, action, obj(JOB_B, "skynomad-owner.json", prefix="skynomad/staging"), **account)
    assert not allowed(airflow, action, obj(JOB_B, f"{PREFIX}/x", prefix="skynomad/staging"), **account)
    bucket = f"arn:aws:s3:::{BUCKET}"
    assert not allowed(instance, "s3:ListBucket", bucket, **SESSION_A, **{"s3:prefix": "skynomad/staging/"})


@pytest.mark.parametrize("action", WRITES)
def test_break_6_the_owner_record_is_written_by_the_airflow_side_never_by_an_instance(action):
    instance, airflow = load("skynomad-instance-policy.json"), load("skynomad-airflow-policy.json")
    assert not allowed(instance, action, obj(JOB_A, "skynomad-owner.json"), **SESSION_A)
    assert not allowed(instance, action, own(name="skynomad-owner.json"), **SESSION_A)  # not even in its own
    assert allowed(airflow, action, obj(JOB_A, "skynomad-owner.json"), **{"s3:ResourceAccount": ACCOUNT})


def test_break_6_the_policies_name_no_session_tag():
    """Nothing mints a session tag: a policy that needs one refuses every call of an instance."""
    for name in ("skynomad-instance-policy.json", "skynomad-airflow-policy.json"):
        assert "PrincipalTag" not in (DOCS / name).read_text()


def test_the_airflow_side_launches_and_ends_only_its_own_deployments_resources():
    policy = load("skynomad-airflow-policy.json")
    instance = f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/i-0123"
    ours = {"aws:ResourceTag/skynomad-deployment": DEPLOYMENT}
    job = {**ours, "aws:ResourceTag/skynomad:client-token": "sn-x-1"}
    assert allowed(policy, "ec2:TerminateInstances", instance, **job)
    assert allowed(policy, "ec2:TerminateInstances", instance, **ours, **{"aws:ResourceTag/skynomad:purpose": "probe"})
    theirs = {**job, "aws:ResourceTag/skynomad-deployment": "staging"}
    assert not allowed(policy, "ec2:TerminateInstances", instance, **theirs)
    assert not allowed(
        policy, "ec2:TerminateInstances", instance, **ours, **{"aws:ResourceTag/skynomad:purpose": "web"}
    )
    assert not allowed(policy, "ec2:TerminateInstances", instance, **{"aws:ResourceTag/skynomad:client-token": "t"})
    launch = {"aws:RequestTag/skynomad-deployment": DEPLOYMENT}
    assert allowed(policy, "ec2:RunInstances", instance, **launch)
    assert not allowed(policy, "ec2:RunInstances", instance, **{"aws:RequestTag/skynomad-deployment": "staging"})
    assert not allowed(policy, "ec2:RunInstances", instance)  # an instance without the deployment tag
    assert allowed(policy, "ec2:RunInstances", f"arn:aws:ec2:us-east-1:{ACCOUNT}:subnet/subnet-1")
    assert not allowed(policy, "ec2:CreateTags", instance, **{"ec2:CreateAction": "CreateTags", **launch})
    checkpoint = obj(JOB_B, "skynomad-owner.json")
    assert allowed(policy, "s3:PutObject", checkpoint, **{"s3:ResourceAccount": ACCOUNT})
    assert not allowed(policy, "s3:PutObject", checkpoint, **{"s3:ResourceAccount": "999988887777"})


def test_request_probes_create_and_delete_only_this_deployments_tagged_probe_fleets():
    policy = load("skynomad-airflow-policy.json")
    fleet = f"arn:aws:ec2:us-east-1:{ACCOUNT}:fleet/fleet-0123"
    template = f"arn:aws:ec2:us-east-1:{ACCOUNT}:launch-template/lt-0123"
    probe = {"aws:RequestTag/skynomad-deployment": DEPLOYMENT, "aws:RequestTag/skynomad:purpose": "probe"}
    for action, resource in [("ec2:CreateFleet", fleet), ("ec2:CreateLaunchTemplate", template)]:
        assert allowed(policy, action, resource, **probe)
        assert not allowed(policy, action, resource, **{**probe, "aws:RequestTag/skynomad-deployment": "staging"})
        assert not allowed(policy, action, resource, **{"aws:RequestTag/skynomad-deployment": DEPLOYMENT})
        assert not allowed(policy, action, resource)  # untagged
    assert not allowed(policy, "ec2:CreateFleet", f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/i-1", **probe)
    for create in ("CreateFleet", "CreateLaunchTemplate"):
        assert allowed(policy, "ec2:CreateTags", fleet, **{"ec2:CreateAction": create, **probe})
        assert not allowed(
            policy,
            "ec2:CreateTags",
            fleet,
            **{"ec2:CreateAction": create, **probe, "aws:RequestTag/skynomad:purpose": "job"},
        )
    ours = {"aws:ResourceTag/skynomad-deployment": DEPLOYMENT, "aws:ResourceTag/skynomad:purpose": "probe"}
    for action, resource in [("ec2:DeleteFleets", fleet), ("ec2:DeleteLaunchTemplate", template)]:
        assert allowed(policy, action, resource, **ours)
        assert not allowed(policy, action, resource, **{**ours, "aws:ResourceTag/skynomad-deployment": "staging"})
        assert not allowed(policy, action, resource, **{"aws:ResourceTag/skynomad-deployment": DEPLOYMENT})
    # A request fleet's instances carry the probe tags from its template: ended by the probe rule,
    # and an untagged instance (a spot request's race winner) still cannot be ended.
    instance = f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/i-0456"
    assert allowed(policy, "ec2:TerminateInstances", instance, **ours)
    assert not allowed(policy, "ec2:TerminateInstances", instance)
    assert not allowed(policy, "ec2:RequestSpotInstances", "*", **probe)  # not granted at all


def test_the_evaluator_refuses_what_no_statement_allows():
    policy = {"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/${x}/*"}]}
    assert allowed(policy, "s3:GetObject", "arn:aws:s3:::b/1/k", x="1")
    assert not allowed(policy, "s3:GetObject", "arn:aws:s3:::b/1/k")  # the variable's key is missing
    assert not allowed(policy, "s3:PutObject", "arn:aws:s3:::b/1/k", x="1")
    # IAM's wildcards: `*` spans '/', `?` is one character, brackets are literal (not fnmatch's sets).
    assert _like("arn:aws:s3:::b-x/p/q/k", "arn:aws:s3:::b-*/k")
    assert _like("a:b", "a?b") and not _like("ab", "a?b")
    assert not _like("b", "[ab]") and _like("[ab]", "[ab]")


def _cel(expression: str, name: str, list_prefix: str = "") -> bool:
    """The boundary's CEL subset, as Python: startsWith/endsWith on resource.name and the list prefix."""
    text = expression.replace("resource.name", "name")
    text = text.replace("api.getAttribute('storage.googleapis.com/objectListPrefix', '')", "list_prefix")
    text = text.replace(".startsWith(", ".startswith(").replace(".endsWith(", ".endswith(")
    text = text.replace("&&", " and ").replace("||", " or ").replace("!", " not ")
    assert re.fullmatch(r"[\w\s().'/,-]*", text), text  # only what the translation above produced
    return bool(eval(text, {"__builtins__": {}}, {"name": name, "list_prefix": list_prefix}))  # noqa: S307


def test_break_6_the_gcp_instance_binding_is_the_deployments_prefix_without_owner_records():
    text = (DOCS / "skynomad-gcp-instance-binding.json").read_text()
    text = text.replace("BUCKET", "ckpt").replace("CHECKPOINT_PREFIX", PREFIX)
    (binding,) = json.loads(text)["bindings"]
    expression = binding["condition"]["expression"]
    objects = "projects/_/buckets/ckpt/objects"
    assert _cel(expression, f"{objects}/{PREFIX}/{JOB_A}/checkpoints/1/MANIFEST.json")
    # Another job of the same deployment: reachable (signatures, not IAM, keep it from being forged).
    assert _cel(expression, f"{objects}/{PREFIX}/{JOB_B}/checkpoints/1/MANIFEST.json")
    assert not _cel(expression, f"{objects}/skynomad/staging/{JOB_B}/checkpoints/1/MANIFEST.json")
    assert not _cel(expression, f"{objects}/{PREFIX}/{JOB_A}/skynomad-owner.json")
    assert _cel(expression, "projects/_/buckets/ckpt", list_prefix=f"{PREFIX}/{JOB_A}/checkpoints/")
    assert not _cel(expression, "projects/_/buckets/ckpt", list_prefix="skynomad/staging/")
    assert not _cel(expression, "projects/_/buckets/ckpt", list_prefix="")
