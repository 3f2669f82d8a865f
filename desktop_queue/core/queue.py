"""The queue: every verb of shared/DESIGN.md section 1 as one durable, cross-process commit."""

from __future__ import annotations

import builtins
import functools
import heapq
import logging
import math
import operator
import os
import random
import secrets
import socket
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from desktop_queue.core.backend import Backend, Change, NextLease, OpenReport, ResultStored, View
from desktop_queue.core.backend import finished_since as backend_finished_since
from desktop_queue.core.clock import Clock, SystemClock
from desktop_queue.core.decisions import Then, decide_failure, decide_reap, lost_lease_reason
from desktop_queue.core.errors import (
    DuplicateKeyConflict,
    IllegalTransition,
    InputTooLarge,
    InvalidInput,
    NoSuchJob,
    NotAllowed,
    QueueError,
    QueueFull,
    StaleLease,
    StoreError,
    UnknownKind,
)
from desktop_queue.core.fingerprint import canonical_json, fingerprint, input_digest
from desktop_queue.core.inputspec import InputSpec, spec_of, title_for
from desktop_queue.core.liveness import holder_alive, this_process
from desktop_queue.core.metrics import Stats
from desktop_queue.core.metrics import compute as compute_stats
from desktop_queue.core.model import (
    TERMINAL,
    Actor,
    ErrorClass,
    EventType,
    Job,
    Priority,
    State,
    check_transition,
    clean_detail,
)
from desktop_queue.core.outcome import Outcome
from desktop_queue.core.present import error_signature, error_text
from desktop_queue.core.preview import replay_title
from desktop_queue.core.reconcile import Reconciled, reconcile_jobs, reconcile_orphans
from desktop_queue.core.records import (
    ErrorDict,
    EventDict,
    JobChanges,
    JobDict,
    NewRecord,
    PurgeRecord,
    Record,
    UpdateRecord,
)
from desktop_queue.core.redact import redact
from desktop_queue.core.results import InvalidArtifact, ResultStore
from desktop_queue.core.retention import RetentionPolicy, load_policy, purge_quarantined
from desktop_queue.core.retention import cutoff as retention_cutoff
from desktop_queue.core.retry import RetryPolicy
from desktop_queue.core.search import SearchQuery, prompt_text
from desktop_queue.core.store.archive import RESOLVED, ArchivedRow, HistoryQuery, PurgeFilter, Totals, as_hot
from desktop_queue.core.store.compaction import KEEP_FINISHED, KEEP_FINISHED_S
from desktop_queue.core.store.journal import Store
from desktop_queue.core.store.views import job_views
from desktop_queue.core.webhooks import Delivery, WebhookResult

log = logging.getLogger(__name__)

#: the fewest characters of an id that find a job by its start (``show 1a2b``)
MIN_ID_PREFIX = 4

MAX_INPUT_BYTES = 1 << 20
MAX_INTERACTIVE_WAITING = 5
#: jobs and input bytes one batch may create in its single commit (a journal record
#: is held in memory whole, and a segment rotates only between commits)
MAX_BATCH = 10_000
MAX_BATCH_BYTES = 64 << 20
MAX_TITLE = 200
#: jobs one page of :meth:`Queue.list_pages` reads at a time
LIST_PAGE = 1000


def _newest(jobs: Iterable[JobDict], n: int | None) -> list[JobDict]:
    """The ``n`` jobs submitted last (None: all), newest first."""
    seq = operator.itemgetter("seq")
    return heapq.nlargest(n, jobs, key=seq) if n is not None else sorted(jobs, key=seq, reverse=True)


@dataclass(frozen=True)
class Lease:
    """A job handed to one worker until ``expires_at``, under an unpredictable token."""

    job_id: str
    token: str
    epoch: int
    expires_at: float
    attempt: int
    worker: str
    job: Job


@dataclass(frozen=True)
class SubmitResult:
    """What a submission did.

    Attributes:
        job: the new job, or the existing one holding the key.
        duplicate: True when no job was created.
        result: the stored result document when the existing job already succeeded.
    """

    job: Job
    duplicate: bool
    result: dict[str, Any] | None = None


class _Batch:
    """The jobs a batch has created so far in its commit, which the state does not hold yet."""

    __slots__ = ("ids", "keys", "interactive")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.keys: dict[str, JobDict] = {}
        self.interactive = 0

    def holder(self, state: View, key: str) -> JobDict | None:
        return self.keys.get(key) or state.holder(key)

    def add(self, job: JobDict) -> None:
        self.ids.add(job["id"])
        self.keys[job["key"]] = job
        if job["priority"] == Priority.INTERACTIVE:
            self.interactive += 1


#: priority name -> lane (a dict lookup: calling the enum costs a microsecond a submission)
_LANES = {p.value: p for p in Priority}
_LANE_ORDER = (Priority.INTERACTIVE, Priority.BACKGROUND)


def _event_dict(
    kind: str, now: float, attempt: int, epoch: int, worker: str | None, actor: str, detail: dict[str, Any] | None
) -> EventDict:
    """One timeline entry (``shared/DESIGN.md`` section 1), its detail through the allow-list.

    Positional and plain strings: the hot verbs call it on every commit; everything else
    goes through :meth:`Queue._event`.
    """
    return {
        "type": kind,
        "at": round(now, 3),
        "attempt": attempt,
        "epoch": epoch,
        "worker": worker,
        "actor": actor,
        "detail": clean_detail(detail),
    }


#: tokens of the leases this process's runtime renews (see Queue.keep): process-wide, as
#: two Queue objects of one process on one data dir must not reap each other's
_KEPT: set[str] = set()


def _reap_candidates(state: View, now: float) -> Collection[str]:
    """The running jobs whose lease may have expired by ``now``: every running one, unless the
    view finds the expired ones itself (``expired_leases``: PostgreSQL asks an index)."""
    expired = getattr(state, "expired_leases", None)
    return cast(Collection[str], expired(now)) if expired is not None else state.ids_in(State.RUNNING)


def _taken(state: View, job_id: str) -> bool:
    """Whether a new random job id is already taken: asked, unless the view's insert refuses a
    taken id itself (``refuses_taken_ids``: PostgreSQL's primary key; the verb then runs
    again and draws another)."""
    return not getattr(state, "refuses_taken_ids", False) and state.exists(job_id)


#: this machine's short name: in worker ids, and on submissions (several machines may share a store)
_HOST = socket.gethostname().split(".")[0]


def default_worker_id() -> str:
    return f"{_HOST}:{os.getpid()}"


