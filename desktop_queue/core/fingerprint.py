"""Idempotency keys: SHA-256 of canonical JSON (shared/DESIGN.md section 3)."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson


def canonical_json(value: Any) -> bytes:
    """Serialises ``value`` with sorted keys and no whitespace, so equal inputs give equal bytes."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def fingerprint(kind: str, provider_version: str, payload: Any) -> str:
    """The default idempotency key of a job."""
    body = canonical_json({"kind": kind, "version": provider_version, "input": payload})
    return hashlib.sha256(body).hexdigest()


def input_digest(kind: str, payload: Any) -> str:
    """A digest of the input alone, used to detect one key reused with another input."""
    return hashlib.sha256(canonical_json({"kind": kind, "input": payload})).hexdigest()
