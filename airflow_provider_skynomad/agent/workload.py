"""The workload's side of the agent's protocol, for a user's own training script, in three lines::

    from airflow_provider_skynomad.agent.workload import Checkpoints

    ckpt = Checkpoints()                       # what the agent restored: ckpt.step, ckpt.path
    if ckpt.path:
        model.load_state_dict(torch.load(ckpt.path / "model.pt"))
    for step in range(ckpt.step, total_steps):
        train_one_step(step)
        ckpt.save(step + 1, total_steps, lambda d: torch.save(model.state_dict(), d / "model.pt"))
    torch.save(model.state_dict(), ckpt.dir / "final.pt")  # the output the agent uploads on exit 0

Why it is shaped so:

- each checkpoint is written into a directory of its own (``step-<n>``) and only then
  announced by replacing the progress file, so the agent — which copies the checkpoint
  directory while training goes on — always finds one complete checkpoint the progress file
  names, however the user's `write` writes its files; the older one is removed after;
- on SIGTERM (the interruption notice) `stopping` becomes True and the next `save` exits the
  process once that checkpoint is written (exit 143, "terminated"), so the step in flight is
  not lost and a loop needs no code for preemption; a long step can check `stopping` itself;
- outside the agent (no ``SKYNOMAD_CHECKPOINT_DIR``) it checkpoints to ``./checkpoint``, so the
  same script runs by hand.

Imports nothing beyond the standard library.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path

STOPPED_EXIT_CODE = 143  # 128 + SIGTERM: the shell's code for "terminated"
_PREFIX = "step-"


class Checkpoints:
    """The checkpoint directory the agent restored, and a `save` that reports progress.

    :param directory: default ``$SKYNOMAD_CHECKPOINT_DIR``, else ``./checkpoint``.
    :param handle_sigterm: install the SIGTERM handler that sets `stopping` (main thread only).
    """

    def __init__(self, directory: str | Path | None = None, handle_sigterm: bool = True):
        self.dir = Path(directory or os.environ.get("SKYNOMAD_CHECKPOINT_DIR") or "checkpoint").resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.progress_file = Path(os.environ.get("SKYNOMAD_PROGRESS_FILE") or self.dir / "progress.json")
        self.step, self.total_steps = 0, None
        self.stopping = False
        try:
            data = json.loads(self.progress_file.read_text())
            self.step, self.total_steps = data["step"], data["total_steps"]
        except (OSError, ValueError, KeyError, TypeError):
            pass  # nothing restored: start from step 0
        if handle_sigterm:
            signal.signal(signal.SIGTERM, self._on_sigterm)

    @property
    def path(self) -> Path | None:
        """The restored checkpoint's directory (what the last `save` wrote), None before the first."""
        path = self.dir / f"{_PREFIX}{self.step:010d}" if isinstance(self.step, int) else None
        return path if path is not None and self.step > 0 and path.is_dir() else None

    def save(self, step: int, total_steps: int, write: Callable[[Path], None]) -> Path:
        """Call `write(directory)` to write checkpoint `step` into a fresh directory, then report it.

        Returns that directory. If SIGTERM came meanwhile, exits with `STOPPED_EXIT_CODE` after it.
        """
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an integer ≥ 0, got {step!r}")
        final = self.dir / f"{_PREFIX}{step:010d}"
        staging = self.dir / f".{_PREFIX}{step:010d}.tmp"  # hidden: never part of a checkpoint
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        write(staging)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(staging, final)
        tmp = self.progress_file.with_name(f".{self.progress_file.name}.tmp")
        tmp.write_text(json.dumps({"step": step, "total_steps": total_steps}))
        os.replace(tmp, self.progress_file)  # the checkpoint is complete: announce it
        self.step, self.total_steps = step, total_steps
        for old in self.dir.glob(f"{_PREFIX}*"):
            if old != final and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
        if self.stopping:
            sys.exit(STOPPED_EXIT_CODE)
        return final

    def _on_sigterm(self, signum, frame) -> None:
        self.stopping = True
