#!/usr/bin/env python3
"""Benchmark of the durable task store, with huey's SQLite storage measured alongside.

For stores already holding 1,000 / 10,000 / 100,000 completed jobs (kept with their
events and result files; ``--sizes`` chooses others: ``--sizes 1m`` works, but
populating and measuring a 1,000,000-job store takes many minutes), this prints, per size:

* durable enqueue ops/s: ``Queue.submit`` with distinct inputs (one ``fsync``'d commit);
* full lifecycle jobs/s: ``submit`` + ``lease`` + ``complete(lease, result)`` (the result
  file is written, then the job committed), with per-lifecycle p50/p99 latency;
* cold open: wall time of ``Queue.open`` on the populated directory, measured inside a
  fresh subprocess (the OS page cache is warm; no Python-level cache can help);
* peak RSS of the subprocess holding the store, after the open and after the ops;
* disk usage of the populated store;

and the same figures for huey's ``SqliteStorage``, once with ``fsync=True``
(``PRAGMA synchronous=FULL``: durable per commit, like ours) and once with huey's
default setting, plus the ratio ours/huey for each figure. Goals are then reported as
PASS/MISS lines; timing never changes the exit status.

Four more cases follow (each runnable alone with ``--only``):

* **concurrency** (``--only concurrency``): 1 and 4 processes (``--procs``) on one data
  dir, each running full lifecycles through ``Queue.submit/lease/complete`` (a lease
  takes whichever job is next, often another process's), then one process of 4 threads
  (``--threads``) sharing one ``Queue``; huey: the same processes or threads on one
  ``SqliteHuey(fsync=True)`` file. All processes open and warm up, then start
  together; the rate is all their lifecycles over the span from the first start to the
  last end. Printed: lifecycles/s ours / huey per configuration, CPU per lifecycle,
  and the scaling 4 / 1 process(es) of each side.
* **worker** (``--only worker``): 2,000 (``--e2e-jobs``) trivial demo jobs
  (``{"prompt": "x", "duration_s": 0}``, distinct keys) submitted beforehand, then
  ``python -m desktop_queue --data-dir D work --concurrency 4 --until-idle`` against
  huey's own consumer with 4 threads on ``SqliteHuey(fsync=True)`` (equal durability)
  and a task that does nothing but return a small result (stored, as ours stores its
  result), stopped once every task completed. Wall time and CPU time (``getrusage``
  of the children) of the whole command, start-up included, per job.
* **backlog** (``--only backlog``; in ``backlog.py``): 2,000 (``--backlog-jobs``) demo jobs
  of 20 ms each (``--backlog-ms``: an answer's wait), then one ``work --concurrency 4
  --until-idle`` against 4 (``--backlog-procs``) started together on the same data dir;
  first start to last exit. The reference is one process of ours.
* **history** (``--only history``, at each of ``--sizes``; in ``history.py``): 1,000
  queued jobs plus N finished ones (succeeded with a small text result, some dead,
  a few cancelled), in ours, huey's ``SqliteHuey`` and a stdlib ``sqlite3`` jobs table
  (WAL, ``synchronous=FULL``, indexed by state). Each in fresh processes: cold open +
  ``list("queued")``, that process's peak RSS, ``stats``/``list dead``/``show ID``
  in-process and through the CLI, the peak RSS of a ``work`` process running the
  queued jobs (on a copy), the compaction child's peak RSS, disk per finished job. With ``--keep DIR`` the populated stores are kept and reused by later runs.

A summary table at the end gives every figure as ours / peer (a figure without a peer,
such as compaction memory, is given against its goal).

How the stores are populated: by running the real lifecycle N times through the real
public API of each side (``Queue.submit/lease/complete``; huey ``enqueue``/``dequeue``/
``put_result``) with per-operation ``fsync`` suspended (ours: ``os.fsync`` is a no-op in
the populating subprocess only; huey: ``fsync=False``), followed by ``os.sync()``. The
files are byte-for-byte what durable lifecycles would have written, in a fraction of
the time. Every *measured* operation runs afterwards, in a fresh process, fully durable.

Each (backend, phase) runs in its own subprocess so that memory figures and caches are
per process: this file re-invokes itself with ``--worker``. The measured operations
are split into rounds (``--rounds``), each a fresh process, alternating the columns,
so that other load on the machine drifts over all columns alike. Each round leaves
its jobs completed in the store, which therefore grows by the measured and warm-up
operations (about 5,000 jobs with the defaults) while it is measured.

Usage::

    python benchmarks/store.py                         # every case; 1,000 / 10,000 / 100,000 jobs
    python benchmarks/store.py --sizes 1000,10000
    python benchmarks/store.py --sizes 1m --only store # 1,000,000 jobs: many minutes to populate
    python benchmarks/store.py --only concurrency      # 1 and 4 processes, 4 threads on one data dir (seconds)
    python benchmarks/store.py --only worker --rounds 1  # work --concurrency 4 vs huey's consumer
    python benchmarks/store.py --only backlog          # 4 work processes vs 1 on 2,000 jobs of 20 ms
    python benchmarks/store.py --only history --sizes 1k,100k,1m --workdir /work/scratch-bench \
        --keep /work/scratch-bench/keep                # history case; populated stores kept for the next run
    python benchmarks/store.py --quick                 # smoke run: 1,000 jobs, 200 ops, 1 round
    python benchmarks/store.py --json                  # raw figures on stdout (table on stderr)
    python benchmarks/store.py --json out.json         # table on stdout, raw figures in out.json
    python benchmarks/store.py --workdir /some/disk    # where the temporary stores live (not tmpfs)
    python benchmarks/store.py --only concurrency --flush-latency-ms 1  # as on a disk whose flush takes 1 ms
    make bench ARGS="--only history --sizes 1k,100k"   # the same through make (installs the bench extras)

Requires ``huey`` and ``psutil`` (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

REPO_ROOT = Path(__file__).resolve().parent.parent

#: The measured columns, in table order.
BACKENDS = ("ours", "huey_fsync", "huey_default")
BACKEND_TITLES = {
    "ours": "ours",
    "huey_fsync": "huey fsync=True",
    "huey_default": "huey default",
}
REFERENCES = ("huey_fsync", "huey_default")

KIND = "demo"
WORKER = "bench-worker"
RESULT_MARK = "@@bench-result "

#: The cases, runnable alone with ``--only``.
CASES = ("store", "concurrency", "worker", "backlog", "history")

DEFAULT_SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000,)

#: Goals (see the module docstring); reported, never enforced through the exit status.
GOAL_LIFECYCLE_VS_HUEY = 1.5
GOAL_COST_GROWTH = 1.3
GOAL_COLD_OPEN_S = 1.0
GOAL_COLD_OPEN_SIZE = 100_000
GOAL_GROWTH_SIZES = (1_000, 100_000)

MIB = 1 << 20


# =========================================================================== worker side
#
# Everything below up to the "orchestrator" banner runs inside a subprocess started
# with ``--worker``; it prints one ``RESULT_MARK``-prefixed JSON line and exits.


def payload_for(tag: str, i: int) -> dict[str, Any]:
    """A distinct, realistic job input (distinct inputs give distinct idempotency keys).

    Args:
        tag: makes inputs unique per phase and run.
        i: the operation's index.

    Returns:
        A small JSON-ready dict, like an image-generation request.
    """
    return {"prompt": f"a lighthouse at dusk, {tag} #{i}", "seed": i, "steps": 30, "size": "1024x1024"}


def result_for(i: int) -> dict[str, Any]:
    """A small result document, like a provider's answer.

    Args:
        i: the operation's index.

    Returns:
        A JSON-ready dict.
    """
    return {"images": [{"uri": f"file:///outputs/{i:08d}.png", "width": 1024, "height": 1024}], "ms": 1234}


def _demo_task(payload: dict[str, Any]) -> dict[str, Any]:
    """The huey task body (never executed by the benchmark: results are put directly)."""
    return result_for(int(payload["seed"]))


class Subject(Protocol):
    """One store under test, as seen by the worker."""

    def open(self) -> None:
        """Opens the store (the cold-open measurement times exactly this)."""

    def enqueue(self, payload: dict[str, Any]) -> None:
        """Durably enqueues one job."""

    def lifecycle(self, payload: dict[str, Any], result: dict[str, Any]) -> None:
        """Enqueues one job, takes it as a worker would, and stores its result."""

    def drain(self) -> int:
        """Takes and completes every waiting job; returns how many."""

    def close(self) -> None:
        """Releases the store."""

    def describe(self) -> dict[str, Any]:
        """Settings worth reporting (called after :meth:`open`)."""


class OursSubject:
    """Desktop Queue's own store, through the public ``Queue`` API.

    Args:
        data_dir: the queue's data directory.
        rotate_bytes: passed to ``Queue.open`` (None: the store's default).
    """

    def __init__(self, data_dir: Path, rotate_bytes: int | None = None) -> None:
        self.data_dir = data_dir
        self.rotate_bytes = rotate_bytes
        self.queue: Any = None

    def open(self) -> None:
        """``Queue.open`` (no providers: kind "demo" needs none)."""
        from desktop_queue.core.queue import Queue

        kwargs = {} if self.rotate_bytes is None else {"rotate_bytes": self.rotate_bytes}
        self.queue = Queue.open(self.data_dir, providers={}, **kwargs)

    def enqueue(self, payload: dict[str, Any]) -> None:
        """``Queue.submit``: one fsynced commit."""
        self.queue.submit(KIND, payload)

    def lifecycle(self, payload: dict[str, Any], result: dict[str, Any]) -> None:
        """``submit``, ``lease`` (which must hand out that job), ``complete(lease, result)``."""
        submitted = self.queue.submit(KIND, payload)
        lease = self.queue.lease(WORKER)
        if lease is None or lease.job_id != submitted.job.id:
            raise RuntimeError(f"lease returned {lease!r}, expected job {submitted.job.id}")
        self.queue.complete(lease, result)

    def drain(self) -> int:
        """Leases and completes queued jobs until none is left."""
        done = 0
        while (lease := self.queue.lease(WORKER)) is not None:
            self.queue.complete(lease, result_for(done))
            done += 1
        return done

    def close(self) -> None:
        """``Queue.close`` (waits for a running compaction)."""
        if self.queue is not None:
            self.queue.close()
            self.queue = None

    def describe(self) -> dict[str, Any]:
        """The rotation threshold and the journal segment being appended to."""
        store = self.queue.store
        return {"rotate_bytes": store.rotate_bytes, "segment": store.segment}


class HueySubject:
    """huey's ``SqliteStorage`` (WAL), through ``SqliteHuey`` and a registered task.

    A lifecycle is ``huey.enqueue`` (by calling the task), ``huey.dequeue()`` and
    ``huey.put_result(task.id, result)``: what a consumer does around running a task.

    Args:
        data_dir: the directory holding ``huey.db``.
        fsync: passed to ``SqliteHuey`` (None: huey's default, the pragma left as is).
    """

    def __init__(self, data_dir: Path, fsync: bool | None) -> None:
        self.data_dir = data_dir
        self.fsync = fsync
        self.huey: Any = None
        self.task: Any = None

    def open(self) -> None:
        """``SqliteHuey(...)``, then one query on each table used, so the connection exists."""
        from huey import SqliteHuey

        kwargs: dict[str, Any] = {} if self.fsync is None else {"fsync": self.fsync}
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.huey = SqliteHuey(name="bench", filename=str(self.data_dir / "huey.db"), **kwargs)
        self.task = self.huey.task(name="demo")(_demo_task)
        # the connection is lazy: make it, and read the task index and the result table once
        self.huey.storage.queue_size()
        self.huey.storage.peek_data("probe")

    def enqueue(self, payload: dict[str, Any]) -> None:
        """Calls the task: ``huey.enqueue`` of a new task (one committed insert)."""
        self.task(payload)

    def lifecycle(self, payload: dict[str, Any], result: dict[str, Any]) -> None:
        """``huey.enqueue``, ``huey.dequeue()``, ``huey.put_result``: three commits."""
        self.task(payload)
        task = self.huey.dequeue()
        if task is None:
            raise RuntimeError("huey dequeued nothing")
        self.huey.put_result(task.id, result)

    def drain(self) -> int:
        """Dequeues tasks and stores their results until none is left."""
        done = 0
        while (task := self.huey.dequeue()) is not None:
            self.huey.put_result(task.id, result_for(done))
            done += 1
        return done

    def close(self) -> None:
        """Closes the SQLite connection."""
        if self.huey is not None:
            self.huey.storage.close()
            self.huey = None

    def describe(self) -> dict[str, Any]:
        """The effective ``synchronous`` and ``journal_mode`` pragmas."""
        import sqlite3

        conn = self.huey.storage.conn
        return {
            "synchronous": int(conn.execute("pragma synchronous").fetchone()[0]),
            "journal_mode": str(conn.execute("pragma journal_mode").fetchone()[0]),
            "sqlite_version": sqlite3.sqlite_version,
        }


def make_subject(backend: str, data_dir: Path, *, populating: bool = False) -> Subject:
    """Builds the subject for one column.

    Args:
        backend: one of :data:`BACKENDS`.
        data_dir: where that store lives.
        populating: huey is opened with ``fsync=False`` (ours handles this with
            :func:`fsync_suspended`).

    Returns:
        The subject (not yet opened).
    """
    if backend == "ours":
        return OursSubject(data_dir)
    if backend == "huey_fsync":
        return HueySubject(data_dir, fsync=not populating)
    if backend == "huey_default":
        return HueySubject(data_dir, fsync=False if populating else None)
    raise ValueError(f"unknown backend {backend!r}")


def peak_rss_bytes() -> int:
    """The peak resident set size of this process so far, in bytes."""
    try:
        import resource
    except ImportError:  # Windows
        import psutil

        info = psutil.Process().memory_info()
        return int(getattr(info, "peak_wset", info.rss))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


@contextlib.contextmanager
def fsync_suspended() -> Iterator[None]:
    """Makes ``os.fsync``, ``os.fdatasync`` and ``syncfs`` no-ops in this process, then flushes everything with ``os.sync``.

    Only the populating subprocess uses this: the store code runs unchanged and writes
    exactly the files it always writes; only their per-operation flush is skipped.
    """
    from desktop_queue.core import results

    real = os.fsync
    real_data = getattr(os, "fdatasync", None)
    real_syncfs = results._syncfs  # (a fold flushes result files with syncfs where there is one)
    os.fsync = lambda fd: None
    if real_data is not None:
        os.fdatasync = lambda fd: None
    if real_syncfs is not None:
        results._syncfs = lambda fd: None
    try:
        yield
    finally:
        os.fsync = real
        if real_data is not None:
            os.fdatasync = real_data
        results._syncfs = real_syncfs
        if hasattr(os, "sync"):
            os.sync()


def _timed_ops(count: int, op: Callable[[int], None]) -> dict[str, Any]:
    """Runs ``op(0..count-1)``, timing each call and the whole.

    Args:
        count: how many operations.
        op: the operation, given its index.

    Returns:
        ``seconds`` (wall time of the whole loop), ``cpu_seconds`` (CPU time of this
        process meanwhile, all threads) and ``latencies`` (seconds, one per call).
    """
    latencies: list[float] = []
    clock = time.perf_counter
    cpu_start = time.process_time()
    start = clock()
    for i in range(count):
        t0 = clock()
        op(i)
        latencies.append(clock() - t0)
    seconds = clock() - start
    return {"seconds": seconds, "cpu_seconds": time.process_time() - cpu_start, "latencies": latencies}


def worker_populate(backend: str, data_dir: Path, n: int) -> dict[str, Any]:
    """Fills a store with ``n`` completed jobs by running ``n`` real lifecycles.

    Args:
        backend: the column.
        data_dir: the (new) store directory.
        n: how many jobs.

    Returns:
        ``seconds`` spent.
    """
    start = time.perf_counter()
    subject = make_subject(backend, data_dir, populating=True)
    with fsync_suspended():
        subject.open()
        try:
            for i in range(n):
                subject.lifecycle(payload_for("populate", i), result_for(i))
        finally:
            subject.close()
    return {"jobs": n, "seconds": time.perf_counter() - start}


def _open_timed(backend: str, data_dir: Path) -> tuple[Subject, int, float, int]:
    """Opens a column's store in this process: ``(subject, rss before, seconds, rss after)``."""
    subject = make_subject(backend, data_dir)
    _import_backend(backend)
    baseline = peak_rss_bytes()
    start = time.perf_counter()
    subject.open()
    open_s = time.perf_counter() - start
    return subject, baseline, open_s, peak_rss_bytes()


def worker_open(backend: str, data_dir: Path) -> dict[str, Any]:
    """Times one cold open of a populated store (this process has never seen it).

    Args:
        backend: the column.
        data_dir: the populated store.

    Returns:
        ``open_s``, ``baseline_rss`` (after imports, before the open) and ``peak_rss``.
    """
    subject, baseline, open_s, peak = _open_timed(backend, data_dir)
    subject.close()
    return {"open_s": open_s, "baseline_rss": baseline, "peak_rss": peak}


def worker_measure(backend: str, data_dir: Path, ops: int, warmup: int, tag: str) -> dict[str, Any]:
    """One measuring round on a populated store, durable per operation.

    Lifecycles come first, then enqueues; the jobs enqueued are then drained
    (unmeasured) so that the next round again finds only completed jobs and each
    measured lease takes the job its lifecycle just submitted. ``peak_rss`` is read
    after the close, so it includes any compaction the round started.

    Args:
        backend: the column.
        data_dir: the populated store.
        ops: measured operations per phase.
        warmup: unmeasured operations before each phase.
        tag: makes this round's inputs distinct from every other's.

    Returns:
        ``lifecycle`` and ``enqueue`` timings (see :func:`_timed_ops`), memory figures,
        ``settings`` (before the ops) and ``settings_after`` (after the drain).
    """
    subject, baseline, open_s, peak_open = _open_timed(backend, data_dir)
    try:
        settings = subject.describe()
        for i in range(warmup):
            subject.lifecycle(payload_for(f"{tag}-warm-life", i), result_for(i))
        lifecycle = _timed_ops(ops, lambda i: subject.lifecycle(payload_for(f"{tag}-life", i), result_for(i)))
        for i in range(warmup):
            subject.enqueue(payload_for(f"{tag}-warm-enq", i))
        enqueue = _timed_ops(ops, lambda i: subject.enqueue(payload_for(f"{tag}-enq", i)))
        drained = subject.drain()
        settings_after = subject.describe()
    finally:
        subject.close()
    return {
        "open_s": open_s,
        "baseline_rss": baseline,
        "peak_rss_open": peak_open,
        "peak_rss": peak_rss_bytes(),
        "lifecycle": lifecycle,
        "enqueue": enqueue,
        "drained": drained,
        "settings": settings,
        "settings_after": settings_after,
    }


# --------------------------------------------------------------- concurrency and worker
#
# The concurrency case: N processes on one store, each running full lifecycles; they
# open, warm up, say "ready" and wait for one "go" line on stdin, so that the timed
# window holds only lifecycles. The end-to-end case: jobs are submitted beforehand,
# then the real worker command (ours) or a huey consumer with 4 threads runs them.

READY_MARK = "@@bench-ready"


def _demo_job_task(payload: dict[str, Any]) -> str:
    """The huey task of the end-to-end case: does nothing; returns a small result, stored like ours."""
    return "ok"


def worker_concurrent(
    backend: str, data_dir: Path, ops: int, warmup: int, tag: str, threads: int = 1
) -> dict[str, Any]:
    """One of N processes (or one process of N threads) doing durable lifecycles on a shared store.

    A lifecycle here is submit, lease *any* waiting job, complete it: with several
    processes or threads the job leased is often another's. It never finds the queue
    empty (every worker submits before it leases), but a lease or dequeue that loses
    a race is retried.

    Args:
        backend: "ours" or "huey_fsync".
        data_dir: the shared store.
        ops: measured lifecycles in this process (split over its threads).
        warmup: unmeasured lifecycles before the "ready" line.
        tag: makes inputs distinct.
        threads: threads sharing this process's one ``Queue`` (huey: one ``SqliteHuey``,
            which gives each thread its own connection).

    Returns:
        ``start``/``end`` (``time.monotonic``, comparable across processes on one
        machine), ``cpu_seconds`` (all threads), ``ops``, ``empty_polls`` (retried leases),
        ``lock_wait_s`` and ``lock_held_s`` (ours: the store's commit lock, in the window).
    """
    import threading

    subject = make_subject(backend, data_dir)
    _import_backend(backend)
    subject.open()
    empty = [0] * threads
    if isinstance(subject, OursSubject):
        queue = subject.queue

        def one(label: str, i: int, t: int) -> None:
            queue.submit(KIND, payload_for(label, i))
            while (lease := queue.lease(f"{WORKER}-{os.getpid()}-{t}")) is None:
                empty[t] += 1
            queue.complete(lease, result_for(i))

    else:
        huey_subject: Any = subject

        def one(label: str, i: int, t: int) -> None:
            huey_subject.task(payload_for(label, i))
            while (task := huey_subject.huey.dequeue()) is None:
                empty[t] += 1
            huey_subject.huey.put_result(task.id, result_for(i))

    per = [ops // threads + (1 if t < ops % threads else 0) for t in range(threads)]
    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            for i in range(per[t]):
                one(f"{tag}-t{t}", i, t)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    try:
        for i in range(warmup):
            one(f"{tag}-warm", i, 0)
        sys.stdout.write(READY_MARK + "\n")
        sys.stdout.flush()
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("no go")
        store = subject.queue.store if isinstance(subject, OursSubject) else None
        locked = (store.lock_wait_s, store.lock_held_s) if store is not None else (0.0, 0.0)
        cpu_start = time.process_time()
        start = time.monotonic()
        if threads == 1:
            run(0)
        else:
            workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        end = time.monotonic()
        cpu = time.process_time() - cpu_start
        if store is not None:
            locked = (store.lock_wait_s - locked[0], store.lock_held_s - locked[1])
        if errors:
            raise errors[0]
    finally:
        subject.close()
    return {
        "start": start,
        "end": end,
        "cpu_seconds": cpu,
        "ops": ops,
        "empty_polls": sum(empty),
        "lock_wait_s": locked[0],
        "lock_held_s": locked[1],
    }


def worker_prepare_jobs(backend: str, data_dir: Path, n: int, duration_s: float = 0) -> dict[str, Any]:
    """Submits ``n`` demo jobs (``{"prompt": "x", "duration_s": duration_s}``), per-op fsync suspended, then ``os.sync``.

    Ours: ``Queue.submit`` with a distinct key per job (the input is the same). huey:
    ``n`` calls of the do-nothing task on ``SqliteHuey(fsync=False)``.
    """
    start = time.perf_counter()
    payload = {"prompt": "x", "duration_s": duration_s}
    with fsync_suspended():
        if backend == "ours":
            from desktop_queue.core.queue import Queue

            queue = Queue.open(data_dir, providers={})
            try:
                for i in range(n):
                    queue.submit(KIND, payload, key=f"e2e-{i}")
            finally:
                queue.close()
        else:
            from huey import SqliteHuey

            data_dir.mkdir(parents=True, exist_ok=True)
            huey = SqliteHuey(name="bench", filename=str(data_dir / "huey.db"), fsync=False)
            task = huey.task(name="noop")(_demo_job_task)
            for _ in range(n):
                task(payload)
            huey.storage.close()
    return {"jobs": n, "seconds": time.perf_counter() - start}


def worker_huey_consumer(data_dir: Path, n: int, threads: int) -> dict[str, Any]:
    """huey's consumer with ``threads`` worker threads on ``SqliteHuey(fsync=True)``, until ``n`` tasks ran.

    The consumer is huey's own (``huey.create_consumer``, thread workers, no periodic
    scheduler); this process starts it, waits until ``n`` tasks have completed (a
    ``SIGNAL_COMPLETE`` handler counts them), then stops it gracefully, which waits for
    the tasks in flight and their results to be stored. The equivalent of
    ``huey_consumer -w 4 -k thread`` with an "until idle" exit, which huey lacks.
    """
    import logging
    import threading

    from huey import SqliteHuey
    from huey.signals import SIGNAL_COMPLETE

    logging.getLogger("huey").setLevel(logging.WARNING)
    huey = SqliteHuey(name="bench", filename=str(data_dir / "huey.db"), fsync=True)
    huey.task(name="noop")(_demo_job_task)
    lock = threading.Lock()
    done = threading.Event()
    count = 0

    @huey.signal(SIGNAL_COMPLETE)
    def _completed(signal: str, task: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal count
        with lock:
            count += 1
            if count >= n:
                done.set()

    consumer = huey.create_consumer(workers=threads, worker_type="thread", periodic=False, check_worker_health=False)
    consumer.start()
    done.wait()
    consumer.stop(graceful=True)
    left = huey.storage.queue_size()
    results = huey.storage.result_store_size()
    return {"completed": count, "queue_left": left, "results_stored": results}


def stats_counts(data_dir: Path) -> dict[str, int]:
    """Jobs per state in ``data_dir``, as ``desktop-queue stats --json`` counts them."""
    out = subprocess.run(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "stats", "--json"],
        capture_output=True, text=True, env=_child_env(), check=True,
    )  # fmt: skip
    return {k: int(v) for k, v in json.loads(out.stdout)["counts"].items()}


def case_module(name: str) -> Any:
    """``benchmarks/<name>.py`` (the backlog or the history case), which uses this file's
    helpers as ``store``."""
    sys.modules.setdefault("store", sys.modules[__name__])
    return importlib.import_module(name)


def backlog_module() -> Any:
    return case_module("backlog")


def history_module() -> Any:
    return case_module("history")


def _import_backend(backend: str) -> None:
    """Imports the backend's modules up front, so that no open pays for imports."""
    if backend == "ours":
        import desktop_queue.core.queue  # noqa: F401
    else:
        import huey  # noqa: F401


def run_worker(spec: dict[str, Any]) -> None:
    """Entry point of a ``--worker`` subprocess: runs one phase, prints its result line.

    Args:
        spec: ``phase`` (populate | open | measure), ``backend``, ``dir`` and the
            phase's parameters.
    """
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    backend = spec["backend"]
    data_dir = Path(spec["dir"])
    phase = spec["phase"]
    if phase == "populate":
        out = worker_populate(backend, data_dir, int(spec["n"]))
    elif phase == "open":
        out = worker_open(backend, data_dir)
    elif phase == "measure":
        out = worker_measure(backend, data_dir, int(spec["ops"]), int(spec["warmup"]), str(spec["tag"]))
    elif phase == "concurrent":
        out = worker_concurrent(
            backend, data_dir, int(spec["ops"]), int(spec["warmup"]), str(spec["tag"]), int(spec.get("threads", 1))
        )
    elif phase == "prepare_jobs":
        out = worker_prepare_jobs(backend, data_dir, int(spec["n"]), float(spec.get("duration_s", 0)))
    elif phase == "huey_consumer":
        out = worker_huey_consumer(data_dir, int(spec["n"]), int(spec["threads"]))
    elif phase.startswith("history_"):
        out = history_module().run_phase(spec)
    else:
        raise SystemExit(f"unknown worker phase {phase!r}")
    sys.stdout.write(RESULT_MARK + json.dumps(out) + "\n")
    sys.stdout.flush()


# =========================================================================== orchestrator


@dataclass(frozen=True)
class Config:
    """What to run.

    Attributes:
        sizes: store sizes (completed jobs before measuring).
        ops: measured operations per phase and size.
        warmup: unmeasured operations before each phase.
        repeats: cold opens per backend and size (the median is shown).
        rounds: the measured ops are split into this many rounds, each in a fresh
            process, alternating the columns (so load drifts hit every column alike).
        workdir: parent of the temporary stores.
        only: which cases run (of :data:`CASES`).
        conc_procs: process counts of the concurrency case.
        conc_threads: thread counts of the concurrency case (one process each).
        conc_jobs: lifecycles per concurrency configuration and round, split over its processes.
        conc_size: completed jobs in the concurrency stores before measuring.
        conc_rounds: concurrency rounds (each runs every configuration once).
        e2e_jobs: pre-submitted jobs of the end-to-end case.
        e2e_threads: ``work --concurrency`` and huey consumer threads.
        e2e_rounds: end-to-end rounds (fresh stores each; the median is shown).
        backlog_jobs: pre-submitted jobs of the backlog case.
        backlog_ms: how long each of them takes.
        backlog_procs: the work processes compared with one in the backlog case.
        keep: where the history case keeps its populated stores across runs (None: not kept).
        repopulate: rebuild kept history stores even when they fit.
    """

    sizes: tuple[int, ...]
    ops: int
    warmup: int
    repeats: int
    rounds: int
    workdir: Path
    only: frozenset[str] = frozenset(CASES)
    conc_procs: tuple[int, ...] = (1, 4)
    conc_threads: tuple[int, ...] = (4,)
    conc_jobs: int = 2000
    conc_size: int = 1000
    conc_rounds: int = 3
    e2e_jobs: int = 2000
    e2e_threads: int = 4
    e2e_rounds: int = 3
    backlog_jobs: int = 2000
    backlog_ms: int = 20
    backlog_procs: int = 4
    keep: Path | None = None
    repopulate: bool = False


def log(message: str) -> None:
    """Progress, on stderr (stdout carries the table or the JSON)."""
    print(message, file=sys.stderr, flush=True)


def spawn(spec: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """Runs one worker subprocess.

    Args:
        spec: the worker's phase and parameters (see :func:`run_worker`).

    Returns:
        The worker's result and the subprocess's wall time (start-up included).

    Raises:
        RuntimeError: the worker failed or printed no result.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - start
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK) and proc.returncode == 0:
            return json.loads(line[len(RESULT_MARK) :]), wall
    raise RuntimeError(
        f"worker {spec['phase']}/{spec['backend']} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    )


def disk_usage(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (blocks where the OS reports them)."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(path):
        for name in filenames:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                blocks = getattr(st, "st_blocks", None)
                total += blocks * 512 if blocks is not None else st.st_size
    return total


def filesystem_of(path: Path) -> str:
    """The file system type holding ``path`` (Linux: from /proc/mounts), or "unknown"."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    target = str(path.resolve())
    best, fstype = "", "unknown"
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, fstype = point, fields[2]
    return fstype


def store_layout(store_dir: Path) -> dict[str, int]:
    """What an open of our store has to read, from the file names of its layout.

    Args:
        store_dir: the ``store`` directory of a data directory.

    Returns:
        ``snapshot_bytes`` (the newest snapshot) and ``journal_bytes`` (the written part
        of the segments after it, replayed record by record on open; a segment is
        created full of zeros, which are not counted).
    """
    snapshots: dict[int, int] = {}
    segments: dict[int, int] = {}
    for entry in os.scandir(store_dir):
        match = re.fullmatch(r"(snapshot|journal)-(\d{12})\.jsonl?", entry.name)
        if match is None:
            continue
        if match.group(1) == "snapshot":
            snapshots[int(match.group(2))] = entry.stat().st_size
        else:
            data = Path(entry.path).read_bytes()
            end = data.find(b"\0")
            segments[int(match.group(2))] = len(data) if end < 0 else end
    newest = max(snapshots, default=0)
    return {
        "snapshot_bytes": snapshots.get(newest, 0),
        "journal_bytes": sum(size for gen, size in segments.items() if gen > newest),
    }


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of already sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def summarize(timings: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Pools the timings of several rounds of one phase.

    Args:
        timings: :func:`_timed_ops` results.

    Returns:
        ``ops``, ``seconds``, ``rate`` (ops per second over all rounds),
        ``p50_ms``/``p99_ms``/``max_ms`` per operation and ``cpu_ms`` (CPU per operation).
    """
    latencies = sorted(x for t in timings for x in t["latencies"])
    seconds = sum(float(t["seconds"]) for t in timings)
    cpu = sum(float(t["cpu_seconds"]) for t in timings)
    return {
        "ops": len(latencies),
        "seconds": seconds,
        "cpu_ms": cpu / len(latencies) * 1e3 if latencies else float("nan"),
        "rate": len(latencies) / seconds if seconds > 0 else float("nan"),
        "p50_ms": _percentile(latencies, 0.50) * 1e3,
        "p99_ms": _percentile(latencies, 0.99) * 1e3,
        "max_ms": (latencies[-1] if latencies else float("nan")) * 1e3,
    }


def merge_rounds(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Combines the measuring rounds of one column.

    Args:
        rounds: :func:`worker_measure` results, in order.

    Returns:
        Pooled ``lifecycle``/``enqueue`` figures, the highest ``peak_rss``/``peak_rss_open``,
        ``rotations`` (ours: journal segments closed during the rounds, each one
        starting a background compaction) and the per-round ``opens_s``/``settings``.
    """
    rotations = 0
    for r in rounds:
        before, after = r["settings"].get("segment"), r["settings_after"].get("segment")
        if before is not None and after is not None:
            rotations += int(after) - int(before)
    return {
        "rounds": len(rounds),
        "lifecycle": summarize([r["lifecycle"] for r in rounds]),
        "enqueue": summarize([r["enqueue"] for r in rounds]),
        "peak_rss": max(int(r["peak_rss"]) for r in rounds),
        "peak_rss_open": max(int(r["peak_rss_open"]) for r in rounds),
        "baseline_rss": min(int(r["baseline_rss"]) for r in rounds),
        "opens_s": [float(r["open_s"]) for r in rounds],
        "drained": [int(r["drained"]) for r in rounds],
        "rotations": rotations,
        "settings": rounds[0]["settings"],
    }


def bench_size(config: Config, root: Path, size: int) -> dict[str, dict[str, Any]]:
    """Populates one store per column with ``size`` jobs, then measures every column.

    Args:
        config: the run's settings.
        root: a fresh temporary directory for this size (removed by the caller).
        size: completed jobs in each store before measuring.

    Returns:
        backend -> figures (``populate``, ``opens``, ``measure``, ``disk_bytes``).
    """
    figures: dict[str, dict[str, Any]] = {b: {} for b in BACKENDS}
    dirs = {b: root / b for b in BACKENDS}

    for backend in ("ours", "huey_fsync"):
        log(f"  populating {BACKEND_TITLES[backend]} with {size:,} completed jobs ...")
        result, _ = spawn({"phase": "populate", "backend": backend, "dir": str(dirs[backend]), "n": size})
        figures[backend]["populate"] = result
        log(f"    done in {result['seconds']:.1f} s")
    # both huey columns measure the same populated database
    shutil.copytree(dirs["huey_fsync"], dirs["huey_default"])
    figures["huey_default"]["populate"] = dict(figures["huey_fsync"]["populate"], copied_from="huey_fsync")
    if hasattr(os, "sync"):
        os.sync()
    for backend in BACKENDS:
        figures[backend]["disk_bytes"] = disk_usage(dirs[backend])
    figures["ours"]["layout"] = store_layout(dirs["ours"] / "store")

    for backend in BACKENDS:
        figures[backend]["opens"] = []
    for attempt in range(config.repeats):
        for backend in BACKENDS:
            log(f"  cold open {attempt + 1}/{config.repeats}: {BACKEND_TITLES[backend]}")
            result, wall = spawn({"phase": "open", "backend": backend, "dir": str(dirs[backend])})
            result["process_s"] = wall
            figures[backend]["opens"].append(result)

    rounds: dict[str, list[dict[str, Any]]] = {b: [] for b in BACKENDS}
    per_round = [
        config.ops // config.rounds + (1 if r < config.ops % config.rounds else 0) for r in range(config.rounds)
    ]
    for index, ops in enumerate(per_round):
        for backend in BACKENDS:
            log(
                f"  measuring round {index + 1}/{config.rounds}: {BACKEND_TITLES[backend]}: "
                f"{config.warmup} + {ops} lifecycles, {config.warmup} + {ops} enqueues"
            )
            result, _ = spawn(
                {
                    "phase": "measure",
                    "backend": backend,
                    "dir": str(dirs[backend]),
                    "ops": ops,
                    "warmup": config.warmup,
                    "tag": f"run-{os.getpid()}-{time.time_ns()}",
                }
            )
            rounds[backend].append(result)
    for backend in BACKENDS:
        figures[backend]["measure"] = merge_rounds(rounds[backend])
    return figures


def _child_env() -> dict[str, str]:
    """The environment of every subprocess: this checkout first on the import path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def spawn_group(specs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs several ``concurrent`` workers at once, released together.

    Each worker opens its store and warms up, then prints a ready line; once all are
    ready, each is sent "go" on stdin, so the timed windows overlap fully.

    Returns:
        The workers' results, in the order of ``specs``.

    Raises:
        RuntimeError: a worker failed or printed no result.
    """
    procs = [
        subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_child_env(),
        )
        for spec in specs
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != READY_MARK:
                proc.wait()
                raise RuntimeError(
                    f"concurrent worker not ready (exit {proc.returncode}): {proc.stderr.read()[-4000:]}"
                )
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        for proc in procs:
            out, err = proc.communicate()
            for line in out.splitlines():
                if line.startswith(RESULT_MARK) and proc.returncode == 0:
                    results.append(json.loads(line[len(RESULT_MARK) :]))
                    break
            else:
                raise RuntimeError(f"concurrent worker failed (exit {proc.returncode}):\n{err[-4000:]}")
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


CONC_BACKENDS = ("ours", "huey_fsync")


def bench_concurrency(config: Config, root: Path) -> dict[str, Any]:
    """N processes (each of ``config.conc_procs``), then one process of N threads (each of
    ``config.conc_threads``), doing lifecycles on one store per column.

    One store per column, populated with ``config.conc_size`` completed jobs, is shared
    by every configuration; the rounds alternate columns and configurations. In every
    configuration the same total of ``config.conc_jobs`` lifecycles is split over the
    processes (or threads), so the rate compares directly.

    Returns:
        ``"<backend>/<n>"`` (n processes) and ``"<backend>/<n>t"`` (one process, n
        threads) -> ``rate`` (lifecycles/s over the union of the timed windows),
        ``cpu_ms`` (CPU of the processes per lifecycle), ``seconds``, ``ops``,
        ``empty_polls``, ``round_rates``; ours also ``lock_held_share`` (the share of the
        timed span in which a process held the store's commit lock) and ``lock_held_ms`` /
        ``lock_wait_ms`` per lifecycle.
    """
    dirs = {b: root / f"conc-{b}" for b in CONC_BACKENDS}
    for backend in CONC_BACKENDS:
        log(f"  populating {BACKEND_TITLES[backend]} with {config.conc_size:,} completed jobs ...")
        spawn({"phase": "populate", "backend": backend, "dir": str(dirs[backend]), "n": config.conc_size})
    if hasattr(os, "sync"):
        os.sync()
    windows: dict[str, list[dict[str, Any]]] = {}
    # (processes, threads per process, key suffix): N processes of one thread, then one of N threads
    shapes = [(n, 1, "") for n in config.conc_procs] + [(1, n, "t") for n in config.conc_threads]
    for index in range(config.conc_rounds):
        for procs, threads, suffix in shapes:
            for backend in CONC_BACKENDS:
                per = [config.conc_jobs // procs + (1 if p < config.conc_jobs % procs else 0) for p in range(procs)]
                shape = f"{procs} process(es)" if not suffix else f"1 process of {threads} threads"
                log(
                    f"  concurrency round {index + 1}/{config.conc_rounds}: {BACKEND_TITLES[backend]}, "
                    f"{shape}, {config.conc_jobs:,} lifecycles"
                )
                tag = f"conc-{os.getpid()}-{time.time_ns()}"
                results = spawn_group(
                    [
                        {
                            "phase": "concurrent",
                            "backend": backend,
                            "dir": str(dirs[backend]),
                            "ops": ops,
                            "warmup": config.warmup // 4,
                            "tag": f"{tag}-p{p}",
                            "threads": threads,
                        }
                        for p, ops in enumerate(per)
                    ]
                )
                start = min(r["start"] for r in results)
                end = max(r["end"] for r in results)
                windows.setdefault(f"{backend}/{threads if suffix else procs}{suffix}", []).append(
                    {
                        "seconds": end - start,
                        "ops": sum(int(r["ops"]) for r in results),
                        "cpu_seconds": sum(float(r["cpu_seconds"]) for r in results),
                        "empty_polls": sum(int(r["empty_polls"]) for r in results),
                        "lock_wait_s": sum(float(r.get("lock_wait_s", 0.0)) for r in results),
                        "lock_held_s": sum(float(r.get("lock_held_s", 0.0)) for r in results),
                    }
                )
    figures: dict[str, Any] = {}
    for key, rounds in windows.items():
        seconds = sum(r["seconds"] for r in rounds)
        ops = sum(r["ops"] for r in rounds)
        figures[key] = {
            "seconds": seconds,
            "ops": ops,
            "rate": ops / seconds if seconds > 0 else float("nan"),
            "cpu_ms": sum(r["cpu_seconds"] for r in rounds) / ops * 1e3,
            "empty_polls": sum(r["empty_polls"] for r in rounds),
            "round_rates": [r["ops"] / r["seconds"] for r in rounds if r["seconds"] > 0],
            # (ours: the share of the run in which some process held the data dir's commit
            # lock, which one holder at a time can hold: near 1, more processes cannot help)
            "lock_held_share": sum(r["lock_held_s"] for r in rounds) / seconds if seconds > 0 else float("nan"),
            "lock_wait_ms": sum(r["lock_wait_s"] for r in rounds) / ops * 1e3,
            "lock_held_ms": sum(r["lock_held_s"] for r in rounds) / ops * 1e3,
        }
    return figures


def _children_cpu() -> float:
    """User + system CPU seconds of every waited-for child of this process so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return float(usage.ru_utime + usage.ru_stime)


def _run_timed_child(argv: Sequence[str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Runs one command to its end: ``(completed process, wall seconds, CPU seconds of it and its children)``.

    The CPU is the ``RUSAGE_CHILDREN`` difference around it: nothing else is waited
    for meanwhile, so the difference is this command's alone (and whatever children it
    waited for itself, such as a compaction).
    """
    cpu_before = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=_child_env(), check=False)
    wall = time.perf_counter() - start
    return proc, wall, _children_cpu() - cpu_before


def _compile_bytecode() -> None:
    """Compiles our package's bytecode, as an installed copy has it, before start-up is timed.

    pip compiles what it installs (huey's side has its ``.pyc`` files); an editable checkout
    run under ``PYTHONDONTWRITEBYTECODE`` would compile every module at each start instead,
    and the end-to-end case would time the compiler.
    """
    import compileall

    package = Path(__file__).resolve().parent.parent / "desktop_queue"
    compileall.compile_dir(str(package), quiet=2, workers=1)
    log(f"  compiled the bytecode of {package} (as an installed package has it)")


def bench_worker(config: Config, root: Path) -> dict[str, Any]:
    """The end-to-end case: the real worker command against huey's consumer.

    Ours: ``python -m desktop_queue --data-dir D work --concurrency T --until-idle`` on
    ``config.e2e_jobs`` pre-submitted demo jobs with ``duration_s`` 0. huey: its
    consumer with T threads on ``SqliteHuey(fsync=True)`` (equal durability), a task
    that does nothing. Wall time and CPU time are those of the whole command, process
    start-up, imports and open included on both sides. Each round uses fresh stores.

    Returns:
        backend -> ``wall_s`` (median), ``jobs_per_s``, ``cpu_ms`` (per job, median),
        ``rounds`` (raw) and ``check`` (what was left after the last round).
    """
    threads = config.e2e_threads
    n = config.e2e_jobs
    _compile_bytecode()
    rounds: dict[str, list[dict[str, float]]] = {b: [] for b in CONC_BACKENDS}
    checks: dict[str, Any] = {}
    for index in range(config.e2e_rounds):
        for backend in CONC_BACKENDS:
            data_dir = root / f"e2e-{backend}-{index}"
            log(f"  end-to-end round {index + 1}/{config.e2e_rounds}: {BACKEND_TITLES[backend]}: submitting {n:,} jobs")
            spawn({"phase": "prepare_jobs", "backend": backend, "dir": str(data_dir), "n": n})
            if hasattr(os, "sync"):
                os.sync()
            log(f"    running them with {threads} {'workers' if backend == 'ours' else 'consumer threads'}")
            if backend == "ours":
                argv = [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "work",
                        "--concurrency", str(threads), "--until-idle"]  # fmt: skip
            else:
                spec = {"phase": "huey_consumer", "backend": backend, "dir": str(data_dir), "n": n, "threads": threads}
                argv = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
            proc, wall, cpu = _run_timed_child(argv)
            if proc.returncode != 0:
                raise RuntimeError(f"end-to-end {backend} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
            if backend == "ours":
                counts = stats_counts(data_dir)
                done = int(counts.get("succeeded", 0))
                checks[backend] = counts
            else:
                out = next(
                    json.loads(x[len(RESULT_MARK) :]) for x in proc.stdout.splitlines() if x.startswith(RESULT_MARK)
                )
                done = int(out["results_stored"])
                checks[backend] = out
            if done != n:
                raise RuntimeError(f"end-to-end {backend}: {done} of {n} jobs done: {checks[backend]}")
            rounds[backend].append({"wall_s": wall, "cpu_s": cpu})
            log(f"    {wall:.2f} s wall, {cpu / n * 1e3:.3f} ms CPU per job")
            shutil.rmtree(data_dir, ignore_errors=True)
    figures: dict[str, Any] = {}
    for backend, rs in rounds.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        figures[backend] = {
            "jobs": n,
            "threads": threads,
            "wall_s": wall,
            "jobs_per_s": n / wall,
            "cpu_ms": statistics.median(r["cpu_s"] for r in rs) / n * 1e3,
            "rounds": rs,
            "check": checks[backend],
        }
    return figures


# ------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class Row:
    """One line of the table.

    Attributes:
        label: what is measured.
        unit: its unit.
        higher_is_better: how to read the ratio.
        pick: extracts the value from a column's figures.
        fmt: how to print a value.
    """

    label: str
    unit: str
    higher_is_better: bool
    pick: Callable[[dict[str, Any]], float]
    fmt: str


def _median_open(fig: dict[str, Any]) -> float:
    """The median cold-open time of one column, in seconds."""
    return float(statistics.median(o["open_s"] for o in fig["opens"]))


def _max_open_rss(fig: dict[str, Any]) -> float:
    """The highest peak RSS seen by one column's cold-open processes, in MiB."""
    return float(max(o["peak_rss"] for o in fig["opens"])) / MIB


ROWS = (
    Row("durable enqueue", "ops/s", True, lambda f: f["measure"]["enqueue"]["rate"], "{:,.0f}"),
    Row("full lifecycle", "jobs/s", True, lambda f: f["measure"]["lifecycle"]["rate"], "{:,.0f}"),
    Row("lifecycle p50", "ms", False, lambda f: f["measure"]["lifecycle"]["p50_ms"], "{:.2f}"),
    Row("lifecycle p99", "ms", False, lambda f: f["measure"]["lifecycle"]["p99_ms"], "{:.2f}"),
    Row("lifecycle max", "ms", False, lambda f: f["measure"]["lifecycle"]["max_ms"], "{:.1f}"),
    Row("lifecycle CPU time", "ms/job", False, lambda f: f["measure"]["lifecycle"]["cpu_ms"], "{:.3f}"),
    Row("cold open (median)", "s", False, _median_open, "{:.3f}"),
    Row("peak RSS after cold open", "MiB", False, _max_open_rss, "{:.1f}"),
    Row("peak RSS, measuring rounds", "MiB", False, lambda f: f["measure"]["peak_rss"] / MIB, "{:.1f}"),
    Row("disk usage when populated", "MiB", False, lambda f: f["disk_bytes"] / MIB, "{:.1f}"),
)


def format_table(size: int, figures: dict[str, dict[str, Any]]) -> list[str]:
    """The table of one size.

    Args:
        size: the store size.
        figures: backend -> figures, as returned by :func:`bench_size`.

    Returns:
        The lines to print.
    """
    headers = [
        "figure",
        "unit",
        "better",
        *(BACKEND_TITLES[b] for b in BACKENDS),
        *(f"ours/{BACKEND_TITLES[r]}" for r in REFERENCES),
    ]
    body: list[list[str]] = []
    for row in ROWS:
        values = {b: row.pick(figures[b]) for b in BACKENDS}
        cells = [row.label, row.unit, "higher" if row.higher_is_better else "lower"]
        cells += [row.fmt.format(values[b]) for b in BACKENDS]
        for ref in REFERENCES:
            cells.append(f"{values['ours'] / values[ref]:.2f}x" if values[ref] else "n/a")
        body.append(cells)
    widths = [max(len(line[i]) for line in [headers, *body]) for i in range(len(headers))]

    def render(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    rule = "-" * len(render(headers))
    return [f"== store holding {size:,} completed jobs ==", render(headers), rule, *map(render, body), ""]


def evaluate_goals(results: dict[int, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Checks the goals against the figures.

    Args:
        results: size -> backend -> figures.

    Returns:
        One dict per goal check: ``goal``, ``status`` (PASS | MISS | SKIP), ``detail``.
    """
    goals: list[dict[str, Any]] = []

    def rate(size: int, backend: str) -> float:
        return float(results[size][backend]["measure"]["lifecycle"]["rate"])

    def p50(size: int, backend: str) -> float:
        return float(results[size][backend]["measure"]["lifecycle"]["p50_ms"])

    for size in sorted(results):
        ratio = rate(size, "ours") / rate(size, "huey_fsync")
        goals.append(
            {
                "goal": f"lifecycle >= {GOAL_LIFECYCLE_VS_HUEY}x huey(fsync=True) at {size:,} jobs",
                "status": "PASS" if ratio >= GOAL_LIFECYCLE_VS_HUEY else "MISS",
                "detail": f"{rate(size, 'ours'):,.0f} vs {rate(size, 'huey_fsync'):,.0f} jobs/s = {ratio:.2f}x "
                f"(by p50 latency: {p50(size, 'huey_fsync') / p50(size, 'ours'):.2f}x)",
                "value": ratio,
            }
        )

    small, large = GOAL_GROWTH_SIZES
    growth_goal = f"per-lifecycle cost at {large:,} jobs within {GOAL_COST_GROWTH}x of {small:,}"
    if small in results and large in results:
        growth = rate(small, "ours") / rate(large, "ours")  # cost ratio = inverse rate ratio
        goals.append(
            {
                "goal": growth_goal,
                "status": "PASS" if growth <= GOAL_COST_GROWTH else "MISS",
                "detail": f"{1e3 / rate(large, 'ours'):.3f} ms vs {1e3 / rate(small, 'ours'):.3f} ms = {growth:.2f}x "
                f"(p50: {p50(large, 'ours'):.3f} ms vs {p50(small, 'ours'):.3f} ms = "
                f"{p50(large, 'ours') / p50(small, 'ours'):.2f}x)",
                "value": growth,
            }
        )
    else:
        goals.append(
            {
                "goal": growth_goal,
                "status": "SKIP",
                "detail": f"needs --sizes to include {small} and {large}",
                "value": None,
            }
        )

    open_goal = f"cold open of {GOAL_COLD_OPEN_SIZE:,} jobs under {GOAL_COLD_OPEN_S:g} s"
    if GOAL_COLD_OPEN_SIZE in results:
        opened = _median_open(results[GOAL_COLD_OPEN_SIZE]["ours"])
        goals.append(
            {
                "goal": open_goal,
                "status": "PASS" if opened < GOAL_COLD_OPEN_S else "MISS",
                "detail": f"median {opened:.3f} s",
                "value": opened,
            }
        )
    else:
        goals.append(
            {
                "goal": open_goal,
                "status": "SKIP",
                "detail": f"needs --sizes to include {GOAL_COLD_OPEN_SIZE}",
                "value": None,
            }
        )
    return goals


#: Goals of the concurrency and end-to-end cases (reported only).
GOAL_CONC_VS_HUEY = 1.5
GOAL_CONC_SCALING = 2.5
GOAL_THREADS_VS_HUEY = 2.0
GOAL_E2E_VS_HUEY = 1.5


def summary_rows(
    results: dict[int, dict[str, dict[str, Any]]],
    conc: dict[str, Any] | None,
    e2e: dict[str, Any] | None,
    history: dict[str, Any] | None = None,
) -> list[tuple[str, str, str, bool, float, str, float]]:
    """Every figure of the run against its peer.

    Returns:
        ``(case, figure, unit, higher_is_better, ours, peer name, peer value)`` tuples.
    """
    rows: list[tuple[str, str, str, bool, float, str, float]] = []
    for size in sorted(results):
        figures = results[size]
        for ref in REFERENCES:
            for row in ROWS:
                rows.append(
                    (f"store {size:,}", row.label, row.unit, row.higher_is_better,
                     row.pick(figures["ours"]), BACKEND_TITLES[ref], row.pick(figures[ref]))
                )  # fmt: skip
    if conc:
        peer = BACKEND_TITLES["huey_fsync"]
        for shape in sorted({k.split("/")[1] for k in conc}, key=_shape_order):
            ours, huey = conc[f"ours/{shape}"], conc[f"huey_fsync/{shape}"]
            what = _shape_title(shape)
            rows.append(("concurrency", f"lifecycles, {what}", "jobs/s", True, ours["rate"], peer, huey["rate"]))
            rows.append(("concurrency", f"CPU, {what}", "ms/job", False, ours["cpu_ms"], peer, huey["cpu_ms"]))
        counts = sorted(int(k.split("/")[1]) for k in conc if k.startswith("ours/") and not k.endswith("t"))
        if len(counts) > 1:
            lo, hi = counts[0], counts[-1]
            rows.append(
                ("concurrency", f"scaling {hi} vs {lo} process(es)", "x", True,
                 conc[f"ours/{hi}"]["rate"] / conc[f"ours/{lo}"]["rate"], peer,
                 conc[f"huey_fsync/{hi}"]["rate"] / conc[f"huey_fsync/{lo}"]["rate"])
            )  # fmt: skip
    if e2e:
        ours, huey = e2e["ours"], e2e["huey_fsync"]
        label = f"worker {ours['jobs']:,} jobs"
        peer = f"huey consumer {huey['threads']} threads"
        rows.append(
            (
                label,
                f"wall time, work --concurrency {ours['threads']}",
                "s",
                False,
                ours["wall_s"],
                peer,
                huey["wall_s"],
            )
        )
        rows.append((label, "throughput", "jobs/s", True, ours["jobs_per_s"], peer, huey["jobs_per_s"]))
        rows.append((label, "CPU time (process + children)", "ms/job", False, ours["cpu_ms"], peer, huey["cpu_ms"]))
    if history:
        rows += history_module().summary_rows(history)
    return rows


def _shape_order(shape: str) -> tuple[bool, int]:
    """Concurrency configurations in table order: processes ("4"), then threads ("4t")."""
    return shape.endswith("t"), int(shape.rstrip("t"))


def _shape_title(shape: str) -> str:
    """ "4" -> "4 process(es)", "4t" -> "4 threads, 1 process"."""
    if shape.endswith("t"):
        return f"{shape[:-1]} threads, 1 process"
    return f"{shape} process(es)"


def _num(value: float) -> str:
    """A figure with about three significant digits."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"


def format_summary(rows: Sequence[tuple[str, str, str, bool, float, str, float]]) -> list[str]:
    """The one table of every figure as ours / peer ("better" says which way a ratio is good)."""
    headers = ["case", "figure", "unit", "better", "ours", "peer", "peer value", "ours/peer"]
    body = []
    for case, figure, unit, higher, ours, peer, value in rows:
        body.append(
            [case, figure, unit, "higher" if higher else "lower", _num(ours), peer, _num(value),
             f"{ours / value:.2f}x" if value else "n/a"]
        )  # fmt: skip
    widths = [max(len(line[i]) for line in [headers, *body]) for i in range(len(headers))]
    left = {0, 1, 2, 3, 5}

    def render(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return ["== summary: every figure as ours / peer ==", render(headers), "-" * len(render(headers)),
            *map(render, body), ""]  # fmt: skip


def evaluate_case_goals(conc: dict[str, Any] | None, e2e: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The goals of the concurrency and end-to-end cases (see :func:`evaluate_goals`)."""
    goals: list[dict[str, Any]] = []
    conc = conc or {}

    def rate(key: str) -> float:
        return float(conc[key]["rate"])

    def ratio_goal(goal: str, ours: str, peer: str, target: float) -> None:
        if ours in conc and peer in conc:
            ratio = rate(ours) / rate(peer)
            goals.append(
                {"goal": f"{goal} >= {target}x", "status": "PASS" if ratio >= target else "MISS",
                 "detail": f"{rate(ours):,.0f} vs {rate(peer):,.0f} jobs/s = {ratio:.2f}x", "value": ratio}
            )  # fmt: skip

    ratio_goal("4 processes of ours / huey(fsync=True) with 4 processes", "ours/4", "huey_fsync/4", GOAL_CONC_VS_HUEY)
    ratio_goal("4 threads of ours / huey(fsync=True) with 4 threads", "ours/4t", "huey_fsync/4t", GOAL_THREADS_VS_HUEY)
    ratio_goal("4 processes of ours / 1 process of ours", "ours/4", "ours/1", GOAL_CONC_SCALING)
    if e2e:
        ours, huey = e2e["ours"], e2e["huey_fsync"]
        ratio = huey["wall_s"] / ours["wall_s"]
        goals.append(
            {"goal": f"work --concurrency {ours['threads']} >= {GOAL_E2E_VS_HUEY}x huey's consumer ({huey['threads']} threads)",
             "status": "PASS" if ratio >= GOAL_E2E_VS_HUEY else "MISS",
             "detail": f"{ours['jobs_per_s']:,.0f} vs {huey['jobs_per_s']:,.0f} jobs/s ({ours['wall_s']:.2f} s vs "
                       f"{huey['wall_s']:.2f} s for {ours['jobs']:,} jobs) = {ratio:.2f}x",
             "value": ratio}
        )  # fmt: skip
        goals.append(
            {"goal": "work CPU per job <= huey consumer's",
             "status": "PASS" if ours["cpu_ms"] <= huey["cpu_ms"] else "MISS",
             "detail": f"{ours['cpu_ms']:.3f} vs {huey['cpu_ms']:.3f} ms/job = {ours['cpu_ms'] / huey['cpu_ms']:.2f}x",
             "value": ours["cpu_ms"] / huey["cpu_ms"]}
        )  # fmt: skip
    return goals


def environment(config: Config) -> dict[str, Any]:
    """What the figures were measured on."""
    import sqlite3

    import huey

    try:
        import psutil

        memory_total: int | None = int(psutil.virtual_memory().total)
    except ImportError:
        memory_total = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_total": memory_total,
        "workdir": str(config.workdir),
        "filesystem": filesystem_of(config.workdir),
        "flush_latency_ms": int(os.environ.get(FLUSH_ENV, "0")) / 1000,
        "huey": getattr(huey, "__version__", "?"),
        "sqlite": sqlite3.sqlite_version,
        "sizes": list(config.sizes),
        "ops": config.ops,
        "warmup": config.warmup,
        "open_repeats": config.repeats,
        "rounds": config.rounds,
        "cases": sorted(config.only),
        "conc_procs": list(config.conc_procs),
        "conc_threads": list(config.conc_threads),
        "conc_jobs": config.conc_jobs,
        "conc_size": config.conc_size,
        "conc_rounds": config.conc_rounds,
        "e2e_jobs": config.e2e_jobs,
        "e2e_threads": config.e2e_threads,
        "e2e_rounds": config.e2e_rounds,
        "backlog_jobs": config.backlog_jobs,
        "backlog_ms": config.backlog_ms,
        "backlog_procs": config.backlog_procs,
        "keep": str(config.keep) if config.keep else None,
        "loadavg_start": _loadavg(),
    }


def _loadavg() -> list[float] | None:
    """The 1/5/15-minute load averages (other work on the machine skews timings), if known."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def format_report(
    env: dict[str, Any],
    results: dict[int, dict[str, dict[str, Any]]],
    goals: list[dict[str, Any]],
    conc: dict[str, Any] | None = None,
    e2e: dict[str, Any] | None = None,
    history: dict[str, Any] | None = None,
    backlog: dict[str, Any] | None = None,
) -> list[str]:
    """The whole human-readable report.

    Args:
        env: from :func:`environment`.
        results: size -> backend -> figures.
        goals: from :func:`evaluate_goals` and :func:`evaluate_case_goals`.
        conc: from :func:`bench_concurrency`, if it ran.
        e2e: from :func:`bench_worker`, if it ran.
        history: from ``history.bench_history``, if it ran.
        backlog: from ``backlog.bench_backlog``, if it ran.

    Returns:
        The lines to print.
    """
    sync_names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    lines = [
        "Desktop Queue store benchmark (reference: huey SqliteStorage)",
        f"python {env['python']} on {env['platform']}, {env['cpus']} CPUs, huey {env['huey']}, SQLite {env['sqlite']}",
        f"stores under {env['workdir']} ({env['filesystem']}); warm OS page cache; cases: {', '.join(env['cases'])}",
        *(
            [f"emulated slower disk: every fsync/fdatasync returns {env['flush_latency_ms']:g} ms later (slowsync.c)"]
            if env.get("flush_latency_ms")
            else []
        ),
        f"load average at start {env['loadavg_start']}, at end {env.get('loadavg_end')} "
        f"({env['cpus']} CPUs; other processes skew timings)",
    ]
    if results:
        lines.append(
            f"store case: {env['ops']} measured ops per phase in {env['rounds']} round(s) alternating the columns, "
            f"each after {env['warmup']} warm-up ops; cold open: median of {env['open_repeats']} fresh processes"
        )
    if env["filesystem"] in ("tmpfs", "ramfs"):
        lines.append("WARNING: the work directory is in memory; fsync costs nothing there, use --workdir on a disk")
    any_size = next(iter(results.values()), None)
    if any_size is not None:
        for ref in REFERENCES:
            settings = any_size[ref]["measure"]["settings"]
            name = sync_names.get(settings["synchronous"], str(settings["synchronous"]))
            lines.append(f"{BACKEND_TITLES[ref]}: journal_mode={settings['journal_mode']}, synchronous={name}")
    lines.append(
        "stores populated (and end-to-end jobs submitted) through the real API with per-op fsync "
        "suspended (then os.sync); every measured op is durable"
    )
    lines.append("")
    for size in sorted(results):
        lines += format_table(size, results[size])
        layout = results[size]["ours"]["layout"]
        lines.insert(
            len(lines) - 1,
            f"note: ours at cold open: snapshot {layout['snapshot_bytes'] / MIB:.1f} MiB "
            f"+ journal {layout['journal_bytes'] / MIB:.1f} MiB to replay",
        )
        rotations = results[size]["ours"]["measure"]["rotations"]
        if rotations:
            lines.insert(
                len(lines) - 1,
                f"note: ours closed {rotations} journal segment(s) during the measuring rounds "
                "(each starts a compaction in a child process)",
            )
    if conc:
        lines.append(
            f"== concurrency: N processes (or threads) on one store holding {env['conc_size']:,}+ completed jobs, "
            f"{env['conc_jobs']:,} lifecycles per configuration and round, {env['conc_rounds']} round(s) =="
        )
        for key in sorted(conc, key=lambda k: (_shape_order(k.split("/")[1]), not k.startswith("ours/"))):
            backend, shape = key.split("/")
            fig = conc[key]
            lines.append(
                f"  {BACKEND_TITLES[backend]:<16} {_shape_title(shape) + ':':<22} {fig['rate']:8,.0f} lifecycles/s, "
                f"{fig['cpu_ms']:.3f} ms CPU per lifecycle (rounds: "
                + ", ".join(f"{r:,.0f}" for r in fig["round_rates"])
                + f"; {fig['empty_polls']} retried leases)"
            )
            if backend == "ours":
                lines.append(
                    f"  {'':<16} {'':<22} commit lock held {fig['lock_held_share']:.0%} of the run; per lifecycle "
                    f"{fig['lock_held_ms']:.3f} ms held, {fig['lock_wait_ms']:.3f} ms waited for"
                )
        lines.append("")
    if e2e:
        lines.append(
            f"== end-to-end: {e2e['ours']['jobs']:,} pre-submitted demo jobs (duration_s 0), "
            f"median of {env['e2e_rounds']} round(s), whole command incl. start-up =="
        )
        for backend, title in (("ours", f"desktop-queue work --concurrency {e2e['ours']['threads']} --until-idle"),
                               ("huey_fsync", f"huey consumer, {e2e['huey_fsync']['threads']} threads, fsync=True")):  # fmt: skip
            fig = e2e[backend]
            lines.append(
                f"  {title:<52} {fig['wall_s']:6.2f} s wall, {fig['jobs_per_s']:7,.0f} jobs/s, "
                f"{fig['cpu_ms']:.3f} ms CPU per job"
            )
        lines.append("")
    lines += backlog_module().format_notes(backlog)
    if history:
        lines += history_module().format_notes(history)
    lines += format_summary(summary_rows(results, conc, e2e, history) + backlog_module().summary_rows(backlog))
    lines.append("Goals (reported only; timing never fails the run):")
    for goal in goals:
        lines.append(f"  {goal['status']:<4}  {goal['goal']}: {goal['detail']}")
    return lines


# ------------------------------------------------------------------------- main


def parse_sizes(text: str) -> tuple[int, ...]:
    """Parses ``--sizes`` ("1000,10000", "1_000,10k" or "100k,1m").

    Raises:
        argparse.ArgumentTypeError: not a list of positive integers.
    """
    sizes = []
    for part in text.split(","):
        part = part.strip().lower().replace("_", "")
        if not part:
            continue
        scale = {"k": 1_000, "m": 1_000_000}.get(part[-1:], 1)
        try:
            value = int(part.rstrip("km")) * scale
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a size: {part!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"sizes must be positive, not {value}")
        sizes.append(value)
    if not sizes:
        raise argparse.ArgumentTypeError("no sizes given")
    return tuple(sorted(set(sizes)))


def parse_cases(text: str) -> frozenset[str]:
    """Parses ``--only`` ("store", "concurrency,worker").

    Raises:
        argparse.ArgumentTypeError: an unknown case.
    """
    cases = frozenset(p.strip() for p in text.split(",") if p.strip())
    unknown = cases - set(CASES)
    if unknown or not cases:
        raise argparse.ArgumentTypeError(f"cases are {', '.join(CASES)}, not {text!r}")
    return cases


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        description="Benchmark the Desktop Queue store against huey's SQLite storage.",
    )
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=None,
        help="store sizes in completed jobs (the history case: finished jobs beside 1,000 queued), comma "
        "separated, k and m suffixes allowed (default: 1000,10000,100000; 1m works but takes many minutes to "
        "populate)",
    )
    parser.add_argument(
        "--only",
        type=parse_cases,
        default=None,
        metavar="CASES",
        help=f"run only these cases, comma separated, of {', '.join(CASES)} (default: all)",
    )
    parser.add_argument(
        "--procs", type=parse_sizes, default=None, help="process counts of the concurrency case (default: 1,4)"
    )
    parser.add_argument(
        "--threads",
        type=parse_sizes,
        default=None,
        help="thread counts of the concurrency case, one process each (default: 4)",
    )
    parser.add_argument(
        "--conc-jobs", type=int, default=None, help="lifecycles per concurrency configuration and round (default: 2000)"
    )
    parser.add_argument(
        "--e2e-jobs", type=int, default=None, help="pre-submitted jobs of the end-to-end case (default: 2000)"
    )
    parser.add_argument(
        "--e2e-threads", type=int, default=4, help="work --concurrency and huey consumer threads (default: 4)"
    )
    parser.add_argument(
        "--backlog-jobs", type=int, default=None, help="pre-submitted jobs of the backlog case (default: 2000)"
    )
    parser.add_argument(
        "--backlog-ms", type=int, default=20, help="how long each job of the backlog case takes, in ms (default: 20)"
    )
    parser.add_argument(
        "--backlog-procs", type=int, default=4, help="work processes compared with one in the backlog case (default: 4)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 1,000 jobs (unless --sizes), 200 ops, 20 warm-up, 1 cold open, 1 round",
    )
    parser.add_argument("--ops", type=int, default=None, help="measured ops per phase (default: 2000)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up ops per phase and round (default: 100)")
    parser.add_argument("--repeats", type=int, default=None, help="cold opens per store (default: 3)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="measuring rounds per store, alternating the columns (default: 5)"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where temporary stores are created (default: the system temp dir)",
    )
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="FILE",
        help="dump raw figures as JSON: to FILE, or without FILE to stdout (table then on stderr)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep the history case's populated stores in DIR/history-N and reuse them in later runs",
    )
    parser.add_argument(
        "--repopulate", action="store_true", help="with --keep: rebuild the kept history stores even when they fit"
    )
    parser.add_argument(
        "--flush-latency-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="emulate a slower disk: every fsync and fdatasync, ours and SQLite's alike, returns MS later "
        "(Linux and a C compiler: benchmarks/slowsync.c is preloaded; default: the disk as it is)",
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return parser


#: the emulated flush latency in microseconds, for benchmarks/slowsync.c (set: it is preloaded)
FLUSH_ENV = "DQ_BENCH_FLUSH_US"


def with_flush_latency(ms: float, argv: Sequence[str]) -> int:
    """Runs this benchmark again with benchmarks/slowsync.c preloaded, so that every process
    it starts (ours and huey's, populating and measuring) waits ``ms`` more per sync.

    Group commit shares a sync among committers: what it is worth depends on what a sync
    costs, and a laptop's disk takes a millisecond or more where a server's write cache
    answers in tens of microseconds. Returns the exit status.
    """
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not sys.platform.startswith("linux") or compiler is None:
        print("--flush-latency-ms needs Linux and a C compiler (cc)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="dq-bench-flush-") as tmp:
        library = Path(tmp) / "slowsync.so"
        source = Path(__file__).with_name("slowsync.c")
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"], check=True)
        env = dict(os.environ)
        env["LD_PRELOAD"] = " ".join(filter(None, [str(library), env.get("LD_PRELOAD")]))
        env[FLUSH_ENV] = str(round(ms * 1000))
        return subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], env=env).returncode


def compile_package() -> None:
    """Byte-compiles the package, as installing it does, before anything is timed.

    An editable checkout's bytecode is written when a module is first imported, unless
    ``PYTHONDONTWRITEBYTECODE`` is set (as on some CI and sandbox machines): every
    process then compiles each module edited since from source, a few milliseconds a
    module, which the command-line figures, the ``work`` start-up and every compaction
    child would count while huey's installed modules load compiled.
    """
    import compileall

    compileall.compile_dir(str(REPO_ROOT / "desktop_queue"), quiet=1)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark; returns the exit status (0 unless something broke).

    Args:
        argv: command-line arguments (default: ``sys.argv[1:]``).
    """
    args = build_parser().parse_args(argv)
    if args.worker is not None:
        run_worker(json.loads(args.worker))
        return 0
    if args.flush_latency_ms < 0:
        print("--flush-latency-ms must be 0 or more", file=sys.stderr)
        return 2
    if args.flush_latency_ms > 0 and FLUSH_ENV not in os.environ:
        return with_flush_latency(args.flush_latency_ms, sys.argv[1:] if argv is None else list(argv))

    for module in ("huey", "psutil"):
        try:
            __import__(module)
        except ImportError:
            print(f"{module} is required: pip install -e '.[bench]'", file=sys.stderr)
            return 2
    compile_package()
    ops = max(1, args.ops if args.ops is not None else (200 if args.quick else 2000))
    config = Config(
        sizes=args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES),
        ops=ops,
        warmup=max(0, args.warmup if args.warmup is not None else (20 if args.quick else 100)),
        repeats=max(1, args.repeats if args.repeats is not None else (1 if args.quick else 3)),
        rounds=min(ops, max(1, args.rounds if args.rounds is not None else (1 if args.quick else 5))),
        workdir=args.workdir.resolve(),
        only=args.only or frozenset(CASES),
        conc_procs=args.procs or (1, 4),
        conc_threads=args.threads or (4,),
        conc_jobs=max(1, args.conc_jobs if args.conc_jobs is not None else (500 if args.quick else 2000)),
        conc_rounds=1 if args.quick else (args.rounds if args.rounds is not None else 3),
        e2e_jobs=max(1, args.e2e_jobs if args.e2e_jobs is not None else (500 if args.quick else 2000)),
        e2e_threads=max(1, args.e2e_threads),
        e2e_rounds=1 if args.quick else (args.rounds if args.rounds is not None else 3),
        backlog_jobs=max(1, args.backlog_jobs if args.backlog_jobs is not None else (500 if args.quick else 2000)),
        backlog_ms=max(0, args.backlog_ms),
        backlog_procs=max(2, args.backlog_procs),
        keep=args.keep.resolve() if args.keep else None,
        repopulate=args.repopulate,
    )
    created_workdir = not config.workdir.exists()
    config.workdir.mkdir(parents=True, exist_ok=True)
    env = environment(config)
    results: dict[int, dict[str, dict[str, Any]]] = {}
    started = time.perf_counter()
    run_dir = Path(tempfile.mkdtemp(prefix="dq-store-bench-", dir=config.workdir))
    conc: dict[str, Any] | None = None
    e2e: dict[str, Any] | None = None
    history: dict[str, Any] | None = None
    backlog: dict[str, Any] | None = None
    try:
        for size in config.sizes if "store" in config.only else ():
            log(f"[{time.perf_counter() - started:6.0f} s] {size:,} jobs")
            size_dir = run_dir / f"n{size}"
            size_dir.mkdir()
            try:
                results[size] = bench_size(config, size_dir, size)
            finally:
                shutil.rmtree(size_dir, ignore_errors=True)
        if "concurrency" in config.only:
            log(
                f"[{time.perf_counter() - started:6.0f} s] concurrency: {', '.join(map(str, config.conc_procs))} processes"
            )
            conc = bench_concurrency(config, run_dir)
        if "worker" in config.only:
            log(f"[{time.perf_counter() - started:6.0f} s] end-to-end worker: {config.e2e_jobs:,} jobs")
            e2e = bench_worker(config, run_dir)
        if "backlog" in config.only:
            log(
                f"[{time.perf_counter() - started:6.0f} s] backlog: {config.backlog_jobs:,} jobs of "
                f"{config.backlog_ms} ms, 1 and {config.backlog_procs} work processes"
            )
            backlog = backlog_module().bench_backlog(
                jobs=config.backlog_jobs,
                job_ms=config.backlog_ms,
                procs=config.backlog_procs,
                threads=config.e2e_threads,
                rounds=config.e2e_rounds,
                root=run_dir,
            )
        if "history" in config.only:
            log(f"[{time.perf_counter() - started:6.0f} s] history: {', '.join(f'{n:,}' for n in config.sizes)} jobs")
            history = history_module().bench_history(
                config.sizes, run_dir, config.keep, config.repeats, config.repopulate
            )
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        if created_workdir:
            with contextlib.suppress(OSError):
                config.workdir.rmdir()
    log(f"[{time.perf_counter() - started:6.0f} s] done")
    env["loadavg_end"] = _loadavg()

    goals = (evaluate_goals(results) if results else []) + evaluate_case_goals(conc, e2e)
    goals += backlog_module().evaluate_goals(backlog) + history_module().evaluate_goals(history)
    report = "\n".join(format_report(env, results, goals, conc, e2e, history, backlog))
    document = {
        "environment": env,
        "results": {str(k): v for k, v in results.items()},
        "concurrency": conc,
        "worker": e2e,
        "backlog": backlog,
        "history": history,
        "goals": goals,
    }
    if args.json == "-":
        print(report, file=sys.stderr)
        print(json.dumps(document, indent=2))
    else:
        print(report)
        if args.json:
            Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
