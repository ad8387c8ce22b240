"""Both boot scripts (AWS user data, GCP startup script) run in bash here, with the cloud's own
commands stubbed: hostile env names never reach bash, hostile values reach the agent as data."""

from __future__ import annotations

import shutil
import subprocess
from types import SimpleNamespace

import pytest

from airflow_provider_skynomad.clouds.aws.boot import UserDataError, boot_script
from airflow_provider_skynomad.clouds.base import LaunchRequest
from airflow_provider_skynomad.clouds.boot_env import UnsafeEnvError
from airflow_provider_skynomad.clouds.gcp.boot import startup_script
from airflow_provider_skynomad.jobs.errors import SkyNomadInputError
from airflow_provider_skynomad.jobs.params import validate_params

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

HOSTILE_NAMES = [
    "X;touch pwned;Y",
    "X=$(touch pwned)",
    "$(touch pwned)",
    "`touch pwned`",
    "A B",
    "X\ntouch pwned\nY",
    "1ABC",
    "",
    "A-B",
    "Ä",
]
HOSTILE_VALUES = {
    "SUBST": "$(touch pwned)",
    "BACKTICK": "`touch pwned`",
    "QUOTES": "'; touch pwned; echo '",
    "DOUBLE": '"; touch pwned; echo "',
    "LINES": "a\ntouch pwned\nb",
    "EXPAND": "${PATH:?$(touch pwned)}",
    "GLOB": "*",
    "BACKSLASH": "\\'\\",
    "EMPTY": "",
    "UNICODE": "ünï ☃",
}
# The stub stands for python: `-c <rank reader>` prints rank 0, anything else (the agent) records
# its arguments and environment, NUL-separated, and exits 0.
STUB_PYTHON = """#!/bin/bash
if [ "$1" = -c ]; then echo 0; exit 0; fi
printf '%s\\0' "$@" > "{out}/argv"
env -0 > "{out}/env"
"""


@pytest.fixture
def sandbox(tmp_path):
    """A directory with stubbed `python3`, `shutdown` and `poweroff`, and where the script runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (bin_dir / "python3").write_text(STUB_PYTHON.format(out=out))
    for name in ("shutdown", "poweroff"):
        (bin_dir / name).write_text(f'#!/bin/bash\necho "$0 $*" > "{out}/{name}"\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return SimpleNamespace(root=tmp_path, bin=bin_dir, out=out, python=str(bin_dir / "python3"))


def aws_script(sandbox, env: dict[str, str]) -> str:
    return boot_script(
        command=("python", "-m", "train"),
        env=env,
        store_uri="s3://bucket/skynomad/job-a",
        run_id="sn-1",
        python=sandbox.python,
        work_dir=str(sandbox.root / "work"),
    )


def gcp_script(sandbox, env: dict[str, str], key: bytes | None = None) -> str:
    cloud = SimpleNamespace(
        checkpoint_key=lambda job_id: key,
        python=sandbox.python,
        work_dir=str(sandbox.root / "work"),
        power_off_command="shutdown -h now",
        store=SimpleNamespace(uri=lambda region, job_id: f"gs://bucket-{region}/skynomad/{job_id}"),
    )
    request = LaunchRequest(
        cloud="gcp",
        region="us-central1",
        zone="us-central1-a",
        instance_type="a3-highgpu-1g",
        count=1,
        spot=True,
        client_token="sn-1",
        command=("python", "-m", "train"),
        env=env,
        job_id="job-a",
    )
    return startup_script(cloud, request, "us-central1", 0, "sn-1-0")


BUILDERS = {"aws": aws_script, "gcp": gcp_script}


def run(sandbox, script: str) -> subprocess.CompletedProcess:
    path = sandbox.root / "boot.sh"
    path.write_text(script)
    return subprocess.run(
        ["bash", str(path)],
        cwd=sandbox.root,
        env={"PATH": f"{sandbox.bin}:/usr/bin:/bin", "HOME": str(sandbox.root)},
        capture_output=True,
        text=True,
        timeout=30,
    )


def recorded_env(sandbox) -> dict[str, str]:
    pairs = (sandbox.out / "env").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if p)


@pytest.mark.parametrize("cloud", sorted(BUILDERS))
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_env_name_is_refused_and_nothing_runs(sandbox, cloud, name):
    """The builder refuses it; had it built a script, running that script must not have run `touch`."""
    try:
        script = BUILDERS[cloud](sandbox, {name: "v"})
    except (UserDataError, UnsafeEnvError) as exc:
        assert "not a shell variable name" in str(exc) and repr(name) in str(exc)
    else:
        run(sandbox, script)
        assert not (sandbox.root / "pwned").exists(), f"{cloud} boot script executed the env name {name!r}"
        pytest.fail(f"the {cloud} boot script was built with the env name {name!r}")


@pytest.mark.parametrize("cloud", sorted(BUILDERS))
def test_hostile_values_reach_the_agent_byte_for_byte_and_execute_nothing(sandbox, cloud):
    done = run(sandbox, BUILDERS[cloud](sandbox, HOSTILE_VALUES))
    assert done.returncode == 0, done.stderr
    assert not (sandbox.root / "pwned").exists()
    env = recorded_env(sandbox)
    for name, value in HOSTILE_VALUES.items():
        assert env[name] == value, name
    argv = (sandbox.out / "argv").read_bytes().split(b"\0")
    assert argv[:3] == [b"-m", b"airflow_provider_skynomad.agent", b"run"]
    assert argv[-4:] == [b"python", b"-m", b"train", b""]
    assert (sandbox.out / "shutdown").read_text().split()[1:] == ["-h", "now"]  # the agent exited 0: power off


def test_a_nul_byte_in_a_value_is_refused(sandbox):
    with pytest.raises(UserDataError, match="NUL"):
        aws_script(sandbox, {"A": "x\x00y"})
    with pytest.raises(UnsafeEnvError, match="NUL"):
        gcp_script(sandbox, {"A": "x\x00y"})


def _operator(**kwargs):
    """The operator's arguments as a DAG author gives them (its own defaults for the rest)."""
    from airflow_provider_skynomad.operators.skynomad import SkyNomadOperator

    return SkyNomadOperator(task_id="job", work_hours=6.0, **kwargs)


