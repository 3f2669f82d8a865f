"""The history case of ``benchmarks/store.py`` (``--only history``): a store with years of history.

Each store holds 1,000 *active* (queued) jobs and N *finished* ones (``--sizes``):
about 94 % succeeded with a small text result, 5 % dead with an error message, 1 %
cancelled, over four provider profiles (all of kind "demo"). Three columns hold the
same jobs: ours, huey's ``SqliteHuey`` (finished: results in its result table,
errors as huey ``Error`` results, cancelled tasks revoked) and a plain stdlib
``sqlite3`` jobs table (WAL, ``synchronous=FULL``, an index on ``(state,
created_at)``). Measured, each in a fresh process (the OS page cache is warm):

* **open + list queued**: ``Queue.open(d)`` then ``queue.list("queued")`` (huey: the
  first query of a new ``SqliteHuey`` and ``huey.pending()``; sqlite: connect, set the
  pragmas, select the queued rows into dicts), wall time from after the imports;
* **peak RSS** of that process, right after the listing, and again after the queries;
* **queries in-process** in that same process: ``queue.stats()``, ``queue.list("dead")``
  and ``queue.get(id)`` of the oldest (archived) job (huey: its counts and
  ``huey.get(id, peek=True)``; it keeps no dead letters to list; sqlite: ``GROUP BY
  state``, the dead rows, one row by id);
* **the same queries through the CLI**: ``python -m desktop_queue --data-dir D stats
  --json``, ``list --state dead --json`` and ``show ID``, whole command, against
  ``python benchmarks/history.py peer-cli BACKEND D COMMAND`` doing the same for the
  peers (a minimal script: the interpreter's start-up is printed as a note);
* **compaction**: on a copy of our store, real lifecycles (per-op fsync suspended)
  until the journal segment rotates, which starts the compaction child
  (``python -m desktop_queue.core.store.compaction``); its peak RSS is its own ``VmHWM``,
  sampled while it runs (see :class:`ChildPeaks`). Then 1,000 more lifecycles and
  an inline ``queue.store.compact_now()`` (``background_compaction=False``): its wall
  time and its peak RSS above the process's RSS before it (Linux: ``VmHWM`` after a
  reset through ``/proc/self/clear_refs``). Peers have no compaction: the goal is the
  reference;
* **a worker on it**: on another copy of our store, the real command ``python -m
  desktop_queue --data-dir COPY work --concurrency 4 --until-idle`` runs the 1,000
  queued jobs; its own peak RSS (``VmHWM``, read by the process itself as it exits) and
  its wall time. Peers have no such process: the goal is the reference;
* **disk**: allocated bytes of the data dir per finished job.

Population runs the real public API (ours ``submit``/``lease``/``complete``/``fail``/
``cancel``; huey ``enqueue``/``dequeue``/``put_result``/``revoke_by_id``) with per-op
``fsync`` suspended, then ``os.sync()``; sqlite inserts in batches of 10,000 rows. The
time and peak RSS of populating are reported with a linear extrapolation to 1,000,000.
With ``--keep DIR`` the populated stores are kept in ``DIR/history-N/`` and reused by
later runs (``--repopulate`` rebuilds them); a store populated by another version of
``desktop_queue/core`` is reused with a note (its open then migrates it).

This file runs in three ways: imported by ``store.py`` (the orchestrator and the
``--worker`` phases named ``history_*``), and as ``python benchmarks/history.py
peer-cli ...`` (the peers' CLI, standard library and huey only).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent

#: The page ``desktop-queue list`` shows unless given ``--limit`` (its LIST_DEFAULT_LIMIT).
LIST_PAGE = 1_000
#: Bump when what populating writes changes: kept stores of another recipe are rebuilt.
RECIPE = 1
ACTIVE = 1_000
KIND = "demo"
WORKER = "bench-history"
PROFILES = ("local-sd", "openai-main", "openai-backup", "studio")
BACKENDS = ("ours", "huey", "sqlite")
TITLES = {"ours": "ours", "huey": "huey SqliteHuey", "sqlite": "sqlite3 WAL+FULL"}
PEERS = ("huey", "sqlite")
SUCCEEDED, DEAD, CANCELLED = "succeeded", "dead", "cancelled"
#: The queries, as (CLI arguments, key of the figures, the ``Queue`` call); ``show`` gets the archived id.
QUERIES = (
    ("stats --json", "stats", "queue.stats()"),
    ("list --state dead --json", "list_dead_page", f'queue.list("dead", limit={LIST_PAGE:,})'),
    ("list --state dead --all --json", "list_dead", 'queue.list_pages("dead"), a page at a time'),
    ("show ID", "show", "queue.get(archived id)"),
)
#: Queries that the "queries use indexes" goal names. ``list --state S`` answers the newest
#: 1,000 (the CLI's and the API's default page, and more than a window shows): that page is
#: the goal's query. Every dead letter of the store (50,000 at a million jobs) is shown
#: beside it, against the peer reading as many rows, with no goal.
GOAL_QUERIES = ("stats", "list_dead_page", "show")
#: Lifecycles at most while waiting for the journal segment to rotate.
COMPACTION_CAP = 50_000
INLINE_COMPACTION_OPS = 1_000

#: ``python -c`` that runs the ``desktop-queue`` command given after it, as ``python -m
#: desktop_queue`` does, then prints its own peak RSS: a high-water mark only the process
#: itself can read to the end (its parent's ``RUSAGE_CHILDREN`` also counts the memory
#: of whatever it was forked from, see :class:`ChildPeaks`).
WORK_CHILD = """
import runpy, sys
sys.argv = ["desktop-queue", *sys.argv[1:]]
try:
    runpy.run_module("desktop_queue", run_name="__main__", alter_sys=True)
