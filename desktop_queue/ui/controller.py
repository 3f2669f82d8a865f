"""The window's single door to the engine: verbs, the lease driver and the refresh loop.

Widgets ask the controller; the controller asks :class:`Queue` and :class:`LeaseDriver`
and reports back with signals. No widget calls the engine directly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from PySide6.QtCore import QFileSystemWatcher, QObject, QTimer, Signal, Slot

from desktop_queue.core import Job, Queue, QueueError, SubmitResult
from desktop_queue.core.flow import FlowControl
from desktop_queue.core.ledger import Budget
from desktop_queue.core.model import Actor
from desktop_queue.core.present import (
    PAUSED,
    interactive_ahead,
    now_line,
    priority_reason,
    slot_reason,
)
from desktop_queue.core.profile_state import ProfileState, profile_state, shown_profiles
from desktop_queue.providers.profiles import ProfileFileError, ProfileSet, load_profiles
from desktop_queue.providers.setup import ProfileConfig
from desktop_queue.providers.setup import apply as apply_profile
from desktop_queue.providers.setup import reconfigure as reconfigure_profiles
from desktop_queue.runtime.driver import LeaseDriver
from desktop_queue.ui.models import DeadLetterModel, QueueModel, RefreshCoordinator

log = logging.getLogger(__name__)

#: a due job while the store takes no changes (the banner says why)
STORE_UNAVAILABLE = "waiting: the store cannot save changes"


class BatchRetry(QObject):
    """Retries a fixed list of job ids a few at a time, paced by a timer.

    The ids are captured when the user confirms; jobs that meanwhile left the dead
    state are skipped and counted, never retried twice.

    Args:
        controller: does each retry.
        ids: the jobs to retry.
        batch_size: retries per timer tick.
        interval_ms: pause between two batches.
        parent: the Qt parent.

    Signals:
        progress(int, int): jobs handled so far, total.
        finished(int, int): jobs retried, jobs skipped.
    """

    progress = Signal(int, int)
    finished = Signal(int, int)

    def __init__(
        self,
        controller: Controller,
        ids: list[str],
        batch_size: int = 10,
        interval_ms: int = 100,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._controller = controller
        self.ids = list(ids)
        self._pos = 0
        self._retried = 0
        self._skipped = 0
        self._batch = max(1, batch_size)
        self.timer = QTimer(self)
        self.timer.setObjectName("retryBatchTimer")
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._step)

    @property
    def active(self) -> bool:
        return self.timer.isActive()

    def start(self) -> None:
        self.timer.start()
        QTimer.singleShot(0, self, self._step)

    def stop(self) -> None:
        self.timer.stop()

    @Slot()
    def _step(self) -> None:
        if not self.timer.isActive():
            return
        chunk = self.ids[self._pos : self._pos + self._batch]
        self._pos += len(chunk)
        for job_id in chunk:
            try:
                self._controller.queue.retry(job_id, Actor.USER)
                self._retried += 1
            except QueueError:
                self._skipped += 1
        self.progress.emit(self._pos, len(self.ids))
        self._controller.changed()
        if self._pos >= len(self.ids):
            self.timer.stop()
            self.finished.emit(self._retried, self._skipped)


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
    ) -> None:
        super().__init__(parent)
        self.queue = queue
        self.providers = dict(providers)
        self.flow = flow
        self.profiles = profiles
        self._in_use: tuple[float, list[str]] = (-1e18, [])
        self.budgets: dict[str, Budget] = dict(budgets or {})
        self._interactive_ahead = 0
        # the queue's clock, so that the panes and the timeline's now line read one time
        # archived jobs come from the queue's history, a page at a time as the views scroll
        self.queue_model = QueueModel(queue.clock.now, hold=self.hold_reason, parent=self, history=queue)
        self.dead_model = DeadLetterModel(queue.clock.now, parent=self, history=queue)
        self.refresher = RefreshCoordinator(queue, [self.queue_model, self.dead_model], refresh_ms, self)
        self.driver = LeaseDriver(
            queue,
            self.providers,
            concurrency=concurrency,
            tick_ms=tick_ms,
            flow=flow,
            attempt_timeout_s=attempt_timeout_s,
            parent=self,
        )
        # before the views repaint on the same signal: count the interactive jobs ahead once per refresh
        self.refresher.refreshed.connect(self.update_lanes)
        self.driver.store_unavailable.connect(self.store_unavailable)
        self.driver.store_available.connect(self._store_back)
        self.batch: BatchRetry | None = None
        self._shut = False

    # ----------------------------------------------------------------- why jobs wait

    def _flow_reason(self, job: Mapping[str, Any]) -> str | None:
        return self.flow.waiting_reason(job) if self.flow is not None else None

    def update_lanes(self) -> None:
        """Counts the queued, due interactive jobs this window's driver will lease first."""
        self._interactive_ahead = interactive_ahead(
            self.queue_model.jobs(), self.queue.clock.now(), kinds=self.providers.keys(), held=self._flow_reason
        )

    def hold_reason(self, job: Mapping[str, Any]) -> str | None:
        """Why a queued, due job does not start now, or None.

        Flow control first: its holds outlast a resume or a free slot. Then this
        window's worker, for the kinds it runs: paused, the lane (interactive jobs
        first), every slot busy. A kind only other processes run is not held here.
        """
        reason = self._flow_reason(job)
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
        return priority_reason(job, self._interactive_ahead, free) or slot_reason(driver.running, driver.concurrency)

    def now_line(self, job: Job | Mapping[str, Any] | None) -> str | None:
        """The timeline's synthetic last line for a queued job (``now: waiting: …``), else None."""
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
        for job in self.queue_model.jobs():
            kind = str(job.get("kind", ""))
            if job.get("state") in ("queued", "running") and kind.startswith("openai."):
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
        """Stops the batch, the refresh loop and the driver (waiting up to ``timeout_ms``)."""
        if self._shut:
            return True
        self._shut = True
        if self.batch is not None:
            self.batch.stop()
        self.refresher.stop()
        return self.driver.shutdown(timeout_ms)

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
        self, kind: str, payload: Any, *, title: str | None, priority: str, max_attempts: int | None
    ) -> SubmitResult:
        """Submits a job (durable when this returns). Raises :class:`QueueError` on refusal."""
        result = self.queue.submit(
            kind, payload, title=title, priority=priority, max_attempts=max_attempts, actor=Actor.USER
        )
        self.changed()
        if result.duplicate:
            self.message.emit(f"Already submitted: job {result.job.id} has this input ({result.job.state})")
        else:
            self.message.emit(f"Submitted job {result.job.id}: {result.job.title}")
        return result

    def _each(self, verb: str, ids: Iterable[str]) -> list[Job]:
        done: list[Job] = []
        errors: list[str] = []
        for job_id in ids:
            try:
                if verb == "cancel":
                    self.driver.cancel(job_id, Actor.USER)
                    done.append(self.queue.get(job_id))
                else:
                    done.append(self.queue.retry(job_id, Actor.USER))
            except QueueError as exc:
                errors.append(str(exc))
        self.changed()
        if errors:
            self.failed.emit("; ".join(errors[:3]) + (f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""))
        if done:
            noun = "job" if len(done) == 1 else "jobs"
            self.message.emit(f"{'Cancelled' if verb == 'cancel' else 'Queued again'}: {len(done)} {noun}")
        return done

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

    def retry_all(self, ids: list[str], batch_size: int = 10, interval_ms: int = 100) -> BatchRetry:
        """Retries exactly ``ids`` (captured at confirmation) in paced batches."""
        if self.batch is not None:
            self.batch.stop()
        self.batch = BatchRetry(self, ids, batch_size, interval_ms, self)
        self.batch.finished.connect(
            lambda retried, skipped: self.message.emit(
                f"Retried {retried} dead jobs"
                + (f" ({skipped} had already changed and were skipped)" if skipped else "")
            )
        )
        self.batch.start()
        return self.batch

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
