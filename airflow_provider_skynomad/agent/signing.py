"""What an instance writes, signed with a per-job key, so one job cannot plant anything in another's.

Why: a manifest says which files make a checkpoint and their sha256, and restore takes the
highest sequence number. Whoever can write under a job's prefix (another job's instance, if the
store's permissions are wider than one job) could otherwise plant a higher-numbered checkpoint
that restore would take. With a key, a manifest counts only if its HMAC-SHA256 verifies; the
MAC covers every field, the sequence number included, so a genuine manifest cannot be replayed
at another number, and another job's genuine manifest (another key) does not verify either.

Progress (``progress.json``) and run records (``runs/<run_id>.json``) are signed the same way,
each with its ``kind`` inside what the MAC covers (`sign_claim`), so one kind of document is never
taken for another: the controller counts progress, and a finished run, only from a claim that
verifies with the job's key (`verified_claim`).

Where the key comes from (docs/agent.md, "Checkpoint signatures"): the controller derives it
from the deployment's secret and the job id (`derive_job_key`), so no instance ever holds the
deployment secret, and a job's instances hold only their own job's key. It reaches the agent in
``SKYNOMAD_CHECKPOINT_KEY`` (64 hex digits), which the agent removes from the workload's
environment and never prints.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping

KEY_ENV = "SKYNOMAD_CHECKPOINT_KEY"
ALGORITHM = "hmac-sha256"
SIGNATURE = "signature"
KIND = "kind"
PROGRESS_CLAIM = "progress"
RUN_CLAIM = "run"
_DERIVATION_LABEL = b"skynomad checkpoint manifest key v1\x00"


def derive_job_key(deployment_secret: str | bytes, job_id: str) -> bytes:
    """The job's 32-byte key: HMAC-SHA256(deployment secret, label ‖ job id). Controller side only."""
    secret = deployment_secret.encode() if isinstance(deployment_secret, str) else bytes(deployment_secret)
    if len(secret) < 16:
        raise ValueError("the checkpoint signing secret must hold at least 16 bytes (e.g. `openssl rand -hex 32`)")
    if not job_id:
        raise ValueError("a checkpoint key needs the job id")
    return hmac.new(secret, _DERIVATION_LABEL + job_id.encode(), hashlib.sha256).digest()


def key_from_env(environ: Mapping[str, str]) -> bytes | None:
    """The key in ``SKYNOMAD_CHECKPOINT_KEY``, None when unset; ValueError (never quoting it) when malformed."""
    text = environ.get(KEY_ENV)
    if text is None or text == "":
        return None
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        key = b""
    if len(key) != 32:
        raise ValueError(f"{KEY_ENV} must be 64 hex digits (a 32-byte key); the value given is not (not shown)")
    return key


def _canonical(manifest: Mapping) -> bytes:
    body = {k: v for k, v in manifest.items() if k != SIGNATURE}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def sign(manifest: Mapping, key: bytes) -> dict:
    """`manifest` with its ``signature``: ``{"alg": "hmac-sha256", "mac": <hex>}`` over every other field."""
    mac = hmac.new(key, _canonical(manifest), hashlib.sha256).hexdigest()
    return {**manifest, SIGNATURE: {"alg": ALGORITHM, "mac": mac}}


def verify(manifest: Mapping, key: bytes) -> None:
    """ValueError unless `manifest` carries a signature made with `key` over exactly these fields."""
    signature = manifest.get(SIGNATURE)
    if not isinstance(signature, Mapping) or not isinstance(signature.get("mac"), str):
        raise ValueError("the manifest is not signed, and this job's checkpoints must be")
    if signature.get("alg") != ALGORITHM:
        raise ValueError(f"the manifest's signature algorithm {signature.get('alg')!r} is not {ALGORITHM}")
    expected = hmac.new(key, _canonical(manifest), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature["mac"]):
        raise ValueError("the manifest's signature does not verify (another job's key, or altered since)")


def sign_claim(document: Mapping, key: bytes, kind: str) -> dict:
    """`document` (progress, a run record) with ``kind`` set and signed: a claim of that kind only."""
    return sign({**document, KIND: kind}, key)


def verified_claim(document: object, key: bytes | None, kind: str) -> dict | None:
    """`document` when it is a claim of `kind` signed with `key`; None otherwise (unsigned, another
    job's key, another kind, altered, not an object, or no key to check it with)."""
    if key is None or not isinstance(document, Mapping) or document.get(KIND) != kind:
        return None
    try:
        verify(document, key)
    except ValueError:
        return None
    return dict(document)
