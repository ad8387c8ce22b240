"""The environment a boot script exports: every name checked, every value quoted.

Why a check here and not only in the operator: a launch request also comes back from task
state (a retried launch), from the CLI and from tests, and the boot script is the last place
before bash reads it. A name bash would not take as a variable name (``X;touch pwned;Y``) is
refused, never escaped: ``export`` cannot quote a name, and a name that needs quoting is not one
the workload could read anyway.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from airflow_provider_skynomad.agent.signing import KEY_ENV, derive_job_key
from airflow_provider_skynomad.exceptions import UnsafeEnvError

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A POSIX shell variable name: what ``export NAME=value`` takes without any quoting."""


def check_env_name(name: object, where: str = "env") -> str:
    """`name` if it is a shell variable name (``^[A-Za-z_][A-Za-z0-9_]*$``), else UnsafeEnvError."""
    if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
        raise UnsafeEnvError(
            f"{where} name {name!r} is not a shell variable name: use letters, digits and '_', "
            "not starting with a digit (e.g. MY_SETTING)"
        )
    return name


def export_lines(env: Mapping[str, str], where: str = "env") -> str:
    """``export NAME='value'`` lines for `env`, sorted by name; names checked, values quoted."""
    lines = []
    for name, value in sorted(env.items()):
        check_env_name(name, where)
        if name == KEY_ENV:
            raise UnsafeEnvError(f"{where} sets {KEY_ENV}: the job's checkpoint key is the connection's to give")
        if not isinstance(value, str) or "\x00" in value:
            raise UnsafeEnvError(f"{where}[{name!r}] must be text without NUL bytes, got {value!r}")
        lines.append(f"export {name}={shlex.quote(value)}\n")
    return "".join(lines)


def signing_secret_problem(signing_secret: str | None) -> str | None:
    """Why a real cloud cannot launch a job with this signing secret (one line, never quoting it); None if it can.

    Its instances' checkpoints, progress and run records count only when they verify with the
    job's key (agent/signing.py), and the key is derived from this secret: without one, nothing
    they write could count, so a launch is refused before anything is launched or written.
    """
    how = "set the connection's checkpoint_signing_secret to a random value (e.g. `openssl rand -hex 32`)"
    if not signing_secret:
        return (
            "checkpoint_signing_secret is not set, and instances' checkpoints, progress and run records "
            f"count only when signed with a key derived from it: {how}"
        )
    if len(signing_secret.encode()) < 16:
        return f"checkpoint_signing_secret is shorter than 16 bytes (not shown): {how}"
    return None


def job_checkpoint_key(signing_secret: str | None, job_id: str) -> bytes | None:
    """The job's manifest key (agent/signing.py) from the connection's signing secret; None without one."""
    return derive_job_key(signing_secret, job_id) if signing_secret else None


def agent_key_prefix(key: bytes | None) -> str:
    """``SKYNOMAD_CHECKPOINT_KEY=<hex> `` to put before the agent's command, "" without a key.

    An assignment on the agent's command line only, not an ``export``: the setup commands and the
    rank reader never see it, and the agent removes it from the workload's environment.
    """
    return "" if key is None else f"{KEY_ENV}={key.hex()} "
