"""An instance writes its own store and restores from the one the controller names (docs/agent.md,
"Where an instance writes"): ``{aws:userid}`` in ``--store`` and ``--restore-from``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_skynomad.agent.identity import resolve_store
from airflow_provider_skynomad.agent.snapshot import hash_all
from airflow_provider_skynomad.agent.store import CheckpointStore

USERID = "AROAEXAMPLEINSTANCEROLE:i-0123456789abcdef0"


class Sts:
    def __init__(self, userid: str) -> None:
        self.userid, self.asked = userid, 0

    def get_caller_identity(self):
        self.asked += 1
        return {"UserId": self.userid, "Account": "123456789012"}


def test_the_store_is_named_by_the_instance_profile_session():
    sts = Sts(USERID)
    assert resolve_store("s3://b/skynomad/job/{aws:userid}", sts) == f"s3://b/skynomad/job/{USERID}"
    assert resolve_store("s3://b/skynomad/job", sts) == "s3://b/skynomad/job" and sts.asked == 1


@pytest.mark.parametrize("userid", ["AIDAEXAMPLEUSERID", "AROAEXAMPLE:../other", "", "AROAEXAMPLE:i-1/x"])
def test_a_session_that_is_not_an_instance_profiles_is_refused(userid):
    with pytest.raises(ValueError, match="not an instance-profile session"):
        resolve_store("s3://b/skynomad/job/{aws:userid}", Sts(userid))


def _checkpoint(store: CheckpointStore, tmp_path: Path, step: int) -> None:
    staged = tmp_path / f"staged-{step}"
    staged.mkdir()
    (staged / "weights.bin").write_bytes(bytes([step]) * 100)
    store.upload_checkpoint(staged, hash_all(staged), step, 10)


def _run(tmp_path: Path, store: str, restore_from: str, name: str) -> dict:
    workload = (
        "import json, os; p = os.environ['SKYNOMAD_PROGRESS_FILE']; d = json.load(open(p)) if os.path.exists(p) "
        "else {'step': 0}; print(json.dumps(d)); json.dump({'step': d['step'] + 1, 'total_steps': 10}, open(p, 'w'))"
    )
    done = subprocess.run(
        [sys.executable, "-m", "airflow_provider_skynomad.agent", "run", "--store", store, "--restore-from",
         restore_from, "--work-dir", str(tmp_path / name), "--run-id", name, "--", sys.executable, "-c", workload],
        env=os.environ.copy(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's process handling is Linux's")
def test_a_new_instance_restores_from_the_named_store_and_numbers_on_in_its_own(tmp_path):
    before, own = (tmp_path / "i-before").as_uri(), (tmp_path / "i-new").as_uri()
    earlier = CheckpointStore(before)
    for step in (3, 4):
        _checkpoint(earlier, tmp_path, step)
    assert _run(tmp_path, own, before, "first") == {"step": 4, "total_steps": 10}
    mine = CheckpointStore(own)
    assert mine.complete_seqs() == [3]  # after the restored seq 2: the controller sees it as newer
    assert mine.read_progress()["step"] == 5
    assert earlier.complete_seqs() == [2, 1] and earlier.read_progress()["step"] == 4  # never written
    # Its own store, once it holds a checkpoint, wins over the one named at launch.
    assert _run(tmp_path, own, before, "again") == {"step": 5, "total_steps": 10}
