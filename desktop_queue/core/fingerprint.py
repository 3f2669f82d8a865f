"""Idempotency keys: SHA-256 of canonical JSON (shared/DESIGN.md section 3)."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson


def canonical_json(value: Any) -> bytes:
    """Serialises ``value`` with sorted keys and no whitespace, so equal inputs give equal bytes."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def fingerprint(kind: str, provider_version: str, payload: Any, *, body: bytes | None = None) -> str:
    """The default idempotency key of a job: SHA-256 of the canonical JSON of
    ``{"input": payload, "kind": kind, "version": provider_version}``.

    ``body`` is ``canonical_json(payload)`` when the caller has it already: the
    document is then assembled around it (sorted keys put ``input`` first), byte for
    byte what serialising the whole would give, without serialising the input again.
    """
    if body is None:
        body = canonical_json(payload)
    doc = (
        b'{"input":' + body + b',"kind":' + orjson.dumps(kind) + b',"version":' + orjson.dumps(provider_version) + b"}"
    )
    return hashlib.sha256(doc).hexdigest()


def input_digest(kind: str, payload: Any, *, body: bytes | None = None) -> str:
    """A digest of the input alone (``{"input": payload, "kind": kind}``), used to detect
    one key reused with another input; ``body`` as in :func:`fingerprint`."""
    if body is None:
        body = canonical_json(payload)
    return hashlib.sha256(b'{"input":' + body + b',"kind":' + orjson.dumps(kind) + b"}").hexdigest()
