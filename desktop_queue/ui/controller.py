"""The window's single door to the engine: verbs, the lease driver and the refresh loop.

Widgets ask the controller; the controller asks :class:`Queue` and :class:`LeaseDriver`
and reports back with signals. No widget calls the engine directly.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QFileSystemWatcher, QObject, QThreadPool, QTimer, Signal, Slot

from desktop_queue.core import Job, NotAllowed, Queue, QueueError, StoreError, SubmitResult
from desktop_queue.core.errors import IllegalTransition
from desktop_queue.core.export import exported_result, write_export
from desktop_queue.core.flow import FlowControl
from desktop_queue.core.ledger import Budget
from desktop_queue.core.model import FINISHED, LIVE, Actor, Priority
from desktop_queue.core.pause import PauseState
from desktop_queue.core.present import (
    PAUSED,
    background_pause_text,
    now_line,
    priority_reason,
    shared_hold_reason,
    slot_reason,
)
from desktop_queue.core.preview import ReplayPreview, preview_replay
from desktop_queue.core.profile_state import ProfileState, profile_state, shown_profiles
from desktop_queue.core.queue import BulkResult, DeadGroup
from desktop_queue.core.schedules import Scheduler
from desktop_queue.core.search import SearchQuery
from desktop_queue.core.wording import counted, first_of
from desktop_queue.providers.profiles import ProfileFileError, ProfileSet, load_profiles
from desktop_queue.providers.setup import ProfileConfig
from desktop_queue.providers.setup import apply as apply_profile
from desktop_queue.providers.setup import reconfigure as reconfigure_profiles
from desktop_queue.runtime.driver import LeaseDriver
from desktop_queue.ui.models.alerts_model import AlertWatch
from desktop_queue.ui.models.dead_letter_model import DeadLetterModel
from desktop_queue.ui.models.queue_model import QueueModel
from desktop_queue.ui.models.refresh import FALLBACK_MS, RefreshCoordinator
from desktop_queue.ui.models.schedules_model import SchedulesModel

log = logging.getLogger(__name__)

#: a due job while the store takes no changes (the banner says why)
STORE_UNAVAILABLE = "waiting: the store cannot save changes"


class _Stopped(Exception):
    """An export was cancelled between two jobs."""


class BulkTask(QObject):
    """One bulk action (retry, replay, resolve, delete, export) run off the GUI thread.

    The work runs on the controller's bulk pool, a chunk of jobs per durable commit;
    it reports progress through this object's signals (the GUI thread owns it) and is
    asked between two chunks whether to stop (:meth:`cancel`). Chunks committed stay
    committed.

    Args:
        verb: what it does, for people ("Retrying", "Resolving"...).
        total: how many jobs it acts on.
        work: ``(progress, stop) -> result``; ``progress(done, total)`` may be called
            from the worker thread, ``stop()`` says whether to stop.
        parent: the Qt parent.

    Signals:
        progress(int, int): jobs handled so far, total.
        finished(object): the work's result (a ``BulkResult``, or a count).
        failed(str): the work raised (message for people).
    """

    progress = Signal(int, int)
    finished = Signal(object)
    failed = Signal(str)

    def __init__(
        self,
        verb: str,
        total: int,
        work: Callable[[Callable[[int, int], None], Callable[[], bool]], Any],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.verb = verb
        self.total = total
        self._work = work
        self._stop = threading.Event()
        self.done = False
        self.result: Any = None
        self.finished.connect(self._mark_done)
        self.failed.connect(self._mark_done)

    @property
    def cancelled(self) -> bool:
        return self._stop.is_set()

    def cancel(self) -> None:
        """Stops before the next chunk (the chunk being committed completes)."""
        self._stop.set()

    def _mark_done(self, result: Any = None) -> None:
        self.done = True
        self.result = result

    def run(self) -> None:
        """The worker thread's part (the pool calls it)."""
        try:
            result = self._work(self.progress.emit, self._stop.is_set)
        except QueueError as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # a bug must reach the user, not vanish with the thread
            log.exception("bulk %s failed", self.verb)
            self.failed.emit(f"{self.verb} stopped: {type(exc).__name__}: {exc}")
        else:
            self.finished.emit(result)


