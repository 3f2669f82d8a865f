"""The lease driver: leases jobs on its thread's event loop and runs them on a QThreadPool.

This is the one runner of Desktop Queue: ``desktop-queue work`` runs it under a
``QCoreApplication`` and the window runs it on the GUI thread. Runnables never touch
widgets or the driver's state: they run the provider and hand the outcome back through
the driver-owned :class:`_Relay`'s signal; the driver then commits it under the lease
token.

Leases live as long as their holder: a :class:`~desktop_queue.core.keeper.LeaseKeeper`
thread renews every lease the driver holds, whatever the provider is doing. An attempt
that hangs is ended by its timeout (the job's ``timeout_s`` input, else the driver's
``attempt_timeout_s``, else the provider's ``default_timeout_s``): the provider gives
its calls no longer (``RunContext.timeout_s``), and the driver fails the attempt as a
retryable timeout if it still has not answered a grace period later. An attempt that
fails only because the machine slept or the process was stopped under it is given
back, its attempt not spent.

A store that cannot commit (a full disk) pauses leasing: a finished attempt's outcome
is kept in memory, and its commit tried again every few seconds until the store takes
it, so a paid answer is committed once, never paid for again, and a failed commit never
spends an attempt. The first commit that goes through resumes leasing. A poisoned store
(a failed ``fsync``) refuses everything until it is reopened: leasing stays paused.

An idle driver does not poll the store: it follows the change feed (a
:class:`~desktop_queue.core.watch.ChangeWatcher` thread; on PostgreSQL ``LISTEN/NOTIFY``)
and sleeps until the first thing it knows falls due, with a slow safety tick
(:mod:`desktop_queue.runtime.wake`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QThreadPool, QTimer, Signal, Slot

from desktop_queue.core import Lease, Outcome, Queue, RunContext, StaleLease
from desktop_queue.core.errors import QueueError, StoreError
from desktop_queue.core.flow import NeedsSession
from desktop_queue.core.keeper import LeaseKeeper
from desktop_queue.core.lapse import Lapse
from desktop_queue.core.model import ErrorClass, Priority
from desktop_queue.core.pause import BackgroundSwitch
from desktop_queue.core.present import flow_event_text
from desktop_queue.core.queue import default_worker_id
from desktop_queue.core.results import InvalidArtifact
from desktop_queue.core.watch import ChangeWatcher
from desktop_queue.runtime import qtcompat
from desktop_queue.runtime.threadstate import keep_thread_state, keep_threads
from desktop_queue.runtime.wake import SAFETY_TICK_S, WakePlan, plan_wake

log = logging.getLogger(__name__)

#: an attempt's timeout when neither the job, the driver nor its provider names one
DEFAULT_ATTEMPT_TIMEOUT_S = 600.0

#: the first and the longest wait before a commit the store refused is tried again
STORE_RETRY_S = (2.0, 5.0)
#: a streaming attempt's text so far goes to the window at most this often (seconds)
PARTIAL_EVERY_S = 0.1

#: what people are told while the disk is full
DISK_FULL = "the disk is full: no new jobs start until there is room (nothing was lost)"
STORE_BACK = "the task store saves changes again: jobs start again"


def attempt_grace(timeout_s: float) -> float:
    """How long past its timeout the driver waits for a provider before it gives up on it."""
    return 5.0 + 0.1 * timeout_s


qtcompat.install()  # PySide6 6.12.0 + CPython 3.11 would abort a long run (see qtcompat)


@dataclass
class RunReport:
    """What a runnable hands back to the driver thread.

    The successes of one batch of reports are committed together (see
    :meth:`LeaseDriver._complete_batch`): ``committed`` is then the job's new state, or
    ``commit_error`` what its commit raised (handled as if the driver's own commit of
    that attempt had raised it).
    """

    lease: Lease
    outcome: Outcome
    cancelled: bool
    reused: bool = False
    #: the result document made when the provider answered (None: none could be made)
    document: dict[str, Any] | None = None
    #: the document was kept on disk as a pending result (see ``ResultStore.put_pending``)
    pending: bool = False
    committed: str | None = None
    commit_error: QueueError | None = None


@dataclass
class _Finish:
    """A finished attempt's outcome on its way to the store; kept while the store refuses it.

    Everything the commit decides from is fixed when the attempt reports, so that a
    commit tried again later decides the same.
    """

    report: RunReport
    #: what is committed (a throttle's pause applied once, see ``paced``)
    outcome: Outcome
    #: seconds of suspension found during the attempt
    suspended: float = 0.0
    #: the driver failed the attempt by its timeout (the provider may still answer)
    timed_out: bool = False
    #: flow control has set the throttle's pause already
    paced: bool = False


def _store_message(exc: StoreError, poisoned: str | None) -> str:
    """What people are told when a commit failed with ``exc``."""
    if poisoned:
        return f"{poisoned}. No new jobs start until then"
    cause = exc.__cause__
    if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
        return DISK_FULL
    return f"the task store cannot save changes ({exc}): no new jobs start until it can (nothing was lost)"


@dataclass
class _Active:
    lease: Lease
    timeout_s: float = DEFAULT_ATTEMPT_TIMEOUT_S
    cancel: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.monotonic)
    timed_out: bool = False


class _Relay(QObject):
    """Lives in the driver's thread; runnables report through it (queued to that thread).

    A runnable puts its report in the inbox and emits ``ready`` only if the inbox was
    empty: one queued signal tells of every report that arrives before the driver
    takes them, so a busy driver handles its finished attempts in batches.

    Signals:
        ready(): reports wait in the inbox (:meth:`take`).
        partial(str, str): a streaming attempt's text so far: job id, text.
        sync_failed(object): a sync of the driver's commits failed (the StoreError).
        changed(object): the change feed saw jobs change (their ids; None: any).
    """

    ready = Signal()
    partial = Signal(str, str)
    sync_failed = Signal(object)
    changed = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._lock = threading.Lock()
        self._inbox: list[RunReport] = []

    def put(self, report: RunReport) -> None:
        """Hands ``report`` to the driver (any thread)."""
        with self._lock:
            first = not self._inbox
            self._inbox.append(report)
        if first:
            self.ready.emit()

    def take(self) -> list[RunReport]:
        """Every report handed in so far, oldest first (the driver's thread)."""
        with self._lock:
            reports, self._inbox = self._inbox, []
        return reports


def _sync_in_pool(queue: Queue, relay: _Relay) -> None:
    """Puts what the driver committed without waiting for the disk there (on a pool thread)."""
    keep_thread_state()
    try:
        queue.sync()
    except StoreError as exc:  # the store is poisoned now: the driver says so, and leases nothing
        try:
            relay.sync_failed.emit(exc)
        except RuntimeError:  # the driver is gone (shutdown): closing the queue says it
            pass


class JobRunnable:
    """Runs one leased attempt on a pool thread and reports its outcome to the driver.

    The pool runs its :meth:`run` (``QThreadPool.start`` with a callable). It is no
    ``QRunnable`` subclass: PySide keeps the Python object of some auto-deleted ones
    alive, with everything they hold, for the life of the process; a callable is let
    go of once it ran.

    Its first act is :meth:`Queue.sync <desktop_queue.core.Queue.sync>`: the driver
    commits leases (and the free successes they follow) without waiting for the disk,
    and one ``fsync`` here, shared by the attempts that start together, makes them
    durable before anything is paid for. A free provider's attempt (``paid = False``)
    skips it: a crash before the sync loses its lease, and the job simply runs again;
    the driver then syncs what it committed off its thread instead.

    A paid success (a provider without ``paid = False``) is committed here, on the
    pool thread, the moment the provider answers, after its answer was kept as a
    pending result: its durable commit is the slow part of a finished attempt, and
    the pool's threads share theirs (group commit) where the driver's thread would
    make one after the other. The driver commits everything else: the successes of
    free providers in one commit per batch of reports (see
    :meth:`LeaseDriver._complete_batch`), failures, retries, give-backs, attempts told
    to stop.

    Args:
        queue: the engine (thread-safe).
        provider: runs the job's kind.
        lease: the lease this attempt holds.
        relay: the driver-owned QObject to report through.
        cancel: set to ask the provider to stop.
        stopping: set with ``cancel`` when the job was not cancelled (shutdown, lost lease).
        timeout_s: the attempt's timeout, handed to the provider.
        keeper: renews the lease; told to stop before a paid success is committed, as
            the driver does before its commits (None: the driver's commit tells it).
    """

    def __init__(
        self,
        queue: Queue,
        provider: Any,
        lease: Lease,
        relay: _Relay,
        cancel: threading.Event,
        stopping: threading.Event | None = None,
        timeout_s: float | None = None,
        keeper: LeaseKeeper | None = None,
    ) -> None:
        self._queue = queue
        self._provider = provider
        self._lease = lease
        self._relay = relay
        self._cancel = cancel
        self._stopping = stopping or threading.Event()
        self._timeout_s = timeout_s
        self._keeper = keeper
        self._partial_at: float | None = None
        #: whether the provider's answer is paid for (a provider without ``paid = False``):
        #: only then does the attempt sync before it runs, keep its answer before the
        #: commit, and commit it itself
        self.paid: bool = getattr(provider, "paid", True)

    def _partial(self, text: str) -> None:
        """Relays a streaming provider's text so far, at most every :data:`PARTIAL_EVERY_S`."""
        now = time.monotonic()
        if self._partial_at is not None and now - self._partial_at < PARTIAL_EVERY_S:
            return
        self._partial_at = now
        try:
            self._relay.partial.emit(self._lease.job_id, text)
        except RuntimeError:  # the driver is gone (shutdown): nobody watches
            pass

    def _beat(self) -> bool:
        # the lease keeper renews the lease; a provider's beat only asks whether to go on
        return not self._cancel.is_set()

    def _record_provider_job(self, provider_job_id: str) -> None:
        self._queue.record_provider_job(self._lease, provider_job_id)

    def run(self) -> None:
        keep_thread_state()
        report = self._attempt()
        if report.outcome.ok and not report.cancelled and (report.reused or self.paid):
            # a paid (or already stored) answer: committed, durably, at once. An attempt
            # told to stop (cancelled, timed out, lease lost, shutdown) is the driver's to
            # settle: it knows why
            self._complete(report)
        self._relay.put(report)

    def _complete(self, report: RunReport) -> None:
        """Commits a success under the lease; the driver is told what came of it."""
        if self._keeper is not None:
            self._keeper.remove(report.lease)  # no renewal may race the commit (and be refused)
        try:
            report.committed = self._queue.complete(
                report.lease, report.outcome.result, reused=report.reused, document=report.document
            ).state
        except QueueError as exc:  # a stale lease, a store that refuses: the driver decides
            report.commit_error = exc

    def _attempt(self) -> RunReport:
        lease = self._lease
        job = lease.job
        reused = False
        document = None
        pending = False
        try:
            # the lease, and the successes committed with it, were written without waiting
            # for the disk: put them there first, before anything is paid for (invariant
            # 4); one fsync covers everything written so far, whoever asks
            try:
                if self.paid:  # (a free answer lost with its lease is only made again)
                    self._queue.sync()
            except StoreError as exc:
                # nothing was sent, so nothing is spent: the driver gives the attempt back
                return RunReport(
                    lease,
                    Outcome.failure(ErrorClass.RETRYABLE, f"the lease could not be saved ({exc})", unreachable=True),
                    self._cancel.is_set(),
                )
            stored = self._queue.stored_result(lease)
            if stored is not None:
                # paid for already: never produce a result twice
                outcome, reused = Outcome.success(stored.get("result")), True
            else:
                context = RunContext(
                    job_id=job.id,
                    attempt=lease.attempt,
                    idempotency_key=job.idempotency_key,
                    cancelled=self._cancel,
                    heartbeat=self._beat,
                    record_provider_job=self._record_provider_job,
                    provider_job_id=job.provider_job_id,
                    stopping=self._stopping,
                    timeout_s=self._timeout_s,
                    partial=self._partial,
                )
                try:
                    outcome = self._provider.run(job, context)
                except Exception as exc:  # providers classify what they did not expect
                    outcome = self._provider.classify(exc)
                if outcome.ok and not self.paid:
                    # an answer that costs nothing is not kept on disk before its commit: a
                    # crash in between makes it again, which is all it costs
                    document = self._queue.results.attempt_document(
                        job.idempotency_key, outcome.result, job_id=job.id, epoch=lease.epoch, produced_at=time.time()
                    )
                elif outcome.ok:
                    # before the commit, so a crash in between does not lose a paid-for result;
                    # kept under this lease's epoch, so only this holder's commit (or the
                    # reconciliation of this holder's death) can make it the job's result
                    try:
                        document = self._queue.results.put_pending(
                            job.idempotency_key,
                            outcome.result,
                            job_id=job.id,
                            epoch=lease.epoch,
                            produced_at=time.time(),
                        )
                        pending = True
                    except (StoreError, OSError) as exc:
                        # the answer is paid for all the same: the driver keeps it in memory
                        # until its commit (which carries it) goes through
                        log.warning("could not keep the result of %s before its commit: %s", job.id, exc)
        except InvalidArtifact as exc:  # the provider's output is unusable: poison after a few
            outcome = Outcome.failure(ErrorClass.POISON, f"{job.kind}: {exc}")
        except Exception as exc:
            # the type only: an exception's text may quote the prompt (invariant 7)
            log.error("attempt of %s crashed: %s", job.id, type(exc).__name__)
            outcome = Outcome.failure(ErrorClass.RETRYABLE, f"worker error: {type(exc).__name__}")
        ok = outcome.ok
        return RunReport(
            lease, outcome, self._cancel.is_set(), reused, document if ok else None, pending=pending and ok
        )


class LeaseDriver(QObject):
    """Leases runnable jobs while capacity allows and commits their outcomes.

    Args:
        queue: the engine.
        providers: kind -> provider; only these kinds are leased.
        concurrency: how many attempts may run at once.
        tick_ms: without ``follow``, how often to reap, catch up with other processes
            and lease. With it, how soon to look again while flow control holds a due
            job (it does not say when its wait ends).
        follow: sleep between looks (see :mod:`desktop_queue.runtime.wake`): wake when
            the change feed says jobs changed (a submission, a retry, a cancel, by any
            process or machine) and when the first thing known falls due (a queued
            job's ``run_after``, a lease's expiry, an attempt's timeout, the upkeep, the
            scheduler's next window, a store retry), and at least every
            ``safety_tick_s``. False: tick every ``tick_ms`` (polling). With a clock a
            test moves by hand (one with ``advance``), the driver also looks every
            ``tick_ms``: such time jumps without anything to wake for.
        safety_tick_s: with ``follow``, the longest the driver sleeps without looking.
        worker_id: shown in timelines (default ``host:pid``).
        pool: the thread pool (default: the global one, grown to ``concurrency`` threads).
        flow: rate limits, concurrency caps and circuit breakers per provider profile
            (:class:`~desktop_queue.core.flow.FlowControl`); None: no flow control.
        lease_s: lease length of every kind (None: each kind's own, see ``Queue.lease_length``).
        attempt_timeout_s: the attempt timeout of jobs whose input names none (None:
            each provider's ``default_timeout_s``).
        keeper_tick_s: the longest the lease keeper sleeps between two looks.
        store_retry_s: the first and the longest wait before a commit the store refused
            is tried again (the wait grows between them).
        background: the data dir's "pause background work" switch, read on every
            lease (default: the queue's data dir's); while it is on, only interactive
            jobs are leased.
        upkeep: an object whose ``tick()`` the driver calls at most every
            ``upkeep.every_s`` seconds (default 30) from its own tick: the repair scan,
            the notification outbox and the alerts (:class:`~desktop_queue.core.repair.Upkeep`).

    Signals:
        job_started(str): a job was leased and handed to the pool.
        job_finished(str, str): an attempt's outcome was committed: job id, new state.
            The successes of one batch of reports share one commit, written before
            this is emitted and synced right after (by the next attempt to start, each
            of which syncs first, or off this thread when none starts).
        stale_result(str): a late result was rejected by its stale token.
        idle(): nothing is running and nothing is runnable right now.
        paused_changed(bool): leasing was paused or resumed.
        error(str): the store could not be used (message for people).
        store_unavailable(str): a commit failed (disk full, or a poisoned store): no
            new jobs start, and finished attempts wait in memory for their commit. The
            message says why (``error`` says it too, once).
        store_available(): a commit went through again: leasing resumes.
        flow_event(str, str, str): a provider profile's flow control changed state
            (breaker opened/half-open/closed, rate lowered/recovered, paused): profile,
            kind (a :class:`~desktop_queue.core.flow.FlowEventType` value), text for
            people. Emitted from this object's thread when it drains the flow
            control's events: on every tick and after every finished attempt.
        partial_text(str, str): a streaming attempt's text so far (job id, text), a
            few times a second while it streams; shown, never stored.

    Attributes:
        ticks: how many full looks (:meth:`tick`) the driver made.
        plan: when and why it looks next (``follow``), a :class:`~desktop_queue.runtime.wake.WakePlan`.
        watcher: the change feed's watcher while the driver runs (``follow``).
        scheduler: None, or an object whose ``maybe_tick()`` evaluates the data dir's
            schedules (:class:`~desktop_queue.core.schedules.Scheduler`, which limits
            itself to one look every few seconds); asked on every tick before leasing,
            so a due window's job starts in the same tick.
    """

    job_started = Signal(str)
    job_finished = Signal(str, str)
    stale_result = Signal(str)
    idle = Signal()
    paused_changed = Signal(bool)
    error = Signal(str)
    flow_event = Signal(str, str, str)
    store_unavailable = Signal(str)
    store_available = Signal()
    partial_text = Signal(str, str)

    def __init__(
        self,
        queue: Queue,
        providers: Mapping[str, Any],
        *,
        concurrency: int = 4,
        tick_ms: int = 250,
        worker_id: str | None = None,
        pool: QThreadPool | None = None,
        flow: Any = None,
        lease_s: float | None = None,
        attempt_timeout_s: float | None = None,
        keeper_tick_s: float = 1.0,
        store_retry_s: tuple[float, float] = STORE_RETRY_S,
        background: BackgroundSwitch | None = None,
        parent: QObject | None = None,
        upkeep: Any = None,
        follow: bool = True,
        safety_tick_s: float = SAFETY_TICK_S,
    ) -> None:
        super().__init__(parent)
        self.follow = follow
        self.safety_tick_s = max(0.05, float(safety_tick_s))
        self._tick_s = max(0.001, tick_ms / 1000)
        self.ticks = 0
        self.plan: WakePlan | None = None
        self.watcher: ChangeWatcher | None = None
        self._flow_held = False  # flow control turned a due job away in the last look
        self._last_tick = -1e18  # (monotonic) when the last full look began
        self._feed_due = False  # a look the feed asked for is posted
        self._sched_next: float | None = None  # wall time of the scheduler's next window
        self._sched_at: float | None = None  # (queue clock, monotonic) when the scheduler last ran
        self._sched_mtime: int | None = None  # of the schedules file when it was read
        self._sched_failed = False  # the scheduler's last look raised
        self.upkeep = upkeep
        self._upkeep_at: float | None = None  # the first runs one interval after the first tick
        self.flow = flow
        self.background = background if background is not None else BackgroundSwitch(queue.data_dir)
        self.lease_s = lease_s
        self.attempt_timeout_s = attempt_timeout_s
        self.keeper = LeaseKeeper(queue, on_lost=self._lost, tick_s=keeper_tick_s)
        self.queue = queue
        self.providers = dict(providers)
        self.worker_id = worker_id or default_worker_id()
        self.pool = pool or QThreadPool.globalInstance()
        self._concurrency = max(1, concurrency)
        self.pool.setMaxThreadCount(max(self.pool.maxThreadCount(), self._concurrency))
        keep_threads(self.pool)  # (its threads keep their Python state: see threadstate)
        self._active: dict[str, _Active] = {}
        self._paused = False
        self._stopping = False
        self._stop_after_current = False
        self._was_idle = False
        # outcomes the store refused, by job id, oldest first; their leases stay kept
        self._held: dict[str, _Finish] = {}
        self._outcome_waits = Lapse(
            log, "the outcome of {key} waits for the store to take it", "the store took the outcome of {key}"
        )
        # committed outcomes flow control could not settle yet (its shared state did not
        # answer), oldest first: told again, so their slots and spend are not lost
        self._unsettled: list[tuple[str, Any, Outcome | None, Any]] = []
        self._store_down: str | None = None
        self._store_retry_s = (max(0.0, store_retry_s[0]), max(store_retry_s))
        self._retry_wait = self._store_retry_s[0]
        self._retry_at = 0.0
        # the kinds the last tick found available; a freed slot leases from them at once
        self._kinds: set[str] | None = None
        self._in_tick = False
        self._relay = _Relay(self)
        self._relay.ready.connect(self._on_ready)
        self._relay.partial.connect(self._keep_partial)
        self._relay.sync_failed.connect(self._sync_failed)
        self._relay.changed.connect(self._on_changed)
        self._launched = False  # whether a paid attempt (which syncs first) started since the last batch of reports
        #: the attempts of a batch whose successes were committed, until they are settled
        self._early: dict[str, _Active] = {}
        #: the latest streamed text of each running attempt that streams (until it ends)
        self._partials: dict[str, str] = {}
        self.scheduler: Any = None
        self._scheduler_error: str | None = None  # said once until it changes
        self._timer = QTimer(self)
        self._timer.setObjectName("leaseDriverTick")
        self._timer.setInterval(tick_ms)
        # following, the timer is the planned wake: one shot, armed again after each look
        self._timer.setSingleShot(follow)
        self._timer.timeout.connect(self.tick)
        # a clock a test moves by hand jumps without any wake-up: then the tick's pace
        self._jumpy = callable(getattr(queue.clock, "advance", None))

    # ------------------------------------------------------------------ control

    @property
    def concurrency(self) -> int:
        return self._concurrency

    def set_concurrency(self, value: int) -> None:
        """Changes how many attempts may run at once (running ones are not interrupted)."""
        self._concurrency = max(1, int(value))
        self.pool.setMaxThreadCount(max(self.pool.maxThreadCount(), self._concurrency))
        self.wake()

    @property
    def running(self) -> int:
        return len(self._active)

    def active_ids(self) -> list[str]:
        return list(self._active)

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def store_problem(self) -> str | None:
        """Why the store takes no changes now (no new jobs start), or None."""
        return self._store_down

    def held_ids(self) -> list[str]:
        """The jobs whose finished attempt waits for the store to take its outcome."""
        return list(self._held)

    def start(self) -> None:
        """Starts ticking (the first tick runs at once) and keeping leases."""
        self._stopping = False
        self.keeper.start()
        if self.follow and self.watcher is None:
            # once it knows its first version it asks for a look: a job submitted between
            # the first look and that version is not left for the safety tick
            self.watcher = ChangeWatcher(
                self.queue,
                self._from_feed,
                fallback_s=self.safety_tick_s,
                on_ready=lambda: self._from_feed(None),
            )
            self.watcher.start(timeout_s=0)  # (its first read is on its thread)
        self._timer.start()
        self.wake()

    def _from_feed(self, ids: set[str] | None) -> None:
        """The watcher's callback, on its thread: hands the change to the driver's thread."""
        try:
            self._relay.changed.emit(ids)
        except RuntimeError:  # the driver is gone (shutdown)
            pass

    @Slot(object)
    def _on_changed(self, ids: set[str] | None) -> None:
        """Jobs changed (anyone's commit): look at once, or a tick's pace after the last look.

        While attempts run, their own commits keep the feed busy: the looks it asks for
        come at most every ``tick_ms``, as the timer's did before (an idle driver's
        first look is at once).
        """
        if self._stopping or self._feed_due:
            return
        self._feed_due = True
        gap = self._tick_s - (time.monotonic() - self._last_tick)
        QTimer.singleShot(max(0, int(gap * 1000)), self, self._feed_tick)

    def _feed_tick(self) -> None:
        self._feed_due = False
        self.tick()

    def _lost(self, lease: Lease) -> None:
        """The keeper's word (on its thread) that a lease is gone: the attempt stops.

        Only events are set here; the driver thread commits nothing for it (the token
        is stale) and frees the slot when the runnable reports.
        """
        active = self._active.get(lease.job_id)
        if active is not None and active.lease.token == lease.token:
            active.stopping.set()
            active.cancel.set()

    def wake(self) -> None:
        """Ticks as soon as the event loop is free (after a submit or a finish)."""
        QTimer.singleShot(0, self, self.tick)

    def pause(self) -> None:
        """Leases nothing new; running attempts finish."""
        if not self._paused:
            self._paused = True
            self.paused_changed.emit(True)

    def resume(self) -> None:
        if self._paused or self._stop_after_current:
            self._paused = False
            self._stop_after_current = False
            self.paused_changed.emit(False)
            self.wake()

    def stop_after_current(self) -> None:
        """Lets running attempts finish, then pauses."""
        self._stop_after_current = True
        self.pause()

    def cancel(self, job_id: str, actor: str = "user") -> None:
        """Cancels a job (queued or running); a running attempt here is told to stop."""
        job = self.queue.cancel(job_id, actor)
        active = self._active.get(job.id)
        if active is not None:
            active.cancel.set()

    def shutdown(self, timeout_ms: int = 5000, cancel_running: bool = True) -> bool:
        """Stops leasing, asks running attempts to stop, waits for the pool.

        Jobs still ``running`` afterwards keep their lease until it expires (or the next
        start reconciles them); nothing is marked done that was not.

        Returns:
            True if every attempt ended within ``timeout_ms``.
        """
        self._stopping = True
        self._timer.stop()
        watcher, self.watcher = self.watcher, None
        if watcher is not None and not watcher.stop(timeout_s=2.0):
            log.debug("the change watcher is still in a read; it ends with the process")
        if cancel_running:
            for active in self._active.values():
                active.stopping.set()
                active.cancel.set()
        done = self.pool.waitForDone(timeout_ms)
        # commit what the runnables reported while we waited (queued signals)
        from PySide6.QtCore import QCoreApplication

        QCoreApplication.sendPostedEvents(self._relay)
        QCoreApplication.processEvents()
        self._on_ready()
        self._settle_held()
        for finish in self._held.values():
            # the store still refuses: the job stays running under its lease, and the next
            # start (or a reaper) settles it from the pending result
            self.keeper.remove(finish.report.lease)
            kept = self._keep_held_answer(finish)
            log.warning(
                "the outcome of %s could not be saved before shutting down%s",
                finish.report.lease.job_id,
                "; its answer is kept for the next start" if kept else "",
            )
        self._held.clear()
        for job_id, active in list(self._active.items()):
            # an attempt we abandoned: give its lease back so nobody waits for it to expire
            self.keeper.remove(active.lease)
            if not active.timed_out:
                try:
                    self.queue.release(active.lease, "interrupted: the worker was shut down and did not stop in time")
                except QueueError:
                    pass
                if self.flow is not None:
                    self.flow.on_outcome(active.lease.job, None)
            self._active.pop(job_id, None)
        self._partials.clear()
        self.keeper.stop()
        return done

    # ------------------------------------------------------------------ the loop

    @Slot()
    def tick(self) -> None:
        """Reaps, notices jobs cancelled elsewhere, and leases while there is capacity."""
        if self._stopping:
            return
        self.ticks += 1
        self._last_tick = time.monotonic()
        self._in_tick = True
        self._flow_held = False
        try:
            self._check_active()
            if self._store_down is not None and not self._store_retry():
                self._emit_idle_if_idle()
                return
            self._settle_flow()
            self._tick_scheduler()
            if self._paused:
                if self._stop_after_current and not self._active:
                    self._stop_after_current = False
                self._run_upkeep()  # alerts and notices go on while leasing is paused
                self._emit_idle_if_idle()
                return
            self._kinds = self._available_kinds()  # once a tick: each provider is asked (a key lookup)
            self._lease_while_capacity(self._kinds)
            if not self._active:
                self.queue.reap()
            self._run_upkeep()
            self._emit_idle_if_idle()
        except StoreError as exc:
            # nothing was written: a lease that failed spent no attempt
            self._store_failed(exc)
        except QueueError as exc:
            log.error("lease driver: %s", exc)
            self.error.emit(str(exc))
        finally:
            self._in_tick = False
            self.drain_flow_events()
            self._plan_wake()

    def _tick_scheduler(self) -> None:
        """Lets the scheduler submit due windows' jobs (queued even while paused: they wait)."""
        if self.scheduler is None:
            return
        try:
            report = self.scheduler.maybe_tick()
            self._sched_failed = False
            if report is not None:
                self._sched_at = self.queue.clock.monotonic()
                self._sched_mtime = None  # (what it wrote is read for the next window)
        except Exception as exc:  # a full disk, a newer schedules file or a bug must not stop the leasing
            self._sched_failed = True
            message = f"schedules: {exc}"
            if message != self._scheduler_error:
                self._scheduler_error = message
                log.warning("%s", message)
                self.error.emit(message)
            return
        if report is not None:
            said = "\n".join(report.errors) or None
            if said is not None and said != self._scheduler_error:  # a broken schedule repeats each look
                for message in report.errors:
                    log.warning("%s", message)
                    self.error.emit(message)
            self._scheduler_error = said

    def _run_upkeep(self) -> None:
        """The low-rate work (repair scan, outbox, alerts), at most every ``upkeep.every_s``."""
        if self.upkeep is None:
            return
        now = self.queue.clock.monotonic()
        if self._upkeep_at is None:
            self._upkeep_at = now  # not at start-up: opening the window does not wait for a scan
            return
        if now - self._upkeep_at < float(getattr(self.upkeep, "every_s", 30.0)):
            return
        self._upkeep_at = now
        try:
            self.upkeep.tick()
        except Exception as exc:  # upkeep must never stop the leasing
            log.error("lease driver: upkeep failed: %s", type(exc).__name__)

    def _fill(self) -> None:
        """Leases at once into the slots finished attempts freed: the part of a tick they need.

        What else a tick does (timeouts, jobs cancelled elsewhere, reaping, asking each
        provider whether it can run) waits for the timer: per finished attempt it would
        cost more than the attempt itself. The kinds are those the last tick found
        available. Paused, or with a store that refuses, the full tick decides.
        """
        if self._stopping or self._in_tick:
            return  # a tick leases after whatever it settled
        if self._kinds is None or self._paused or self._store_down is not None:
            self.tick()
            return
        self._flow_held = False
        try:
            self._lease_while_capacity(self._kinds)
            self._emit_idle_if_idle()
        except StoreError as exc:
            self._store_failed(exc)
        except QueueError as exc:
            log.error("lease driver: %s", exc)
            self.error.emit(str(exc))
        finally:
            self.drain_flow_events()
            if len(self._active) < self._concurrency:
                # a slot stays free: what falls due next (a retry's backoff, say) is planned
                # now; with every slot busy, a finish comes first (and plans then)
                self._plan_wake()

    def _lease_while_capacity(self, kinds: set[str]) -> None:
        """Leases runnable jobs of ``kinds`` and starts them until every slot is taken.

        Raises:
            StoreError: a lease commit failed (nothing was written for it).
            QueueError: the store could not be used otherwise.
        """
        if len(self._active) >= self._concurrency:
            return
        lanes = self._lanes()
        # every free slot is leased in one commit, so one sync (by the first attempt to
        # start) makes them all durable
        if self.flow is None:
            while len(self._active) < self._concurrency:
                leases = self.queue.lease_many(
                    self.worker_id,
                    self._concurrency - len(self._active),
                    kinds=kinds,
                    lease_s=self.lease_s,
                    kept=True,
                    lanes=lanes,
                )
                if not leases:
                    return
                self._store_ok()
                for lease in leases:
                    self._launch(lease)
            return
        # the shared flow state (a file lock, a stat) only once a job flow control governs
        # comes up: until then the scan goes without, and at that job the lease writes
        # nothing and the scan starts again inside a session, which is taken before the
        # store's commit lock (the lease commit asks accept inside it), never inside it
        while len(self._active) < self._concurrency:
            try:
                leases = self.queue.lease_many(
                    self.worker_id,
                    self._concurrency - len(self._active),
                    kinds=kinds,
                    accept=self._noting(self.flow.accept_unshared),
                    lease_s=self.lease_s,
                    kept=True,
                    lanes=lanes,
                )
            except NeedsSession:
                break
            if not leases:
                return
            self._start_all(leases)
        else:
            return
        # one look at the shared flow state for the rest of the scan (every lease of it);
        # accept admits each job it lets through, so one commit may take several
        with self.flow.session():
            while len(self._active) < self._concurrency:
                leases = self.queue.lease_many(
                    self.worker_id,
                    self._concurrency - len(self._active),
                    kinds=kinds,
                    accept=self._noting(self.flow.accept),
                    lease_s=self.lease_s,
                    kept=True,
                    lanes=lanes,
                )
                if not leases:
                    return
                self._start_all(leases)

    def _noting(self, accept: Any) -> Any:
        """``accept`` that notes a job it turned away: flow control holds a due job (see :meth:`_plan_wake`)."""

        def ask(job: Any) -> bool:
            ok = bool(accept(job))
            if not ok:
                self._flow_held = True
            return ok

        return ask

    # ------------------------------------------------------------------ when to look next

    def _plan_wake(self) -> None:
        """Arms the timer for the first thing known to fall due (``follow``; see :mod:`.wake`)."""
        if not self.follow or self._stopping:
            return
        if self._jumpy:
            if self._timer.isActive():
                return  # (the tick's pace: a fill does not put the next look off)
            self.plan = WakePlan(self._tick_s, "tick")
        else:
            leasing = not self._paused and self._store_down is None and len(self._active) < self._concurrency
            queue_wake = expiry = None
            if leasing:
                try:
                    queue_wake, expiry = self.queue.wake_times()
                except QueueError as exc:  # (the store is away: the store retry, or the safety tick, looks again)
                    log.debug("lease driver: could not plan: %s", exc)
                if self._active:
                    expiry = None  # (a busy driver reaps nothing: see tick)
            self.plan = plan_wake(
                now=self.queue.clock.now(),
                safety_s=self.safety_tick_s,
                queue_wake=queue_wake,
                expiry=expiry,
                leasing=leasing,
                flow_held=self._flow_held,
                flow_s=self._tick_s,
                deadlines={
                    "timeout": self._next_timeout(),
                    "upkeep": self._upkeep_delay(),
                    "scheduler": self._scheduler_delay(),
                    "store_retry": self._retry_at - time.monotonic() if self._store_down is not None else None,
                },
            )
        self._timer.start(max(0, math.ceil(self.plan.delay_s * 1000)))

    def _next_timeout(self) -> float | None:
        """Seconds until the first running attempt outlives its timeout and grace (None: none runs)."""
        now = time.monotonic()
        ends = [
            active.started + active.timeout_s + attempt_grace(active.timeout_s) - now
            for active in self._active.values()
            if not active.timed_out
        ]
        # (suspended time is not counted: a look that comes early finds it and plans again)
        return min(ends) + 0.01 if ends else None

    def _upkeep_delay(self) -> float | None:
        if self.upkeep is None or self._upkeep_at is None:
            return None
        every = float(getattr(self.upkeep, "every_s", 30.0))
        return self._upkeep_at + every - self.queue.clock.monotonic()

    def _scheduler_delay(self) -> float | None:
        """Seconds until the scheduler's next window (None: no schedule known; the safety tick looks).

        The schedules are a file, read again when it changed (one ``stat`` per plan): a
        schedule another process adds is found by the next look (at the latest the
        safety tick), and its window still runs on time within ``schedules.GRACE_S``.
        """
        scheduler = self.scheduler
        if scheduler is None:
            return None
        if self._sched_failed:
            # its last look raised (a full disk, say, which may clear): asked again at its
            # interval, so that a window due meanwhile is not left to the safety tick
            return float(getattr(scheduler, "min_interval_s", self._tick_s))
        book = getattr(scheduler, "book", None)
        path = getattr(book, "path", None)
        if book is None or path is None:
            return None
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            return None  # (no schedule was ever added here)
        if mtime != self._sched_mtime:
            self._sched_mtime = mtime
            try:
                now = self.queue.clock.now()
                runs = [r for e in book.load() if (r := e.next_run(now)) is not None]
            except Exception as exc:  # (the tick says what is wrong with the file, once)
                log.debug("lease driver: schedules not read: %s", exc)
                runs = []
            self._sched_next = min(runs) if runs else None
        if self._sched_next is None:
            return None
        delay = self._sched_next - self.queue.clock.now() + 0.01
        if self._sched_at is not None:  # (maybe_tick looks no sooner than its interval)
            gap = self._sched_at + float(getattr(scheduler, "min_interval_s", 0.0)) - self.queue.clock.monotonic()
            delay = max(delay, gap)
        return delay

    def _start_all(self, leases: list[Lease]) -> None:
        """Tells flow control and starts the attempts of ``leases`` (flow control on)."""
        self._store_ok()
        for lease in leases:
            self.flow.on_start(lease.job)
            self._launch(lease)

    def _lanes(self) -> tuple[str, ...] | None:
        """The lanes to lease from: interactive only while background work is paused on the data dir."""
        return (Priority.INTERACTIVE,) if self.background.paused else None

    # ------------------------------------------------------------------ a store that refuses

    def _keep_held_answer(self, finish: _Finish) -> bool:
        """Writes a held success's answer as its pending result, if it is not one already.

        When the provider answered, the disk may have refused the pending result too (it
        was full); it may take it now (room was made, or a disk error passed, and only
        the journal stays refused until reopened). Without it the next start could not
        tell that the job was answered, and would run it, and pay for it, again.
        """
        report = finish.report
        if not finish.outcome.ok or report.pending or report.reused:
            return report.pending
        lease = report.lease
        results = self.queue.results
        try:
            # (a paid answer whose pending result the disk refused has no document yet)
            document = report.document or results.attempt_document(
                lease.job.idempotency_key,
                finish.outcome.result,
                job_id=lease.job_id,
                epoch=lease.epoch,
                produced_at=time.time(),
            )
            results.keep_pending(document, durable=True)
        except (StoreError, OSError, InvalidArtifact) as exc:
            log.error("the answer of %s is lost with this process: %s", lease.job_id, exc)
            return False
        return True

    def _store_failed(self, exc: StoreError) -> None:
        """A commit failed: no new jobs start; people are told once, and again if the reason changes."""
        message = _store_message(exc, self.queue.store.poisoned)
        if message != self._store_down:
            if self._store_down is None:
                self._retry_wait = self._store_retry_s[0]
            self._store_down = message
            log.error("lease driver: %s (%s)", message, exc)
            self.error.emit(message)
            self.store_unavailable.emit(message)
        self._retry_at = time.monotonic() + self._retry_wait
        self._retry_wait = min(self._store_retry_s[1], self._retry_wait * 1.5)

    def _store_ok(self) -> None:
        """A commit went through: once nothing waits for the store any more, leasing resumes."""
        if self._store_down is None:
            return
        if self._held:
            self._retry_at = 0.0  # the store takes changes again: try the waiting ones next tick
            return
        self._store_down = None
        log.info("lease driver: %s", STORE_BACK)
        self.store_available.emit()

    def _store_retry(self) -> bool:
        """Tries the refused commits again when due; True when leasing may go on (or probe)."""
        if time.monotonic() < self._retry_at:
            return False
        if not self._settle_held():
            return False
        # nothing is left waiting: the next lease commit is the probe (it spends nothing if refused)
        self._retry_at = time.monotonic() + self._retry_wait
        return True

    def _settle_held(self) -> bool:
        """Commits the held outcomes, oldest first; False as soon as the store refuses one."""
        for job_id in list(self._held):
            finish = self._held.pop(job_id)
            if not self._settle(finish):
                return False
        return True

    def drain_flow_events(self) -> int:
        """Logs the flow control's recorded state changes and emits ``flow_event`` for each.

        Returns:
            How many events were drained.
        """
        if self.flow is None:
            return 0
        events = self.flow.drain_events()
        for event in events:
            text = flow_event_text(event)
            log.info("flow control: %s", text)
            self.flow_event.emit(event.profile, str(event.type), text)
        return len(events)

    def _available_kinds(self) -> set[str]:
        """The kinds whose providers can run now; the others' jobs wait with the provider's reason.

        A provider may say it cannot run (``unavailable_reason()``: no API key yet, say);
        its jobs are then not leased, so they spend no attempt, and flow control tells the
        window why they wait.
        """
        kinds = set()
        asks = {k: a for k, p in self.providers.items() if callable(a := getattr(p, "unavailable_reason", None))}
        # a check can be slow (the first keyring look-up loads every keyring backend, and
        # one of them runs a compiler to find a library): only kinds that have a queued
        # job are asked; the others are not leased from until a tick finds one of theirs
        waiting = self.queue.waiting_kinds(asks) if asks else set()
        for kind in self.providers:
            ask = asks.get(kind)
            reason = None
            if ask is not None:
                if kind not in waiting:
                    continue
                try:
                    reason = ask()
                except Exception as exc:  # a provider's check must not stop the driver
                    log.warning("provider %s: unavailable_reason failed: %s", kind, type(exc).__name__)
            if self.flow is not None and hasattr(self.flow, "hold_kind"):
                self.flow.hold_kind(kind, reason)
            if reason is None:
                kinds.add(kind)
        return kinds

    def timeout_for(self, job: Any) -> float:
        """The attempt timeout of ``job``: its input's ``timeout_s``, the driver's, its provider's."""
        payload = getattr(job, "input", None)
        value = payload.get("timeout_s") if isinstance(payload, Mapping) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
        if self.attempt_timeout_s is not None:
            return float(self.attempt_timeout_s)
        default = getattr(self.providers.get(job.kind), "default_timeout_s", None)
        if isinstance(default, (int, float)) and default > 0:
            return float(default)
        return DEFAULT_ATTEMPT_TIMEOUT_S

    def _check_timeouts(self) -> None:
        """Fails attempts that outlived their timeout and grace (suspended time not counted)."""
        now = time.monotonic()
        for active in list(self._active.values()):
            if active.timed_out:
                continue
            ran = now - active.started - self.keeper.suspended_since(active.started)
            if ran <= active.timeout_s + attempt_grace(active.timeout_s):
                continue
            active.timed_out = True
            active.stopping.set()
            active.cancel.set()
            lease = active.lease
            outcome = Outcome.failure(
                ErrorClass.RETRYABLE, f"{lease.job.kind}: no answer within {active.timeout_s:g} s (attempt timeout)"
            )
            log.warning("attempt of %s timed out after %g s", lease.job_id, active.timeout_s)
            self._settle(_Finish(RunReport(lease, outcome, False), outcome, timed_out=True))

    def _check_active(self) -> None:
        self._check_timeouts()
        for job_id, active in list(self._active.items()):
            if active.cancel.is_set():
                continue
            try:
                state, token = self.queue.lease_holder(job_id)
            except (QueueError, KeyError):
                state, token = None, None
            if token != active.lease.token:
                # cancelled elsewhere: stop and cancel provider-side work too;
                # reaped or taken over: stop, but leave provider-side work to resume
                if state != "cancelled":
                    active.stopping.set()
                active.cancel.set()

    def _emit_idle_if_idle(self) -> None:
        idle = not self._active and not self._held and (self._paused or self._nothing_runnable())
        if idle and not self._was_idle:
            self.idle.emit()
        self._was_idle = idle

    def _nothing_runnable(self) -> bool:
        wake = self.queue.next_wake()
        return wake is None or wake > self.queue.clock.now()

    def _launch(self, lease: Lease) -> None:
        provider = self.providers[lease.job.kind]
        active = _Active(lease, self.timeout_for(lease.job))
        self._active[lease.job_id] = active
        self.keeper.add(lease, self.lease_s or self.queue.lease_length(lease.job.kind))
        runnable = JobRunnable(
            self.queue, provider, lease, self._relay, active.cancel, active.stopping, active.timeout_s, self.keeper
        )
        if runnable.paid:
            self._launched = True  # (its first act, a sync, makes what the driver committed durable)
        self._was_idle = False
        self.pool.start(runnable.run)
        self.job_started.emit(lease.job_id)

    @Slot()
    def _on_ready(self) -> None:
        """Handles every report in the inbox, then leases into the freed slots at once."""
        reports = self._relay.take()
        if not reports:
            return
        self._launched = False
        unsynced = self._complete_batch(reports)
        flow = self.flow
        governed = flow is not None and any(flow.governs(r.lease.job) for r in reports)
        # one look at the shared flow state for the whole batch, if any of it needs one
        with flow.session() if governed else contextlib.nullcontext():
            self._in_tick, in_tick = True, self._in_tick  # one fill for the whole batch
            try:
                for report in reports:
                    self._on_finished(report)
            finally:
                self._in_tick = in_tick
            self._fill()
        if unsynced and not self._launched:
            if self._stopping:  # (shutting down: waiting is what shutdown does)
                try:
                    self.queue.sync()
                except StoreError as exc:
                    self._store_failed(exc)
            else:
                # no attempt starts to sync them (a paid one does before it runs): sync off this thread
                self.pool.start(functools.partial(_sync_in_pool, self.queue, self._relay))

    def _complete_batch(self, reports: list[RunReport]) -> bool:
        """Commits the plain successes among ``reports`` in one commit, not waiting for the disk.

        A plain success is a free provider's (a paid one's runnable committed it) whose
        attempt is still this driver's, not timed out and not told to stop; its report
        then carries its new state (or what its commit raised), which :meth:`_commit`
        hands on. The commit is durable once the next paid
        attempt to start has synced (or the sync the caller starts when none does).

        Returns:
            Whether anything was committed that waits for a sync.
        """
        plain = []
        for report in reports:
            if not report.outcome.ok or report.cancelled or report.committed is not None or report.commit_error:
                continue  # (a paid success its runnable committed, or tried to)
            active = self._active.get(report.lease.job_id)
            if active is None or active.lease.token != report.lease.token or active.timed_out:
                continue
            plain.append(report)
        if not plain:
            return False
        for report in plain:
            self.keeper.remove(report.lease)  # no renewal may race the commit (and be refused)
        done = [(r.lease, r.outcome.result, r.document) for r in plain]
        pending = any(r.pending for r in plain)
        try:
            answers, leases = self._complete_and_lease(done, len(plain), pending)
        except QueueError as exc:  # a store that refuses: each is settled (and held) on its own
            for report in plain:
                report.commit_error = exc
            return False
        for report, answer in zip(plain, answers, strict=True):
            if isinstance(answer, QueueError):
                report.commit_error = answer
            else:
                report.committed = answer.state
                # its slot is free now; _on_finished finds the attempt here
                self._early[report.lease.job_id] = self._active.pop(report.lease.job_id)
        if leases:
            # started before anyone is told of the batch: the new attempts' first act,
            # the sync (which makes this commit durable), overlaps what follows
            self._store_ok()
            for lease in leases:
                if self.flow is not None:
                    self.flow.on_start(lease.job)
                self._launch(lease)
        return bool(answers)

    @Slot(object)
    def _sync_failed(self, exc: StoreError) -> None:
        self._store_failed(exc)

    @Slot(str, str)
    def _keep_partial(self, job_id: str, text: str) -> None:
        if job_id in self._active:  # a late one, after its attempt ended, is dropped
            self._partials[job_id] = text
            self.partial_text.emit(job_id, text)

    def partial_of(self, job_id: str) -> str | None:
        """The text streamed so far by ``job_id``'s running attempt, or None (for a view opened mid-stream)."""
        return self._partials.get(job_id)

    def _complete_and_lease(
        self, done: list[tuple[Lease, Any, dict[str, Any] | None]], freed: int, pending: bool
    ) -> tuple[list[Any], list[Lease]]:
        """Commits ``done`` and, on the fast path, leases into the slots they free, in one commit.

        The fast path is :meth:`_fill`'s (kinds known, not paused, stopping or refused by
        the store). A job flow control governs needs its shared state, which is not
        taken here: the successes are then committed alone and the fill that follows
        the settling leases (inside a session).

        Raises:
            StoreError: the store refused: nothing was written.
        """
        kinds = self._kinds
        fast = not (self._stopping or kinds is None or self._paused or self._store_down is not None)
        n = self._concurrency - len(self._active) + freed if fast else 0
        if n > 0:
            try:
                return self.queue.complete_and_lease(
                    done,
                    n,
                    worker=self.worker_id,
                    kinds=kinds,
                    lease_s=self.lease_s,
                    accept=self._noting(self.flow.accept_unshared) if self.flow is not None else None,
                    kept=True,
                    lanes=self._lanes(),
                    durable=False,
                    pending=pending,
                )
            except NeedsSession:
                pass
        return self.queue.complete_many(done, durable=False, pending=pending), []

    def _on_finished(self, report: RunReport) -> None:
        lease = report.lease
        self._partials.pop(lease.job_id, None)
        active = self._early.pop(lease.job_id, None)  # (committed in the batch: its slot was freed then)
        if active is None:
            active = self._active.get(lease.job_id)
            if active is not None and active.lease.token == lease.token:
                del self._active[lease.job_id]
            else:
                active = None
        if active is not None and active.timed_out and report.committed is None:
            # already failed as a timeout: whatever came back is a stale holder's
            if not self._holds(lease):  # (that failure still waits for the store: its lease stays kept)
                self.keeper.remove(lease)
            if not isinstance(report.commit_error, StaleLease):  # (its refused commit said so already)
                self.queue.results.drop_pending(lease.job.idempotency_key, lease.epoch)
                with contextlib.suppress(QueueError):
                    self.queue.record_stale(lease, "answer after the attempt timed out ignored")
            self.stale_result.emit(lease.job_id)
            self._after_finish()
            return
        if active is not None and active.timed_out:
            # the answer was committed before the timeout's failure could be (which was
            # then refused as stale, silently): the success stands
            self._held.pop(lease.job_id, None)
            active.timed_out = False
        suspended = self.keeper.suspended_since(active.started) if active is not None else 0.0
        self._settle(_Finish(report, report.outcome, suspended))

    def _holds(self, lease: Lease) -> bool:
        held = self._held.get(lease.job_id)
        return held is not None and held.report.lease.token == lease.token

    def _settle(self, finish: _Finish) -> bool:
        """Commits a finished attempt's outcome and tells; False when the store refused it.

        A refused outcome is held (its lease kept) and tried again later: nothing is
        lost, nothing is spent, and the provider is not called again.
        """
        lease = finish.report.lease
        self.keeper.remove(lease)
        state = ""
        cancelled = finish.report.cancelled
        try:
            state, cancelled = self._commit(finish)
        except StaleLease:
            self._outcome_waits.forget(lease.job_id)
            if finish.timed_out:
                return True
            self.stale_result.emit(lease.job_id)
            try:
                state = self.queue.get(lease.job_id).state
            except QueueError:
                state = ""
        except StoreError as exc:
            self._held[lease.job_id] = finish
            self.keeper.add(lease, self.lease_s or self.queue.lease_length(lease.job.kind))
            self._outcome_waits.failed(key=lease.job_id)
            self._store_failed(exc)
            return False
        except QueueError as exc:
            self._outcome_waits.forget(lease.job_id)
            log.error("could not commit the outcome of %s: %s", lease.job_id, exc)
            self.error.emit(str(exc))
        else:
            self._outcome_waits.ended(lease.job_id)
            self._store_ok()
        outcome = finish.outcome
        if finish.timed_out:
            if self.flow is not None:
                self._flow_outcome(lease.job_id, lease.job, outcome, None)
            self.job_finished.emit(lease.job_id, state)
            return True
        if self.flow is not None:
            counted = (not cancelled or outcome.unreachable) and state not in ("", "cancelled")
            result = outcome.result if outcome.ok and isinstance(outcome.result, dict) else {}
            self._flow_outcome(lease.job_id, lease, outcome if counted else None, result.get("usage"))
            self.drain_flow_events()
        self.job_finished.emit(lease.job_id, state)
        self._after_finish()
        return True

    def _flow_outcome(self, job_id: str, job: Any, outcome: Outcome | None, usage: Any) -> None:
        """Tells flow control how an attempt ended (``FlowControl.on_outcome``), after any told before that it could not take."""
        self._unsettled.append((job_id, job, outcome, usage))
        self._settle_flow()

    def _settle_flow(self) -> None:
        """Tells flow control the outcomes it could not take yet, oldest first, until one fails again.

        A shared state that does not answer (a database away longer than its retries)
        raises before anything is changed, so telling again counts nothing twice.
        """
        while self._unsettled and self.flow is not None:
            job_id, job, outcome, usage = self._unsettled[0]
            try:
                self.flow.on_outcome(job, outcome, usage)
            except QueueError as exc:
                log.warning("flow control has not taken the outcome of %s yet: %s", job_id, exc)
                return
            self._unsettled.pop(0)

    def _commit(self, finish: _Finish) -> tuple[str, bool]:
        """Commits ``finish`` under its lease; returns the job's new state and whether it counts as stopped.

        Raises:
            StaleLease: the lease is no longer current.
            StoreError: the store refused; nothing was changed.
        """
        report, outcome, lease = finish.report, finish.outcome, finish.report.lease
        if report.committed is not None:  # the runnable committed the success
            return report.committed, report.cancelled
        if report.commit_error is not None:  # ...or tried: a later try commits here
            error, report.commit_error = report.commit_error, None
            raise error
        if finish.timed_out:
            return self.queue.fail(lease, outcome).state, False
        if outcome.unreachable and not report.cancelled:
            # nothing reached the provider, so nothing was paid: the attempt is given back,
            # and flow control holds the profile's jobs while it is offline
            return self.queue.release(lease, f"not sent: {outcome.message}; the attempt is not counted").state, False
        if (
            finish.suspended > 0
            and not outcome.ok
            and not report.cancelled
            and outcome.error_class is ErrorClass.RETRYABLE
        ):
            # the call broke because the machine slept or the process stood still under it:
            # not the job's fault, and no answer is coming: run it again, attempt unspent
            reason = f"interrupted by a suspension of {finish.suspended:.0f} s; the attempt is not counted"
            return self.queue.release(lease, reason).state, True
        if outcome.ok:
            state = self.queue.complete(lease, outcome.result, reused=report.reused, document=report.document).state
            return state, report.cancelled
        if report.cancelled:
            # told to stop. Cancelled or reaped elsewhere: nothing to commit (the token is
            # stale). Stopped by our own shutdown: give the lease back, attempt not spent.
            if self.queue.lease_token(lease.job_id) == lease.token:
                return self.queue.release(lease, "interrupted: the worker was shut down").state, True
            return self.queue.get(lease.job_id).state, True
        if outcome.error_class is ErrorClass.THROTTLED and self.flow is not None and not finish.paced:
            # the whole profile pauses, longer after each throttle in a row: the job
            # waits as long (its attempt is given back, so its own backoff cannot grow)
            pause = self.flow.throttle_delay(lease.job, outcome.retry_after)
            if pause is not None:
                finish.outcome = outcome = dataclasses.replace(outcome, retry_after=pause)
            finish.paced = True
        return self.queue.fail(lease, outcome).state, False

    def _after_finish(self) -> None:
        if self._stop_after_current and not self._active:
            self._stop_after_current = False
        self._fill()
