"""The shipped IAM policies refuse what belongs to another job or another deployment.

moto does not evaluate IAM policies (no `simulate_custom_policy`), so `allowed` below is a small
evaluator of the policy grammar the files use: Allow/Deny statements, action and resource
wildcards, ``${aws:PrincipalTag/...}`` variables (a missing key matches nothing), and the
StringEquals, StringLike and Null condition operators (keys AND-ed, values OR-ed). An explicit
Deny wins; nothing allowed is refused. The GCP credential access boundary is a CEL expression of
``startsWith`` / ``endsWith`` / ``&&`` / ``||`` / ``!``, evaluated the same way.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[4] / "docs" / "iam"
ACCOUNT, DEPLOYMENT = "111122223333", "prod"
BUCKET = "acme-skynomad-ckpt-us-east-1"


def load(name: str) -> dict:
    text = (DOCS / name).read_text().replace("ACCOUNT_ID", ACCOUNT).replace("DEPLOYMENT_ID", DEPLOYMENT)
    return json.loads(text)


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
    return fnmatch.fnmatchcase(value, pattern)


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


def obj(job: str, name: str = "checkpoints/0000000001/MANIFEST.json", bucket: str = BUCKET) -> str:
    return f"arn:aws:s3:::{bucket}/skynomad/{job}/{name}"


JOB_A, JOB_B = "sn-aaaaaaaaaaaaaaaa-1", "sn-bbbbbbbbbbbbbbbb-2"
SESSION_A = {"aws:PrincipalTag/skynomad-job": JOB_A, "s3:ResourceAccount": ACCOUNT}


@pytest.mark.parametrize("action", ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"])
def test_a_jobs_instances_reach_their_own_prefix_and_not_another_jobs(action):
    policy = load("skynomad-instance-policy.json")
    assert allowed(policy, action, obj(JOB_A), **SESSION_A)
    assert not allowed(policy, action, obj(JOB_B), **SESSION_A)  # the forged-checkpoint break
    assert not allowed(policy, action, obj(JOB_A[:-1]), **SESSION_A)  # a prefix of its id is another job
    assert not allowed(policy, action, obj(JOB_A), **{**SESSION_A, "s3:ResourceAccount": "999988887777"})
    assert not allowed(policy, action, obj(JOB_A), **{"s3:ResourceAccount": ACCOUNT})  # an untagged session


def test_listing_is_its_own_prefix_only_and_the_owner_record_is_read_only():
    policy = load("skynomad-instance-policy.json")
    bucket = f"arn:aws:s3:::{BUCKET}"
    assert allowed(policy, "s3:ListBucket", bucket, **SESSION_A, **{"s3:prefix": f"skynomad/{JOB_A}/checkpoints/"})
    assert not allowed(policy, "s3:ListBucket", bucket, **SESSION_A, **{"s3:prefix": f"skynomad/{JOB_B}/"})
    assert not allowed(policy, "s3:ListBucket", bucket, **SESSION_A, **{"s3:prefix": "skynomad/"})
    assert allowed(policy, "s3:GetObject", obj(JOB_A, "skynomad-owner.json"), **SESSION_A)
    assert not allowed(policy, "s3:PutObject", obj(JOB_A, "skynomad-owner.json"), **SESSION_A)


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


def _cel(expression: str, name: str, list_prefix: str = "") -> bool:
    """The boundary's CEL subset, as Python: startsWith/endsWith on resource.name and the list prefix."""
    text = expression.replace("resource.name", "name")
    text = text.replace("api.getAttribute('storage.googleapis.com/objectListPrefix', '')", "list_prefix")
    text = text.replace(".startsWith(", ".startswith(").replace(".endsWith(", ".endswith(")
    text = text.replace("&&", " and ").replace("||", " or ").replace("!", " not ")
    assert re.fullmatch(r"[\w\s().'/,-]*", text), text  # only what the translation above produced
    return bool(eval(text, {"__builtins__": {}}, {"name": name, "list_prefix": list_prefix}))  # noqa: S307


def test_the_gcp_access_boundary_refuses_another_jobs_prefix():
    text = (DOCS / "skynomad-gcp-job-access-boundary.json").read_text()
    (rule,) = json.loads(text.replace("BUCKET", "ckpt").replace("JOB_ID", JOB_A))["accessBoundary"][
        "accessBoundaryRules"
    ]
    expression = rule["availabilityCondition"]["expression"]
    own = f"projects/_/buckets/ckpt/objects/skynomad/{JOB_A}"
    assert _cel(expression, f"{own}/checkpoints/1/MANIFEST.json")
    assert not _cel(expression, f"projects/_/buckets/ckpt/objects/skynomad/{JOB_B}/checkpoints/1/MANIFEST.json")
    assert not _cel(expression, f"{own}/skynomad-owner.json")
    assert _cel(expression, "projects/_/buckets/ckpt", list_prefix=f"skynomad/{JOB_A}/checkpoints/")
    assert not _cel(expression, "projects/_/buckets/ckpt", list_prefix=f"skynomad/{JOB_B}/")
