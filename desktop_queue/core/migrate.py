"""Copying a whole queue from one store to another: a JSON data dir to PostgreSQL, and back.

:func:`migrate` reads every job of the source through its
:class:`~desktop_queue.core.backend.Backend` (the JSON store's hot set *and* its
archive: finished jobs compaction moved to segments) in submission order, and writes
them into the target in batches. Each batch is one commit (one transaction on
PostgreSQL) holding its jobs with their whole timelines and the result documents of
their keys, so a migration killed mid-way leaves whole batches behind. Rerun with
``resume``, it copies the jobs the target lacks and duplicates none: every job is
keyed on its id, looked up in the transaction that would add it.

Jobs are copied exactly as they are (id, submission number, state, attempts, lease
fields, timeline): nothing is decided again. A job the source had ``running`` stays
``running``; the target's first opener reconciles it like any orphan, which is why the
source's workers should be stopped first (the command says so when it finds some).

The data dir's own files (schedules, the spend ledger, prices) are not jobs: they are
copied as files when the target is a data dir (:func:`copy_data_files`), and stay in
their data dir when the target is PostgreSQL (the output says where).

:func:`summary` is what both sides are compared with at the end: the jobs per state and
one checksum over each job's (id, state, attempts, result digest).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

import orjson

from desktop_queue.core.backend import Change, View, store_options
from desktop_queue.core.errors import InvalidInput, QueueError
from desktop_queue.core.model import events_of
from desktop_queue.core.queue import Queue
from desktop_queue.core.records import JobDict, NewRecord, Record
from desktop_queue.core.results import ResultStore
from desktop_queue.core.store.archive import as_hot
from desktop_queue.core.store.fileio import atomic_write, make_dirs
from desktop_queue.core.wording import counted

#: jobs a batch (one commit) holds by default
BATCH = 500

#: the data dir's files that are not jobs, copied as they are (the ledger is a folder of them)
DATA_FILES = ("schedules.json", "prices.json")
DATA_DIRS = ("ledger",)

_PG_SCHEMES = ("postgresql://", "postgres://")

#: progress(copied, skipped, total): called after each batch
Progress = Callable[[int, int, int], None]


class TargetNotEmpty(QueueError):
    """The target holds jobs already and the migration was not asked to resume."""


def is_pg(location: str) -> bool:
    """Whether ``location`` names a PostgreSQL store (else it is a data dir)."""
    return location.strip().startswith(_PG_SCHEMES)


def describe(location: str) -> str:
    """``location`` for people: a data dir's path, a PostgreSQL URI without its password."""
    if not is_pg(location):
        return str(location)
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(location.strip())
    if parts.password is not None:
        user, _, host = parts.netloc.rpartition("@")
        parts = parts._replace(netloc=f"{user.partition(':')[0]}:***@{host}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(name == "password" for name, _ in query):
        hidden = [(name, "***" if name == "password" else value) for name, value in query]
        parts = parts._replace(query=urlencode(hidden, safe="/*"))
    return urlunsplit(parts)


def open_side(location: str, *, data_dir: Path) -> Queue:
    """Opens one side of a migration, without start-up reconciliation (nothing is decided again).

    Args:
        location: a data dir, or a ``postgresql://`` URI.
        data_dir: the data dir a PostgreSQL side keeps its local files in (artifacts).
    Raises:
        StoreError: the store cannot be opened.
        InvalidInput: ``location`` is empty.
    """
    if not location.strip():
        raise InvalidInput("a migration needs a data dir or a postgresql://... URI on each side")
    if is_pg(location):
        queue = Queue(data_dir, **store_options(location))
    else:
        # (inline compaction: a migration process leaves no child behind it)
        queue = Queue(Path(location), background_compaction=False)
    queue.store.open(on_first=None)
    return queue


# ---------------------------------------------------------------------- reading the source


#: one job's place in the source: (seq, id, its archive row, or None for a hot job)
Place = tuple[int, str, Any]


def _order(st: View) -> list[Place]:
    """Every job of ``st``, in submission order."""
    hot = st.hot_jobs()
    if st.archive is None:
        # (PostgreSQL: every job is "hot", and its ids come in seq order without reading the jobs)
        return [(n, job_id, None) for n, job_id in enumerate(hot)]
    out: list[Place] = [(int(job["seq"]), job_id, None) for job_id, job in hot.items()]
    for row in st.archive.rows():
        if row.id not in hot:  # (the hot set holds a newer copy of one archived, then retried)
            out.append((row.seq, row.id, row))
    out.sort(key=lambda place: (place[0], place[1]))
    return out


def _full(job: JobDict) -> JobDict:
    """A copy of a stored job with its timeline parsed (a store's own dicts are never changed)."""
    copy = cast(JobDict, dict(job))
    copy["events"] = [cast(Any, dict(e)) for e in events_of(cast(JobDict, dict(job)))]
    return copy


def _read_batch(st: View, part: Sequence[Place]) -> list[JobDict]:
    by_id: Callable[[Sequence[str]], list[JobDict]] | None = getattr(st, "jobs_by_id", None)
    if by_id is not None and st.archive is None:
        # (PostgreSQL's view reads the batch in one statement; a data dir's places already
        # say where each archived job lies, which its jobs_by_id would ask the index again)
        return [_full(job) for job in by_id([job_id for _, job_id, _ in part])]
    rows = [row for _, _, row in part if row is not None]
    archived: dict[str, JobDict] = {}
    if rows and st.archive is not None:
        archived = {j["id"]: j for j in st.archive.jobs(rows)}
    hot = st.hot_jobs()
    out: list[JobDict] = []
    for _, job_id, row in part:
        job = hot.get(job_id) if row is None else archived.get(job_id)
        if job is None or (row is not None and st.purged(job)):
            continue  # (gone meanwhile, or purged but not yet folded away)
        out.append(_full(job) if row is None else as_hot(_full(job)))
    return out


def _wants_result(job: JobDict) -> bool:
    return job.get("state") == "succeeded" or bool(job.get("result_ref"))


def jobs_of(queue: Queue, *, batch: int = BATCH) -> Iterator[list[JobDict]]:
    """Every job of ``queue`` with its timeline, in submission order, ``batch`` at a time."""
    order = queue.store.read(_order)
    for start in range(0, len(order), batch):
        part = order[start : start + batch]
        yield queue.store.read(partial(_read_batch, part=part))


# ---------------------------------------------------------------------- writing the target


def _result_docs(source: Queue, jobs: Sequence[JobDict]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for job in jobs:
        key = job["key"]
        if key not in out and _wants_result(job):
            doc = source.results.get(key)
            if doc is not None:
                out[key] = doc
    return out


def _copy_artifact(source: ResultStore, target: ResultStore, doc: dict[str, Any]) -> None:
    """Copies the artifact file a result refers to into the target's result folder (if missing)."""
    result = doc.get("result")
    ref = result.get("artifact_ref") if isinstance(result, dict) else None
    if not isinstance(ref, str):
        return
    try:
        src, dst = source.artifact_file(ref), target.root.parent / ref
    except ValueError:
        return
    if src.exists() and not dst.exists() and src.resolve() != dst.resolve():
        make_dirs(dst.parent)
        atomic_write(dst, src.read_bytes(), overwrite=False)


def _new_records(jobs: Sequence[JobDict]) -> list[Record]:
    news: list[NewRecord] = []
    for job in jobs:
        body = cast(JobDict, {k: v for k, v in job.items() if k != "events"})
        news.append({"op": "new", "job": body, "ev": events_of(job)})
    if not news:
        return []
    return [news[0]] if len(news) == 1 else [{"op": "batch", "new": news}]


def _write_json(target: Queue, jobs: Sequence[JobDict], results: dict[str, dict[str, Any]]) -> int:
    """One durable commit of the jobs the target lacks; their results written first (as files)."""
    missing = target.store.read(lambda st: [j for j in jobs if not st.exists(j["id"])])
    written = []
    for job in missing:
        doc = results.get(job["key"])
        if doc is not None and not target.results.has(job["key"]):
            target.results.write(doc, durable=False)
            written.append(job["key"])
    # a result is durable before its job's success, as always: one flush for the batch's files
    target.results.make_durable(written)

    def fn(st: View) -> Change[int]:
        fresh = [j for j in missing if not st.exists(j["id"])]
        return Change(_new_records(fresh), len(fresh))

    return target.store.commit(fn)


def _write_pg(target: Queue, jobs: Sequence[JobDict], results: dict[str, dict[str, Any]]) -> int:
    """One transaction: the jobs the target lacks (their own seq kept), their events and results.

    Written with SQL of its own rather than ``new`` records: a new job's record takes a
    fresh submission number from the sequence, and a copy keeps the one it has.
    """

    def fn(view: Any) -> Change[int]:
        conn = view.conn
        ids = [j["id"] for j in jobs]
        have = {r[0] for r in conn.execute("SELECT id FROM dq_jobs WHERE id = ANY(%s)", (ids,)).fetchall()}
        fresh = [j for j in jobs if j["id"] not in have]
        if not fresh:
            return Change([], 0)
        rows: list[tuple[Any, ...]] = []
        for job in fresh:
            body = {k: v for k, v in job.items() if k != "events"}
            rows.append(
                (
                    job["id"],
                    job["seq"],
                    job["kind"],
                    job["priority"],
                    job["key"],
                    job["state"],
                    job.get("run_after") or 0.0,
                    job.get("lease_expires_at"),
                    orjson.dumps(body).decode(),
                    orjson.dumps(list(job.get("events") or ())).decode(),
                )
            )
        fresh_keys = {j["key"] for j in fresh}
        docs = [(k, orjson.dumps(d).decode()) for k, d in results.items() if k in fresh_keys]
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO dq_jobs (id, seq, kind, priority, key, state, run_after, lease_expires_at, doc, events)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb)",
                rows,
            )
            if docs:
                cur.executemany(
                    "INSERT INTO dq_results (key, doc) VALUES (%s, %s::jsonb) ON CONFLICT (key) DO NOTHING", docs
                )
            # each result's artifact with it (copied into the target's data dir just before),
            # so that every machine sharing the queue can show it
            for key, doc in results.items():
                artifact = view.artifact_of(doc) if key in fresh_keys else None
                if artifact is not None:
                    cur.execute(
                        "INSERT INTO dq_artifacts (ref, key, sha256, data) VALUES (%s, %s, %s, %s)"
                        " ON CONFLICT (ref) DO NOTHING",
                        (artifact[0], key, artifact[1], artifact[2]),
                    )
        # the next submission and lease must come after every copied one's
        top_seq = max(int(j["seq"]) for j in fresh)
        top_epoch = max(int(j.get("lease_epoch") or 0) for j in fresh)
        for name, top in (("dq_job_seq", top_seq), ("dq_lease_epoch", top_epoch)):
            if top > 0:
                conn.execute(
                    f"SELECT setval('{name}', greatest(%s, (SELECT CASE WHEN is_called THEN last_value ELSE 0 END"
                    f" FROM {name})))",
                    (top,),
                )
        return Change([], len(fresh))

    return target.store.commit(fn)