class Queue:
    """The job engine over one data directory.

    Every method is a single atomic commit, safe across threads and processes. The jobs
    live in a :class:`~desktop_queue.core.backend.Backend`: by default the JSON store in
    ``data_dir/store``; the verbs read and change them only through that seam.

    Args:
        data_dir: the data directory (``store/`` and ``results/`` live in it).
        providers: kind -> provider (``version``, ``validate``, optional ``lookup``).
        clock: where time comes from.
        policy: retry and lease defaults.
        rng: randomness for backoff jitter (tests pass a seeded one).
        rotate_bytes: journal segment size that triggers compaction.
        background_compaction: fold segments in a child process (False: inline, for tests).
        keep_finished, keep_finished_s: the hot set's finished jobs (see ``core.store.archive``).
        backend: where the jobs live instead of the JSON store (e.g. ``MemoryBackend()``);
            the JSON store's options above then do not apply.
    """

    def __init__(
        self,
        data_dir: Path | str,
        providers: Mapping[str, Any] | None = None,
        *,
        clock: Clock | None = None,
        policy: RetryPolicy | None = None,
        rng: random.Random | None = None,
        rotate_bytes: int = 4 << 20,
        background_compaction: bool = True,
        keep_finished: int = KEEP_FINISHED,
        keep_finished_s: float = KEEP_FINISHED_S,
        backend: Backend | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.providers: Mapping[str, Any] = providers if providers is not None else {}
        #: kind -> (its provider, that provider's input description): what names a job
        #: submitted without a title (asking the provider costs 20 µs a submit)
        self._specs: dict[str, tuple[Any, InputSpec | None]] = {}
        self.clock: Clock = clock or SystemClock()
        self.policy = policy or RetryPolicy()
        self.rng = rng or random.Random()
        self.store: Backend = backend or Store(
            self.data_dir / "store",
            rotate_bytes=rotate_bytes,
            background_compaction=background_compaction,
            keep_finished=keep_finished,
            keep_finished_s=keep_finished_s,
            now=self.clock.now,
        )
        self.results = ResultStore(
            self.data_dir / "results",
            carried=self.store.carried_result,
            carried_keys=self.store.carried_keys,
            # (a backend without an archive keeps every result where ``carried`` finds it)
            archived=self.store.archived_result if getattr(self.store, "archive", None) is not None else None,
            archived_count=self._archived_succeeded,
            # (a store several machines share keeps artifacts too: see Backend.carried_result)
            fetch_artifact=getattr(self.store, "fetch_artifact", None),
        )
        shares = getattr(self.store, "read_artifacts_with", None)
        if shares is not None:
            shares(self.results.read_artifact)  # (a success's commit stores its artifact's bytes)
        self.reconciled: list[Reconciled] = []

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(cls, data_dir: Path | str, providers: Mapping[str, Any] | None = None, **kwargs: Any) -> Queue:
        """Opens (creating if needed) the queue; the first process to open it reconciles orphans."""
        queue = cls(data_dir, providers, **kwargs)
        # (a backend with a row per worker recovers the jobs of the dead ones instead)
        queue.store.on_orphans(lambda jobs: reconcile_jobs(queue, jobs))
        queue.store.open(on_first=lambda: reconcile_orphans(queue))
        return queue

    def close(self) -> None:
        self.store.close()

    def prepare_close(self) -> None:
        """Starts what closing does that can run meanwhile (a data dir's last fold, in a
        child process), for a caller with more to do before it closes; what it commits
        after this, the close still folds."""
        ahead: Callable[[], None] | None = getattr(self.store, "fold_ahead", None)
        if ahead is not None:
            ahead()

    def sync(self) -> None:
        """Puts every change this process has committed on disk (a no-op when they are).

        Leases and heartbeats are committed without waiting for the disk (see
        :meth:`lease`); the lease driver calls this before it calls a provider.

        Raises:
            StoreError: the disk refused.
        """
        self.store.sync()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def report(self) -> OpenReport:
        """What opening the store found (first opener? recoveries?)."""
        return self.store.report

    def _archived_succeeded(self) -> int:
        return self.store.peek(lambda st: st.archive.totals().counts.get(State.SUCCEEDED, 0) if st.archive else 0)

    # ------------------------------------------------------------------ helpers

    def _event(
        self,
        kind: EventType,
        job: JobDict,
        actor: str,
        now: float,
        *,
        detail: dict[str, Any] | None = None,
        worker: str | None = None,
        attempt: int | None = None,
        epoch: int | None = None,
    ) -> EventDict:
        return _event_dict(
            str(kind),
            now,
            job.get("attempts", 0) if attempt is None else attempt,
            job.get("lease_epoch", 0) if epoch is None else epoch,
            worker,
            str(actor),
            detail,
        )

    @staticmethod
    def _upd(job_id: str, changes: JobChanges, *events: EventDict) -> UpdateRecord:
        return {"op": "upd", "id": job_id, "set": changes, "ev": list(events)}

    def _provider(self, kind: str) -> Any:
        provider = self.providers.get(kind)
        if provider is None and self.providers:
            known = ", ".join(sorted(self.providers)) or "none"
            raise UnknownKind(f"unknown job kind {kind!r} (known kinds: {known})")
        return provider

    @staticmethod
    def _find(state: View, job_id: str) -> JobDict:
        """The job with this id or unique id prefix, hot or archived (see :meth:`View.job`)."""
        job = state.job(job_id)
        if job is not None:
            return job
        if len(job_id) >= MIN_ID_PREFIX:
            # (a view that keeps every job, PostgreSQL's, finds them itself: not by every id)
            named: Callable[[str], Iterable[str]] | None = getattr(state, "ids_with_prefix", None)
            ids = set(named(job_id)) if named is not None else {i for i in state.hot_jobs() if i.startswith(job_id)}
            if state.archive is not None and len(ids) < 2:
                ids.update(state.archive.with_prefix(job_id))
            if len(ids) == 1:
                found = state.job(ids.pop())
                if found is not None:
                    return found
            if len(ids) > 1:
                raise NoSuchJob(f"job id prefix {job_id!r} is ambiguous ({len(ids)} jobs)")
        elif job_id:
            raise NoSuchJob(f"no job {job_id!r} (the start of an id must be {MIN_ID_PREFIX} characters or more)")
        raise NoSuchJob(f"no job {job_id!r}")

    def _lease_changes_cleared(self, now: float) -> JobChanges:
        return {"lease_token": None, "lease_expires_at": None, "updated_at": now}

    def _view(self, job_id: str) -> Job:
        return self.store.peek(lambda state: Job.from_dict(self._find(state, job_id)))

    # ------------------------------------------------------------------ submit

    def _title_of(self, kind: str, provider: Any, payload: Any) -> str | None:
        """The title of a job submitted without one: its prompt's first line (as the window,
        the CLI and the HTTP API name it), else None (then the job is named by its kind)."""
        known = self._specs.get(kind)
        if known is None or known[0] is not provider:
            known = (provider, spec_of(provider) if provider is not None else None)
            self._specs[kind] = known
        return title_for(known[1], payload)

    def _submission(
        self,
        kind: str,
        payload: Any,
        *,
        key: str | None,
        title: str | None,
        priority: str,
        max_attempts: int | None,
        actor: str,
        replay_of: str | None,
        run_after: float | None = None,
    ) -> tuple[Callable[..., Change[tuple[str, bool]]], int]:
        """Validates a submission; returns the transaction function that creates the job,
        and the size of the input in bytes.

        The function takes the state and, inside :meth:`submit_many`, the batch so far; it
        answers ``(job id, duplicate)``: duplicate when an existing job holds the key.
        ``run_after`` (a wall time) holds a new job back until then (``submit --at``, schedules).
        """
        provider = self._provider(kind)
        try:
            body = canonical_json(payload)
        except TypeError as exc:
            raise InvalidInput(f"input is not JSON: {exc}") from None
        if len(body) > MAX_INPUT_BYTES:
            raise InputTooLarge(f"input is {len(body):,} bytes; the limit is {MAX_INPUT_BYTES:,} bytes (1 MiB)")
        if provider is not None and hasattr(provider, "validate"):
            provider.validate(payload)
        lane = _LANES.get(priority) if isinstance(priority, str) else None
        if lane is None:
            raise InvalidInput(f"priority must be interactive or background, not {priority!r}")
        budget = self.policy.max_attempts if max_attempts is None else max_attempts
        if not isinstance(budget, int) or not 1 <= budget <= 100:
            raise InvalidInput(f"max attempts must be between 1 and 100, not {max_attempts!r}")
        if key is not None and (not isinstance(key, str) or not key.strip() or len(key) > 256):
            raise InvalidInput("an idempotency key is 1 to 256 characters")
        version = str(getattr(provider, "version", "1"))
        key_source = "replay" if replay_of else ("caller" if key else "fingerprint")
        the_key = key or fingerprint(kind, version, payload, body=body)
        digest = input_digest(kind, payload, body=body)
        if title is None:
            title = self._title_of(kind, provider, payload)
        clean_title = " ".join((title or "").split())[:MAX_TITLE]
        now = self.clock.now()
        if run_after is not None and not (isinstance(run_after, int | float) and math.isfinite(run_after)):
            raise InvalidInput(f"run after must be a time, not {run_after!r}")
        start = max(now, float(run_after)) if run_after is not None else now

        def fn(state: View, batch: _Batch | None = None) -> Change[tuple[str, bool]]:
            holder = state.holder(the_key) if batch is None else batch.holder(state, the_key)
            if holder is not None:
                held, existing = holder["id"], holder
                if existing.get("input_digest") != digest:
                    raise DuplicateKeyConflict(f"idempotency key is already used by job {held} with a different input")
                return Change([], (held, True))
            if lane is Priority.INTERACTIVE:
                waiting = state.queued_in_lane(Priority.INTERACTIVE)
                if batch is not None:
                    waiting += batch.interactive
                if waiting >= MAX_INTERACTIVE_WAITING:
                    raise QueueFull(
                        f"{waiting} interactive jobs are already waiting (the limit is {MAX_INTERACTIVE_WAITING}); "
                        "wait for one to start or submit it as background"
                    )
            job_id = secrets.token_hex(5)
            while _taken(state, job_id) or (batch is not None and job_id in batch.ids):
                job_id = secrets.token_hex(5)
            job: JobDict = {
                "id": job_id,
                "seq": state.seq + 1 + (len(batch.ids) if batch is not None else 0),
                "kind": kind,
                "title": clean_title or f"{kind} job",
                "priority": str(lane),
                "input": payload,
                "input_digest": digest,
                "key": the_key,
                "key_source": key_source,
                "max_attempts": budget,
                "state": str(State.QUEUED),
                "attempts": 0,
                "total_attempts": 0,
                "run": 1,
                "created_at": now,
                "updated_at": now,
                "run_after": start,
                "deadline_at": start + self.policy.deadline_s,
                "lease_token": None,
                "lease_epoch": 0,
                "lease_expires_at": None,
                "worker": None,
                "last_error": None,
                "result_ref": None,
                "provider_job_id": None,
                "replay_of": replay_of,
                "replayed_as": [],
                "poison_count": 0,
                "started_at": None,
                "finished_at": None,
            }
            detail: dict[str, Any] = {
                "kind": kind,
                "priority": str(lane),
                "key_source": key_source,
                "bytes": len(body),
                "host": _HOST,
            }
            if replay_of:
                detail["replay_of"] = replay_of
            if batch is not None:
                batch.add(job)
            event = _event_dict(EventType.SUBMITTED, now, 0, 0, None, str(actor), detail)
            return Change([{"op": "new", "job": job, "ev": [event]}], (job_id, False))

        return fn, len(body)

    def submit(
        self,
        kind: str,
        payload: Any,
        *,
        key: str | None = None,
        title: str | None = None,
        priority: str = Priority.BACKGROUND,
        max_attempts: int | None = None,
        actor: str = Actor.USER,
        replay_of: str | None = None,
        run_after: float | None = None,
    ) -> SubmitResult:
        """Creates a job, or returns the live or succeeded one holding the same key.

        The job exists durably when this returns. With ``run_after`` (a wall time in
        the future) it stays queued until then; a duplicate keeps its own time.

        Raises:
            InvalidInput: bad input, kind, priority or attempt budget (nothing is created).
            InputTooLarge: the input is over 1 MiB.
            DuplicateKeyConflict: the key is held by a job with a different input.
            QueueFull: the interactive lane already has its maximum of waiting jobs.
        """
        fn, _ = self._submission(
            kind,
            payload,
            key=key,
            title=title,
            priority=priority,
            max_attempts=max_attempts,
            actor=actor,
            replay_of=replay_of,
            run_after=run_after,
        )
        job_id, duplicate = self.store.commit(fn)
        job = self._view(job_id)
        if duplicate:
            result = self.results.get(job.idempotency_key) if job.state == State.SUCCEEDED else None
            return SubmitResult(job=job, duplicate=True, result=result)
        return SubmitResult(job=job, duplicate=False, result=None)

    def submit_many(
        self,
        kind: str,
        payloads: Sequence[Any],
        *,
        titles: Sequence[str | None] | None = None,
        priority: str = Priority.BACKGROUND,
        max_attempts: int | None = None,
        actor: str = Actor.USER,
    ) -> builtins.list[SubmitResult]:
        """Creates one job per input, all in one durable commit: all of them exist, or none.

        Every input is validated before anything is written, so one bad line refuses the
        whole batch with an error naming it (``InvalidInput`` with "item N: ..."). An input
        equal to an earlier one, in the store or in this batch, is a duplicate: it returns
        the job holding its key, as :meth:`submit` does, and creates nothing.

        Raises:
            InvalidInput: an empty batch, more than MAX_BATCH items, or a bad item.
            InputTooLarge: an item over 1 MiB.
            DuplicateKeyConflict, QueueFull: as :meth:`submit`; nothing is created.
        """
        if not payloads:
            raise InvalidInput("the batch is empty")
        if len(payloads) > MAX_BATCH:
            raise InvalidInput(f"a batch holds at most {MAX_BATCH:,} jobs, not {len(payloads):,}")
        if titles is not None and len(titles) != len(payloads):
            raise InvalidInput("a batch needs one title per input")
        parts = []
        for number, payload in enumerate(payloads, 1):
            try:
                parts.append(
                    self._submission(
                        kind,
                        payload,
                        key=None,
                        title=titles[number - 1] if titles is not None else None,
                        priority=priority,
                        max_attempts=max_attempts,
                        actor=actor,
                        replay_of=None,
                    )
                )
            except InputTooLarge as exc:
                raise InputTooLarge(f"item {number}: {exc}") from None
            except InvalidInput as exc:
                raise InvalidInput(f"item {number}: {exc}") from None
        size = sum(n for _, n in parts)
        if size > MAX_BATCH_BYTES:
            raise InputTooLarge(
                f"the batch's inputs are {size:,} bytes; the limit is {MAX_BATCH_BYTES:,} bytes (64 MiB)"
            )

        def fn(state: View) -> Change[list[tuple[str, bool]]]:
            batch = _Batch()
            created: list[NewRecord] = []
            made: list[tuple[str, bool]] = []
            for make, _ in parts:
                change = make(state, batch)
                created.extend(cast(Sequence[NewRecord], change.records))
                made.append(change.value)
            if len(created) <= 1:
                return Change(list(created), made)
            return Change([{"op": "batch", "new": created}], made)

        results: list[SubmitResult] = []
        for job_id, duplicate in self.store.commit(fn):
            job = self._view(job_id)
            if duplicate:
                result = self.results.get(job.idempotency_key) if job.state == State.SUCCEEDED else None
                results.append(SubmitResult(job=job, duplicate=True, result=result))
            else:
                results.append(SubmitResult(job=job, duplicate=False, result=None))
        return results

    # ------------------------------------------------------------------ leases

    def lease(
        self,
        worker: str | None = None,
        *,
        kinds: set[str] | None = None,
        lease_s: float | None = None,
        accept: Callable[[JobDict], bool] | None = None,
        kept: bool = False,
        lanes: Collection[str] | None = None,
    ) -> Lease | None:
        """Leases the next runnable job (interactive lane first, then ``run_after``, then submission order).

        Expired leases are reaped in the same commit. The attempt is recorded before
        anyone calls the provider (invariant 4): when this returns, the lease is in the
        journal, where it survives this process and every other process sees it. It is
        not yet fsynced; call :meth:`sync` before calling the provider (the lease driver
        does, on the worker thread) so that it also survives a power cut. Any later
        durable commit of this process syncs it too; until then a power cut can forget
        only this attempt (the job is then queued again, its attempt not counted).

        A lease with no filter (``kinds``, ``accept``, ``lanes``) and one lease length for
        every kind is one statement where the backend can (:class:`NextLease`), the same
        lease written by the server; while a lease has expired it leases the usual way.

        Args:
            worker: who holds the lease (shown in timelines).
            kinds: only these job kinds (None: any).
            lease_s: lease length (default: the kind's provider's ``lease_s``, else the policy's).
            accept: a further filter (flow control), called with the job dict.
            kept: the caller renews the lease for as long as it lives (the runtime's lease
                keeper does): the lease names this process as its holder, and is then
                reaped only once that process has ended (see :meth:`keep`). Without it a
                lease is lost when it expires, as a plain lease of a script should be.
            lanes: only these lanes (None: both); a lane left out is not scanned at all,
                so a paused background lane costs nothing however long it is.
        """
        who = worker or default_worker_id()
        owner = this_process() if kept else None
        if kinds is None and accept is None and lanes is None and self._leases_in_one_statement:
            length = lease_s if lease_s is not None else self._uniform_lease_length()
            if length is not None:
                done, taken = self._lease_next(who, owner, length, kept)
                if done:
                    return taken
        reaped: set[str] = set()

        def skip(job: JobDict) -> bool:
            if job["id"] in reaped:
                return True
            if kinds is not None and job["kind"] not in kinds:
                return True
            return accept is not None and not accept(job)

        def fn(state: View) -> Change[tuple[str, str, int, float, int] | None]:
            now = self.clock.now()
            records = self._reap_records(state, now)
            reaped.clear()
            if records:
                reaped.update(r["id"] for r in records)
            if kinds is not None and not state.queued_of_kinds(kinds):
                return Change(records, None)  # (none waits that this worker runs: no lane to scan)
            filtered = records or kinds is not None or accept is not None
            job = None
            for lane in _LANE_ORDER:
                if lanes is not None and lane not in lanes:
                    continue
                job = state.runnable(lane, now, skip if filtered else None)
                if job is not None:
                    break
            if job is None:
                return Change(records, None)
            record, leased = self._lease_record(job, state.epoch + 1, now, lease_s, owner, who, kept)
            records.append(record)
            return Change(records, leased)

        leased = self.store.commit(fn, durable=False)
        if leased is None:
            return None
        job_id, token, epoch, expires, attempt = leased
        return Lease(
            job_id=job_id,
            token=token,
            epoch=epoch,
            expires_at=expires,
            attempt=attempt,
            worker=who,
            job=self._view(job_id),
        )

    def lease_many(
        self,
        worker: str | None,
        n: int,
        *,
        kinds: set[str] | None = None,
        lease_s: float | None = None,
        accept: Callable[[JobDict], bool] | None = None,
        kept: bool = False,
        lanes: Collection[str] | None = None,
    ) -> builtins.list[Lease]:
        """:meth:`lease` of up to ``n`` jobs in one commit: the next ``n`` it would lease one by one.

        Each lease is what :meth:`lease` makes (its own unpredictable token, a strictly
        increasing epoch, ``attempts`` counted, the ``leased`` event); one journal write
        carries them all, so one :meth:`sync` makes them durable together. ``accept`` is
        asked in lease order and must take its own answers into account (flow control's
        does: an accepted job is admitted at once). An exception from it writes nothing.

        Returns:
            The leases, in the order they were taken (empty: nothing runnable).
        """
        if n <= 1:
            one = self.lease(worker, kinds=kinds, lease_s=lease_s, accept=accept, kept=kept, lanes=lanes)
            return [one] if one is not None else []
        return self.complete_and_lease(
            (), n, worker=worker, kinds=kinds, lease_s=lease_s, accept=accept, kept=kept, lanes=lanes
        )[1]

    def _lease_records(
        self,
        state: View,
        n: int,
        busy: Collection[str],
        *,
        who: str,
        owner: str | None,
        kinds: set[str] | None,
        lease_s: float | None,
        accept: Callable[[JobDict], bool] | None,
        kept: bool,
        lanes: Collection[str] | None,
    ) -> tuple[builtins.list[Record], builtins.list[tuple[str, str, int, float, int]]]:
        """The records of :meth:`lease_many` in ``state``: reaps, then up to ``n`` leases.

        ``busy``: jobs the same commit settles otherwise (neither reaped nor leased).
        """
        now = self.clock.now()
        records: builtins.list[Record] = []
        taken: set[str] = set(busy)
        # (a view that finds expired leases itself asks for them and its pick in one
        # statement: no look at the running jobs first)
        if getattr(state, "expired_leases", None) is not None or state.ids_in(State.RUNNING):
            for record in self._reap_records(state, now):
                if record["id"] not in taken:
                    records.append(record)
                    taken.add(record["id"])
        leased: builtins.list[tuple[str, str, int, float, int]] = []
        if n <= 0 or (kinds is not None and not state.queued_of_kinds(kinds)):
            return records, leased

        def skip(job: JobDict) -> bool:
            if job["id"] in taken:  # (leased in this commit: the view applies it only after)
                return True
            if kinds is not None and job["kind"] not in kinds:
                return True
            return accept is not None and not accept(job)

        epoch = 0
        while len(leased) < n:
            job = None
            for lane in _LANE_ORDER:
                if lanes is not None and lane not in lanes:
                    continue
                job = state.runnable(lane, now, skip)
                if job is not None:
                    break
            if job is None:
                break
            taken.add(job["id"])
            # a backend whose epoch reserves a new one at each read (a sequence) or not
            epoch = max(state.epoch + 1, epoch + 1)
            record, lease = self._lease_record(job, epoch, now, lease_s, owner, who, kept)
            records.append(record)
            leased.append(lease)
        return records, leased

    def _lease_record(
        self,
        job: JobDict,
        epoch: int,
        now: float,
        lease_s: float | None,
        owner: str | None,
        who: str,
        kept: bool,
    ) -> tuple[UpdateRecord, tuple[str, str, int, float, int]]:
        """The record that leases ``job`` under a new unpredictable token and ``epoch``, and
        (job id, token, epoch, expiry, attempt) for the :class:`Lease` made once it commits."""
        token = secrets.token_urlsafe(24)
        attempts = job["attempts"] + 1
        length = self.lease_length(job["kind"]) if lease_s is None else lease_s
        changes, event = self._lease_fields(
            token, epoch, attempts, job.get("total_attempts", 0) + 1, now, length, owner, who
        )
        if kept:
            _KEPT.add(token)  # before the commit: no other thread of ours may reap it meanwhile
        return self._upd(job["id"], changes, event), (job["id"], token, epoch, now + length, attempts)

    @staticmethod
    def _lease_fields(
        token: str,
        epoch: int,
        attempts: int,
        total_attempts: int,
        now: float,
        length: float,
        owner: str | None,
        who: str,
    ) -> tuple[JobChanges, EventDict]:
        """The changes and the ``leased`` event that lease a job whose counts become ``attempts``
        and ``total_attempts``, under ``token`` and ``epoch``, for ``length`` seconds from ``now``.

        The one definition of a lease: :meth:`_lease_record` fills in the job's counts, and
        a view that leases in one statement (:class:`NextLease`) the job it takes.
        """
        changes: JobChanges = {
            "state": State.RUNNING,
            "attempts": attempts,
            "total_attempts": total_attempts,
            "lease_token": token,
            "lease_epoch": epoch,
            "lease_expires_at": now + length,
            "lease_owner": owner,
            "worker": who,
            "started_at": now,
            "updated_at": now,
        }
        event = _event_dict(EventType.LEASED, now, attempts, epoch, who, Actor.SYSTEM, {"lease_s": length})
        return changes, event

    def _uniform_lease_length(self) -> float | None:
        """The lease length of every kind, if all share one (None: it depends on the kind)."""
        lengths = {self.lease_length(kind) for kind in self.providers}
        lengths.add(self.policy.lease_s)  # (a kind without a provider)
        return lengths.pop() if len(lengths) == 1 else None

    def _lease_next(self, who: str, owner: str | None, length: float, kept: bool) -> tuple[bool, Lease | None]:
        """:meth:`lease` in one statement, where the backend's view can (``lease_next``).

        Returns (done, the lease or None if nothing was runnable); not done: the view
        cannot, or a lease had expired, which only :meth:`lease`'s own scan reaps (nothing
        was written).
        """
        token = secrets.token_urlsafe(24)
        at: list[float] = []

        def fn(state: View) -> Change[NextLease | None]:
            lease_next = getattr(state, "lease_next", None)
            if lease_next is None:
                return Change((), None)
            now = self.clock.now()
            at[:] = [now]
            changes, event = self._lease_fields(token, 0, 0, 0, now, length, owner, who)
            return Change((), cast(NextLease, lease_next(changes, event, now)))

        if kept:
            _KEPT.add(token)  # (as _lease_record: before the commit)
        taken = self.store.commit(fn, durable=False)
        if taken is None or taken.job_id is None:
            _KEPT.discard(token)
            return taken is not None and not taken.expired, None
        return True, Lease(
            job_id=taken.job_id,
            token=token,
            epoch=taken.epoch,
            expires_at=at[0] + length,
            attempt=taken.attempt,
            worker=who,
            job=self._view(taken.job_id),
        )

    def _current(self, state: View, lease: Lease) -> JobDict:
        job = state.hot(lease.job_id)
        if job is None or job["state"] != State.RUNNING or job.get("lease_token") != lease.token:
            current = job["state"] if job else "missing"
            raise StaleLease(f"job {lease.job_id}: lease epoch {lease.epoch} is no longer current (job is {current})")
        return job

    def lease_length(self, kind: str) -> float:
        """The lease length of ``kind``: its provider's ``lease_s``, else the policy's."""
        provider = self.providers.get(kind)
        length = getattr(provider, "lease_s", None) if provider is not None else None
        return float(length) if isinstance(length, (int, float)) and length > 0 else self.policy.lease_s

    def keep(self, lease: Lease) -> None:
        """Says that this process's runtime renews ``lease`` for as long as it runs.

        A kept lease is never reaped by this process, however late its renewal: the
        holder is alive by definition, and after a suspension (sleep, ``SIGSTOP``) the
        runtime renews it before anything else happens. Other processes see the holder
        (``lease_owner``) alive and do not reap it either.
        """
        _KEPT.add(lease.token)

    def unkeep(self, lease: Lease) -> None:
        """The runtime no longer renews ``lease`` (the attempt ended or was abandoned)."""
        _KEPT.discard(lease.token)

    def heartbeat(self, lease: Lease, lease_s: float | None = None) -> float:
        """Extends a lease; returns the new expiry.

        Raises:
            StaleLease: the lease was lost; the rejection is recorded in the timeline.
        """
        length = self.lease_length(lease.job.kind) if lease_s is None else lease_s

        def fn(state: View) -> Change[float]:
            job = self._current(state, lease)
            now = self.clock.now()
            return Change([self._upd(job["id"], {"lease_expires_at": now + length, "heartbeat_at": now})], now + length)

        # a heartbeat need not wait for the disk: after a power cut every lease is orphaned anyway
        try:
            return self.store.commit(fn, durable=False)
        except StaleLease:
            self.record_stale(lease, "heartbeat of a lost lease rejected")
            raise

    def record_suspension(self, lease: Lease, seconds: float, machine: bool, lease_s: float | None = None) -> None:
        """Renews a lease after its holder was suspended, and says so in the timeline.

        Raises:
            StaleLease: the lease was lost meanwhile; the rejection is recorded.
        """
        length = self.lease_length(lease.job.kind) if lease_s is None else lease_s
        what = "the machine was suspended" if machine else "the worker process did not run"
        reason = f"{what} for {seconds:.0f} s; the lease is renewed and the attempt goes on"

        def fn(state: View) -> list[Record]:
            job = self._current(state, lease)
            now = self.clock.now()
            ev = self._event(
                EventType.RESUMED,
                job,
                Actor.SYSTEM,
                now,
                detail={"reason": reason, "delay_s": round(seconds, 1)},
                worker=lease.worker,
            )
            return [self._upd(job["id"], {"lease_expires_at": now + length, "heartbeat_at": now}, ev)]

        try:
            self.store.transact(fn, durable=False)
        except StaleLease:
            self.record_stale(lease, "renewal after a suspension rejected")
            raise

    def record_provider_job(self, lease: Lease, provider_job_id: str) -> None:
        """Commits the provider-side job id before the provider is polled (crash-safe resumption)."""

        def fn(state: View) -> list[Record]:
            job = self._current(state, lease)
            now = self.clock.now()
            ev = self._event(
                EventType.PROVIDER_JOB,
                job,
                Actor.SYSTEM,
                now,
                detail={"provider_job_id": provider_job_id},
                worker=lease.worker,
            )
            return [self._upd(job["id"], {"provider_job_id": provider_job_id, "updated_at": now}, ev)]

        try:
            self.store.transact(fn)
        except StaleLease:
            self.record_stale(lease, "provider job id of a lost lease rejected")
            raise

    def stored_result(self, lease: Lease) -> dict[str, Any] | None:
        """The result already stored for the key of ``lease``'s job, or None: asked before an attempt runs.

        While the job is hot and holds its key, no archived job can hold a result for
        that key (a submission would have found that job and returned it), so the
        archive is not asked; the journal's results and the result files are.
        """
        return self.results.get(lease.job.idempotency_key, archived=lambda: self._key_not_held(lease))

    def _key_not_held(self, lease: Lease) -> bool:
        """Whether ``lease``'s job no longer holds its key, so an archived job may hold its result."""
        key = lease.job.idempotency_key
        return self.store.peek(lambda state: state.holder_id(key)) != lease.job_id

    def complete(
        self, lease: Lease, result: Any, *, reused: bool = False, document: dict[str, Any] | None = None
    ) -> Job:
        """Stores the result durably under the job's key, then marks the job ``succeeded``.

        Args:
            lease: the lease the attempt holds.
            result: what the provider answered.
            reused: the result is one stored earlier for the key (not produced again).
            document: the result document this attempt kept when the provider answered
                (what :meth:`ResultStore.put_pending` returned), by a caller that found
                no stored result for the key (:meth:`stored_result`) after its lease was
                taken. The result is then not looked up again, nor its pending copy read
                back: while the lease is current and its job holds the key, no one else
                can have stored a result for that key since.

        Raises:
            StaleLease: the lease is no longer current; the state is unchanged and the
                rejection is recorded in the job's timeline.
        """
        key = lease.job.idempotency_key
        if (
            document is not None
            and not reused
            and document.get("key") == key
            and document.get("job_id") == lease.job_id
            and document.get("epoch") == lease.epoch
        ):
            done = self._complete_kept(lease, key, document)
            if done is not None:
                return done
            return self._complete_looked_up(lease, result, reused, look_up=True)
        return self._complete_looked_up(lease, result, reused)

    def complete_many(
        self,
        done: Sequence[tuple[Lease, Any, dict[str, Any] | None]],
        *,
        durable: bool = True,
        pending: bool = True,
    ) -> builtins.list[Job | QueueError]:
        """:meth:`complete` of several attempts (``(lease, result, document)`` each) in one commit.

        An attempt that kept its document (see :meth:`complete`) and whose job still holds
        its key is marked ``succeeded`` in the one commit, its record carrying its result;
        the others go through :meth:`complete` one by one. With ``durable=False`` the
        commit is written (every process sees it) but not synced: the caller syncs
        (:meth:`sync`) before it reports anything that depends on it surviving a power cut.
        ``pending=False`` says that no document was kept as a pending result
        (:meth:`ResultStore.put_pending`): there is then none to remove.

        Returns:
            For each attempt, in order: the job, or what its commit raised: a
            :class:`StaleLease` (recorded in the timeline, its pending result dropped),
            or a :class:`StoreError` from an attempt that went through :meth:`complete`.

        Raises:
            StoreError: the one commit was refused: nothing was changed.
        """
        return self.complete_and_lease(done, 0, durable=durable, pending=pending)[0]

    def complete_and_lease(
        self,
        done: Sequence[tuple[Lease, Any, dict[str, Any] | None]],
        n: int,
        *,
        worker: str | None = None,
        kinds: set[str] | None = None,
        lease_s: float | None = None,
        accept: Callable[[JobDict], bool] | None = None,
        kept: bool = False,
        lanes: Collection[str] | None = None,
        durable: bool = True,
        pending: bool = True,
    ) -> tuple[builtins.list[Job | QueueError], builtins.list[Lease]]:
        """:meth:`complete_many` of ``done`` and :meth:`lease_many` of ``n`` in one commit.

        What a worker does when attempts end and their slots are to be filled again:
        one journal write, one sync. The leases never take or reap a job of ``done``.
        An exception from ``accept`` writes nothing, the successes neither.

        Returns:
            ``complete_many``'s answers and ``lease_many``'s leases.
        """
        now = self.clock.now()
        kept_docs: dict[int, tuple[str, str, dict[str, Any]]] = {}
        for i, (lease, _result, doc) in enumerate(done):
            key = lease.job.idempotency_key
            if (
                doc is not None
                and doc.get("key") == key
                and doc.get("job_id") == lease.job_id
                and doc.get("epoch") == lease.epoch
            ):
                kept_docs[i] = (key, self.results.ref_for(key), doc)
        who = worker or default_worker_id()
        owner = this_process() if kept else None
        busy = {lease.job_id for lease, _result, _doc in done}

        checks = self._checks_new_results  # (until a commit finds a result stored: then looked up)

        def fn(
            state: View,
        ) -> Change[tuple[dict[int, StaleLease | bool], builtins.list[tuple[str, str, int, float, int]]]]:
            records: builtins.list[Record] = []
            decided: dict[int, StaleLease | bool] = {}
            for i, (key, ref, doc) in kept_docs.items():
                lease = done[i][0]
                try:
                    job = self._current(state, lease)
                except StaleLease as exc:
                    decided[i] = exc
                    continue
                if state.holder_id(key) != job["id"] or (not checks and self.store.carried_result(key) is not None):
                    decided[i] = False  # the full look-up decides (see _complete_kept)
                    continue
                records.append(self._success_record(job, lease, ref, now, doc, reused=False, new=checks))
                decided[i] = True
            leased: builtins.list[tuple[str, str, int, float, int]] = []
            if n > 0:
                more, leased = self._lease_records(
                    state,
                    n,
                    busy,
                    who=who,
                    owner=owner,
                    kinds=kinds,
                    lease_s=lease_s,
                    accept=accept,
                    kept=kept,
                    lanes=lanes,
                )
                records.extend(more)
            return Change(records, (decided, leased))

        decided: dict[int, StaleLease | bool] = {}
        leased: builtins.list[tuple[str, str, int, float, int]] = []
        if kept_docs or n > 0:
            # (leases alone need no sync here: the caller syncs before it calls a provider)
            try:
                decided, leased = self.store.commit(fn, durable=durable and bool(kept_docs))
            except ResultStored:
                checks = False  # (fn reads it when it runs again)
                decided, leased = self.store.commit(fn, durable=durable and bool(kept_docs))
        answers: dict[int, Job | QueueError] = {}
        made = [i for i, how in decided.items() if how is True]
        ids = [done[i][0].job_id for i in made] + [item[0] for item in leased]
        jobs = (
            self.store.peek(lambda state: [Job.from_dict(self._find(state, job_id)) for job_id in ids]) if ids else []
        )
        for i, job in zip(made, jobs, strict=False):
            lease = done[i][0]
            if pending:
                self.results.drop_pending(lease.job.idempotency_key, lease.epoch)  # the record carries it
            answers[i] = job
        for i, how in decided.items():
            if isinstance(how, StaleLease):
                lease = done[i][0]
                try:
                    self.record_stale(lease, "late result rejected")
                except QueueError as exc:  # only the event is missing: the state is right
                    log.warning("could not record the late result of %s: %s", lease.job_id, exc)
                self.results.drop_pending(lease.job.idempotency_key, lease.epoch)
                answers[i] = how
        out: builtins.list[Job | QueueError] = []
        for i, (lease, result, doc) in enumerate(done):
            answer = answers.get(i)
            if answer is None:
                try:
                    answer = self.complete(lease, result, document=doc)
                except QueueError as exc:
                    answer = exc
            out.append(answer)
        leases = [
            Lease(job_id=job_id, token=token, epoch=epoch, expires_at=expires, attempt=attempt, worker=who, job=job)
            for (job_id, token, epoch, expires, attempt), job in zip(leased, jobs[len(made) :], strict=True)
        ]
        return out, leases

    def _complete_kept(self, lease: Lease, key: str, doc: dict[str, Any]) -> Job | None:
        """:meth:`complete` with the attempt's own kept document; None when the job no longer holds its key."""
        now = self.clock.now()
        ref = self.results.ref_for(key)

        checks = self._checks_new_results

        def fn(state: View) -> Change[bool]:
            job = self._current(state, lease)
            if state.holder_id(key) != job["id"] or (not checks and self.store.carried_result(key) is not None):
                return Change([], False)  # not the key's holder (or a result appeared): the full look-up decides
            return Change([self._success_record(job, lease, ref, now, doc, reused=False, new=checks)], True)

        try:
            done = self.store.commit(fn)
        except ResultStored:
            return None  # (a result appeared: the full look-up decides)
        except StaleLease:
            self.record_stale(lease, "late result rejected")
            self.results.drop_pending(key, lease.epoch)
            raise
        if not done:
            return None
        self.results.drop_pending(key, lease.epoch)  # the journal record carries it now
        return self._view(lease.job_id)

    def _success_record(
        self, job: JobDict, lease: Lease, ref: str, now: float, doc: dict[str, Any], *, reused: bool, new: bool = False
    ) -> UpdateRecord:
        """The record of ``job``'s success with the result ``doc``.

        ``new``: no stored result was looked up for the key; the backend's commit checks
        that none is (see ``Backend.carried_result``).
        """
        check_transition(job["id"], job["state"], State.SUCCEEDED)
        detail: dict[str, Any] = {"result_ref": ref}
        if reused:
            detail["reason"] = "result already stored for this key; not produced again"
        event = _event_dict(
            EventType.SUCCEEDED,
            now,
            job.get("attempts", 0),
            job.get("lease_epoch", 0),
            lease.worker,
            Actor.SYSTEM,
            detail,
        )
        changes: JobChanges = {
            "state": State.SUCCEEDED,
            "result_ref": ref,
            "finished_at": now,
            "last_error": None,
            **self._lease_changes_cleared(now),
        }
        record = self._upd(job["id"], changes, event)
        # the record carries the result: one fsync makes both durable ("the same durable
        # commit"); compaction writes the result file (synced) before folding this record
        record["res"] = doc
        if new:
            record["res_new"] = True
        return record

    def _complete_looked_up(self, lease: Lease, result: Any, reused: bool, *, look_up: bool = False) -> Job:
        """:meth:`complete` that looks up the key's result and the attempt's pending copy.

        On a backend that checks new results in the commit, the one committed with a
        success is not asked for first (a round trip) unless ``look_up``: the commit
        finds it, and the verb then runs again asking.
        """
        now = self.clock.now()
        key = lease.job.idempotency_key
        ref = self.results.ref_for(key)
        checks = self._checks_new_results and not look_up
        # (as in stored_result: while the lease's job holds the key, no archived job can hold a result for it)
        existing = self.results.get(key, archived=lambda: self._key_not_held(lease), carried=not checks)
        pending = None
        if existing is not None:
            # a result committed earlier for this key (reused): never produced twice
            doc = existing
            created = existing.get("job_id") == lease.job_id and existing.get("epoch") == lease.epoch
        else:
            # kept by this very attempt when the provider answered (the runnable does), or
            # made now; an artifact is written under this epoch's own name either way
            pending = self.results.pending(key, lease.epoch)
            doc = pending or self.results.attempt_document(
                key, result, job_id=lease.job_id, epoch=lease.epoch, produced_at=now
            )
            created = True

        new = checks and existing is None

        def fn(state: View) -> list[Record]:
            job = self._current(state, lease)
            return [self._success_record(job, lease, ref, now, doc, reused=reused or not created, new=new)]

        try:
            self.store.transact(fn)
        except ResultStored:
            return self._complete_looked_up(lease, result, reused, look_up=True)
        except StaleLease:
            self.record_stale(lease, "late result rejected")
            if pending is not None:
                self.results.drop_pending(key, lease.epoch)
            raise
        if pending is not None:
            self.results.drop_pending(key, lease.epoch)  # the journal record carries it now
        return self._view(lease.job_id)

    def apply_webhook(
        self,
        delivery: Delivery,
        lookup: Callable[[Job], Any],
        profile_of: Callable[[JobDict], str | None],
    ) -> WebhookResult:
        """Applies a verified provider webhook delivery: at most one state change per
        delivery id, recorded in the commit of its effect (see :mod:`.webhooks`).

        Raises:
            WebhookNotReady: the provider does not say yet how its job ended.
        """
        from desktop_queue.core.webhooks import apply_delivery

        return apply_delivery(self, delivery, lookup, profile_of)

    @staticmethod
    def taken_over(job: JobDict, worker: str) -> Lease:
        """The current lease of a running job, as one that takes it over in a commit holds it
        (a webhook finishing the job): clearing its token there makes the holder's late
        report stale."""
        return Lease(
            job_id=job["id"],
            token=job.get("lease_token") or "",
            epoch=job.get("lease_epoch", 0),
            expires_at=job.get("lease_expires_at") or 0.0,
            attempt=job.get("attempts", 0),
            worker=worker,
            job=Job.from_dict(job, with_events=False),
        )

    def record_stale(self, lease: Lease, reason: str) -> None:
        """Records in the job's timeline that a lost lease's holder was turned away."""

        def fn(state: View) -> list[Record]:
            job = state.hot(lease.job_id)
            if job is None:
                return []
            ev = self._event(
                EventType.STALE_RESULT,
                job,
                Actor.SYSTEM,
                self.clock.now(),
                detail={"reason": reason, "stale_epoch": lease.epoch},
                worker=lease.worker,
                attempt=lease.attempt,
                epoch=lease.epoch,
            )
            return [self._upd(job["id"], {}, ev)]

        self.store.transact(fn)

    def fail(self, lease: Lease, outcome: Outcome) -> Job:
        """Records a failed attempt and decides: retry later, wait for a rate limit, or dead-letter.

        Raises:
            StaleLease: the lease is no longer current (the state is unchanged).
        """

        def fn(state: View) -> list[Record]:
            job = self._current(state, lease)
            now = self.clock.now()
            return [self._failure_record(job, outcome, now, Actor.SYSTEM, lease.worker)]

        try:
            self.store.transact(fn)
        except StaleLease:
            self.record_stale(lease, "late failure report ignored")
            raise
        return self._view(lease.job_id)

    def _failure_record(
        self,
        job: JobDict,
        outcome: Outcome,
        now: float,
        actor: str,
        worker: str | None,
        event_reason: str | None = None,
    ) -> UpdateRecord:
        error_class = ErrorClass(outcome.error_class or ErrorClass.RETRYABLE)
        decision = decide_failure(
            error_class,
            outcome.retry_after,
            attempts=job["attempts"],
            max_attempts=job["max_attempts"],
            poison_count=job.get("poison_count", 0),
            deadline_at=job.get("deadline_at"),
            now=now,
            policy=self.policy,
            rng=self.rng,
        )
        message = redact(outcome.message or error_class.value, job.get("input"))
        error: ErrorDict = {"class": str(error_class), "message": message, "status": outcome.status}
        if outcome.key_fp:  # (never in the event: the timeline says what, not which key)
            error["key_fp"] = outcome.key_fp
        detail: dict[str, Any] = {"error_class": str(error_class), "error": message, "status": outcome.status}
        if event_reason:
            detail["reason"] = event_reason
        changes: JobChanges = {"last_error": error, "updated_at": now, "lease_token": None, "lease_expires_at": None}
        if decision.give_back:
            changes["attempts"] = max(0, job["attempts"] - 1)
        if decision.poison_count is not None:
            changes["poison_count"] = decision.poison_count
            detail["poison_count"] = decision.poison_count
        if decision.poisoned:
            changes["poison"] = True
        if decision.dead:
            check_transition(job["id"], job["state"], State.DEAD)
            ev = self._event(
                EventType.DEAD_LETTERED, job, actor, now, detail={**detail, "reason": decision.reason}, worker=worker
            )
            return self._upd(job["id"], {**changes, "state": str(State.DEAD), "finished_at": now}, ev)
        check_transition(job["id"], job["state"], State.QUEUED)
        ev = self._event(
            decision.event or EventType.RETRY_SCHEDULED,
            job,
            actor,
            now,
            detail={
                **detail,
                "delay_s": round(decision.delay, 3),
                "run_after": round(now + decision.delay, 3),
                "retry_after_s": decision.retry_after,
            },
            worker=worker,
        )
        return self._upd(job["id"], {**changes, "state": str(State.QUEUED), "run_after": now + decision.delay}, ev)

    def release(self, lease: Lease, reason: str = "the worker was shut down") -> Job:
        """Gives a lease back unfinished: ``queued`` again at once, the attempt not counted.

        For a worker that stops on purpose (app closing), so the job need not wait for
        its lease to expire. Raises :class:`StaleLease` if the lease was already lost.
        """

        def fn(state: View) -> list[Record]:
            job = self._current(state, lease)
            now = self.clock.now()
            ev = self._event(EventType.RELEASED, job, Actor.SYSTEM, now, detail={"reason": reason}, worker=lease.worker)
            changes: JobChanges = {
                **self._lease_changes_cleared(now),
                "state": str(State.QUEUED),
                "run_after": now,
                "attempts": max(0, job["attempts"] - 1),
            }
            return [self._upd(job["id"], changes, ev)]

        try:
            self.store.transact(fn)
        except StaleLease:
            self.record_stale(lease, "release of a lost lease rejected")
            raise
        return self._view(lease.job_id)

    # ------------------------------------------------------------------ reaping

    def _lost(self, job: JobDict, expires: float, now: float) -> str | None:
        """Why an expired lease counts as lost (None: its holder lives; leave it be)."""
        if job.get("lease_token") in _KEPT:
            return None  # (before looking at the process table: the common case of a suspension)
        owner, me = job.get("lease_owner"), this_process()
        return lost_lease_reason(
            renewed_here=False,
            owner=owner,
            me=me,
            alive=None if owner is None or owner == me else holder_alive(owner),
            overdue_s=now - expires,
        )

    def _reap_records(self, state: View, now: float) -> list[UpdateRecord]:
        records: list[UpdateRecord] = []
        for job_id in list(_reap_candidates(state, now)):
            job = state.hot_jobs()[job_id]
            expires = job.get("lease_expires_at")
            if expires is None or expires >= now:
                continue
            why = self._lost(job, expires, now)
            if why is None:
                continue
            base: JobChanges = {"lease_token": None, "lease_expires_at": None, "updated_at": now}
            detail = {"expired_at": round(expires, 3), "reason": why}
            ev = self._event(EventType.LEASE_EXPIRED, job, Actor.SYSTEM, now, detail=detail, worker=job.get("worker"))
            found = self.results.get(job["key"]) or self.results.pending(job["key"], job.get("lease_epoch", 0))
            then = decide_reap(has_result=found is not None, attempts=job["attempts"], max_attempts=job["max_attempts"])
            if then is Then.SUCCEED and found is not None:
                # the lost holder had its answer before it went: never produce it again
                ref = self.results.ref_for(job["key"])
                done = self._event(
                    EventType.SUCCEEDED,
                    job,
                    Actor.SYSTEM,
                    now,
                    detail={"result_ref": ref, "reason": "result already stored for this key; not produced again"},
                )
                record = self._upd(
                    job_id, {**base, "state": str(State.SUCCEEDED), "result_ref": ref, "finished_at": now}, ev, done
                )
                record["res"] = found  # the lost holder may never have synced it
                records.append(record)
            elif then is Then.DEAD:
                error: ErrorDict = {
                    "class": "retryable",
                    "message": "lease expired on the last attempt",
                    "status": None,
                }
                dead_ev = self._event(
                    EventType.DEAD_LETTERED,
                    job,
                    Actor.SYSTEM,
                    now,
                    detail={
                        "reason": f"lease expired with attempts exhausted ({job['attempts']}/{job['max_attempts']})"
                    },
                )
                records.append(
                    self._upd(
                        job_id, {**base, "state": str(State.DEAD), "finished_at": now, "last_error": error}, ev, dead_ev
                    )
                )
            else:
                records.append(self._upd(job_id, {**base, "state": str(State.QUEUED), "run_after": now}, ev))
        return records

    def reap(self) -> list[str]:
        """Returns expired leases to ``queued`` (or ``dead`` when the budget is spent); the ids reaped."""

        def fn(state: View) -> Change[list[str]]:
            records = self._reap_records(state, self.clock.now())
            return Change(records, [r["id"] for r in records])

        return self.store.commit(fn)

    # ------------------------------------------------------------------ people's verbs

    def cancel(self, job_id: str, actor: str = Actor.USER) -> Job:
        """``queued`` -> ``cancelled``; ``running`` -> ``cancelled`` with the lease revoked."""

        def fn(state: View) -> Change[str]:
            job = self._find(state, job_id)
            check_transition(job["id"], job["state"], State.CANCELLED)
            now = self.clock.now()
            ev = self._event(EventType.CANCELLED, job, actor, now, detail={"from_state": job["state"]})
            changes: JobChanges = {
                "state": str(State.CANCELLED),
                "finished_at": now,
                **self._lease_changes_cleared(now),
            }
            return Change([self._upd(job["id"], changes, ev)], job["id"])

        return self._view(self.store.commit(fn))

    def retry(self, job_id: str, actor: str = Actor.USER) -> Job:
        """``dead``/``cancelled`` -> ``queued``: the same job, a new run with a fresh attempt budget."""

        def fn(state: View) -> Change[str]:
            job = self._find(state, job_id)
            check_transition(job["id"], job["state"], State.QUEUED)
            if job["state"] not in (State.DEAD, State.CANCELLED):
                raise IllegalTransition(job["id"], job["state"], State.QUEUED)
            held = state.holder(job["key"])
            holder = held["id"] if held is not None else None
            if holder is not None and holder != job["id"]:
                raise NotAllowed(f"job {holder} already holds this job's idempotency key; retry that one instead")
            return Change([self._retry_record(job, actor)], job["id"])

        return self._view(self.store.commit(fn))

    def _retry_record(self, job: JobDict, actor: str) -> UpdateRecord:
        """The update that starts a dead or cancelled job's next run (the checks are the caller's)."""
        now = self.clock.now()
        run = job.get("run", 1) + 1
        ev = self._event(EventType.RETRIED, job, actor, now, detail={"run": run, "from_state": job["state"]})
        changes: JobChanges = {
            "state": str(State.QUEUED),
            "run": run,
            "attempts": 0,
            "poison_count": 0,
            "poison": False,
            "run_after": now,
            "deadline_at": now + self.policy.deadline_s,
            "finished_at": None,
            "updated_at": now,
        }
        if job.get("resolved_at") is not None:
            changes["resolved_at"] = None  # a new run: if it dies again, it waits for a person again
        return self._upd(job["id"], changes, ev)

    def replay(self, job_id: str, payload: Any = None, actor: str = Actor.USER, *, title: str | None = None) -> Job:
        """A finished job -> a **new** linked job with the same (or edited) input and its own key.

        The new job and the original's back-link are one commit: both or neither.
        """
        original = self.get(job_id)
        if original.state not in TERMINAL:
            raise NotAllowed(f"job {original.id} is {original.state}; only finished jobs can be replayed")
        new_input = original.input if payload is None else payload
        replay_key = fingerprint("replay", original.idempotency_key, {"of": original.id, "nonce": secrets.token_hex(8)})
        create, _ = self._submission(
            original.kind,
            new_input,
            key=replay_key,
            # an edited prompt names the new job; else "<title> (replay)"
            title=title or (replay_title(original) if payload is None else replay_title(original, payload)),
            priority=original.priority,
            max_attempts=original.max_attempts,
            actor=actor,
            replay_of=original.id,
        )
        edited = payload is not None and canonical_json(payload) != canonical_json(original.input)

        def fn(state: View) -> Change[str]:
            job = self._find(state, original.id)
            if job["state"] not in TERMINAL:
                raise NotAllowed(f"job {original.id} is {job['state']}; only finished jobs can be replayed")
            made = create(state)
            records = list(made.records)
            new_id = made.value[0]
            now = self.clock.now()
            ev = self._event(EventType.REPLAYED_AS, job, actor, now, detail={"replayed_as": new_id, "edited": edited})
            records.append(
                self._upd(job["id"], {"replayed_as": [*job.get("replayed_as", []), new_id], "updated_at": now}, ev)
            )
            return Change(records, new_id)

        return self.get(self.store.commit(fn))

    # ------------------------------------------------------------------ reading

    def get(self, job_id: str) -> Job:
        """One job with its timeline; ``job_id`` may be a unique prefix of 4+ characters."""
        return self.store.read(lambda state: Job.from_dict(self._find(state, job_id)))

    def job_dicts(self, ids: Collection[str], chunk: int = 500) -> Iterator[JobDict]:
        """Every job of ``ids``, hot or archived, as stored (a purged or unknown id is left
        out), ``chunk`` a read so that the store is never held for long, and read as the
        caller goes (one that folds them holds a chunk at a time). Shallow copies: the hot
        set's own dicts change in place once the read's lock is let go.

        For readers that follow the change feed and must see a job even if a compaction
        archived it since it changed (the outbox), where :meth:`raw_jobs` holds the hot set.
        """
        wanted = builtins.list(ids)
        for start in range(0, len(wanted), chunk):
            part = wanted[start : start + chunk]

            def fn(st: View, part: builtins.list[str] = part) -> builtins.list[JobDict]:
                # (both views read a batch together: PostgreSQL's in one statement, a data
                # dir's archived jobs a block at a time)
                batch: Callable[[Sequence[str]], builtins.list[JobDict]] | None = getattr(st, "jobs_by_id", None)
                found = batch(part) if batch is not None else (st.job(job_id) for job_id in part)
                return [cast(JobDict, dict(job)) for job in found if job is not None]

            yield from self.store.read(fn)

    def lease_token(self, job_id: str) -> str | None:
        """The current lease token (tests and the crash drill only; never shown to people)."""
        return self.lease_holder(job_id)[1]

    def lease_holder(self, job_id: str) -> tuple[str, str | None]:
        """``(state, lease token)`` of a job in one read (the lease driver checks its leases with it)."""

        def fn(state: View) -> tuple[str, str | None]:
            job = state.hot_jobs()[job_id]
            return job["state"], job.get("lease_token")

        return self.store.read(fn)

    def list(self, state: str | None = None, *, limit: int | None = None, with_events: bool = False) -> list[Job]:
        """Jobs, newest first, optionally only those in ``state``: the hot set's and the
        archive's merged by submission, in one read (:meth:`list_pages` reads them a page
        at a time)."""
        if state is not None:
            State(state)
        most = None if limit is None else max(0, limit)
        read = functools.partial(self._page, state=state, before=None, want=most, most=most, with_events=with_events)
        return self.store.read(read)[0]

    def list_pages(
        self, state: str | None = None, *, limit: int | None = None, page: int | None = None
    ) -> Iterator[builtins.list[Job]]:
        """The jobs :meth:`list` returns, in its order, a page at a time (the last may be empty).

        Each page is read on its own, as the jobs submitted before the previous page's
        last one: however many jobs the archive holds, only a page of them is in memory
        (``list --all`` of a million jobs would otherwise hold all of them). A job the
        archive takes between two pages keeps its place (the order is by submission);
        jobs submitted after the first page are not listed.

        A page is at least half the hot set, so that scanning it for each page stays a
        small part of reading the page however large a backlog it holds.
        """
        if state is not None:
            State(state)
        page = page or LIST_PAGE
        before: int | None = None
        left = limit
        while left is None or left > 0:
            want = page if left is None else min(page, left)
            jobs, complete = self.store.read(
                functools.partial(self._page, state=state, before=before, want=want, most=left)
            )
            yield jobs
            if complete or not jobs:
                return
            before = jobs[-1].seq
            if left is not None:
                left -= len(jobs)

    def _page(
        self,
        st: View,
        *,
        state: str | None,
        before: int | None,
        want: int | None,
        most: int | None,
        with_events: bool = False,
    ) -> tuple[builtins.list[Job], bool]:
        """The newest ``want`` jobs (in ``state``, submitted before ``before``; None: every
        one) of the hot set and the archive, more for a large hot set but never more than
        ``most``, and whether no job is left after them."""
        # (a view that reads a page in place, PostgreSQL's, need not list every job first)
        newest: Callable[[str | None, int, int | None], builtins.list[JobDict]] | None = getattr(st, "newest", None)
        if newest is not None and want is not None:
            raw = newest(state, want, before)
            return job_views(raw, with_events=with_events), len(raw) < want
        hot = st.hot_jobs()
        if want is not None:
            want = max(want, min(len(hot) // 2, most if most is not None else len(hot)))
        found: Iterable[JobDict] = hot.values() if state is None else (hot[i] for i in st.ids_in(state))
        if before is not None:
            found = (j for j in found if j["seq"] < before)
        raw = _newest(found, want)
        complete = want is None or len(raw) < want
        if st.archive is not None and state not in (State.QUEUED, State.RUNNING):
            archived = self._archived(st, state, want, before=before)
            complete = complete and (want is None or len(archived) < want)
            raw = _newest([*raw, *archived], want)
        return job_views(raw, with_events=with_events), complete

    @staticmethod
    def _archived(
        st: View, state: str | None, limit: int | None, *, before: int | None = None
    ) -> builtins.list[JobDict]:
        """Archived jobs (in ``state``, submitted before ``before``), newest first, without
        those the hot set holds a newer copy of."""
        assert st.archive is not None
        out: list[JobDict] = []
        while limit is None or len(out) < limit:
            page = 500 if limit is None else limit - len(out) + 16
            rows = st.archive.rows(state=state, before_seq=before, limit=page)
            if not rows:
                break
            for job in st.archive.jobs(r for r in rows if r.id not in st.hot_jobs()):
                if not st.purged(job):
                    out.append(as_hot(job))
            before = rows[-1].seq
            if len(rows) < page:
                break
        return out if limit is None else out[:limit]

    def history(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        profile: str | None = None,
        error_class: str | None = None,
        text: str | None = None,
        before_seq: int | None = None,
        limit: int = 200,
        resolved: bool | None = None,
        signature: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
    ) -> builtins.list[ArchivedRow]:
        """A page of archived jobs, newest first, found through the archive's index (no segment read).

        For the window's history and filters: ``before_seq`` continues after the last row
        of the previous page. Jobs that the hot set holds (:meth:`raw_jobs`) are left out
        (the archive may hold an older copy of them); on PostgreSQL, where every row is
        the job's only copy, the newest finished ones may come in both.
        ``text`` is looked for in the title and the prompt; ``resolved`` keeps only the
        resolved dead letters (True) or the others (False); ``signature`` one error
        signature; ``created_after`` / ``created_before`` a date range.
        """

        query: HistoryQuery = {
            "state": state,
            "kind": kind,
            "profile": profile,
            "error_class": error_class,
            "text": text,
            "before_seq": before_seq,
            "limit": limit,
            "resolved": resolved,
            "signature": signature,
            "created_after": created_after,
            "created_before": created_before,
        }

        def fn(st: View) -> builtins.list[ArchivedRow]:
            if st.archive is None:
                # (a view that pages its one copy of every job itself, PostgreSQL's, hot ones too)
                paged: Callable[[HistoryQuery], builtins.list[ArchivedRow]] | None = getattr(st, "history_rows", None)
                return paged(query) if paged is not None else []
            rows = st.archive.rows(**query)
            return [r for r in rows if r.id not in st.hot_jobs()]

        return self.store.read(fn)

    def finished_since(self, cutoff: float, state: str = State.SUCCEEDED) -> dict[str, float]:
        """``id -> finished_at`` of every job that ended in ``state`` at or after ``cutoff``, hot or archived.

        What the window's "done in the last minute" starts from when it loads (then it
        follows the changes): the hot set keeps only the newest finished jobs, and a busy
        worker finishes more than that in a minute.
        """
        return self.store.read(lambda st: backend_finished_since(st, cutoff, state))

    def counts(self) -> dict[str, int]:
        """Jobs per state, hot and archived; resolved dead letters count as ``resolved`` (a key
        present only when there are some), not ``dead``."""

        def fn(st: View) -> dict[str, int]:
            # (a view that counts in place, PostgreSQL's, answers without listing every job)
            counted: Callable[[], dict[str, int]] | None = getattr(st, "state_counts", None)
            if counted is not None:
                out = counted()
            else:
                out = {str(s): len(st.ids_in(s)) for s in State}
                out[RESOLVED] = self._hot_resolved(st)
            out[State.DEAD] -= out[RESOLVED]
            if st.archive is not None:
                for name, n in self._archived_totals(st).counts.items():
                    out[name] = out.get(name, 0) + n
            if not out[RESOLVED]:
                del out[RESOLVED]  # (present only when a person resolved some: the states stay the keys)
            return out

        return self.store.read(fn)

    @staticmethod
    def _archived_totals(st: View) -> Totals:
        """The archive's running totals without the jobs the hot set holds a newer copy of
        (archived once, then retried or replayed): those count as the hot job they are now."""
        assert st.archive is not None
        totals = st.archive.totals()
        if st.hot_jobs() and any(totals.counts.values()):
            for state, contrib in st.archive.contributions_of(st.hot_jobs()):
                totals.add(state, contrib, -1)
        return totals

    def refresh(self) -> int:
        """Applies other processes' commits; returns the state version."""
        return self.store.read(lambda st: st.version)

    def changed_since(self, version: int) -> tuple[int, set[str] | None]:
        """Catches up, then the ids changed after ``version`` (None: reload everything)."""
        return self.store.changes(version)

    @property
    def _leases_in_one_statement(self) -> bool:
        """Whether the backend's writing view can lease the next job in one statement (:class:`NextLease`)."""
        return bool(getattr(self.store, "leases_in_one_statement", False))

    @property
    def _checks_new_results(self) -> bool:
        """Whether the backend's commit checks that a success's result is new for its key."""
        return bool(getattr(self.store, "checks_new_results", False))

    @property
    def has_change_feed(self) -> bool:
        """Whether other processes' commits wake :meth:`wait_changes` (PostgreSQL's LISTEN/NOTIFY);
        False: it only waits out its timeout, and the caller reads at that pace."""
        return bool(getattr(self.store, "change_feed", False))

    def wait_changes(self, version: int, timeout_s: float, stop: threading.Event | None = None) -> bool:
        """Waits until another commit may have changed jobs after ``version`` (see :meth:`Backend.wait_changes`).

        ``stop``: an event whose setting, followed by :meth:`interrupt_waits`, ends the wait
        at once (a backend whose wait cannot be interrupted waits it out).
        """
        return self.store.wait_changes(version, timeout_s, stop)

    def interrupt_waits(self) -> None:
        """Wakes this process's :meth:`wait_changes` calls, to look at their ``stop`` events."""
        interrupt = getattr(self.store, "interrupt_waits", None)
        if interrupt is not None:
            interrupt()

    def raw_jobs(self, ids: set[str] | None = None) -> builtins.list[JobDict]:
        """Shallow copies of the hot set's job dicts without events (for the window's models).

        Only queued jobs keep their input: flow control reads it to say why one waits
        (its provider profile and estimated cost); finished jobs do not need it. The
        archive is read a page at a time through :meth:`history`.
        """

        def fn(st: View) -> list[JobDict]:
            # (a view that shapes them itself, PostgreSQL's, reads them in one statement)
            shaped: Callable[[Collection[str] | None], builtins.list[JobDict]] | None = getattr(st, "window_jobs", None)
            if shaped is not None:
                return shaped(ids)
            hot = st.hot_jobs()
            source = hot.values() if ids is None else (hot[i] for i in ids if i in hot)
            return cast(
                list[JobDict],
                [
                    {
                        k: v
                        for k, v in j.items()
                        if k not in ("events", "lease_token") and (k != "input" or j["state"] == State.QUEUED)
                    }
                    for j in source
                ],
            )

        return self.store.read(fn)

    def hot_ids(self, states: Collection[str] | None = None) -> builtins.list[str]:
        """The ids of the hot set's jobs (in ``states``, if given), in the order of
        :meth:`raw_jobs`, without copying the jobs."""

        def fn(st: View) -> builtins.list[str]:
            shaped: Callable[[Collection[str] | None], builtins.list[JobDict]] | None = getattr(st, "window_jobs", None)
            jobs = shaped(None) if shaped is not None else st.hot_jobs().values()
            return [j["id"] for j in jobs if states is None or j["state"] in states]

        return self.store.read(fn)

    def hot_among(self, ids: Collection[str]) -> set[str]:
        """Which of ``ids`` the hot set still holds (the window's tables let go of the others).

        The rest were archived (or purged) since: the window finds them again through
        :meth:`history`. On PostgreSQL, where every row is the job's only copy, the hot
        set is what the window holds of it (the unfinished jobs and the newest finished
        ones); the in-memory backend, which keeps no archive, answers all of them.
        """

        def fn(st: View) -> set[str]:
            # (a view that knows its window's hot set, PostgreSQL's, asks its server once)
            asked: Callable[[Collection[str]], set[str]] | None = getattr(st, "hot_among", None)
            if asked is not None:
                return asked(ids)
            if st.archive is None:
                return set(ids)
            hot = st.hot_jobs()
            return {i for i in ids if i in hot}

        return self.store.read(fn)

    def next_wake(self) -> float | None:
        """When the earliest queued job becomes runnable (wall time), or None if none is queued."""
        return self.store.read(lambda st: st.next_wake())

    def wake_times(self) -> tuple[float | None, float | None]:
        """(:meth:`next_wake`, the earliest expiry of a lease this process does not keep) in one read.

        The lease driver sleeps until the first of them (wall times; None: nothing
        queued, nothing running elsewhere): then a queued job becomes runnable, or an
        expired lease may be reaped.
        """

        def fn(st: View) -> tuple[float | None, float | None]:
            asked = getattr(st, "next_expiry", None)  # (PostgreSQL asks an index)
            if asked is not None:
                return st.next_wake(), cast(
                    float | None, asked(_KEPT.copy())
                )  # (copy: one C call, safe from other threads)
            expiries = [
                float(expires)
                for i in st.ids_in(State.RUNNING)
                if (j := st.hot(i)) is not None
                and (expires := j.get("lease_expires_at")) is not None
                and j.get("lease_token") not in _KEPT
            ]
            return st.next_wake(), min(expiries) if expiries else None

        return self.store.read(fn)

    def waiting_kinds(self, kinds: Iterable[str]) -> set[str]:
        """Which of ``kinds`` have a queued job (due or not): one consistent read."""
        wanted = list(kinds)
        return self.store.read(lambda st: {kind for kind in wanted if st.queued_of_kinds((kind,))})

    def is_idle(self) -> bool:
        """No job queued or running."""
        return self.store.read(lambda st: not st.ids_in(State.QUEUED) and not st.ids_in(State.RUNNING))

    def stats(self) -> Stats:
        """Counts and timings derived from every job's timeline (the archive's from its running totals)."""

        def fn(st: View) -> Stats:
            if st.archive is None:
                # (a view that keeps every job, PostgreSQL's, streams their timelines: a page at a time)
                streamed: Callable[[], Iterable[JobDict]] | None = getattr(st, "timelines", None)
                stats = compute_stats(streamed() if streamed is not None else st.hot_jobs().values())
            else:
                stats = compute_stats(st.hot_jobs().values(), archived=self._archived_totals(st))
            # a resolved dead letter waits for nobody: counted apart, not among the dead letters
            counted: Callable[[], dict[str, int]] | None = getattr(st, "state_counts", None)
            resolved = counted()[RESOLVED] if counted is not None else self._hot_resolved(st)
            stats.counts[State.DEAD] = stats.counts.get(State.DEAD, 0) - resolved
            stats.counts[RESOLVED] = stats.counts.get(RESOLVED, 0) + resolved
            if not stats.counts[RESOLVED]:
                del stats.counts[RESOLVED]
            stats.dead_letters = stats.counts[State.DEAD]
            return stats

        return self.store.read(fn)

    @staticmethod
    def _hot_resolved(st: View) -> int:
        """How many hot dead jobs are resolved (bounded by the hot set's finished jobs)."""
        return sum(1 for j in Queue._hot_in(st, State.DEAD) if j.get("resolved_at") is not None)

    def purge(self, finished_before: float, states: Sequence[str] | None = None, *, dry_run: bool = False) -> int:
        """Removes finished jobs (with their results and artifacts) finished before a wall time.

        One durable journal record says what goes; hot jobs go at once, and a compaction
        (run before this returns) writes the archive segments that hold the others again
        without them. Returns how many jobs matched.

        Raises:
            InvalidInput: a state that is not a finished one.
        """
        chosen = tuple(states) if states else tuple(str(s) for s in TERMINAL)
        for name in chosen:
            if name not in TERMINAL:
                raise InvalidInput(f"only finished jobs can be purged (succeeded, dead, cancelled), not {name!r}")
        return self._purge(PurgeFilter(before=finished_before, states=chosen), dry_run=dry_run)

    def _purge(self, purge: PurgeFilter, *, dry_run: bool) -> int:
        """Counts the jobs ``purge`` matches, hot and archived; unless ``dry_run``, removes them
        with one journal record and a compaction before returning."""

        def count(st: View) -> int:
            # (a view that keeps every job, PostgreSQL's, counts them itself)
            counted: Callable[[PurgeFilter], int] | None = getattr(st, "count_matching", None)
            if counted is not None:
                return counted(purge)
            hot = sum(1 for j in st.hot_jobs().values() if purge.matches(j))
            if st.archive is None:
                return hot
            return hot + sum(1 for i in st.archive.matching(purge) if i not in st.hot_jobs())

        matched = self.store.read(count)
        if dry_run or not matched:
            return matched
        record: PurgeRecord = {"op": "purge", "filter": purge.to_json(), "at": self.clock.now()}
        self.store.transact(lambda st: [record])
        self.store.compact_now()
        return matched

    def apply_retention(self, policy: RetentionPolicy | None = None, *, dry_run: bool = False) -> tuple[int, int]:
        """Purges what the data directory's retention policy (or ``policy``) no longer keeps.

        Returns:
            ``(jobs purged, quarantined files deleted)``.
        """
        policy = load_policy(self.data_dir) if policy is None else policy
        now = self.clock.now()
        jobs = files = 0
        if policy.finished_days is not None:
            jobs = self.purge(retention_cutoff(policy.finished_days, now), policy.purge_states(), dry_run=dry_run)
        if policy.quarantine_days is not None:
            before = retention_cutoff(policy.quarantine_days, now)
            files = len(purge_quarantined(self.data_dir, before, dry_run=dry_run))
        return jobs, files

    # ------------------------------------------------------------------ dead letters and history

    def _bulk(
        self,
        ids: Sequence[str],
        decide: Callable[[View, str, _BulkChunk], builtins.list[Record]],
        *,
        chunk: int,
        progress: Callable[[int, int], None] | None,
        stop: Callable[[], bool] | None,
    ) -> BulkResult:
        """Runs ``decide`` on every id, ``chunk`` ids a durable commit (one fsync a chunk, not a job).

        ``decide`` returns the records for one job, or raises a :class:`QueueError` that
        skips it (the reason is kept). ``stop`` is asked between chunks: the chunks
        committed stay committed.
        """
        wanted = list(dict.fromkeys(ids))  # once each, in the order given
        done: list[str] = []
        skipped: dict[str, str] = {}
        created: dict[str, str] = {}
        handled = 0
        step = max(1, chunk)
        for start in range(0, len(wanted), step):
            if stop is not None and stop():
                return BulkResult(done, skipped, created, cancelled=True, total=len(wanted))
            part = wanted[start : start + step]
            acc = _BulkChunk()

            def fn(state: View, part: builtins.list[str] = part, acc: _BulkChunk = acc) -> builtins.list[Record]:
                acc.reset()
                records: list[Record] = []
                for job_id in part:
                    try:
                        records.extend(decide(state, job_id, acc))
                    except QueueError as exc:
                        acc.skipped[job_id] = str(exc)
                if acc.new:
                    records.insert(0, {"op": "batch", "new": acc.new} if len(acc.new) > 1 else acc.new[0])
                return records

            self.store.transact(fn)
            done.extend(acc.done)
            skipped.update(acc.skipped)
            created.update(acc.created)
            handled += len(part)
            if progress is not None:
                progress(handled, len(wanted))
        return BulkResult(done, skipped, created, cancelled=False, total=len(wanted))

    def retry_many(
        self,
        ids: Sequence[str],
        actor: str = Actor.USER,
        *,
        chunk: int = 500,
        progress: Callable[[int, int], None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> BulkResult:
        """:meth:`retry` for many jobs, ``chunk`` of them in one durable commit.

        A job that is no longer dead or cancelled, or whose key another live job holds
        (also one retried earlier in the same call), is skipped with the reason.
        """

        def decide(state: View, job_id: str, acc: _BulkChunk) -> builtins.list[Record]:
            job = self._find(state, job_id)
            if job["state"] not in (State.DEAD, State.CANCELLED):
                raise NotAllowed(f"job {job['id']} is {job['state']}; only dead or cancelled jobs can be retried")
            held = state.holder(job["key"])
            if (held is not None and held["id"] != job["id"]) or job["key"] in acc.keys:
                holder = held["id"] if held is not None else acc.keys[job["key"]]
                raise NotAllowed(f"job {holder} already holds job {job['id']}'s idempotency key")
            acc.keys[job["key"]] = job["id"]
            acc.done.append(job["id"])
            return [self._retry_record(job, actor)]

        return self._bulk(ids, decide, chunk=chunk, progress=progress, stop=stop)

    def replay_many(
        self,
        ids: Sequence[str],
        actor: str = Actor.USER,
        *,
        chunk: int = 500,
        progress: Callable[[int, int], None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> BulkResult:
        """:meth:`replay` for many finished jobs with their own inputs: new linked jobs,
        ``chunk`` originals in one durable commit (``BulkResult.created``: original -> new).

        An original that is not finished, or whose input its provider now refuses, is
        skipped with the reason.
        """

        def decide(state: View, job_id: str, acc: _BulkChunk) -> builtins.list[Record]:
            job = self._find(state, job_id)
            if job["state"] not in TERMINAL:
                raise NotAllowed(f"job {job['id']} is {job['state']}; only finished jobs can be replayed")
            title = job.get("title") or ""
            replay_key = fingerprint("replay", job["key"], {"of": job["id"], "nonce": secrets.token_hex(8)})
            create, _ = self._submission(
                job["kind"],
                job.get("input"),
                key=replay_key,
                title=title if title.endswith("(replay)") else f"{title} (replay)",
                # the background lane: the interactive one holds a few jobs a person waits on
                priority=str(Priority.BACKGROUND),
                max_attempts=job["max_attempts"],
                actor=actor,
                replay_of=job["id"],
            )
            made = create(state, acc.batch)
            acc.new.extend(cast(Sequence[NewRecord], made.records))
            new_id = made.value[0]
            now = self.clock.now()
            ev = self._event(EventType.REPLAYED_AS, job, actor, now, detail={"replayed_as": new_id, "edited": False})
            acc.created[job["id"]] = new_id
            acc.done.append(job["id"])
            return [self._upd(job["id"], {"replayed_as": [*job.get("replayed_as", []), new_id], "updated_at": now}, ev)]

        return self._bulk(ids, decide, chunk=chunk, progress=progress, stop=stop)

    def resolve(self, job_id: str, note: str | None = None, actor: str = Actor.USER) -> Job:
        """Closes a dead letter without retrying it: it stays ``dead``, flagged ``resolved_at``,
        with a ``resolved`` event (and the person's ``note``, if any, cut to 300 characters).

        A resolved dead letter is no longer counted among the dead letters (``counts``,
        ``stats``), the window hides it unless asked, and it is purged like any finished
        job. A later retry clears the flag.

        Raises:
            NotAllowed: the job is not dead, or already resolved.
        """
        result = self.resolve_many([job_id], note, actor, strict=True)
        return self.get(result.done[0])

    def resolve_many(
        self,
        ids: Sequence[str],
        note: str | None = None,
        actor: str = Actor.USER,
        *,
        chunk: int = 500,
        progress: Callable[[int, int], None] | None = None,
        stop: Callable[[], bool] | None = None,
        strict: bool = False,
    ) -> BulkResult:
        """:meth:`resolve` for many dead letters, ``chunk`` in one durable commit.

        Jobs not dead, or resolved already, are skipped with the reason (``strict``:
        raised instead, nothing changed).
        """
        clean_note = " ".join((note or "").split()) or None

        def decide(state: View, job_id: str, acc: _BulkChunk) -> builtins.list[Record]:
            job = self._find(state, job_id)
            if job["state"] != State.DEAD:
                raise NotAllowed(f"job {job['id']} is {job['state']}; only dead letters can be resolved")
            if job.get("resolved_at") is not None:
                raise NotAllowed(f"job {job['id']} is resolved already")
            now = self.clock.now()
            ev = self._event(EventType.RESOLVED, job, actor, now, detail={"note": clean_note})
            acc.done.append(job["id"])
            return [self._upd(job["id"], {"resolved_at": now, "updated_at": now}, ev)]

        if strict:

            def fn(state: View) -> Change[list[str]]:
                acc = _BulkChunk()
                records = [r for job_id in ids for r in decide(state, job_id, acc)]
                return Change(records, acc.done)

            done = self.store.commit(fn)
            return BulkResult(list(done), {}, {}, cancelled=False, total=len(ids))
        return self._bulk(ids, decide, chunk=chunk, progress=progress, stop=stop)

    def purge_jobs(self, ids: Sequence[str], *, dry_run: bool = False) -> int:
        """Removes these finished jobs (a person's selection) with their results and artifacts.

        One journal record for all of them, as :meth:`purge`; jobs that are not finished
        (or no longer exist) are left alone. Returns how many jobs matched.
        """
        wanted = frozenset(ids)
        if not wanted:
            return 0
        purge = PurgeFilter(before=self.clock.now() + 1.0, states=tuple(str(s) for s in TERMINAL), ids=wanted)
        return self._purge(purge, dry_run=dry_run)

    def dead_letter_groups(self, *, resolved: bool = False) -> builtins.list[DeadGroup]:
        """The dead letters grouped by error signature, largest group first, archived ones
        included (``resolved``: the resolved ones instead of those waiting for a person)."""

        def fn(st: View) -> builtins.list[DeadGroup]:
            counts: dict[str, int] = {}
            example: dict[str, str] = {}
            klass: dict[str, str | None] = {}
            for job in self._hot_in(st, State.DEAD):
                if (job.get("resolved_at") is not None) != resolved:
                    continue
                sig = error_signature(job)
                counts[sig] = counts.get(sig, 0) + 1
                example.setdefault(sig, error_text(job))
                error = job.get("last_error")
                klass.setdefault(sig, error.get("class") if error else None)
            if st.archive is not None:
                # the archive's groups, less the archived copies of jobs the hot set holds now
                for sig, n, err in st.archive.dead_groups(resolved=resolved):
                    counts[sig] = counts.get(sig, 0) + n
                    klass.setdefault(sig, err)
                # (a hot job has an archived copy only if a verb changed it after it was archived)
                hot = [
                    i
                    for i, j in st.hot_jobs().items()
                    if j.get("run", 1) > 1 or j.get("replayed_as") or j.get("resolved_at") is not None
                ]
                for _id, (state, resolved_at, old_sig) in st.archive.facts_of(hot).items():
                    if state == State.DEAD and (resolved_at is not None) == resolved:
                        key = old_sig or ""
                        counts[key] = counts.get(key, 0) - 1
            groups = [DeadGroup(sig, n, klass.get(sig), example.get(sig) or sig) for sig, n in counts.items() if n > 0]
            groups.sort(key=lambda g: (-g.count, g.signature))
            return groups

        return self.store.read(fn)

    def dead_letter_ids(
        self, *, signature: str | None = None, resolved: bool = False, query: SearchQuery | None = None
    ) -> builtins.list[str]:
        """The ids of the dead letters with this error signature (None: any) that ``query``
        matches, newest first, hot and archived (from the index; no segment is read)."""
        q = (query or SearchQuery()).with_state(str(State.DEAD))

        def fn(st: View) -> builtins.list[str]:
            hot = [
                j
                for j in self._hot_in(st, State.DEAD)
                if (j.get("resolved_at") is not None) == resolved
                and (signature is None or error_signature(j) == signature)
                and q.matches(j, self._searchable(j))
            ]
            hot.sort(key=lambda j: j["seq"], reverse=True)
            out = [j["id"] for j in hot]
            if st.archive is not None:
                rows = st.archive.rows(
                    state=str(State.DEAD),
                    kind=q.kind,
                    profile=q.profile,
                    text=q.text,
                    resolved=resolved,
                    signature=signature,
                    created_after=q.after,
                    created_before=q.before,
                )
                out.extend(r.id for r in rows if r.id not in st.hot_jobs())
            return out

        return self.store.read(fn)

    def _find_paged(self, fits: Callable[[JobDict], bool], state: str | None, page: int) -> Iterator[Job]:
        """:meth:`find_jobs` over a view that pages every job itself (``newest`` with ``before_seq``)."""
        before: int | None = None
        while True:

            def fn(st: View, before: int | None = before) -> tuple[builtins.list[Job], int | None]:
                jobs: builtins.list[JobDict] = st.newest(state, page, before)  # type: ignore[attr-defined]
                last = int(jobs[-1]["seq"]) if len(jobs) >= page else None
                return [Job.from_dict(j) for j in jobs if fits(j)], last

            found, before = self.store.read(fn)
            yield from found
            if before is None:
                return

    @staticmethod
    def _hot_in(st: View, state: State) -> builtins.list[JobDict]:
        """The hot jobs in ``state``; a view that reads them in one statement (PostgreSQL's,
        whose every dead letter is hot) need not read them one by one."""
        read: Callable[[str], builtins.list[JobDict]] | None = getattr(st, "jobs_in", None)
        if read is not None:
            return read(str(state))
        hot = st.hot_jobs()
        return [hot[i] for i in st.ids_in(state)]

    @staticmethod
    def _searchable(job: JobDict) -> str:
        return " ".join(
            str(x) for x in (job["id"], job.get("title"), job.get("kind"), job.get("state"), error_text(job)) if x
        ).casefold()

    def prompt_matches(self, text: str, ids: Iterable[str] | None = None) -> set[str]:
        """The hot jobs (of ``ids``, or all but the queued ones) whose prompt contains ``text``, in any case.

        For the window's search, whose rows do not carry finished jobs' inputs. As in
        the archive's index, the first :data:`~desktop_queue.core.search.PROMPT_INDEX_CHARS`
        characters of a prompt are searched; their casefolded text is kept after the
        first search (by input digest).
        """
        needle = text.strip().casefold()
        if not needle:
            return set()
        cache = self._prompt_cache

        def fn(st: View) -> set[str]:
            out: set[str] = set()
            # (a view that reads the hot jobs' inputs in one statement, PostgreSQL's, need
            # not read the jobs one by one)
            bulk: Callable[[], builtins.list[tuple[str, str, Any]]] | None = (
                getattr(st, "inputs_not_queued", None) if ids is None else None
            )
            if bulk is not None:
                inputs = bulk()
            else:
                if ids is None:  # the queued rows carry their input: the others (bounded by the hot set's)
                    wanted = [i for s in State if s != State.QUEUED for i in st.ids_in(s)]
                else:
                    wanted = [i for i in ids if i in st.hot_jobs()]
                jobs = [st.hot_jobs()[i] for i in wanted]
                inputs = [(j["id"], j.get("input_digest") or "", j.get("input")) for j in jobs]
            for job_id, digest, payload in inputs:
                hit = cache.get(job_id)
                if hit is None or hit[0] != digest:
                    hit = (digest, prompt_text(payload).casefold())
                    cache[job_id] = hit
                if needle in hit[1]:
                    out.add(job_id)
            # (forget the jobs gone since: in bulk, every job not queued was just read)
            known: Collection[str] = {i for i, _, _ in inputs} if bulk is not None else st.hot_jobs()
            if len(cache) > 2 * max(1, len(known)):
                for gone in [i for i in cache if i not in known]:
                    del cache[gone]
            return out

        return self.store.read(fn)

    @functools.cached_property
    def _prompt_cache(self) -> dict[str, tuple[str, str]]:
        return {}

    def find_jobs(
        self, query: SearchQuery | None = None, *, resolved: bool | None = None, page: int = 500
    ) -> Iterator[Job]:
        """Every job ``query`` matches, with its timeline, newest first (for export).

        The hot set's matches and the archive's, read a page at a time (the archive is
        never loaded whole), are merged by submission: a job queued long ago still comes
        after the newer jobs the archive holds, as ``list`` orders them.
        """
        q = query or SearchQuery()

        def fits(job: JobDict) -> bool:
            if resolved is not None and (job.get("resolved_at") is not None) != resolved:
                return False
            return q.matches(job, self._searchable(job))

        def matching(st: View) -> builtins.list[tuple[int, str]] | None:
            if st.archive is None and getattr(st, "newest", None) is not None:
                # a view whose hot set is the whole history (PostgreSQL's) pages it newest
                # first: gathering every matching job first held them all in memory
                return None
            return sorted((j["seq"], j["id"]) for j in st.hot_jobs().values() if fits(j))

        hot = self.store.read(matching)
        if hot is None:
            yield from self._find_paged(fits, q.state, page)
            return
        if q.state in (State.QUEUED, State.RUNNING):
            yield from self._found_hot(hot)
            return
        # (an archived copy of a job listed hot is left out even if it was archived since)
        seen = {job_id for _seq, job_id in hot}
        yield from heapq.merge(
            self._found_hot(hot),
            self._found_archived(q, resolved, page, seen),
            key=operator.attrgetter("seq"),
            reverse=True,
        )

    def _found_hot(self, hot: builtins.list[tuple[int, str]]) -> Iterator[Job]:
        """The hot matches of :meth:`find_jobs`, newest first, each read whole as it is reached."""
        for _seq, job_id in reversed(hot):
            try:
                yield self.get(job_id)
            except NoSuchJob:
                continue  # purged meanwhile

    def _found_archived(self, q: SearchQuery, resolved: bool | None, page: int, hot: Collection[str]) -> Iterator[Job]:
        """The archived matches of :meth:`find_jobs`, newest first, a page of the index at a time."""
        before: int | None = None
        while True:

            def fn(st: View, before: int | None = before) -> tuple[builtins.list[Job], int | None]:
                if st.archive is None:
                    return [], None
                rows = st.archive.rows(
                    state=q.state,
                    kind=q.kind,
                    profile=q.profile,
                    text=q.text,
                    before_seq=before,
                    limit=page,
                    resolved=resolved,
                    created_after=q.after,
                    created_before=q.before,
                )
                if not rows:
                    return [], None
                found = [
                    Job.from_dict(as_hot(j))
                    for j in st.archive.jobs(r for r in rows if r.id not in hot and r.id not in st.hot_jobs())
                    if not st.purged(j)
                ]
                return found, (rows[-1].seq if len(rows) >= page else None)

            jobs, before = self.store.read(fn)
            yield from jobs
            if before is None:
                return

    def import_jobs(self, docs: Iterable[Mapping[str, Any]], actor: str = Actor.USER) -> ImportResult:
        """Adds exported jobs (see :mod:`desktop_queue.core.export`) to this store, as they were.

        Each job keeps its id, state, attempts, timeline and input; it gets a new place
        in this store's submission order, after the jobs here, by when it was created
        (an export lists the newest first: taking that order reversed every list and the
        order queued jobs are leased in; jobs created at the same moment keep their
        order in an export). A job whose id exists
        here already is skipped, and so is a live job whose idempotency key a job here
        holds. A job exported ``running`` comes in ``queued`` (its lease was another
        store's). A succeeded job's result, when the export carries it, is stored first
        (durably, under its key, write-once as every result is), so the job is never
        succeeded here without it; the commit carries it too, so that on a shared
        backend (PostgreSQL) every machine finds it, not only the one whose data dir
        has the file. All the jobs go in one durable commit.

        Raises:
            InvalidInput: a document that is not an exported job, or a result that cannot
                be stored (nothing is imported).
        """
        from desktop_queue.core.export import job_from_export

        docs = list(docs)
        parsed = [job_from_export(doc, number) for number, doc in enumerate(docs, 1)]
        carried: set[str] = set()  # the jobs whose result the export carried, stored now
        # results stored here now, to be carried by the import's commit too: on a shared
        # backend every machine then finds them (the file is this machine's data dir only)
        shared: dict[str, dict[str, Any]] = {}
        for number, (doc, (job, _events)) in enumerate(zip(docs, parsed, strict=True), 1):
            result = doc.get("result")
            if result is None or job["state"] != State.SUCCEEDED:
                continue
            try:
                stored = self.results.put_new(
                    job["key"],
                    result,
                    job_id=job["id"],
                    epoch=int(job.get("lease_epoch") or 0),
                    produced_at=float(job.get("finished_at") or job["created_at"]),
                )
            except InvalidArtifact as exc:
                raise InvalidInput(f"job {number} ({job['id']}): its result cannot be stored: {exc}") from None
            except OSError as exc:  # (a full disk: no job is imported; a result stored already waits for its key)
                raise StoreError(
                    f"could not store the result of job {number} ({job['id']}): {exc.strerror or exc}; "
                    "nothing was imported"
                ) from exc
            job["result_ref"] = self.results.ref_for(job["key"])
            carried.add(job["id"])
            if stored is not None:
                shared[job["id"]] = stored
        checks = self._checks_new_results
        # oldest first; of two created at once, the later in the (newest-first) export
        submitted = [parsed[i] for i in sorted(range(len(parsed)), key=lambda i: (parsed[i][0]["created_at"], -i))]

        def fn(state: View) -> Change[tuple[list[str], dict[str, str]]]:
            seq = state.seq
            records: list[NewRecord] = []
            added: list[str] = []
            skipped: dict[str, str] = {}
            keys: set[str] = set()
            for job, events in submitted:
                if state.exists(job["id"]) or job["id"] in added:
                    skipped[job["id"]] = "a job with this id exists here"
                    continue
                if job["state"] in (State.QUEUED, State.SUCCEEDED):
                    held = state.holder(job["key"])
                    if held is not None or job["key"] in keys:
                        skipped[job["id"]] = "a job here holds its idempotency key"
                        continue
                    keys.add(job["key"])
                seq += 1
                job["seq"] = seq
                records.append({"op": "new", "job": job, "ev": events})
                added.append(job["id"])
            if not records:
                return Change([], (added, skipped))
            batch: list[Record] = [records[0]] if len(records) == 1 else [{"op": "batch", "new": records}]
            for job_id in added:
                doc = shared.get(job_id)
                if doc is None or (not checks and self.store.carried_result(doc["key"]) is not None):
                    continue
                record = self._upd(job_id, {})
                record["res"] = doc
                if checks:
                    record["res_new"] = True  # (never replaces a result stored meanwhile: see below)
                batch.append(record)
            return Change(batch, (added, skipped))

        try:
            added, skipped = self.store.commit(fn)
        except ResultStored:
            # a result was stored for one of the keys meanwhile: that one is the key's
            # result, and this machine's copy of the imported one stays where it is
            for job_id, doc in list(shared.items()):
                if self.store.carried_result(doc["key"]) is not None:
                    del shared[job_id]
            added, skipped = self.store.commit(fn)
        without = [
            j["id"] for j, _e in parsed if j["id"] in added and j["state"] == State.SUCCEEDED and j["id"] not in carried
        ]
        return ImportResult(list(added), dict(skipped), len(carried), without)


@dataclass(frozen=True)
class BulkResult:
    """What a bulk verb did.

    Attributes:
        done: the jobs changed (retried, replayed, resolved), in the order given.
        skipped: job -> why it was left alone (no longer dead, key held, input refused...).
        created: original -> new job, for replays.
        cancelled: stopped between two chunks before the end (``done`` stays done).
        total: how many distinct jobs were asked for.
    """

    done: list[str]
    skipped: dict[str, str]
    created: dict[str, str]
    cancelled: bool
    total: int


@dataclass(frozen=True)
class ImportResult:
    """What :meth:`Queue.import_jobs` did: the ids added, job -> why it was skipped, how
    many results the export carried (stored), and the succeeded jobs added without one."""

    added: list[str]
    skipped: dict[str, str]
    results: int = 0
    without_result: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DeadGroup:
    """Dead letters that failed alike (one error signature).

    Attributes:
        signature: the error with its varying parts blanked (``present.error_signature``).
        count: how many dead letters have it.
        error_class: their error class.
        example: one of their errors as people read it.
    """

    signature: str
    count: int
    error_class: str | None
    example: str

    @property
    def label(self) -> str:
        """``fatal 401 demo: unauthorized ×812``."""
        return f"{self.signature or 'no error recorded'} ×{self.count:,}"


class _BulkChunk:
    """What one chunk of a bulk verb has decided so far (started again if the commit retries)."""

    __slots__ = ("done", "skipped", "created", "keys", "new", "batch")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.done: list[str] = []
        self.skipped: dict[str, str] = {}
        self.created: dict[str, str] = {}
        self.keys: dict[str, str] = {}
        self.new: list[NewRecord] = []
        self.batch = _Batch()
