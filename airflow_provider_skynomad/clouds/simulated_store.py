"""The simulated cloud's state on disk: one JSON document guarded by `fcntl.flock`.

The operator launches in one process and the trigger polls in another (and Airflow runs
triggers' blocking calls in threads), so every read-modify-write takes an exclusive lock on
a side file and replaces the document atomically. Each call opens its own lock file
description, so threads of one process exclude each other as well as processes do.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..files import atomic_write_json


def empty_state() -> dict:
    return {"version": 1, "groups": {}, "tokens": {}, "probes": [], "egress": []}


@contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `lock_path` for the duration of the block."""
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class StateStore:
    """`state.json` in the state directory, changed only inside `update()`."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / "state.json"
        self.lock_path = state_dir / "state.lock"

    @contextmanager
    def update(self) -> Iterator[dict]:
        """Yield the current state under the lock; write it back if the block changed it."""
        with exclusive(self.lock_path):
            state = self._read()
            before = json.dumps(state, sort_keys=True)
            yield state
            if json.dumps(state, sort_keys=True) != before:
                atomic_write_json(self.path, state)

    def _read(self) -> dict:
        if not self.path.exists():
            return empty_state()
        with self.path.open() as handle:
            return json.load(handle)