@pytest.mark.parametrize("name", [n for n in HOSTILE_NAMES if "\n" not in n])
def test_the_operator_refuses_a_hostile_env_name_before_anything_launches(name):
    with pytest.raises(SkyNomadInputError, match="not a shell variable name"):
        validate_params(_operator(env={name: "v"}))


def test_the_operator_takes_shell_variable_names_and_any_printable_value():
    params = validate_params(_operator(env={"_A1": "$(x)", "b": "'"}))
    assert params.env == {"_A1": "$(x)", "b": "'"}


KEY = bytes(range(32))


@pytest.mark.parametrize("cloud", sorted(BUILDERS))
def test_the_jobs_checkpoint_key_reaches_the_agent_alone(sandbox, cloud):
    """In the agent's environment, not exported: setup commands (AWS) and the rank reader never see it."""
    if cloud == "aws":
        script = boot_script(
            command=("python", "-m", "train"),
            env={"A": "1"},
            store_uri="s3://bucket/skynomad/job-a",
            run_id="sn-1",
            python=sandbox.python,
            work_dir=str(sandbox.root / "work"),
            setup_commands=(f'env > "{sandbox.out}/setup-env"',),
            checkpoint_key=KEY,
        )
    else:
        script = gcp_script(sandbox, {"A": "1"}, key=KEY)
    assert "export SKYNOMAD_CHECKPOINT_KEY" not in script
    done = run(sandbox, script)
    assert done.returncode == 0, done.stderr
    assert recorded_env(sandbox)["SKYNOMAD_CHECKPOINT_KEY"] == KEY.hex()
    if cloud == "aws":
        assert "SKYNOMAD_CHECKPOINT_KEY" not in (sandbox.out / "setup-env").read_text()


@pytest.mark.parametrize("cloud", sorted(BUILDERS))
def test_env_cannot_set_the_checkpoint_key(sandbox, cloud):
    with pytest.raises(ValueError, match="checkpoint key"):
        BUILDERS[cloud](sandbox, {"SKYNOMAD_CHECKPOINT_KEY": "00" * 32})
