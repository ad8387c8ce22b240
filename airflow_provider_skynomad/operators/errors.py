"""The error the operator raises when a job cannot start as specified."""

from __future__ import annotations


class SkyNomadInputError(ValueError):
    """The job cannot start as specified; nothing was launched and nothing was written."""
