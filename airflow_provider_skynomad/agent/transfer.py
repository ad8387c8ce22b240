"""Move a job's newest complete checkpoint from one store to another, of any kind.

A move within one cloud uses that cloud's own copy (S3 cross-region copy, GCS rewrite). Between
clouds there is no such call: the checkpoint is restored from the source (its files verified
against their manifest) into a local directory and uploaded to the target as a new checkpoint,
manifest last, so the target never holds a half-copied checkpoint that counts.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from airflow_provider_skynomad.agent.snapshot import hash_all
from airflow_provider_skynomad.agent.store import CheckpointStore


def copy_latest(source: CheckpointStore | str, target: CheckpointStore | str) -> bool:
    """Copy the newest complete checkpoint of `source` to `target` (stores or store URIs); False when it has none."""
    source = CheckpointStore(source) if isinstance(source, str) else source
    target = CheckpointStore(target) if isinstance(target, str) else target
    with tempfile.TemporaryDirectory(prefix="skynomad-transfer-") as tmp:
        local = Path(tmp) / "checkpoint"
        manifest = source.restore(local, Path(tmp))
        if manifest is None:
            return False
        target.upload_checkpoint(local, hash_all(local), manifest["step"], manifest["total_steps"])
    return True
