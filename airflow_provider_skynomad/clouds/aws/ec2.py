"""EC2's own rules that both the AWS cloud (cloud.py) and its request probe (probe.py) follow.

Here, below both, so the probe does not import the cloud that calls it: the minimum billed time and
the tag format EC2 takes.
"""

from __future__ import annotations

MIN_BILLED_SECONDS = 60  # EC2 bills Linux instances per second with a 60 s minimum


def tag_list(tags: dict[str, str]) -> list[dict]:
    """Tags as EC2's ``TagSpecifications`` and ``CreateTags`` take them."""
    return [{"Key": k, "Value": str(v)} for k, v in tags.items()]
