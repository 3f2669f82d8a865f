"""Export jobs with their timelines to CSV or JSON Lines, and read such files back.

An exported job is every field of :class:`~desktop_queue.core.model.Job` with its
events; its input (the prompt: the user's own data) only when asked. JSON Lines holds
one job object a line. CSV holds one job a row, the nested fields (last error, events,
replayed-as, input) as JSON text in their cells, so that a spreadsheet shows them and
:func:`read_export` reads them back exactly.

A succeeded job's result goes along when asked (``result``: the JSON the provider's
answer became, an image's or audio's bytes as ``artifact_b64`` in it), and the import
stores it before the job, so the job shows its answer there and a duplicate of its input
is not paid for again. Without it, an imported succeeded job keeps its ``result_ref``
but has no result in its new data dir.
"""

from __future__ import annotations

import base64
import csv
import io
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import fields
from typing import IO, Any

import orjson

from desktop_queue.core.errors import InvalidInput
from desktop_queue.core.fingerprint import input_digest
from desktop_queue.core.model import TERMINAL, Job, State, clean_detail
from desktop_queue.core.records import EventDict, JobDict
from desktop_queue.core.results import ResultStore

FORMATS = ("csv", "jsonl")
EXPORT_FORMAT = "desktop-queue.job"
EXPORT_VERSION = 1

#: the job's fields, in the order a CSV file has them (``events`` and ``input`` last)
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Job) if f.name not in ("raw_events", "input"))
_NESTED = frozenset({"last_error", "replayed_as", "events", "input", "result"})
_NUMBERS = frozenset(
    {
        "seq",
        "max_attempts",
        "attempts",
        "total_attempts",
        "run",
        "created_at",
        "updated_at",
        "run_after",
        "deadline_at",
        "lease_epoch",
        "lease_expires_at",
        "poison_count",
        "started_at",
        "finished_at",
        "resolved_at",
    }
)
_INTS = frozenset({"seq", "max_attempts", "attempts", "total_attempts", "run", "lease_epoch", "poison_count"})


def export_doc(job: Job, *, with_input: bool = False, result: Any = None) -> dict[str, Any]:
    """One job as an export document (every field, the events; the input and result only if asked)."""
    doc: dict[str, Any] = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION}
    for name in FIELDS:
        value = getattr(job, name)
        doc[name] = list(value) if isinstance(value, tuple) else value
    doc["events"] = [dict(e) for e in job.raw_events]
    if with_input:
        doc["input"] = job.input
    if result is not None:
        doc["result"] = result
    return doc


def exported_result(results: ResultStore, job: Job) -> Any:
    """What an export carries of a succeeded job's result: the stored JSON, with an
    artifact's bytes (``artifact_b64``) in place of its file; None if it has none here."""
    if job.state != State.SUCCEEDED or not job.result_ref:
        return None
    doc = results.get(job.idempotency_key)
    if doc is None:
        return None
    result = doc.get("result")
    if isinstance(result, Mapping) and isinstance(result.get("artifact_ref"), str):
        data = results.read_artifact(result["artifact_ref"])
        if data is None:
            return None  # (its file is gone: the job says so where it is)
        kept = {k: v for k, v in result.items() if k not in _ARTIFACT_FILE_KEYS}
        return {**kept, "artifact_b64": base64.b64encode(data).decode("ascii")}
    return result


#: what a stored artifact result says of its file, made again where it is imported
_ARTIFACT_FILE_KEYS = frozenset({"artifact_ref", "artifact_bytes", "artifact_sha256"})


def write_export(
    jobs: Iterable[Job],
    out: IO[bytes],
    fmt: str = "jsonl",
    *,
    with_input: bool = False,
    result_of: Callable[[Job], Any] | None = None,
) -> int:
    """Writes ``jobs`` to ``out`` in ``fmt`` (``csv`` or ``jsonl``); returns how many.

    Args:
        result_of: a job's result as the export carries it (see :func:`exported_result`);
            None: no results.

    Raises:
        InvalidInput: an unknown format.
    """
    if fmt not in FORMATS:
        raise InvalidInput(f"export format must be csv or jsonl, not {fmt!r}")
    count = 0

    def doc_of(job: Job) -> dict[str, Any]:
        return export_doc(job, with_input=with_input, result=result_of(job) if result_of is not None else None)

    if fmt == "jsonl":
        for job in jobs:
            out.write(orjson.dumps(doc_of(job)) + b"\n")
            count += 1
        return count
    columns = [*FIELDS, "events", *(["input"] if with_input else []), *(["result"] if result_of else [])]
    text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
    try:
        writer = csv.writer(text)
        writer.writerow(columns)
        for job in jobs:
            doc = doc_of(job)
            writer.writerow([_cell(name, doc.get(name)) for name in columns])
            count += 1
        text.flush()
    finally:
        text.detach()  # the caller owns ``out``
    return count