finally:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print("@@work-peak", int(line.split()[1]) * 1024, flush=True)
"""
WORK_CONCURRENCY = 4

GOAL_OPEN_MS = 20.0
GOAL_RSS_MIB = 80.0
GOAL_COMPACTION_MIB = 100.0
GOAL_QUERY_MS = 50.0
GOAL_DISK_PER_JOB = 1024.0
GOAL_SIZE = 1_000_000

MIB = 1 << 20


# ============================================================== what the stores hold


def fate(i: int) -> str:
    """How finished job ``i`` ended: 5 % dead, 1 % cancelled, the rest succeeded."""
    if i % 20 == 7:
        return DEAD
    if i % 100 == 51:
        return CANCELLED
    return SUCCEEDED


def job_input(i: int, tag: str = "h") -> dict[str, Any]:
    """A small generation request; distinct per ``i`` (so are the idempotency keys)."""
    return {
        "prompt": f"a lighthouse at dusk over a quiet harbor, study {tag}{i}",
        "profile": PROFILES[i % len(PROFILES)],
        "seed": i,
        "duration_s": 0,
    }


def job_title(i: int) -> str:
    """What a person would see in the list."""
    return f"Lighthouse study {i}"


def job_result(i: int) -> dict[str, Any]:
    """A small text result, like the demo provider's (about 250 bytes)."""
    text = (
        f"Amber light over the harbor, study {i}: the lantern turns, the river runs to the sea, "
        "a falcon drifts over granite and the meadow is quiet under a cobalt sky."
    )
    return {"text": text, "words": len(text.split()), "provider": "demo", "model": "demo-1"}


def job_error(i: int) -> str:
    """The message of a dead job."""
    return f"HTTP 400 from {PROFILES[i % len(PROFILES)]}: the request was refused (content policy, ref {i})"


# =================================================================== worker phases
#
# Each runs in a fresh ``store.py --worker`` subprocess and returns a JSON-ready dict.


def _bench() -> Any:
    """``store.py``, for its helpers (it registers itself under this name before importing us)."""
    import store

    return store


class ChildPeaks:
    """Samples the peak RSS of this process's children (the store's compactions) while they run.

    Not ``RUSAGE_CHILDREN``: Linux counts in a child's ``ru_maxrss`` the memory of the
    process it was forked from, up to its ``exec``, so a compaction started by a process
    holding 700 MiB would report 700 MiB whatever it used itself. A child's own peak is
    its ``VmHWM`` after the ``exec`` (a high-water mark: a sample taken any time after the
    peak sees it); children still running this script (not yet exec'd) are skipped.

    Args:
        interval: seconds between samples.
    """

    def __init__(self, interval: float) -> None:
        import threading

        self.interval = interval
        self.peaks: dict[int, int] = {}
        self.commands: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="child-peaks", daemon=True)

    def __enter__(self) -> ChildPeaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak(self) -> int:
        """The highest peak RSS of any child seen, in bytes (0: none seen)."""
        return max(self.peaks.values(), default=0)

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        mine = me.cmdline()
        while not self._stop.wait(self.interval):
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    command = child.cmdline()
                    if command == mine or not command:
                        continue  # forked, not yet exec'd: its memory is still ours
                    hwm = _vm_status("VmHWM", child.pid)
                    peak = hwm if hwm is not None else int(child.memory_info().rss)
                    self.peaks[child.pid] = max(self.peaks.get(child.pid, 0), peak)
                    self.commands[child.pid] = " ".join(command[1:4])


def _progress(backend: str, done: int, total: int, start: float) -> None:
    """A progress line on stderr (the orchestrator passes it through while populating)."""
    elapsed = time.perf_counter() - start
    print(f"    {backend}: {done:,}/{total:,} jobs, {elapsed:.0f} s", file=sys.stderr, flush=True)


