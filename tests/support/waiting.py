"""Waiting in tests for something another process or thread does."""

from __future__ import annotations

import time


def wait_for(predicate, timeout_s: float = 20.0, what: str = "condition"):
    """`predicate()`'s first truthy value, polled every 10 ms; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