def _cell(name: str, value: Any) -> str:
    if value is None:
        return ""
    if name in _NESTED:
        return orjson.dumps(value).decode()
    if isinstance(value, float):
        return repr(value)
    return str(value)


def read_export(data: bytes) -> Iterator[dict[str, Any]]:
    """The job documents of an export file (CSV or JSON Lines, told apart by its first byte).

    Raises:
        InvalidInput: a line or row that cannot be read (naming it).
    """
    body = data.lstrip()
    if body.startswith(b"{"):
        for number, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                parsed = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise InvalidInput(f"line {number}: not JSON ({exc})") from None
            if not isinstance(parsed, dict):
                raise InvalidInput(f"line {number}: not a job object")
            yield parsed
        return
    reader = csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline=""))
    for number, row in enumerate(reader, 2):
        doc: dict[str, Any] = {}
        for name, cell in row.items():
            if name is None:
                raise InvalidInput(f"row {number}: more cells than columns")
            doc[name] = _uncell(name, cell or "", number)
        yield doc


def _uncell(name: str, cell: str, row: int) -> Any:
    if cell == "":
        return [] if name in ("replayed_as", "events") else None
    try:
        if name in _NESTED:
            return orjson.loads(cell)
        if name in _INTS:
            return int(cell)
        if name in _NUMBERS:
            return float(cell)
    except (ValueError, orjson.JSONDecodeError):
        raise InvalidInput(f"row {row}: {name} cannot be read ({cell[:40]!r})") from None
    return cell


def job_from_export(doc: Mapping[str, Any], number: int = 0) -> tuple[JobDict, list[EventDict]]:
    """The stored job and timeline an export document describes (for ``Queue.import_jobs``).

    Raises:
        InvalidInput: a document that lacks what a job needs, or a live job without its input.
    """
    where = f"job {number}" if number else "job"
    try:
        job_id = str(doc["id"])
        kind = str(doc["kind"])
        state = str(doc["state"])
        State(state)
        key = str(doc["idempotency_key"])
        created = float(doc["created_at"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(f"{where}: not an exported job ({exc})") from None
    has_input = "input" in doc
    if state not in TERMINAL and not has_input:
        raise InvalidInput(f"{where} ({job_id}) is {state}: it needs its input to be imported (export with inputs)")
    events_raw = doc.get("events") or []
    if not isinstance(events_raw, list):
        raise InvalidInput(f"{where}: events must be a list")
    events: list[EventDict] = []
    for ev in events_raw:
        if not isinstance(ev, dict) or "type" not in ev or "at" not in ev:
            raise InvalidInput(f"{where}: an event lacks its type or time")
        event: dict[str, Any] = dict(ev)
        event["detail"] = clean_detail(ev.get("detail"))  # the allow-list holds for imported timelines too
        events.append(event)  # type: ignore[arg-type]
    payload = doc.get("input")
    job: dict[str, Any] = {name: doc.get(name) for name in FIELDS}
    job.pop("idempotency_key", None)
    job.update(
        id=job_id,
        kind=kind,
        state=state,
        key=key,
        created_at=created,
        title=str(doc.get("title") or ""),
        priority=str(doc.get("priority") or "background"),
        key_source=str(doc.get("key_source") or "fingerprint"),
        max_attempts=int(doc.get("max_attempts") or 1),
        attempts=int(doc.get("attempts") or 0),
        total_attempts=int(doc.get("total_attempts") or 0),
        run=int(doc.get("run") or 1),
        updated_at=float(doc.get("updated_at") or created),
        run_after=float(doc.get("run_after") or created),
        lease_epoch=int(doc.get("lease_epoch") or 0),
        poison_count=int(doc.get("poison_count") or 0),
        replayed_as=list(doc.get("replayed_as") or []),
        lease_token=None,
        lease_owner=None,
    )
    if has_input:
        job["input"] = payload
        job["input_digest"] = input_digest(kind, payload)
    if state == State.RUNNING:
        # its lease was another store's: it waits here to run again, the attempt given back
        job.update(state=str(State.QUEUED), lease_expires_at=None, attempts=max(0, job["attempts"] - 1))
    return job, events  # type: ignore[return-value]