def populate_ours(data_dir: Path, n: int) -> dict[str, Any]:
    """N finished jobs through real lifecycles, then ``ACTIVE`` queued ones."""
    from desktop_queue.core.model import ErrorClass
    from desktop_queue.core.outcome import Outcome
    from desktop_queue.core.queue import Queue

    ids: dict[str, str] = {}
    start = time.perf_counter()
    step = max(10_000, n // 10)
    with _bench().fsync_suspended():
        queue = Queue.open(data_dir, providers={})
        try:
            for i in range(n):
                end = fate(i)
                job_id = queue.submit(KIND, job_input(i), title=job_title(i)).job.id
                ids.setdefault(end, job_id)
                if end == CANCELLED:
                    queue.cancel(job_id)
                else:
                    lease = queue.lease(WORKER)
                    if lease is None or lease.job_id != job_id:
                        raise RuntimeError(f"lease returned {lease!r}, expected job {job_id}")
                    if end == DEAD:
                        queue.fail(lease, Outcome.failure(ErrorClass.FATAL, job_error(i)))
                    else:
                        queue.complete(lease, job_result(i))
                if (i + 1) % step == 0:
                    _progress("ours", i + 1, n, start)
            for j in range(ACTIVE):
                queue.submit(KIND, job_input(j, "active-"), title=job_title(j))
        finally:
            queue.close()
    return {"ids": ids, "seconds": time.perf_counter() - start}


def _huey(data_dir: Path, fsync: bool) -> tuple[Any, Any]:
    """A ``SqliteHuey`` on ``data_dir/huey.db`` and its task (never run: results are put directly)."""
    from huey import SqliteHuey

    data_dir.mkdir(parents=True, exist_ok=True)
    huey = SqliteHuey(name="bench", filename=str(data_dir / "huey.db"), fsync=fsync)
    task = huey.task(name="demo")(_noop)
    return huey, task


def _noop(payload: dict[str, Any]) -> None:
    """The huey task (the benchmark dequeues and stores results itself)."""


def populate_huey(data_dir: Path, n: int) -> dict[str, Any]:
    """N tasks enqueued, dequeued and given a result (or an ``Error``, or revoked), then ``ACTIVE`` enqueued."""
    from huey.api import Error

    huey, task = _huey(data_dir, fsync=False)
    ids: dict[str, str] = {}
    start = time.perf_counter()
    step = max(10_000, n // 10)
    for i in range(n):
        end = fate(i)
        handle = task(job_input(i))
        ids.setdefault(end, handle.id)
        if end == CANCELLED:
            huey.revoke_by_id(handle.id)
        dequeued = huey.dequeue()
        if dequeued is None or dequeued.id != handle.id:
            raise RuntimeError(f"huey dequeued {dequeued!r}, expected {handle.id}")
        if end == DEAD:
            huey.put_result(handle.id, Error({"error": job_error(i), "retries": 0, "task_id": handle.id}))
        elif end == SUCCEEDED:
            huey.put_result(handle.id, job_result(i))
        if (i + 1) % step == 0:
            _progress("huey", i + 1, n, start)
    for j in range(ACTIVE):
        task(job_input(j, "active-"))
    huey.storage.close()
    if hasattr(os, "sync"):
        os.sync()
    return {"ids": ids, "seconds": time.perf_counter() - start}


SQLITE_SCHEMA = """
create table jobs (
    id text primary key,
    kind text not null,
    profile text,
    state text not null,
    title text,
    input text not null,
    result text,
    error text,
    attempts integer not null,
    created_at real not null,
    started_at real,
    finished_at real
);
create index jobs_state on jobs (state, created_at);
"""
SQLITE_COLUMNS = "id, kind, profile, state, title, input, result, error, attempts, created_at, started_at, finished_at"


def _sqlite_connect(data_dir: Path) -> sqlite3.Connection:
    """The peer's connection, durable per commit (WAL, ``synchronous=FULL``)."""
    conn = sqlite3.connect(str(data_dir / "jobs.db"), isolation_level=None)
    conn.execute("pragma journal_mode=wal")
    conn.execute("pragma synchronous=full")
    return conn


def populate_sqlite(data_dir: Path, n: int) -> dict[str, Any]:
    """N finished rows and ``ACTIVE`` queued ones, in transactions of 10,000 rows."""
    data_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    conn = _sqlite_connect(data_dir)
    conn.execute("pragma synchronous=off")
    conn.executescript(SQLITE_SCHEMA)
    ids: dict[str, str] = {}
    now = time.time() - n  # one job a second, ending now
    batch: list[tuple[Any, ...]] = []

    def flush() -> None:
        conn.execute("begin")
        conn.executemany(f"insert into jobs ({SQLITE_COLUMNS}) values ({', '.join('?' * 12)})", batch)
        conn.execute("commit")
        batch.clear()

    for i in range(n + ACTIVE):
        active = i >= n
        end = "queued" if active else fate(i)
        job_id = uuid.uuid4().hex
        ids.setdefault(end, job_id)
        payload = job_input(i - n, "active-") if active else job_input(i)
        created = now + i
        batch.append(
            (
                job_id,
                KIND,
                payload["profile"],
                end,
                job_title(i),
                json.dumps(payload),
                json.dumps(job_result(i)) if end == SUCCEEDED else None,
                job_error(i) if end == DEAD else None,
                0 if end in ("queued", CANCELLED) else 1,
                created,
                None if end in ("queued", CANCELLED) else created + 0.2,
                None if end == "queued" else created + 0.7,
            )
        )
        if len(batch) >= 10_000:
            flush()
    if batch:
        flush()
    conn.execute("pragma wal_checkpoint(truncate)")
    conn.close()
    if hasattr(os, "sync"):
        os.sync()
    return {"ids": ids, "seconds": time.perf_counter() - start}


def phase_populate(backend: str, data_dir: Path, n: int) -> dict[str, Any]:
    """Populates one column; adds the process's and its children's (compactions') peak RSS."""
    populate = {"ours": populate_ours, "huey": populate_huey, "sqlite": populate_sqlite}[backend]
    with ChildPeaks(interval=0.05) as children:
        out = populate(data_dir, n)
    out.update(n=n, peak_rss=_bench().peak_rss_bytes(), children_peak_rss=children.peak)
    return out


def _sqlite_rows(cursor: sqlite3.Cursor) -> list[dict[str, Any]]:
    """Rows as dicts (ours hands out Job objects; a dict per row is the peer's equivalent)."""
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``(fn(), milliseconds)``."""
    start = time.perf_counter()
    value = fn()
    return value, (time.perf_counter() - start) * 1e3


def expected_counts(n: int) -> dict[str, int]:
    """Jobs per state in a store of ``n`` finished jobs."""
    counts = {SUCCEEDED: 0, DEAD: 0, CANCELLED: 0, "queued": ACTIVE}
    for i in range(n):
        counts[fate(i)] += 1
    return counts


def phase_open(backend: str, data_dir: Path, ids: dict[str, str], n: int) -> dict[str, Any]:
    """Open + list queued (timed from after the imports), peak RSS, then the queries in-process.

    Ours: a query that raises or answers wrongly is recorded under ``problems`` (the
    store is being reworked: a wrong answer is a finding, not a reason to stop).
    """
    bench = _bench()
    archived = ids[SUCCEEDED]
    queries: dict[str, float] = {}
    problems: dict[str, str] = {}
    want = expected_counts(n)
    if backend == "ours":
        from desktop_queue.core.queue import Queue

        baseline = bench.peak_rss_bytes()
        start = time.perf_counter()
        queue = Queue.open(data_dir, providers={})
        queued = len(queue.list("queued"))
        open_ms = (time.perf_counter() - start) * 1e3
        peak_open = bench.peak_rss_bytes()

        def check(query: str, fn: Callable[[], Any], wrong: Callable[[Any], str | None]) -> None:
            try:
                value, queries[query] = _timed(fn)
                if (why := wrong(value)) is not None:
                    problems[query] = why
            except Exception as exc:  # recorded, reported as a MISS
                problems[query] = f"{type(exc).__name__}: {exc}"

        def stats_wrong(stats: Any) -> str | None:
            counts = getattr(stats, "counts", None)
            if counts is None:
                return None
            got = {k: int(counts.get(k, 0)) for k in want}
            return None if got == want else f"counts {got}, expected {want}"

        try:
            check("stats", queue.stats, stats_wrong)
            check(
                "list_dead_page",
                lambda: queue.list("dead", limit=LIST_PAGE),
                lambda v: (
                    None
                    if len(v) == min(LIST_PAGE, want[DEAD])
                    else f"{len(v)} dead jobs, expected {min(LIST_PAGE, want[DEAD])}"
                ),
            )
            check(
                "list_dead",
                # (as the CLI reads it: one page held at a time)
                lambda: sum(len(page) for page in queue.list_pages("dead")),
                lambda v: None if v == want[DEAD] else f"{v} dead jobs, expected {want[DEAD]}",
            )
            check(
                "show",
                lambda: queue.get(archived),
                lambda v: None if v.id == archived and v.state == SUCCEEDED else f"got {v.id} ({v.state})",
            )
        finally:
            queue.close()
    elif backend == "huey":
        import huey  # noqa: F401

        baseline = bench.peak_rss_bytes()
        start = time.perf_counter()
        hq, _task = _huey(data_dir, fsync=True)
        queued = len(hq.pending())
        open_ms = (time.perf_counter() - start) * 1e3
        peak_open = bench.peak_rss_bytes()
        _, queries["stats"] = _timed(lambda: (hq.pending_count(), hq.scheduled_count(), hq.result_count()))
        result, queries["show"] = _timed(lambda: hq.get(archived, peek=True))
        if result is None:
            raise RuntimeError(f"huey: no result for {archived}")
        hq.storage.close()
    else:
        baseline = bench.peak_rss_bytes()
        start = time.perf_counter()
        conn = _sqlite_connect(data_dir)
        queued = len(_sqlite_rows(conn.execute("select * from jobs where state = 'queued' order by created_at")))
        open_ms = (time.perf_counter() - start) * 1e3
        peak_open = bench.peak_rss_bytes()
        _, queries["stats"] = _timed(lambda: sqlite_query(conn, "stats", archived))
        _, queries["list_dead_page"] = _timed(lambda: sqlite_query(conn, "list_dead_page", archived))
        _, queries["list_dead"] = _timed(lambda: sqlite_query(conn, "list_dead", archived))
        _, queries["show"] = _timed(lambda: sqlite_query(conn, "show", archived))
        conn.close()
    if queued != ACTIVE:
        raise RuntimeError(f"{backend}: {queued} queued jobs listed, expected {ACTIVE}")
    return {
        "open_ms": open_ms,
        "baseline_rss": baseline,
        "peak_rss_open": peak_open,
        "peak_rss_queries": bench.peak_rss_bytes(),
        "queries_ms": queries,
        "problems": problems,
    }


def sqlite_query(conn: sqlite3.Connection, what: str, job_id: str) -> Any:
    """The peer's answer to one query (the same in-process and from its CLI)."""
    if what == "stats":
        rows = conn.execute(
            "select state, count(*), avg(finished_at - started_at), max(finished_at - started_at) "
            "from jobs group by state"
        ).fetchall()
        return {state: {"count": c, "run_avg_s": avg, "run_max_s": top} for state, c, avg, top in rows}
    if what == "list_dead":
        return _sqlite_rows(conn.execute("select * from jobs where state = 'dead' order by created_at desc"))
    if what == "list_dead_page":
        return _sqlite_rows(
            conn.execute("select * from jobs where state = 'dead' order by created_at desc limit ?", (LIST_PAGE,))
        )
    return _sqlite_rows(conn.execute("select * from jobs where id = ?", (job_id,)))


def _vm_status(field: str, pid: int | str = "self") -> int | None:
    """A ``/proc/PID/status`` figure (``VmRSS``, ``VmHWM``) in bytes, or None (not Linux, or gone)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return None


def phase_compaction(data_dir: Path) -> dict[str, Any]:
    """The compaction child's peak RSS after one segment of lifecycles, then an inline ``compact_now``."""
    from desktop_queue.core.queue import Queue

    bench = _bench()

    def lifecycles(queue: Any, count: int, tag: str, until: Callable[[], bool] | None = None) -> int:
        done = 0
        while done < count and (until is None or not until()):
            queue.submit(KIND, job_input(done, tag), title=job_title(done))
            lease = queue.lease(WORKER)  # the oldest queued job: the active ones go first
            if lease is None:
                raise RuntimeError("nothing to lease")
            queue.complete(lease, job_result(done))
            done += 1
        return done

    with bench.fsync_suspended(), ChildPeaks(interval=0.005) as children:
        queue = Queue.open(data_dir, providers={})
        first = queue.store.segment
        start = time.perf_counter()
        ran = lifecycles(queue, COMPACTION_CAP, "compact-", until=lambda: queue.store.segment != first)
        fill_s = time.perf_counter() - start
        rotated = queue.store.segment != first
        rss_holder = _vm_status("VmRSS") or 0
        start = time.perf_counter()
        queue.close()  # waits for the compaction child the rotation started
        close_s = time.perf_counter() - start

    inline: dict[str, Any] = {}
    with bench.fsync_suspended():
        queue = Queue.open(data_dir, providers={}, background_compaction=False)
        try:
            lifecycles(queue, INLINE_COMPACTION_OPS, "inline-")
            before = _vm_status("VmRSS")
            reset = False
            with contextlib.suppress(OSError):
                Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
                reset = True
            peak_before = bench.peak_rss_bytes()
            start = time.perf_counter()
            queue.store.compact_now()
            inline["seconds"] = time.perf_counter() - start
            hwm = _vm_status("VmHWM") if reset else None
            if before is not None and hwm is not None:
                inline["extra_rss"] = max(0, hwm - before)
            else:  # only visible when it beats the open's peak
                inline["extra_rss"] = max(0, bench.peak_rss_bytes() - peak_before)
            inline["rss_before"] = before
        finally:
            queue.close()
    return {
        "lifecycles": ran,
        "rotated": rotated,
        "fill_s": fill_s,
        "close_wait_s": close_s,
        "child_peak_rss": children.peak,
        "children": len(children.peaks),
        "child_commands": sorted(set(children.commands.values())),
        "holder_rss": rss_holder,
        "inline": inline,
    }


def run_phase(spec: dict[str, Any]) -> dict[str, Any]:
    """Entry point of the ``history_*`` worker phases of ``store.py --worker``."""
    phase, data_dir = spec["phase"], Path(spec["dir"])
    if phase == "history_populate":
        return phase_populate(spec["backend"], data_dir, int(spec["n"]))
    if phase == "history_open":
        return phase_open(spec["backend"], data_dir, spec["ids"], int(spec["n"]))
    if phase == "history_compaction":
        return phase_compaction(data_dir)
    raise SystemExit(f"unknown worker phase {phase!r}")


# ========================================================================== peer CLI


def peer_cli(argv: Sequence[str]) -> int:
    """``peer-cli BACKEND DIR COMMAND [ID]``: a peer's answer to a CLI query, as JSON on stdout."""
    backend, data_dir, command = argv[0], Path(argv[1]), argv[2]
    job_id = argv[3] if len(argv) > 3 else ""
    if backend == "sqlite":
        conn = _sqlite_connect(data_dir)
        answer = sqlite_query(conn, command, job_id)
        conn.close()
    elif backend == "huey":
        huey, _task = _huey(data_dir, fsync=True)
        if command == "stats":
            answer = {
                "queued": huey.pending_count(),
                "scheduled": huey.scheduled_count(),
                "results": huey.result_count(),
            }
        elif command == "show":
            answer = {"id": job_id, "result": huey.get(job_id, peek=True)}
        else:
            raise SystemExit(f"huey has no {command}")
        huey.storage.close()
    else:
        raise SystemExit(f"no peer {backend!r}")
    sys.stdout.write(json.dumps(answer, default=str) + "\n")
    return 0


# ==================================================================== orchestrator


def core_fingerprint() -> str:
    """A digest of ``desktop_queue/core`` (the store's code): which version populated a kept store."""
    digest = hashlib.sha256()
    core = REPO_ROOT / "desktop_queue" / "core"
    for path in sorted(core.rglob("*.py")):
        digest.update(str(path.relative_to(core)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _spawn_live(spec: dict[str, Any]) -> dict[str, Any]:
    """A worker whose stderr (progress) goes to ours; returns its result."""
    bench = _bench()
    proc = subprocess.run(
        [sys.executable, str(HERE / "store.py"), "--worker", json.dumps(spec)],
        stdout=subprocess.PIPE,
        text=True,
        env=bench._child_env(),
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(bench.RESULT_MARK) and proc.returncode == 0:
            return dict(json.loads(line[len(bench.RESULT_MARK) :]))
    raise RuntimeError(f"worker {spec['phase']}/{spec['backend']} failed (exit {proc.returncode}); see above")


def ensure_populated(
    parent: Path, n: int, repopulate: bool, fingerprint: str
) -> tuple[dict[str, Path], dict[str, dict[str, Any]]]:
    """The three stores of size ``n`` under ``parent/history-n``, populated unless kept ones fit.

    A column is reused when its stamp (``<backend>.json`` beside it) names this recipe
    and size; one populated by other store code is reused with a note.

    Returns:
        backend -> directory, and backend -> its stamp (``ids``, ``seconds``, RSS, ...).
    """
    log = _bench().log
    root = parent / f"history-{n}"
    root.mkdir(parents=True, exist_ok=True)
    dirs = {b: root / b for b in BACKENDS}
    stamps: dict[str, dict[str, Any]] = {}
    for backend in BACKENDS:
        stamp_path = root / f"{backend}.json"
        stamp: dict[str, Any] | None = None
        with contextlib.suppress(OSError, ValueError):
            stamp = json.loads(stamp_path.read_text())
        if stamp is not None and not repopulate and stamp.get("recipe") == RECIPE and stamp.get("n") == n:
            stamp["other_core"] = backend == "ours" and stamp.get("core") != fingerprint
            if stamp["other_core"]:
                log(f"  note: the kept {n:,}-job store of ours was populated by other store code; reused")
            log(f"  reusing the kept {TITLES[backend]} store of {n:,} finished jobs ({dirs[backend]})")
            stamp["reused"] = True
            stamps[backend] = stamp
            continue
        with contextlib.suppress(FileNotFoundError):
            stamp_path.unlink()
        shutil.rmtree(dirs[backend], ignore_errors=True)
        log(f"  populating {TITLES[backend]} with {n:,} finished + {ACTIVE:,} queued jobs ...")
        result = _spawn_live({"phase": "history_populate", "backend": backend, "dir": str(dirs[backend]), "n": n})
        result.update(recipe=RECIPE, core=fingerprint, reused=False)
        stamp_path.write_text(json.dumps(result, indent=2) + "\n")
        log(
            f"    done in {result['seconds']:.1f} s, peak RSS {result['peak_rss'] / MIB:.0f} MiB "
            f"(children {result['children_peak_rss'] / MIB:.0f} MiB)"
        )
        stamps[backend] = result
    return dirs, stamps


def _last_line(text: str) -> str:
    """The last non-blank line of an error output (the exception, in a traceback)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _wall(argv: Sequence[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Runs a command to its end; ``(wall milliseconds, the completed process)``."""
    start = time.perf_counter()
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=_bench()._child_env(), check=False)
    return (time.perf_counter() - start) * 1e3, proc


def cli_argv(backend: str, data_dir: Path, query: str, job_id: str) -> list[str] | None:
    """The command line of one query (None: the peer has no such query)."""
    if backend == "ours":
        args = {
            "stats": ["stats", "--json"],
            "list_dead_page": ["list", "--state", "dead", "--json"],
            "list_dead": ["list", "--state", "dead", "--all", "--json"],
        }.get(query, ["show", job_id])
        return [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), *args]
    if backend == "huey" and query in ("list_dead", "list_dead_page"):
        return None
    return [sys.executable, str(HERE / "history.py"), "peer-cli", backend, str(data_dir), query, job_id]


def measure_work(store_dir: Path, copy: Path) -> dict[str, Any]:
    """``work --until-idle`` on a copy of ``store_dir``: its peak RSS, wall time and jobs run.

    Returns:
        ``peak_rss`` (bytes), ``seconds`` and ``succeeded``; or ``error`` when the command
        failed or said nothing of its peak (a finding about ours: reported, not raised).
    """
    import re

    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(store_dir, copy, symlinks=True)
    try:
        argv = [sys.executable, "-c", WORK_CHILD, "--data-dir", str(copy), "work",
                "--concurrency", str(WORK_CONCURRENCY), "--until-idle"]  # fmt: skip
        ms, proc = _wall(argv)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    peak = re.search(r"^@@work-peak (\d+)$", proc.stdout, re.MULTILINE)
    if proc.returncode != 0 or peak is None:
        return {"error": f"exit {proc.returncode}: {_last_line(proc.stderr)}"}
    # "stopped (idle): 1,000 succeeded; queue now ..." (the command's last word on what it ran)
    ran = re.search(r"stopped \(idle\): ([\d,]+) succeeded", proc.stderr)
    return {
        "peak_rss": int(peak.group(1)),
        "seconds": ms / 1e3,
        "succeeded": int(ran.group(1).replace(",", "")) if ran else 0,
    }


def bench_history(
    sizes: Sequence[int], run_dir: Path, keep: Path | None, repeats: int, repopulate: bool
) -> dict[str, Any]:
    """The history case at every size.

    Args:
        sizes: finished jobs per store.
        run_dir: this run's scratch directory (stores live here without ``keep``).
        keep: where populated stores are kept across runs (None: not kept).
        repeats: fresh processes per open measurement and per CLI query (the median is shown).
        repopulate: rebuild kept stores even when they fit.

    Returns:
        ``sizes`` (size -> backend -> figures) and ``python_startup_ms``.
    """
    bench = _bench()
    log = bench.log
    fingerprint = core_fingerprint()
    results: dict[str, Any] = {}
    for n in sizes:
        log(f"  history: {n:,} finished jobs")
        dirs, stamps = ensure_populated(keep or run_dir, n, repopulate, fingerprint)
        figures: dict[str, dict[str, Any]] = {b: {"populate": stamps[b]} for b in BACKENDS}
        if hasattr(os, "sync"):
            os.sync()
        for backend in BACKENDS:
            figures[backend]["disk_bytes"] = bench.disk_usage(dirs[backend])
            figures[backend]["opens"] = []
            figures[backend]["cli_ms"] = {}
            figures[backend]["cli_problems"] = {}
        for attempt in range(repeats):
            for backend in BACKENDS:
                log(f"    open + list queued {attempt + 1}/{repeats}: {TITLES[backend]}")
                spec = {"phase": "history_open", "backend": backend, "dir": str(dirs[backend])}
                try:
                    result, _ = bench.spawn({**spec, "ids": stamps[backend]["ids"], "n": n})
                except RuntimeError as exc:
                    if backend != "ours":
                        raise
                    result = {"error": _last_line(str(exc))}  # a finding about the store: reported
                    log(f"      failed: {result['error']}")
                figures[backend]["opens"].append(result)
        for _args, query, _call in QUERIES:
            for _attempt in range(repeats):
                for backend in BACKENDS:
                    argv = cli_argv(backend, dirs[backend], query, stamps[backend]["ids"][SUCCEEDED])
                    if argv is None:
                        continue
                    ms, proc = _wall(argv)
                    if proc.returncode == 0:
                        figures[backend]["cli_ms"].setdefault(query, []).append(ms)
                    elif backend == "ours":
                        figures[backend]["cli_problems"][query] = f"exit {proc.returncode}: {_last_line(proc.stderr)}"
                    else:
                        raise RuntimeError(f"{TITLES[backend]} {query} failed (exit {proc.returncode}):\n{proc.stderr}")
            log(f"    CLI {query}: {repeats} run(s) per column")
        log("    a worker on a copy of ours")
        figures["ours"]["work"] = measure_work(dirs["ours"], run_dir / f"history-{n}-work")
        if "error" in figures["ours"]["work"]:
            log(f"      failed: {figures['ours']['work']['error']}")
        log("    compaction on a copy of ours")
        copy = run_dir / f"history-{n}-compaction"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(dirs["ours"], copy, symlinks=True)
        try:
            figures["ours"]["compaction"], _ = bench.spawn({"phase": "history_compaction", "backend": "ours",
                                                            "dir": str(copy)})  # fmt: skip
        except RuntimeError as exc:
            figures["ours"]["compaction"] = {"error": _last_line(str(exc))}
            log(f"      failed: {figures['ours']['compaction']['error']}")
        finally:
            shutil.rmtree(copy, ignore_errors=True)
        results[str(n)] = figures
    startup = [_wall([sys.executable, "-c", "pass"])[0] for _ in range(max(3, repeats))]
    return {"sizes": results, "python_startup_ms": statistics.median(startup)}


# ============================================================== figures and goals


def _median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _opens(fig: dict[str, Any]) -> list[dict[str, Any]]:
    """The open measurements of a column that did not fail."""
    return [o for o in fig["opens"] if "error" not in o]


def pick_open_ms(fig: dict[str, Any]) -> float | None:
    """Median open + list queued, ms."""
    return _median([o["open_ms"] for o in _opens(fig)])


def pick_rss_open(fig: dict[str, Any]) -> float | None:
    """Highest peak RSS after open + list, MiB."""
    return max((o["peak_rss_open"] / MIB for o in _opens(fig)), default=None)


def pick_rss_queries(fig: dict[str, Any]) -> float | None:
    """Highest peak RSS after the in-process queries, MiB."""
    return max((o["peak_rss_queries"] / MIB for o in _opens(fig)), default=None)


def pick_query_ms(fig: dict[str, Any], query: str) -> float | None:
    """Median in-process time of one query that answered right, ms (None: none did, or no such query)."""
    return _median(
        [o["queries_ms"][query] for o in _opens(fig) if query in o["queries_ms"] and query not in o["problems"]]
    )


def pick_cli_ms(fig: dict[str, Any], query: str) -> float | None:
    """Median wall time of one CLI query, ms (None: not measured)."""
    return _median(fig["cli_ms"].get(query, []))


def disk_per_job(fig: dict[str, Any], n: int) -> float:
    """Allocated bytes per finished job."""
    return float(fig["disk_bytes"]) / n


def problems_of(fig: dict[str, Any], query: str) -> list[str]:
    """What went wrong with one query of ours (in-process or CLI), distinct messages."""
    found = [o["problems"][query] for o in _opens(fig) if query in o.get("problems", {})]
    if query in fig.get("cli_problems", {}):
        found.append("CLI " + fig["cli_problems"][query])
    return sorted(set(found))


Summary = tuple[str, str, str, bool, float, str, float]


def summary_rows(history: dict[str, Any] | None) -> list[Summary]:
    """The history figures for the one summary table of ``store.py``: ours / each peer."""
    rows: list[Summary] = []
    if not history:
        return rows
    for key, figures in sorted(history["sizes"].items(), key=lambda kv: int(kv[0])):
        n = int(key)
        case = f"history {n:,}"
        ours = figures["ours"]
        measured: list[tuple[str, str, Callable[[dict[str, Any]], float | None], tuple[str, ...]]] = [
            (f"open + list {ACTIVE:,} queued", "ms", pick_open_ms, PEERS),
            ("peak RSS after open + list", "MiB", pick_rss_open, PEERS),
            ("peak RSS after the queries", "MiB", pick_rss_queries, PEERS),
        ]
        for args, query, call in QUERIES:
            measured.append((f"{call} in-process", "ms", lambda f, q=query: pick_query_ms(f, q), PEERS))
            measured.append((f"CLI {args}", "ms", lambda f, q=query: pick_cli_ms(f, q), PEERS))
        measured.append(("disk per finished job", "bytes", lambda f, n=n: disk_per_job(f, n), PEERS))
        # sqlite3 is filled by batched inserts, not lifecycles: only huey compares
        measured.append(("populate, fsync suspended", "s", lambda f: float(f["populate"]["seconds"]), ("huey",)))
        for label, unit, pick, peers in measured:
            mine = pick(ours)
            if mine is None:
                continue
            for peer in peers:
                theirs = pick(figures[peer])
                if theirs is not None:
                    rows.append((case, label, unit, False, mine, TITLES[peer], theirs))
        work = ours.get("work", {})
        if "peak_rss" in work:
            rows.append((case, f"work --concurrency {WORK_CONCURRENCY} --until-idle, peak RSS", "MiB", False,
                         work["peak_rss"] / MIB, "goal", GOAL_RSS_MIB))  # fmt: skip
        compaction = ours["compaction"]
        if "error" not in compaction:
            if compaction["children"]:
                rows.append((case, "compaction child peak RSS", "MiB", False, compaction["child_peak_rss"] / MIB,
                             "goal", GOAL_COMPACTION_MIB))  # fmt: skip
            rows.append((case, "inline compact_now, RSS above before", "MiB", False,
                         compaction["inline"]["extra_rss"] / MIB, "goal", GOAL_COMPACTION_MIB))  # fmt: skip
    return rows


def _goal(goal: str, value: float | None, limit: float, detail: str, failed: Sequence[str] = ()) -> dict[str, Any]:
    """One goal line: PASS when ``value`` is within ``limit`` and nothing failed."""
    if failed:
        detail = f"{detail}; FAILED: {'; '.join(failed)}"
    ok = value is not None and value <= limit and not failed
    return {"goal": goal, "status": "PASS" if ok else "MISS", "detail": detail, "value": value}


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


def evaluate_goals(history: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The issue's goals for history, as PASS/MISS lines (never the exit status)."""
    goals: list[dict[str, Any]] = []
    if not history:
        return goals
    sizes = {int(k): v for k, v in history["sizes"].items()}
    for n, figures in sorted(sizes.items()):
        ours = figures["ours"]
        ms = pick_open_ms(ours)
        failed = sorted({o["error"] for o in ours["opens"] if "error" in o})
        goals.append(
            _goal(f"open + list {ACTIVE:,} queued <= {GOAL_OPEN_MS:g} ms with {n:,} finished jobs", ms, GOAL_OPEN_MS,
                  f"median {_fmt(ms)} ms (huey {_fmt(pick_open_ms(figures['huey']))}, "
                  f"sqlite3 {_fmt(pick_open_ms(figures['sqlite']))})", failed)
        )  # fmt: skip
    for n, figures in sorted(sizes.items()):
        ran = figures["ours"]["compaction"]
        title = f"compaction peak RSS <= {GOAL_COMPACTION_MIB:g} MiB with {n:,} finished jobs"
        if "error" in ran:
            goals.append(_goal(title, None, GOAL_COMPACTION_MIB, "not measured", [ran["error"]]))
            continue
        inline = f"inline compact_now +{ran['inline']['extra_rss'] / MIB:.0f} MiB in {ran['inline']['seconds']:.2f} s"
        if not ran["rotated"]:
            detail, value = f"no segment rotated after {ran['lifecycles']:,} lifecycles; {inline}", None
        elif not ran["children"]:
            value = ran["inline"]["extra_rss"] / MIB
            detail = f"no compaction child seen after the rotation; {inline}"
        else:
            value = ran["child_peak_rss"] / MIB
            detail = f"child {value:.0f} MiB after {ran['lifecycles']:,} lifecycles; {inline}"
        goals.append(_goal(title, value, GOAL_COMPACTION_MIB, detail))
    top = max(sizes)
    figures = sizes[top]
    ours = figures["ours"]
    at = f"at {top:,}" + ("" if top >= GOAL_SIZE else f" (the goal names {GOAL_SIZE:,})")
    mib = pick_rss_open(ours)
    goals.append(
        _goal(f"peak RSS of open + list <= {GOAL_RSS_MIB:g} MiB {at}", mib, GOAL_RSS_MIB,
              f"{_fmt(mib, '.0f')} MiB (after the queries {_fmt(pick_rss_queries(ours), '.0f')} MiB; "
              f"huey {_fmt(pick_rss_open(figures['huey']), '.0f')}, "
              f"sqlite3 {_fmt(pick_rss_open(figures['sqlite']), '.0f')})")
    )  # fmt: skip
    work = ours.get("work")
    if work is not None:
        title = f"peak RSS of work --concurrency {WORK_CONCURRENCY} --until-idle <= {GOAL_RSS_MIB:g} MiB {at}"
        if "error" in work:
            goals.append(_goal(title, None, GOAL_RSS_MIB, "not measured", [work["error"]]))
        else:
            value = work["peak_rss"] / MIB
            detail = f"{value:.0f} MiB, running its {work['succeeded']:,} queued jobs in {work['seconds']:.1f} s"
            ran = [] if work["succeeded"] == ACTIVE else [f"it ran {work['succeeded']:,} jobs, not {ACTIVE:,}"]
            goals.append(_goal(title, value, GOAL_RSS_MIB, detail, ran))
    for args, query, call in QUERIES:
        if query not in GOAL_QUERIES:
            continue
        ms = pick_query_ms(ours, query)
        goals.append(
            _goal(f"{call} in-process <= {GOAL_QUERY_MS:g} ms {at}", ms, GOAL_QUERY_MS,
                  f"{_fmt(ms)} ms in-process, CLI {args} {_fmt(pick_cli_ms(ours, query), '.0f')} ms "
                  f"(interpreter start-up {history['python_startup_ms']:.0f} ms)", problems_of(ours, query))
        )  # fmt: skip
    per_job = disk_per_job(ours, top)
    goals.append(
        _goal(f"disk <= {GOAL_DISK_PER_JOB:g} bytes per finished job {at}", per_job, GOAL_DISK_PER_JOB,
              f"{per_job:,.0f} bytes (huey {disk_per_job(figures['huey'], top):,.0f}, "
              f"sqlite3 {disk_per_job(figures['sqlite'], top):,.0f})")
    )  # fmt: skip
    return goals


def _kept_note(stamp: dict[str, Any]) -> str:
    """How a populated store came to be measured: populated now, or kept (by which code)."""
    if not stamp.get("reused"):
        return ""
    if stamp.get("other_core"):
        return " (kept, populated by OTHER store code: --repopulate)"
    return " (kept from an earlier run)"


def format_notes(history: dict[str, Any] | None) -> list[str]:
    """Lines printed before the summary: population cost and its extrapolation, compaction, failures."""
    if not history:
        return []
    lines = [
        f"== history: {ACTIVE:,} queued + N finished jobs (5 % dead, 1 % cancelled), each figure the median of "
        "fresh processes; peers: huey SqliteHuey(fsync=True), sqlite3 WAL + synchronous=FULL =="
    ]
    for key, figures in sorted(history["sizes"].items(), key=lambda kv: int(kv[0])):
        n = int(key)
        for backend in BACKENDS:
            pop = figures[backend]["populate"]
            rate = n / pop["seconds"] if pop["seconds"] > 0 else float("nan")
            lines.append(
                f"  {n:>9,} {TITLES[backend]:<17} populated in {pop['seconds']:7.1f} s"
                f"{_kept_note(pop)}, {rate:8,.0f} jobs/s, "
                f"peak RSS {pop['peak_rss'] / MIB:6.0f} MiB (compaction children {pop['children_peak_rss'] / MIB:.0f}"
                f" MiB); 1,000,000 at this rate: {GOAL_SIZE / rate / 60:.1f} min"
            )
        comp = figures["ours"]["compaction"]
        if "error" in comp:
            lines.append(f"  {n:>9,} ours compaction failed: {comp['error']}")
        else:
            lines.append(
                f"  {n:>9,} ours compaction: {comp['lifecycles']:,} lifecycles to rotate ({comp['fill_s']:.1f} s, "
                f"fsync suspended; the holder then at {comp['holder_rss'] / MIB:.0f} MiB RSS), close waited "
                f"{comp['close_wait_s']:.2f} s; {comp['children']} child(ren): {', '.join(comp['child_commands'])}"
            )
        for _args, query, call in QUERIES:
            for problem in problems_of(figures["ours"], query):
                lines.append(f"  {n:>9,} ours {call} FAILED: {problem}")
    lines.append(f"  python start-up alone (python -c pass): {history['python_startup_ms']:.0f} ms")
    lines.append("")
    return lines


if __name__ == "__main__":
    if sys.argv[1:2] != ["peer-cli"]:
        raise SystemExit("usage: history.py peer-cli BACKEND DIR COMMAND [ID] (the rest runs from store.py)")
    sys.exit(peer_cli(sys.argv[2:]))