class Controller(QObject):
    """Owns the queue's Qt side: models, refresh loop and lease driver.

    Args:
        queue: the opened engine.
        providers: kind -> provider.
        concurrency: global concurrency (Preferences).
        refresh_ms: the refresh timer interval.
        tick_ms: the lease driver's tick.
        flow: rate limits, concurrency caps and breakers per provider profile (None: none);
            the queue pane's "next run" says when it holds a job back.
        budgets: profile -> its spending limits, for the provider indicator (flow
            control's snapshot has the spend, not the limits).
        attempt_timeout_s: the attempt timeout of jobs whose input names none
            (Preferences; None: each kind's own).
        profiles: the provider profiles as configured (None: every profile flow
            control knows counts as configured).
        parent: the Qt parent.
        live: the views follow the store's change feed (a watcher thread; the refresh
            timer then only moves the clock on) instead of reading the store every tick.
        fallback_ms: live: the views read the store at least this often all the same.

    Why a queued job waits (the queue pane's "next run" and the timeline's now line)
    comes from :meth:`hold_reason`: flow control first (offline, no key, breaker,
    budget, rate limit, concurrency cap), then this window's worker (paused, the lane
    behind interactive jobs, every slot busy).

    Signals:
        message(str): something to tell the user in passing (status bar).
        failed(str): a verb could not be done (message for people).
        store_unavailable(str): the store takes no changes (disk full, or it must be
            reopened): no new jobs start here; the reason for people.
        store_available(): the store takes changes again; jobs start again.
    """

    message = Signal(str)
    failed = Signal(str)
    store_unavailable = Signal(str)
    store_available = Signal()

    def __init__(
        self,
        queue: Queue,
        providers: Mapping[str, Any],
        *,
        concurrency: int = 4,
        refresh_ms: int = 300,
        tick_ms: int = 250,
        flow: FlowControl | None = None,
        budgets: Mapping[str, Budget] | None = None,
        attempt_timeout_s: float | None = None,
        profiles: ProfileSet | None = None,
        parent: QObject | None = None,
        live: bool = False,
        fallback_ms: int = FALLBACK_MS,
    ) -> None:
        super().__init__(parent)
        self.queue = queue
        self.providers = dict(providers)
        self.flow = flow
        self.profiles = profiles
        self._in_use: tuple[float, list[str]] = (-1e18, [])
        self.budgets: dict[str, Budget] = dict(budgets or {})
        self._interactive_ahead: int | None = None
        # the queue's clock, so that the panes and the timeline's now line read one time
        # archived jobs come from the queue's history, a page at a time as the views scroll
        self.queue_model = QueueModel(queue.clock.now, hold=self.hold_reason, parent=self, history=queue)
        self.dead_model = DeadLetterModel(queue.clock.now, parent=self, history=queue)
        self.refresher = RefreshCoordinator(
            queue, [self.queue_model, self.dead_model], refresh_ms, self, live=live, fallback_ms=fallback_ms
        )
        #: the repair scan, the notification outbox and the alerts (the driver ticks them)
        self.alerts = AlertWatch(
            queue,
            providers=self.providers,
            flow=flow,
            budgets=lambda: self.budgets,
            capacity_free=lambda: not self.driver.paused and self.driver.running < self.driver.concurrency,
            parent=self,
        )
        self.driver = LeaseDriver(
            queue,
            self.providers,
            concurrency=concurrency,
            tick_ms=tick_ms,
            flow=flow,
            attempt_timeout_s=attempt_timeout_s,
            parent=self,
            upkeep=self.alerts.upkeep,
        )
        # schedules: evaluated on the driver's tick (whoever else runs them, a window makes one job)
        self.scheduler = Scheduler(queue)
        self.driver.scheduler = self.scheduler
        self.schedules_model = SchedulesModel(self.scheduler, queue.clock.now, parent=self)
        self.schedules_model.failed.connect(self.failed)
        self.schedules_model.message.connect(self.message)
        #: the data dir's "pause background work" switch (the driver's: one reading for both)
        self.background = self.driver.background
        self._background_state = self.background.state()
        # before the views repaint on the same signal: count the interactive jobs ahead once per refresh
        self.refresher.refreshed.connect(self.update_lanes)
        self.driver.store_unavailable.connect(self.store_unavailable)
        self.driver.store_available.connect(self._store_back)
        self.refresher.jobs_changed.connect(lambda _ids: self.alerts.deliver_soon())  # finished jobs' notices
        #: bulk actions run here, one at a time, off the GUI thread (never the driver's pool)
        self.bulk_pool = QThreadPool(self)
        self.bulk_pool.setMaxThreadCount(1)
        self.bulk_task: BulkTask | None = None
        self._shut = False

    # ----------------------------------------------------------------- why jobs wait

    def _flow_reason(self, job: Mapping[str, Any]) -> str | None:
        return self.flow.waiting_reason(job) if self.flow is not None else None

    def update_lanes(self) -> None:
        """Forgets the count of interactive jobs ahead: the next question counts again (once per tick).

        Counted only when asked (a background job's "next run" painted, the now line),
        and only over the queued interactive jobs the refresher's tally keeps: a tick
        with nothing on screen to explain costs nothing.

        The background switch is read again here too (another process may have
        flipped it): once per refresh, not once per painted row.
        """
        self._interactive_ahead = None
        self._background_state = self.background.state()

    @property
    def interactive_ahead(self) -> int:
        """How many queued, due interactive jobs this window's driver will lease first."""
        if self._interactive_ahead is None:
            self._interactive_ahead = self.refresher.tally.interactive_ahead(
                self.queue.clock.now(), kinds=self.providers.keys(), held=self._flow_reason
            )
        return self._interactive_ahead

    def hold_reason(self, job: Mapping[str, Any]) -> str | None:
        """Why a queued, due job does not start now, or None.

        Flow control first: its holds outlast a resume or a free slot. Then this
        window's worker, for the kinds it runs: paused, the lane (interactive jobs
        first), every slot busy. A kind only other processes run is not held here.
        """
        reason = shared_hold_reason(job, self._background_state, self.flow)  # every process honours these
        if reason:
            return reason
        if job.get("kind") not in self.providers:
            return None
        driver = self.driver
        if driver.store_problem is not None:
            return STORE_UNAVAILABLE
        if driver.paused:
            return PAUSED
        free = max(0, driver.concurrency - driver.running)
        if job.get("priority") == Priority.INTERACTIVE:
            return slot_reason(driver.running, driver.concurrency)
        return priority_reason(job, self.interactive_ahead, free) or slot_reason(driver.running, driver.concurrency)

    def now_line(self, job: Job | Mapping[str, Any] | None) -> str | None:
        """The timeline's synthetic last line: why a queued job waits (``now: waiting: …``), or
        who holds a running job's overdue lease; else None."""
        if job is None:
            return None
        data = job.to_json(with_events=False) if isinstance(job, Job) else job
        return now_line(data, self.queue.clock.now(), self.hold_reason)

    def _unavailable(self, profile: str) -> str | None:
        """The first reason a provider of ``profile`` gives for not running (no API key), or None."""
        for provider in self.providers.values():
            routes = getattr(provider, "by_profile", None)
            if isinstance(routes, dict):
                inner = routes.get(profile)
                ask_inner = getattr(inner, "unavailable_reason", None)
                try:
                    reason = ask_inner() if callable(ask_inner) else None
                except Exception:  # a status display must never break on a provider's check
                    reason = None
                if isinstance(reason, str) and reason:
                    return reason
                continue
            if getattr(getattr(provider, "profile", None), "name", None) != profile:
                continue
            ask = getattr(provider, "unavailable_reason", None)
            if not callable(ask):
                continue
            try:
                reason = ask()
            except Exception:  # a status display must never break on a provider's check
                continue
            if isinstance(reason, str) and reason:
                return reason
        return None

    def configured_profiles(self) -> list[str]:
        """The provider profiles the user set up, in their order (none: the fallback only)."""
        if self.profiles is None or not self.profiles.configured:
            return []
        return self.profiles.names()

    def provider_states(self) -> list[tuple[str, str, str]]:
        """(profile, level, text) of every profile worth showing (see :meth:`profile_states`)."""
        return [(state.profile, state.level, state.text) for state in self.profile_states()]

    #: how often the status bar looks again which profiles queued jobs use (a walk over the jobs)
    IN_USE_RECHECK_S = 5.0

    def _profiles_in_use(self) -> list[str]:
        """The profiles that queued or running jobs use (kind only: the pane holds no inputs)."""
        now = self.queue.clock.now()
        at, found = self._in_use
        if now - at < self.IN_USE_RECHECK_S:
            return found
        default = self.profiles.default_name() if self.profiles is not None else None
        used: list[str] = []
        for kind in sorted(self.refresher.tally.active_kinds()):
            if kind.startswith("openai."):
                used.append(default or kind.split(".", 1)[0])
                break
        self._in_use = (now, used)
        return used

    def profile_states(self) -> list[ProfileState]:
        """The real state of every profile worth showing (configured ones, or used by queued jobs)."""
        if self.flow is None:
            return []
        known = self.flow.profiles()
        if self.profiles is not None:
            names, anything = self.profiles.names(), self.profiles.configured
        else:
            names, anything = known, True
        used = [] if anything else self._profiles_in_use()
        now = self.queue.clock.now()
        out = []
        for name in shown_profiles(names, used, anything_configured=anything):
            snapshot = self.flow.snapshot(name) if name in known else None
            out.append(
                profile_state(
                    name,
                    snapshot,
                    now,
                    configured=anything and name in known,
                    budget=self.budgets.get(name),
                    no_key=self._unavailable(name),
                )
            )
        return out

    @property
    def store_problem(self) -> str | None:
        """Why the store takes no changes now (no new jobs start here), or None."""
        return self.driver.store_problem

    @Slot()
    def _store_back(self) -> None:
        self.store_available.emit()
        self.message.emit("The store saves changes again; jobs start again.")
        self.refresher.soon()

    # ----------------------------------------------------------------- lifecycle

    def start(self, lease: bool = True) -> None:
        """Loads the models and starts the refresh loop; then the lease driver (unless told not to)."""
        self.refresher.start()
        if lease:
            self.driver.start()

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Stops a bulk action, the refresh loop and the driver (waiting up to ``timeout_ms``)."""
        if self._shut:
            return True
        self._shut = True
        self.alerts.stop()
        if self.bulk_task is not None:
            self.bulk_task.cancel()
        self.bulk_pool.waitForDone(timeout_ms)
        self.refresher.stop()
        clean = self.driver.shutdown(timeout_ms)
        self.scheduler.close()
        return clean

    def changed(self) -> None:
        """Something was committed here: refresh the views and wake the driver now."""
        self.refresher.soon()
        if not self._shut:
            self.driver.wake()

    # ----------------------------------------------------------------- verbs

    def validate(self, kind: str, payload: Any) -> None:
        """Raises :class:`InvalidInput` (or :class:`UnknownKind`) if ``payload`` is not acceptable."""
        from desktop_queue.core.errors import UnknownKind

        provider = self.providers.get(kind)
        if provider is None:
            raise UnknownKind(f"unknown job kind {kind!r}")
        if hasattr(provider, "validate"):
            provider.validate(payload)

    def submit(
        self,
        kind: str,
        payload: Any,
        *,
        title: str | None,
        priority: str,
        max_attempts: int | None,
        run_after: float | None = None,
    ) -> SubmitResult:
        """Submits a job (durable when this returns; held until ``run_after`` when given).

        Raises :class:`QueueError` on refusal.
        """
        result = self.queue.submit(
            kind,
            payload,
            title=title,
            priority=priority,
            max_attempts=max_attempts,
            actor=Actor.USER,
            run_after=run_after,
        )
        self.changed()
        if result.duplicate:
            self.message.emit(f"Already submitted: job {result.job.id} has this input ({result.job.state})")
        else:
            self.message.emit(f"Submitted job {result.job.id}: {result.job.title}")
        return result

    def submit_many(
        self,
        kind: str,
        payloads: Sequence[Any],
        *,
        titles: Sequence[str | None] | None,
        priority: str,
        max_attempts: int | None,
    ) -> list[SubmitResult]:
        """Submits a batch in one durable commit (all or none). Raises :class:`QueueError` on refusal."""
        results = self.queue.submit_many(
            kind, payloads, titles=titles, priority=priority, max_attempts=max_attempts, actor=Actor.USER
        )
        self.changed()
        created = sum(1 for r in results if not r.duplicate)
        repeated = len(results) - created
        text = f"Submitted {created:,} {kind} job{'s' if created != 1 else ''}"
        if repeated:
            text += f"; {repeated:,} already existed"
        self.message.emit(text)
        return results

    def _each(self, verb: str, ids: Iterable[str]) -> list[Job]:
        done: list[Job] = []
        errors: list[str] = []
        overtaken: list[str] = []
        for job_id in ids:
            try:
                if verb == "cancel":
                    self.driver.cancel(job_id, Actor.USER)
                    done.append(self.queue.get(job_id))
                else:
                    done.append(self.queue.retry(job_id, Actor.USER))
            except IllegalTransition as exc:
                # the job moved on while the person decided (a running job finished as
                # "Cancel a running job?" was open, another window retried it): not a failure
                if exc.from_state in (FINISHED if verb == "cancel" else LIVE):
                    overtaken.append(
                        f"{self._called(job_id)} {'had already' if verb == 'cancel' else 'is already'} {exc.from_state}"
                    )
                else:
                    errors.append(str(exc))
            except QueueError as exc:
                errors.append(str(exc))
        self.changed()
        if errors:
            self.failed.emit(first_of(errors, 3, "; "))
        said = []
        if done:
            said.append(f"{'Cancelled' if verb == 'cancel' else 'Queued again'}: {counted(len(done), 'job')}")
        if overtaken:
            said.append(f"Nothing to {verb}: {first_of(overtaken, 2)}")
        if said:
            self.message.emit(". ".join(said))
        return done

    def _called(self, job_id: str) -> str:
        """How a message names a job: its title, quoted, else its id."""
        try:
            title = self.queue.get(job_id).title
        except QueueError:
            title = ""
        return f"“{title}”" if title else f"job {job_id}"

    def cancel(self, ids: Iterable[str]) -> list[Job]:
        """Cancels jobs; running attempts here are told to stop (a late result is rejected)."""
        return self._each("cancel", ids)

    def retry(self, ids: Iterable[str]) -> list[Job]:
        """Puts dead or cancelled jobs back in the queue (same jobs, a new run each)."""
        return self._each("retry", ids)

    def replay(self, job_id: str, payload: Any = None) -> Job:
        """A new job linked to a finished one, with the same or edited input."""
        job = self.queue.replay(job_id, payload, Actor.USER)
        self.changed()
        self.message.emit(f"Replayed {job_id} as new job {job.id}")
        return job

    def retry_all(self, ids: list[str]) -> BulkTask:
        """Retries exactly ``ids`` (captured at confirmation), 500 per durable commit, off the GUI thread."""
        return self.bulk("retry", ids)

    # ----------------------------------------------------------------- dead letters and history

    def preview_replay(self, job: Job, payload: Any = None) -> ReplayPreview:
        """What replaying ``job`` (with ``payload``, None: its own input) will do; queues nothing."""
        kwargs = {} if payload is None else {"new_input": payload}
        return preview_replay(job, self.providers, flow=self.flow, **kwargs)

    def resolve(self, ids: Iterable[str], note: str | None = None) -> BulkResult:
        """Closes dead letters without retrying them (at once: a few jobs)."""
        result = self.queue.resolve_many(list(ids), note, Actor.USER)
        self.changed()
        self._report("Resolved", result)
        return result

    def _report(self, done_text: str, result: BulkResult) -> None:
        n = len(result.done)
        text = f"{done_text} {n:,} dead letter{'s' if n != 1 else ''}"
        if result.skipped:
            text += f"; {len(result.skipped):,} skipped (they had changed meanwhile)"
        if result.cancelled:
            text += f"; stopped before the other {result.total - n - len(result.skipped):,}"
        self.message.emit(text)

    def start_bulk(
        self,
        verb: str,
        total: int,
        work: Callable[[Callable[[int, int], None], Callable[[], bool]], Any],
    ) -> BulkTask:
        """Starts a bulk action on the bulk pool; the views refresh after every chunk and at the end.

        Raises:
            NotAllowed: another bulk action is still running.
        """
        if self.bulk_task is not None and not self.bulk_task.done:
            raise NotAllowed(f"{self.bulk_task.verb} is still going on; wait for it or cancel it first")
        task = BulkTask(verb, total, work, self)
        task.progress.connect(lambda _d, _t: self.refresher.soon())
        task.finished.connect(lambda _r: self.changed())
        task.failed.connect(self.failed)
        task.failed.connect(lambda _m: self.changed())
        self.bulk_task = task
        # from the event loop: whoever called this connects to the task's signals first
        # (a quick task must not finish before its progress dialog listens)
        QTimer.singleShot(0, self, lambda: self._run_bulk(task))
        return task

    def _run_bulk(self, task: BulkTask) -> None:
        if self._shut or task.cancelled:
            task.failed.emit(f"{task.verb} did not start: the window is closing" if self._shut else "Stopped")
            return
        self.bulk_pool.start(task.run)  # (a callable: see runtime.driver.JobRunnable)

    def bulk(self, verb: str, ids: list[str], note: str | None = None) -> BulkTask:
        """Retries, replays or resolves exactly ``ids`` (captured at confirmation), off the GUI
        thread, 500 jobs per durable commit; ``verb``: ``retry``, ``replay`` or ``resolve``."""
        queue = self.queue
        texts = {
            "retry": ("Retrying", "Retried"),
            "replay": ("Replaying", "Replayed"),
            "resolve": ("Resolving", "Resolved"),
        }
        if verb not in texts:
            raise ValueError(f"unknown bulk verb {verb!r}")
        doing, done = texts[verb]

        def work(progress: Callable[[int, int], None], stop: Callable[[], bool]) -> BulkResult:
            if verb == "retry":
                return queue.retry_many(ids, Actor.USER, progress=progress, stop=stop)
            if verb == "replay":
                return queue.replay_many(ids, Actor.USER, progress=progress, stop=stop)
            return queue.resolve_many(ids, note, Actor.USER, progress=progress, stop=stop)

        task = self.start_bulk(doing, len(ids), work)
        task.finished.connect(lambda result: self._report(done, result))
        return task

    def delete(self, ids: list[str]) -> BulkTask:
        """Deletes these finished jobs with their results (one journal record), off the GUI thread."""
        task = self.start_bulk("Deleting", len(ids), lambda _p, _s: self.queue.purge_jobs(ids))
        task.finished.connect(lambda n: self.message.emit(f"Deleted {n:,} finished job{'s' if n != 1 else ''}"))
        return task

    def count_finished_before(self, when: float, states: list[str] | None = None) -> int:
        """How many finished jobs (in ``states``) a delete "finished before ``when``" removes."""
        return self.queue.purge(when, states, dry_run=True)

    def delete_before(self, when: float, states: list[str] | None = None, total: int = 0) -> BulkTask:
        """Deletes the finished jobs (in ``states``) finished before ``when``, off the GUI thread."""
        task = self.start_bulk("Deleting", total, lambda _p, _s: self.queue.purge(when, states))
        task.finished.connect(lambda n: self.message.emit(f"Deleted {n:,} finished job{'s' if n != 1 else ''}"))
        return task

    def export(
        self,
        path: Path,
        query: SearchQuery,
        fmt: str,
        *,
        with_inputs: bool,
        with_results: bool = False,
        resolved: bool | None = None,
    ) -> BulkTask:
        """Writes the jobs ``query`` matches to ``path`` (CSV or JSON Lines), off the GUI thread.

        The file is written beside ``path`` and renamed when complete: a cancelled or
        failed export leaves no half file.
        """
        queue = self.queue

        def work(progress: Callable[[int, int], None], stop: Callable[[], bool]) -> int:
            partial = path.with_name(f".{path.name}.partial")
            counted = {"n": 0}

            def jobs() -> Iterator[Job]:
                for job in queue.find_jobs(query, resolved=resolved):
                    if stop():
                        raise _Stopped
                    counted["n"] += 1
                    if counted["n"] % 200 == 0:
                        progress(counted["n"], 0)
                    yield job

            try:
                with open(partial, "wb") as out:
                    results = queue.results
                    result_of = (lambda job: exported_result(results, job)) if with_results else None
                    count = write_export(jobs(), out, fmt, with_input=with_inputs, result_of=result_of)
                os.replace(partial, path)
            except _Stopped:
                partial.unlink(missing_ok=True)
                return -1
            except OSError as exc:
                partial.unlink(missing_ok=True)
                raise StoreError(f"could not write {path}: {exc.strerror or exc}") from exc
            return count

        task = self.start_bulk("Exporting", 0, work)
        task.finished.connect(
            lambda n: self.message.emit(
                "Export cancelled; no file was written" if n < 0 else f"Exported {counted(n, 'job')} to {path}"
            )
        )
        return task

    def dead_groups(self, resolved: bool = False) -> list[DeadGroup]:
        """The dead letters grouped by error signature (empty if the store cannot be read)."""
        try:
            return self.queue.dead_letter_groups(resolved=resolved)
        except QueueError as exc:
            self.failed.emit(str(exc))
            return []

    def dead_ids(
        self, *, signature: str | None = None, resolved: bool = False, query: SearchQuery | None = None
    ) -> list[str]:
        """The ids of the dead letters of one group (None: all) that ``query`` matches."""
        return self.queue.dead_letter_ids(signature=signature, resolved=resolved, query=query)

    def job(self, job_id: str) -> Job | None:
        """One job with its timeline, or None if it cannot be read."""
        try:
            return self.queue.get(job_id)
        except QueueError:
            return None

    # ----------------------------------------------------------------- queue control

    def set_paused(self, paused: bool) -> None:
        if paused:
            self.driver.pause()
        else:
            self.driver.resume()

    def stop_after_current(self) -> None:
        self.driver.stop_after_current()

    @property
    def background_state(self) -> PauseState:
        """The data dir's background switch as last read (once per refresh, and on every flip here)."""
        return self._background_state

    def set_background_paused(self, paused: bool) -> None:
        """Pauses (or resumes) background work for every process on the data dir; kept across restarts."""
        try:
            self._background_state = self.background.set(paused, str(Actor.USER))
        except QueueError as exc:
            self.failed.emit(str(exc))
            self._background_state = self.background.state()
            return
        if paused:
            self.message.emit("Background work paused for every process on this data dir; interactive jobs still run.")
        else:
            self.message.emit("Background work resumed.")
        self.changed()

    def background_status(self) -> str | None:
        """What the status bar says about background work: the switch, then each degraded profile (None: it runs)."""
        parts = []
        switch = background_pause_text(self._background_state, self.queue.clock.now())
        if switch is not None:
            parts.append(switch)
        if self.flow is not None:
            try:
                parts.extend(self.flow.degradations().values())
            except Exception:  # a status display must never break on a flow-control hiccup
                log.debug("could not read the degradations", exc_info=True)
        return "; ".join(parts) or None

    def set_concurrency(self, value: int) -> None:
        self.driver.set_concurrency(value)

    def apply_provider_profile(self, config: ProfileConfig) -> None:
        """Uses a changed provider profile from the next attempt on (endpoint, model, key, limits)."""
        apply_profile(self.providers, self.flow, config)
        self.budgets[config.name] = config.budget()
        self.changed()

    def apply_profiles(self, profiles: ProfileSet) -> None:
        """Runs ``profiles`` from the next attempt on (Preferences added, removed or renamed some).

        Only the ``openai.*`` kinds the window runs are replaced; a window started with
        providers of its own (tests, the screenshot script) keeps them.
        """
        before = self.profiles
        if before is not None and profiles == before:
            return  # saved unchanged: the running providers keep their clients
        self.profiles = profiles
        self.budgets = {p.name: p.budget() for p in profiles.profiles}
        if before is not None and any(k.startswith("openai.") for k in self.providers):
            targets = [self.providers, self.driver.providers]
            if isinstance(self.queue.providers, dict):
                targets.append(self.queue.providers)
            reconfigure_profiles(targets, self.flow, profiles)
        else:
            for config in profiles.profiles:
                apply_profile(self.providers, self.flow, config)
        self._in_use = (-1e18, [])
        self.changed()

    def watch_profiles(self, path: Path) -> None:
        """Applies ``profiles.json`` again whenever another process (``desktop-queue profile …``) changes it.

        The directory is watched, not the file: an atomic save replaces the file, and a
        watch on the old one would end there.
        """
        self._profiles_path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.warning("cannot watch %s: %s", path, exc)
            return
        # a save is a temp file and a rename: look once it has settled
        timer = QTimer(self)
        timer.setObjectName("profilesReloadTimer")
        timer.setSingleShot(True)
        timer.setInterval(150)
        timer.timeout.connect(self.reload_profiles)
        self._watcher = QFileSystemWatcher([str(path.parent)], self)
        self._watcher.directoryChanged.connect(lambda _d: timer.start())

    @Slot()
    def reload_profiles(self) -> None:
        """Reads the watched profiles file and runs what it says (if it changed)."""
        path = getattr(self, "_profiles_path", None)
        if path is None:
            return
        try:
            found = load_profiles(path.parent)
        except ProfileFileError as exc:
            self.failed.emit(str(exc))
            return
        for notice in found.notices:
            self.failed.emit(notice)
        if found != self.profiles:
            self.apply_profiles(found)
            self.message.emit("The provider profiles were changed elsewhere; they apply from the next job on.")
