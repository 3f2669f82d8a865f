"""The seam between the queue's verbs and where jobs are kept.

:class:`~desktop_queue.core.queue.Queue` runs every verb over one :class:`Backend`: it
reads jobs through a :class:`View` and changes them only by handing the backend journal
records (:mod:`.records`) to commit atomically. Two backends implement it today:

- :class:`~desktop_queue.core.store.journal.Store`, the JSON journal in the data directory
  (the default; the store of record on a desktop);
- :class:`~desktop_queue.core.memory.MemoryBackend`, everything in memory, for scripts
  and tests that need no durability.

A database fits the same shape: ``transact`` is one database transaction; the
:class:`View` it is given reads with row locks (``runnable`` is ``SELECT ... FOR UPDATE
SKIP LOCKED LIMIT 1`` over the queued jobs of a lane whose ``run_after`` has come), and
the returned records become the transaction's ``INSERT``/``UPDATE`` statements before it
commits. ``changed_since`` is what ``LISTEN/NOTIFY`` feeds (:meth:`Backend.changes`,
:meth:`Backend.wait_changes`).

The decisions the verbs make from what they read are pure functions
(:mod:`.decisions`), so a backend never repeats them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from desktop_queue.core.records import JobDict, Record
from desktop_queue.core.store.archive import ArchivedRow, PurgeFilter, Totals

T = TypeVar("T")

#: what recovers the jobs of workers found dead: called with (job id, lease epoch) of each
Orphans = Callable[[list[tuple[str, int]]], None]


class ResultStored(Exception):
    """A success committed as new for its key (``res_new``) met a result stored for that key.

    Raised only by a backend that checks new results itself (``checks_new_results``):
    nothing was committed, and the verb commits again after looking the stored result
    up, which it then reuses (a result is never produced twice for one key).
    """


@dataclass(frozen=True, slots=True)
class Change(Generic[T]):
    """What a verb's transaction function returns: the records to commit, and its answer.

    The function reads the :class:`View` and decides; the backend commits ``records``
    atomically and hands ``value`` back from :meth:`Backend.commit` once they are made.
    """

    records: Sequence[Record]
    value: T


@dataclass(slots=True)
class NextLease:
    """What a view's lease in one statement (``lease_next``) took, once its commit answered.

    A view that can take the next job and write its lease in one statement offers
    ``lease_next(changes, event, now)``: ``changes`` and ``event`` are the lease the verb
    made (``Queue._lease_fields``) for a job it does not know yet, and the view fills in
    what depends on the job it takes: ``attempts`` and ``total_attempts`` one more than
    the job's, ``lease_epoch`` a new epoch, and the event's ``attempt`` and ``epoch`` the
    same. It writes nothing if a lease has expired (``expired``): the verb then leases the
    usual way, which reaps first.

    Attributes:
        job_id: the job leased (None: nothing was).
        epoch: its lease epoch.
        attempt: its attempt, counted.
        expired: a lease had expired, so nothing was leased.
    """

    job_id: str | None = None
    epoch: int = 0
    attempt: int = 0
    expired: bool = False


@dataclass
class OpenReport:
    """What opening the backend found.

    Attributes:
        first: this process opened it while no other had it open.
        notices: plain-language messages for the user (recoveries, quarantines).
    """

    first: bool
    notices: list[str] = field(default_factory=list)


class History(Protocol):
    """Finished jobs that left the hot set, and the index that finds them
    (:class:`~desktop_queue.core.store.archive.Archive`)."""

    def get(self, job_id: str) -> JobDict | None: ...
    def rows(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        profile: str | None = None,
        error_class: str | None = None,
        text: str | None = None,
        before_seq: int | None = None,
        limit: int | None = None,
        resolved: bool | None = None,
        signature: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
    ) -> list[ArchivedRow]: ...
    def jobs(self, rows: Iterable[ArchivedRow]) -> Iterator[JobDict]: ...
    def totals(self) -> Totals: ...
    def contributions_of(self, ids: Iterable[str]) -> list[tuple[str, dict[str, Any]]]: ...
    def matching(self, purge: PurgeFilter) -> list[str]: ...
    def with_prefix(self, prefix: str, limit: int = 3) -> list[str]: ...
    def dead_groups(self, *, resolved: bool = False) -> list[tuple[str, int, str | None]]: ...
    def facts_of(self, ids: Iterable[str]) -> dict[str, tuple[str, float | None, str | None]]: ...
    def finished_since(self, cutoff: float, state: str) -> dict[str, float]: ...


class View(Protocol):
    """What a verb may read: inside :meth:`Backend.transact` (then it is the state the
    commit changes) or in :meth:`Backend.read`.

    Job dicts returned are the backend's own: a verb must not change them (it returns
    records instead).
    """

    #: bumped by every change a process sees (see :meth:`changed_since`)
    version: int
    #: the highest submission number and lease epoch given out so far
    seq: int
    epoch: int

    @property
    def archive(self) -> History | None:
        """Finished jobs outside the hot set, or None when the backend keeps every job hot."""
        ...

    def job(self, job_id: str) -> JobDict | None:
        """The job with this id, hot or archived."""
        ...

    def holder(self, key: str) -> JobDict | None:
        """The live or succeeded job holding idempotency key ``key``."""
        ...

    def exists(self, job_id: str) -> bool: ...

    def hot(self, job_id: str) -> JobDict | None:
        """The job if it is in the hot set (queued, running or recently finished), else None."""
        ...

    def hot_jobs(self) -> Mapping[str, JobDict]:
        """Every job of the hot set, by id."""
        ...

    def ids_in(self, state: str) -> Collection[str]:
        """Ids of the hot jobs in ``state`` (every queued and running job is hot)."""
        ...

    def holder_id(self, key: str) -> str | None:
        """The id of the hot job holding idempotency key ``key`` (None: none, or an archived one)."""
        ...

    def purged(self, job: JobDict) -> bool:
        """Whether a purge recorded but not yet carried out removes this archived job."""
        ...

    def queued_in_lane(self, lane: str) -> int:
        """How many jobs wait in the priority lane ``lane``."""
        ...

    def queued_of_kinds(self, kinds: Iterable[str]) -> bool:
        """Whether any job of one of ``kinds`` is queued (runnable now or later)."""
        ...

    def runnable(self, lane: str, now: float, skip: Callable[[JobDict], bool] | None = None) -> JobDict | None:
        """The next queued job of ``lane`` whose ``run_after`` has come and that ``skip`` keeps."""
        ...

    def next_wake(self) -> float | None:
        """When the earliest queued job becomes runnable, or None if none is queued."""
        ...

    def changed_since(self, version: int) -> tuple[int, set[str] | None]:
        """Ids changed after ``version``; None means "everything"."""
        ...


class Backend(Protocol):
    """Where jobs are kept: atomic commits of journal records, and consistent reads."""

    #: what opening it found
    report: OpenReport

    @property
    def poisoned(self) -> str | None:
        """Why the backend refuses every commit until it is reopened (None: it does not)."""
        ...

    @property
    def closed(self) -> bool: ...

    def open(self, on_first: Callable[[], None] | None = None) -> OpenReport:
        """Opens it; ``on_first`` runs when no other process has it open (reconciliation)."""
        ...

    def close(self) -> None: ...

    def transact(self, fn: Callable[[View], Sequence[Record]], *, durable: bool = True) -> Sequence[Record]:
        """Commits the records ``fn`` derives from the current :class:`View`, atomically.

        ``fn`` may raise to commit nothing. Records are applied to the view only once they
        are committed (and, if ``durable``, on disk).
        """
        ...

    def commit(self, fn: Callable[[View], Change[T]], *, durable: bool = True) -> T:
        """:meth:`transact` for a function that answers too: commits its records, returns its value."""
        ...

    def read(self, fn: Callable[[View], T]) -> T:
        """Runs ``fn`` on an up-to-date :class:`View` (every process's commits applied)."""
        ...

    def peek(self, fn: Callable[[View], T]) -> T:
        """Runs ``fn`` on the view as this process last saw it: what its own last commit left."""
        ...

    def sync(self) -> None:
        """Puts every commit this process made on disk (a no-op where every commit is)."""
        ...

    def compact_now(self) -> None:
        """Folds what the journal holds (purges included) before returning."""
        ...

    def quiet(self) -> AbstractContextManager[bool]:
        """While held, says whether no maintenance (a compaction) of the backend runs,
        and keeps one from starting; for sweeping files that one might still write."""
        ...

    def carried_result(self, key: str) -> dict[str, Any] | None:
        """A result document committed with its job's success, not yet in a result file.

        A backend whose answer costs a round trip (PostgreSQL) sets the class attribute
        ``checks_new_results = True``: a success record marked ``res_new`` then commits
        only if no result is stored for its key, and raises :class:`ResultStored`
        otherwise, so the verb need not ask this first. Without it (the JSON store, whose
        answer is in memory) the verb asks, and never marks a record.

        A backend that several machines share also keeps the results' artifacts (their
        files live in the data dir of the machine that made them): it has
        ``read_artifacts_with(reader)``, told by the queue how to read an artifact's bytes
        (``reader(ref)``) for the commit of the success that refers to it, and
        ``fetch_artifact(ref) -> bytes | None``, which the result store asks for an
        artifact this machine lacks (:meth:`ResultStore.artifact_file
        <desktop_queue.core.results.ResultStore.artifact_file>`).
        """
        ...

    def carried_keys(self) -> list[str]: ...

    def archived_result(self, key: str) -> dict[str, Any] | None:
        """The result document of an archived job holding ``key``."""
        ...

    def on_orphans(self, recover: Orphans) -> None:
        """Sets what recovers the leases of a worker found dead while the backend is open.

        For a backend that keeps a heartbeat per worker (PostgreSQL), which reconciles
        per worker instead of at the first open; the others run ``on_first`` and never
        call ``recover``.
        """
        ...

    def changes(self, version: int) -> tuple[int, set[str] | None]:
        """``View.changed_since(version)`` on an up-to-date view, and that view's version.

        A backend with a change feed (PostgreSQL's ``LISTEN``) also notes where its feed
        was before the read, for :meth:`wait_changes`.
        """
        ...

    def wait_changes(self, version: int, timeout_s: float, stop: threading.Event | None = None) -> bool:
        """Waits until a commit may have changed jobs after ``version`` (True) or ``timeout_s`` passes.

        ``version`` is one :meth:`changes` answered. A backend with a change feed waits
        for a notification, asking the server nothing meanwhile; without one it waits
        ``timeout_s`` and answers True: the caller then reads at that pace. ``stop`` ends
        the wait early once set: a backend with a feed also needs its
        ``interrupt_waits()`` called after (its wait is on the feed, not the event).
        """
        ...


def scan_jobs(st: View) -> Iterable[JobDict]:
    """The hot jobs, with their timelines and inputs, for a pass over all of them (the
    alerts' last hour, the usual run times, a webhook's job).

    A view whose hot set is every job it keeps (PostgreSQL's table) answers with the
    jobs a data dir keeps hot instead (its ``hot_set``: the unfinished jobs and the
    newest finished ones), in one statement: a pass over its ``hot_jobs`` would read the
    whole history, a job at a time.
    """
    read: Callable[[], Iterable[JobDict]] | None = getattr(st, "hot_set", None)
    return read() if read is not None else st.hot_jobs().values()


def finished_since(st: View, cutoff: float, state: str) -> dict[str, float]:
    """``id -> finished_at`` of every job that ended in ``state`` at or after ``cutoff``,
    hot or archived: where the hot set keeps only the newest finished jobs, and a busy
    minute finishes more (the status bar's "done in the last minute", the alerts' dead
    letters).

    A view that keeps every job in one table (PostgreSQL's) finds them by an index; a
    data dir looks through its hot jobs, and through the archive's index for the others.
    """
    found: Callable[[float, str], dict[str, float]] | None = getattr(st, "finished_since", None)
    if found is not None:
        return found(cutoff, state)
    hot = st.hot_jobs()
    out = {} if st.archive is None else st.archive.finished_since(cutoff, state)
    for job_id in [i for i in out if i in hot]:
        del out[job_id]  # (the hot copy is the newer one)
    for job_id in st.ids_in(state):
        finished = hot[job_id].get("finished_at")
        if finished is not None and finished >= cutoff:
            out[job_id] = float(finished)
    return out


def wait_out(timeout_s: float, stop: threading.Event | None) -> bool:
    """``wait_changes`` of a backend without a change feed: ``timeout_s`` (or until ``stop``), then True."""
    if stop is not None:
        stop.wait(timeout_s)
    else:
        time.sleep(timeout_s)
    return True


#: the environment variable that chooses the backend when ``--store`` is not given
STORE_ENV = "DESKTOP_QUEUE_STORE"

_PG_SCHEMES = ("postgresql://", "postgres://")


def store_options(store: str | None = None) -> dict[str, Any]:
    """The :meth:`Queue.open` keyword arguments for the backend ``store`` names.

    ``store`` (``--store``), else ``$DESKTOP_QUEUE_STORE``: a ``postgresql://`` URI opens
    the PostgreSQL backend, whose clock is the server's (lease expiry is measured on one
    timeline for every machine); nothing (or empty) is the JSON store in the data dir.
    psycopg is imported only for a PostgreSQL store.

    Raises:
        ValueError: a store that is neither (the message says what is accepted).
        StoreError: psycopg is not installed.
    """
    import os

    from desktop_queue.core.errors import StoreError

    chosen = store if store is not None else os.environ.get(STORE_ENV, "")
    chosen = chosen.strip()
    if not chosen:
        return {}
    if not chosen.startswith(_PG_SCHEMES):
        raise ValueError(f"a store is a postgresql://... URI, not {chosen.split('://')[0]!r}")
    try:
        from desktop_queue.core.pg import PgBackend
    except ImportError:
        raise StoreError("the PostgreSQL store needs psycopg: pip install 'desktop-queue[postgres]'") from None
    backend = PgBackend(chosen)
    return {"backend": backend, "clock": backend.clock}
