"""Every error SkyNomad raises, under one base: ``except SkyNomadError`` catches any of them.

Each class keeps the built-in base it had (a ``ValueError`` for bad input, a ``RuntimeError`` for
a failure, an ``ImportError`` for a missing extra), so code that caught those still does. The modules
that raise them re-export them, so ``from airflow_provider_skynomad.planner.job import JobSpecError``
still works.

This module imports nothing (the workload agent on an instance loads it). The two errors that must
also be Airflow's ``AirflowFailException`` (a task that fails at once, without its retries) subclass
``SkyNomadError`` in jobs/errors.py, where Airflow is imported: ``SkyNomadInputError`` and
``SkyNomadDeadlineMissed``.
"""

from __future__ import annotations

DISTRIBUTION = "airflow-provider-skynomad"
"""The name to ``pip install`` (MissingExtraError's message)."""


class SkyNomadError(Exception):
    """The base of every SkyNomad error."""


# -- market data ------------------------------------------------------------------------------


class TraceError(SkyNomadError, ValueError):
    """A trace or market-table dump is malformed; the message says where and how to fix it."""


class LineBoundError(SkyNomadError, ValueError):
    """A trace line over the bound, a byte that is not UTF-8, or a broken gzip stream, at `line`."""

    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


class MarketInputError(SkyNomadError, ValueError):
    """The market table cannot serve the job as asked (empty, stale, unknown zones); nothing was launched."""


class PriceTableError(SkyNomadError, ValueError):
    """A price table file is malformed or a refresh found nothing; the message names the file or query."""


class MarketSchemaError(SkyNomadError, RuntimeError):
    """The database holds a market schema this code cannot use (e.g. written by a newer release)."""


class FleetRowError(SkyNomadError, ValueError):
    """A live job-table row cannot be read as a fleet claim (which row, which field, what to do)."""


# -- the planner --------------------------------------------------------------------------------


class JobSpecError(SkyNomadError, ValueError):
    """The job cannot be planned as specified (e.g. an infeasible deadline)."""


class PaceError(SkyNomadError, ValueError):
    """An observation the pace cannot learn from (not a number, negative, or a fraction above 1)."""


# -- the workload and its agent (on the instance) -----------------------------------------------


class CheckpointMismatch(SkyNomadError, ValueError):
    """The checkpoint in the directory belongs to a run with other settings."""


class StoreError(SkyNomadError, RuntimeError):
    """The store URI is malformed, or the store cannot be reached or written (the agent exits 2)."""


class ObjectTooLarge(SkyNomadError, ValueError):
    """An object is larger than the caller said it may be (a manifest's size): it was not read whole."""

    def __init__(self, key: str, limit: int, size: int | None = None):
        seen = f"{size} B" if size is not None else "more"
        super().__init__(f"{key} holds {seen}, more than the {limit} B expected; not downloaded")


class NotRegularFile(SkyNomadError, OSError):
    """A path that was a file when listed is now a FIFO, socket or device: it is not copied."""


# -- the connection and the clouds --------------------------------------------------------------


class SkyNomadConfigError(SkyNomadError, ValueError):
    """The `skynomad` connection is incomplete or contradictory; the message names the field."""


class MissingExtraError(SkyNomadError, ImportError):
    """An optional extra is needed but not installed; the message says which one to install."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"the {extra!r} extra is not installed (no module {module}): install {DISTRIBUTION}[{extra}], "
            f"e.g. pip install '{DISTRIBUTION}[{extra}]'",
            name=module,
        )
        self.extra = extra


class CapacityError(SkyNomadError, RuntimeError):
    """The zone had no capacity for the whole gang; nothing is left running or billed."""


class TransientCloudError(SkyNomadError, RuntimeError):
    """A cloud API call that may succeed if sent again: throttled, timed out, a 5xx answer."""


class CloudApiError(SkyNomadError, RuntimeError):
    """A cloud API call still failed after its bounded retries; the message is for users."""


class ThrottledError(TransientCloudError):
    """Injected: the API refused the call (rate exceeded)."""


class InjectedTimeout(TransientCloudError, TimeoutError):
    """Injected: the call or its answer timed out."""


class UnsafeEnvError(SkyNomadError, ValueError):
    """An env name that is not a shell variable name, or a value bash cannot hold."""


class UserDataError(SkyNomadError, ValueError):
    """The boot script cannot be built as asked (a credential in it, an env name that is not a shell
    variable name, or too long for EC2)."""


class ProbeNoAnswer(SkyNomadError, RuntimeError):
    """A request probe got no capacity answer in time (EC2's fleet, or a Compute Engine VM neither
    allocated nor refused); what it asked for was deleted and the zone is not recorded."""


class TraceEndedError(SkyNomadError, RuntimeError):
    """The simulated clock has run past the end of the trace: there is no market left to replay."""


# -- probing and jobs -----------------------------------------------------------------------------


class SkyNomadProbeError(SkyNomadError, RuntimeError):
    """Some zones could not be probed (the others' rows were written)."""


class SkyNomadJobFailed(SkyNomadError, RuntimeError):
    """The job's workload or group failed (the message carries the workload's last error lines)."""


class ControlLost(SkyNomadError, RuntimeError):
    """Another copy of the job's controller wrote its record since this one read it: this copy stops."""


# -- the command line -------------------------------------------------------------------------------


class UsageError(SkyNomadError, ValueError):
    """Bad command-line input: reported on stderr with exit code 2 before anything runs or is written."""
