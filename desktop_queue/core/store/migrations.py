"""Snapshot migrations: each older schema version, one step at a time, up to the current one.

A store of a newer version is refused (:func:`desktop_queue.core.store.snapshot.decode_snapshot`),
never read as if it were this one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from desktop_queue.core.errors import StoreError
from desktop_queue.core.store.codec import (
    SCHEMA_VERSION,
)

log = logging.getLogger(__name__)


def migrate_snapshot(doc: dict[str, Any]) -> dict[str, Any]:
    """Brings an older snapshot document forward to :data:`SCHEMA_VERSION`."""
    version = doc.get("schema_version", 0)
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise StoreError(f"no migration from schema_version {version}")
        doc = step(doc)
        version = doc["schema_version"]
    return doc


def _migrate_v0(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 0 (pre-release) kept jobs as an ``id -> job`` object without ``run``/``key_source``."""
    data = doc["data"]
    jobs = list(data["jobs"].values()) if isinstance(data.get("jobs"), dict) else list(data.get("jobs", []))
    for job in jobs:
        job.setdefault("run", 1)
        job.setdefault("key_source", "fingerprint")
        job.setdefault("total_attempts", job.get("attempts", 0))
    data["jobs"] = jobs
    doc["schema_version"] = 1
    return doc


def _migrate_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 kept events as JSON arrays; schema 2 writes them as strings but reads both."""
    doc["schema_version"] = 2
    return doc


def _migrate_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 kept each job's events as a JSON string inside the document; schema 3 keeps
    them after it (the jobs read them all the same: a string, bytes or a list)."""
    doc["schema_version"] = 3
    return doc


def _migrate_v3(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 4 keeps only the hot set in the snapshot; the other finished jobs are in the
    archive (``store/archive/``), which an older version would not read: it must refuse
    the store rather than show a history with most of its jobs missing. The jobs of a
    schema 3 snapshot are all still in it; the first compaction archives them."""
    doc["schema_version"] = 4
    return doc


#: schema_version -> function that lifts a document one version up.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    0: _migrate_v0,
    1: _migrate_v1,
    2: _migrate_v2,
    3: _migrate_v3,
}