# ---------------------------------------------------------------------- checking


@dataclass(frozen=True)
class Summary:
    """What one side holds: jobs per state, and a checksum over (id, state, attempts, result digest)."""

    counts: dict[str, int]
    checksum: str
    jobs: int

    def to_json(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "counts": dict(sorted(self.counts.items())), "checksum": self.checksum}


def result_digest(doc: dict[str, Any] | None) -> str:
    """The SHA-256 of a result document's canonical JSON ("" for none): equal on every store."""
    if doc is None:
        return ""
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


def summary(queue: Queue, *, batch: int = BATCH) -> Summary:
    """Counts per state and the checksum of every job of ``queue`` (read in batches)."""
    counts: dict[str, int] = {}
    lines: list[bytes] = []
    for jobs in jobs_of(queue, batch=batch):
        for job in jobs:
            state = str(job["state"])
            counts[state] = counts.get(state, 0) + 1
            digest = result_digest(queue.results.get(job["key"])) if _wants_result(job) else ""
            lines.append(f"{job['id']}\t{state}\t{int(job.get('attempts') or 0)}\t{digest}".encode())
    lines.sort()
    checksum = hashlib.sha256(b"\n".join(lines)).hexdigest()
    return Summary(counts, checksum, len(lines))


# ---------------------------------------------------------------------- the whole copy


