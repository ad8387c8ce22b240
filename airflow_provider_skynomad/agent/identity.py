"""The name an instance writes its checkpoints under: its own cloud session's.

On AWS the instance policy (docs/iam/skynomad-instance-policy.json) lets an instance write and
delete only under a prefix named by its instance-profile session, ``${aws:userid}``, which for an
EC2 role session is ``ROLE_ID:INSTANCE_ID``. The boot script cannot know that name (the instance
id comes after the launch), so the store it gives the agent ends in the placeholder
``{aws:userid}``, filled here from ``sts:GetCallerIdentity`` (which needs no permission). A name
another principal could pick for itself is no risk as long as only EC2 may assume the role.
"""

from __future__ import annotations

import re

AWS_USERID = "{aws:userid}"
_USERID = re.compile(r"[A-Z0-9]{8,128}:[A-Za-z0-9+=,.@_-]{2,64}")


def resolve_store(uri: str, sts=None) -> str:
    """`uri` with ``{aws:userid}`` replaced by this machine's AWS session's user id (`sts`: a client to ask)."""
    if AWS_USERID not in uri:
        return uri
    if sts is None:
        import boto3

        sts = boto3.client("sts")
    userid = str(sts.get_caller_identity().get("UserId", ""))
    if not _USERID.fullmatch(userid):
        raise ValueError(
            f"--store {uri!r}: this machine's AWS session is {userid!r}, not an instance-profile session "
            "(ROLE_ID:INSTANCE_ID); run the agent with the instance profile's credentials"
        )
    return uri.replace(AWS_USERID, userid)
