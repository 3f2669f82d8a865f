"""Snapshots: every hot job as of the end of a journal segment, in one atomic JSON file.

The jobs come first as one JSON line, their events after it as one blob per job, so an
open parses each job's timeline only when something looks at it.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable
from typing import Any

import orjson

from desktop_queue.core.errors import StoreCorrupt, StoreError
from desktop_queue.core.records import (
    EventDict,
    JobDict,
)
from desktop_queue.core.store.codec import (
    SCHEMA_VERSION,
    SNAPSHOT_FORMAT,
)
from desktop_queue.core.store.migrations import (
    migrate_snapshot,
)

log = logging.getLogger(__name__)


def _slim_event(event: EventDict) -> dict[str, Any]:
    return {k: v for k, v in event.items() if v is not None and v != {}}


def _events_bytes(job: JobDict) -> bytes:
    """A job's events as the JSON array the snapshot keeps (already encoded if never parsed)."""
    events = job.get("events")
    if isinstance(events, bytes):
        return events
    if isinstance(events, str):
        return events.encode()
    return orjson.dumps([_slim_event(e) for e in events or ()])


def encode_snapshot(gen: int, jobs: Iterable[JobDict], seq: int, epoch: int, n: int = 0) -> bytes:
    """A snapshot file: one JSON line (the jobs), then every job's events, with one CRC-32 over both.

    Layout (schema 3)::

        {"format":...,"schema_version":3,"gen":7,"checksum":"crc32:…","events_bytes":N,"data":{"seq":…,"epoch":…,"jobs":[…]}}
        <N bytes: each job's events as a JSON array, one after the other, in the order of "jobs">

    Each job records the length of its events as ``ev_bytes``. The events are not
    parsed when the store opens: each job keeps its slice as bytes until a timeline,
    a change or the metrics need them (see :func:`~desktop_queue.core.model.events_of`).
    Empty fields are left out (a third of a finished job). Both keep cold opens fast.
    """
    slim: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for job in jobs:
        out: dict[str, Any] = {k: v for k, v in job.items() if v is not None and k != "events"}
        events = _events_bytes(job)
        out["ev_bytes"] = len(events)
        chunks.append(events)
        slim.append(out)
    data = orjson.dumps({"seq": seq, "epoch": epoch, "n": n, "jobs": slim})
    blob = b"".join(chunks)
    head = orjson.dumps(
        {
            "format": SNAPSHOT_FORMAT,
            "schema_version": SCHEMA_VERSION,
            "gen": gen,
            "checksum": f"crc32:{zlib.crc32(blob, zlib.crc32(data)):08x}",
            "events_bytes": len(blob),
        }
    )
    return head[:-1] + b',"data":' + data + b"}\n" + blob + b"\n"


def decode_snapshot(raw: bytes, name: str) -> tuple[dict[str, Any], bool]:
    """Parses and verifies a snapshot; returns ``(document, migrated)``.

    Raises:
        StoreCorrupt: it is not a valid snapshot.
        StoreError: it was written by a newer Desktop Queue (it is left untouched).
    """
    # the document is one line (schema 3 puts the events after it); older ones are the whole file
    line_end = raw.find(b"\n")
    head = memoryview(raw)[:line_end] if line_end >= 0 else raw
    try:
        doc = orjson.loads(head)
    except orjson.JSONDecodeError as exc:
        raise StoreCorrupt(f"{name} is not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != SNAPSHOT_FORMAT or "data" not in doc:
        raise StoreCorrupt(f"{name} is not a Desktop Queue snapshot")
    version = doc.get("schema_version")
    if not isinstance(version, int):
        raise StoreCorrupt(f"{name} has no schema_version")
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{name} was written by a newer Desktop Queue (schema {version}, this one reads {SCHEMA_VERSION}); "
            "it has not been touched: please upgrade"
        )
    checksum = doc.get("checksum")
    start = raw.find(b',"data":')
    blob: bytes | memoryview = b""
    if version >= 3:
        size = doc.get("events_bytes")
        if not isinstance(size, int) or size < 0 or line_end < 0:
            raise StoreCorrupt(f"{name} has no events section")
        blob = memoryview(raw)[line_end + 1 : line_end + 1 + size]
        if len(blob) != size or raw[line_end + 1 + size :] not in (b"", b"\n"):
            raise StoreCorrupt(f"{name} is cut short or has bytes after its end")
    if checksum is not None:
        end = line_end if line_end >= 0 else len(raw)
        while end and raw[end - 1] in b" \t\r\n":
            end -= 1
        end = raw.rfind(b"}", 0, end)
        body = memoryview(raw)[start + len(b',"data":') : end] if start >= 0 and end > start else b""
        if f"crc32:{zlib.crc32(blob, zlib.crc32(body)):08x}" != checksum:
            raise StoreCorrupt(f"{name} failed its checksum")
    elif version >= 1:
        raise StoreCorrupt(f"{name} has no checksum")
    if version >= 3:
        _attach_events(doc, blob, name)
    migrated = version < SCHEMA_VERSION
    if migrated:
        doc = migrate_snapshot(doc)
    return doc, migrated


def _attach_events(doc: dict[str, Any], blob: bytes | memoryview, name: str) -> None:
    """Gives each job of a schema-3 document its slice of the events (bytes, parsed later)."""
    offset = 0
    for job in doc["data"]["jobs"]:
        size = job.pop("ev_bytes", 0)
        job["events"] = bytes(blob[offset : offset + size])
        offset += size
    if offset != len(blob):
        raise StoreCorrupt(f"{name}: its events do not match its jobs")