@dataclass
class Report:
    """What a migration did, and what both sides hold after it.

    Attributes:
        copied: jobs written into the target by this run.
        skipped: jobs the target had already (an earlier, interrupted run copied them).
        running: jobs copied while ``running`` (the target's first opener reconciles them).
        source, target: what each side holds at the end.
        notes: the data dir's files: where they went, or where they stay.
    """

    copied: int = 0
    skipped: int = 0
    running: int = 0
    source: Summary | None = None
    target: Summary | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return self.source is not None and self.source == self.target


def migrate(
    source: Queue,
    target: Queue,
    *,
    resume: bool = False,
    batch: int = BATCH,
    progress: Progress | None = None,
) -> Report:
    """Copies every job of ``source`` (with its timeline and result) into ``target``, then checks both.

    Raises:
        TargetNotEmpty: ``target`` holds jobs and ``resume`` is False (nothing was copied).
    """
    if batch < 1:
        raise InvalidInput(f"a batch holds at least one job, not {batch}")
    held = sum(target.counts().values())
    if held and not resume:
        raise TargetNotEmpty(
            f"the target holds {held:,} jobs already: migrate into an empty store, "
            "or pass --resume to finish an interrupted migration into it"
        )
    write = _write_pg if target.store.read(lambda st: st.archive is None) else _write_json
    report = Report()
    total = sum(source.counts().values())
    for jobs in jobs_of(source, batch=batch):
        results = _result_docs(source, jobs)
        for doc in results.values():
            _copy_artifact(source.results, target.results, doc)
        made = write(target, jobs, results)
        report.copied += made
        report.skipped += len(jobs) - made
        report.running += sum(1 for j in jobs if j["state"] == "running")
        if progress is not None:
            progress(report.copied, report.skipped, total)
    target.sync()
    report.source = summary(source, batch=batch)
    report.target = summary(target, batch=batch)
    return report


