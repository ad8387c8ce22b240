"""The user data of an AWS launch: a boot script that runs the workload under the agent.

What it does, in order: export the job's plain environment, run the user's setup commands
(e.g. ``pip install airflow-provider-skynomad``), read the member's rank (its AMI launch index)
from IMDSv2 (0 when it cannot be read), run ``python3 -m airflow_provider_skynomad.agent run --store
s3://<the region's bucket>/<prefix>/<job_id>/{aws:userid} [--restore-from <newest>] ... --notice aws --
<command>`` (docs/agent.md: the instance writes only under its own session's name) and power the instance
off when the agent exits with anything but 3. Exit 3 means "preempted": the notice came, the last
checkpoint is uploaded and EC2 is about to reclaim the instance, which then ends with
``Server.SpotInstanceTermination`` (the adapter's proof of a preemption); powering off first
would only blur that. Every other exit powers off (``InstanceInitiatedShutdownBehavior=terminate``
ends the billing) and the agent's run record in S3 says finished or failed.

No credential is ever written here: the instance profile supplies them, and `boot_script` refuses
an environment that carries AWS keys. The python executable and the work directory are
parameters, so a test can run the very same script as a local process.
"""

from __future__ import annotations

import shlex

from airflow_provider_skynomad.clouds.boot_env import UnsafeEnvError, agent_key_prefix, export_lines
from airflow_provider_skynomad.exceptions import UserDataError

CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
MAX_USER_DATA_BYTES = 16 * 1024  # EC2's limit, before base64
PREEMPTED_EXIT = 3


# The member's rank is its AMI launch index, read from IMDSv2 with the python the agent needs anyway
# (an image may lack curl); SKYNOMAD_IMDS_ENDPOINT points it elsewhere in tests.
RANK_FROM_IMDS = """\
import os, urllib.request as r
base = os.environ.get("SKYNOMAD_IMDS_ENDPOINT", "http://169.254.169.254")
ask = r.Request(base + "/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"})
token = r.urlopen(ask, timeout=2).read().decode()
index = r.Request(base + "/latest/meta-data/ami-launch-index", headers={"X-aws-ec2-metadata-token": token})
print(r.urlopen(index, timeout=2).read().decode().strip())
"""


def boot_script(
    *,
    command: tuple[str, ...],
    env: dict[str, str],
    store_uri: str,
    run_id: str,
    python: str = "python3",
    work_dir: str = "/var/lib/skynomad",
    setup_commands: tuple[str, ...] = (),
    checkpoint_key: bytes | None = None,
    restore_uri: str | None = None,
) -> str:
    """The bash script EC2 runs at first boot (see the module docstring); "" without a command.

    `store_uri` is where the agent writes (on AWS it ends in ``{aws:userid}``: the instance's own
    session's name, the only prefix the instance policy lets it write); `restore_uri` where it
    restores from when that holds nothing yet (the job's newest checkpoint at launch).
    `checkpoint_key`: the job's manifest key (docs/agent.md, "Checkpoint signatures"), given to
    the agent's command alone.
    """
    if not command:
        return ""
    leaked = sorted(k for k in env if k.upper() in CREDENTIAL_ENV)
    if leaked:
        raise UserDataError(
            f"env sets {', '.join(leaked)}: credentials never go into user data; the instance profile "
            "(cloud_options.instance_profile) gives the instance its own"
        )
    try:
        exports = export_lines(env)
    except UnsafeEnvError as exc:
        raise UserDataError(str(exc)) from None
    quote = shlex.quote
    setup = "".join(f"{line}\n" for line in setup_commands)
    key = agent_key_prefix(checkpoint_key)
    agent_args = [python, "-m", "airflow_provider_skynomad.agent", "run", "--store", store_uri]
    if restore_uri:
        agent_args += ["--restore-from", restore_uri]
    agent = shlex.join(agent_args)
    script = f"""#!/bin/bash
# SkyNomad boot script (airflow-provider-skynomad): run the workload under the agent, then power off.
# No credentials here: the instance profile supplies them.
set -u
{exports}{setup}RANK=$({quote(python)} -c {quote(RANK_FROM_IMDS)} 2>/dev/null || true)
case "$RANK" in ''|*[!0-9]*) RANK=0 ;; esac
RUN_ID={quote(run_id)}
if [ "$RANK" != 0 ]; then RUN_ID="$RUN_ID-$RANK"; fi
WORK_DIR={quote(work_dir.rstrip("/") + "/" + run_id)}/rank-$RANK
mkdir -p "$WORK_DIR"
{key}{agent} --work-dir "$WORK_DIR" --run-id "$RUN_ID" --rank "$RANK" --notice aws -- {shlex.join(command)}
code=$?
echo "skynomad: agent exited with $code"
if [ "$code" != {PREEMPTED_EXIT} ]; then shutdown -h now; fi
exit "$code"
"""
    if len(script.encode()) > MAX_USER_DATA_BYTES:
        raise UserDataError(
            f"the boot script is {len(script.encode())} bytes, EC2 takes at most {MAX_USER_DATA_BYTES}: "
            "shorten env or the command (pass large inputs through files or the checkpoint)"
        )
    return script
