"""Optional extras: the real clouds' Airflow providers are installed only on request.

``pip install airflow-provider-skynomad`` runs the simulated cloud; ``[aws]`` adds the amazon
provider (EC2, S3), ``[gcp]`` the google provider (Compute Engine). Picking ``cloud: aws`` or
``gcp`` without its extra must say what to install, not fail later with a bare
``ModuleNotFoundError`` deep inside a launch: ``require_extra`` does that check, without
importing the provider (the triggerer calls it from its event loop).
"""

from __future__ import annotations

import importlib.util

from airflow_provider_skynomad.exceptions import MissingExtraError

EXTRAS = {
    "aws": "airflow.providers.amazon",
    "gcp": "airflow.providers.google",
}
"""Extra name (= the cloud kind that needs it) → the module clouds/ imports from, whose presence means
the extra is installed."""
NEEDS_NO_EXTRA = ("simulated",)
"""Cloud kinds that run on the base install, so that `require_extra(config.cloud)` fits every cloud."""


def is_installed(module: str) -> bool:
    """Whether `module` can be imported, found without importing it (its parent packages are)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def require_extra(name: str, module: str | None = None) -> None:
    """Raise MissingExtraError unless the extra `name` is installed.

    :param name: the extra, e.g. ``"aws"``, which is also the cloud kind that needs it; a kind in
        NEEDS_NO_EXTRA (``"simulated"``) passes.
    :param module: the module to look for; default: ``EXTRAS[name]``.
    """
    if module is None:
        if name in NEEDS_NO_EXTRA:
            return
        if name not in EXTRAS:
            raise ValueError(f"unknown extra {name!r}; known: {sorted(EXTRAS)}")
        module = EXTRAS[name]
    if not is_installed(module):
        raise MissingExtraError(name, module)