def copy_data_files(source_dir: Path, target_dir: Path) -> list[str]:
    """Copies the schedules, prices and spend ledger files of one data dir into another.

    A file the target has already is kept (it may be newer than the source's); each is
    named in the notes returned.
    """
    notes: list[str] = []
    if source_dir.resolve() == target_dir.resolve():
        return notes
    names = [n for n in DATA_FILES if (source_dir / n).is_file()]
    for folder in DATA_DIRS:
        if (source_dir / folder).is_dir():
            names.extend(
                str(p.relative_to(source_dir)) for p in sorted((source_dir / folder).rglob("*")) if p.is_file()
            )
    copied = kept = 0
    for name in names:
        src, dst = source_dir / name, target_dir / name
        if dst.exists():
            kept += 1
            notes.append(f"kept the target's own {name} (not overwritten)")
            continue
        make_dirs(dst.parent)
        atomic_write(dst, src.read_bytes(), overwrite=False)
        shutil.copystat(src, dst)
        copied += 1
    if copied:
        notes.append(f"copied {counted(copied, 'data file')} (schedules, prices, spend ledger) into {target_dir}")
    return notes


def data_files_note(location: str, data_dir: Path) -> str:
    """Where the data dir's files stay when the target is PostgreSQL (it does not hold them)."""
    return (
        f"schedules, prices and the spend ledger are not copied into {describe(location)}: they stay files "
        f"in the data dir {data_dir}; run the window and workers with --data-dir {data_dir} to keep them"
    )
