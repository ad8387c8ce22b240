"""Files that readers never see half-written, shared by the simulated cloud's state and the workload's checkpoints.

Both are read by other processes while they are rewritten (the trigger polls the simulated
cloud; a relaunched worker resumes from the checkpoint a killed one was writing), and a
SIGKILL can land at any instant.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write-to-temp in the same directory, fsync, then `os.replace`: readers see old or new, never half.

    :param mode: the file's permissions (mkstemp's 0600 would hide a checkpoint from other
        users of a shared zone directory).
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:  # closes the descriptor whatever happens next
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, data: dict, mode: int = 0o600) -> None:
    """`atomic_write` of a JSON document (private to its owner by default, as mkstemp makes it)."""
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True).encode(), mode)
