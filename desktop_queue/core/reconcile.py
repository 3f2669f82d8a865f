"""Start-up reconciliation: jobs left ``running`` by a process that died (shared/DESIGN.md section 3).

Before anything runs again, each such job is asked about where its answer may be: the
local result store first (the dead holder's own answer, or a pending one of its
current epoch), then the provider's ``lookup``. :func:`~desktop_queue.core.decisions.decide_reconcile`
says what that means; this module gathers the facts and commits the decision, one job
at a time, each in its own commit that changes the job only if it is still running.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from desktop_queue.core.backend import Change, View
from desktop_queue.core.decisions import Lookup, Then, decide_reconcile
from desktop_queue.core.errors import StoreError
from desktop_queue.core.findings import FindingsLog
from desktop_queue.core.liveness import holder_alive
from desktop_queue.core.model import Actor, EventType, State
from desktop_queue.core.outcome import LookupResult
from desktop_queue.core.records import ErrorDict, JobChanges
from desktop_queue.core.wording import counted

if TYPE_CHECKING:
    from desktop_queue.core.queue import Queue

log = logging.getLogger(__name__)

#: what one reconciliation commit answers: (decision, reason), or None when the job was left as it was
_Decided = Change[tuple[str, str] | None]


@dataclass(frozen=True)
class Reconciled:
    """One start-up reconciliation decision."""

    job_id: str
    title: str
    decision: str  # succeeded | requeued | resumed | dead | unchanged
    reason: str


def reconcile_orphans(queue: Queue) -> None:
    """Resolves every job left ``running`` by a process that died; fills ``queue.reconciled``.

    Runs as the store's first opener (``Store.open(on_first=...)``).
    """
    queue.reconciled = []
    running = queue.store.read(
        lambda st: sorted((i, st.hot_jobs()[i].get("lease_owner")) for i in st.ids_in(State.RUNNING))
    )
    # a job whose holder still runs is no orphan, whoever believes it opened the store first
    orphans = [job_id for job_id, owner in running if holder_alive(owner) is not True]
    for job_id in orphans:
        try:
            queue.reconciled.append(reconcile_one(queue, job_id))
        except Exception as exc:  # one bad orphan must not keep the app from starting
            log.error("could not reconcile job %s: %s", job_id, type(exc).__name__)  # no text: invariant 7
            queue.report.notices.append(f"job {job_id} could not be reconciled: {type(exc).__name__}")
    record_findings(queue)
    # after reconciling, which reads the pending results of the orphans
    sweep_results(queue, alone=len(orphans) == len(running))


def reconcile_jobs(queue: Queue, jobs: list[tuple[str, int]]) -> None:
    """Resolves the jobs of a worker found dead (its heartbeat stopped); adds to ``queue.reconciled``.

    Runs for a backend that keeps a row per worker (``Backend.on_orphans``), in whichever
    live process noticed first. ``jobs`` are (id, lease epoch): a job is changed only while
    that lease is still its current one (it may have expired and been leased again since).
    """
    decided: list[Reconciled] = []
    for job_id, epoch in jobs:
        try:
            decided.append(reconcile_one(queue, job_id, epoch=epoch))
        except Exception as exc:  # one bad orphan must not stop the others
            log.error("could not reconcile job %s: %s", job_id, type(exc).__name__)  # no text: invariant 7
    queue.reconciled.extend(decided)
    record_findings(queue, decided)


def record_findings(queue: Queue, decided: list[Reconciled] | None = None) -> None:
    """Writes what was decided (``decided``, else all of ``queue.reconciled``) where the window
    reads it, whichever process decided it (:mod:`desktop_queue.core.findings`). A failure
    costs only the message: the events in each job's timeline say the same."""
    found = queue.reconciled if decided is None else decided
    if not found:
        return
    try:
        FindingsLog(queue.data_dir).record(((r.job_id, r.decision, r.reason) for r in found), queue.clock.now())
    except (OSError, StoreError) as exc:
        log.warning("could not record the reconciliation findings: %s", type(exc).__name__)
        queue.report.notices.append(
            f"what reconciliation found could not be written for other windows ({type(exc).__name__})"
        )


def sweep_results(queue: Queue, alone: bool) -> None:
    """Removes the result writes a crash left unfinished, and pending results nothing can commit.

    Runs while this process is the only one with the store open, so no write is in
    progress unless this process makes it (a reopen after a disk error, its attempts
    still running: ``alone`` is False then, and only files far older than any write
    go) or a compaction child outlived the process that started it (it holds
    ``compact.lock``; its writes are kept likewise).
    """
    results = queue.results
    try:
        with queue.store.quiet() as quiet:
            alone = quiet and alone
            removed = results.remove_temp_files(None if alone else 3600.0)
            stale = 0
            if alone:
                live = queue.store.read(
                    lambda st: [
                        (st.hot_jobs()[i]["key"], st.hot_jobs()[i].get("lease_epoch") or 0)
                        for i in st.ids_in(State.RUNNING)
                    ]
                )
                stale = results.remove_stale_pending(live)
    except OSError as exc:  # leftovers cost only disk space: say so, and open anyway
        queue.report.notices.append(
            f"could not remove unfinished result writes ({exc.filename or results.root}: "
            f"{exc.strerror or exc}); they will be tried again at the next start"
        )
        return
    if removed:
        queue.report.notices.append(
            f"removed {counted(removed, 'unfinished result write')} left by a crash (nothing lost)"
        )
    if stale:
        queue.report.notices.append(
            f"removed {counted(stale, 'kept result')} of attempts that can no longer commit (nothing lost)"
        )


def reconcile_one(queue: Queue, job_id: str, *, epoch: int | None = None) -> Reconciled:
    """Finds out what became of one orphaned job and commits that (see the module's docstring).

    With ``epoch``, the job is changed only while its lease is still that one.
    """
    job = queue.get(job_id)
    expected = epoch
    key, epoch = job.idempotency_key, job.lease_epoch
    now = queue.clock.now()
    results = queue.results
    # the dead holder's own answer counts only if its lease was still the current one
    doc = results.get(key) or results.pending(key, epoch)
    lookup = LookupResult(LookupResult.UNKNOWN)
    if doc is None:
        provider = queue.providers.get(job.kind)
        if provider is not None and hasattr(provider, "lookup"):
            try:
                lookup = provider.lookup(job)
            except Exception as exc:
                log.warning("lookup of job %s failed: %s", job_id, type(exc).__name__)
                lookup = LookupResult(LookupResult.UNKNOWN)
    status = lookup.status if lookup.status != LookupResult.FAILED or lookup.outcome is not None else Lookup.UNKNOWN
    then = decide_reconcile(
        has_result=doc is not None, lookup=status, attempts=job.attempts, max_attempts=job.max_attempts
    )

    def when_running(build: Callable[[View], _Decided]) -> Callable[[View], _Decided]:
        def fn(state: View) -> _Decided:
            raw = state.hot_jobs()[job_id]
            if raw["state"] != State.RUNNING or (expected is not None and raw.get("lease_epoch") != expected):
                return Change([], None)  # changed by another process meanwhile
            return build(state)

        return fn

    def succeed(ref: str, reason: str) -> Callable[[View], _Decided]:
        def build(state: View) -> _Decided:
            raw = state.hot_jobs()[job_id]
            ev = queue._event(
                EventType.RECONCILED, raw, Actor.SYSTEM, now, detail={"reason": reason, "result_ref": ref}
            )
            changes: JobChanges = {
                "state": str(State.SUCCEEDED),
                "result_ref": ref,
                "finished_at": now,
                **queue._lease_changes_cleared(now),
            }
            record = queue._upd(job_id, changes, ev)
            carried = results.get(key) or doc
            if carried is not None:
                record["res"] = carried  # the file may never have been synced
            return Change([record], (State.SUCCEEDED, reason))

        return when_running(build)

    def requeue(reason: str) -> Callable[[View], _Decided]:
        def build(state: View) -> _Decided:
            raw = state.hot_jobs()[job_id]
            base: JobChanges = {**queue._lease_changes_cleared(now), "run_after": now}
            if then is Then.RESUME:
                # the provider is still working on this attempt: resume it, spend no new attempt
                ev = queue._event(EventType.RECONCILED, raw, Actor.SYSTEM, now, detail={"reason": reason})
                changes: JobChanges = {**base, "state": str(State.QUEUED), "attempts": max(0, raw["attempts"] - 1)}
                return Change([queue._upd(job_id, changes, ev)], ("resumed", reason))
            if raw["attempts"] >= raw["max_attempts"]:  # (read again: another process may have changed it)
                why = f"{reason}; attempts exhausted ({raw['attempts']}/{raw['max_attempts']})"
                ev = queue._event(EventType.RECONCILED, raw, Actor.SYSTEM, now, detail={"reason": why})
                error: ErrorDict = {"class": "retryable", "message": "interrupted on its last attempt", "status": None}
                dead: JobChanges = {**base, "state": str(State.DEAD), "finished_at": now, "last_error": error}
                return Change([queue._upd(job_id, dead, ev)], (State.DEAD, why))
            ev = queue._event(
                EventType.RECONCILED, raw, Actor.SYSTEM, now, detail={"reason": f"{reason}; queued again"}
            )
            return Change(
                [queue._upd(job_id, {**base, "state": str(State.QUEUED)}, ev)], ("requeued", f"{reason}; queued again")
            )

        return when_running(build)

    def fail(state: View) -> _Decided:
        raw = state.hot_jobs()[job_id]
        assert lookup.outcome is not None  # (decide_reconcile says FAIL only with one)
        reason = "the provider reported a failure"
        rec = queue._failure_record(raw, lookup.outcome, now, Actor.SYSTEM, None, event_reason=f"reconciled: {reason}")
        rec["ev"].insert(0, queue._event(EventType.RECONCILED, raw, Actor.SYSTEM, now, detail={"reason": reason}))
        return Change([rec], ("dead" if rec["set"]["state"] == State.DEAD else "requeued", reason))

    if then is Then.SUCCEED and doc is not None:
        decided = queue.store.commit(succeed(results.ref_for(key), "result found in the local result store"))
        results.drop_pending(key, epoch)  # the journal carries it now
    elif then is Then.SUCCEED:
        ref, _ = results.put(key, lookup.result, job_id=job_id, epoch=epoch, produced_at=now)
        decided = queue.store.commit(succeed(ref, "the provider had finished it; result fetched and stored"))
    elif then is Then.RESUME:
        decided = queue.store.commit(requeue("the provider is still working on it; polling resumes"))
    elif then is Then.FAIL:
        decided = queue.store.commit(when_running(fail))
    else:
        decided = queue.store.commit(requeue("outcome unknown (the process running it died)"))
    if decided is None:
        return Reconciled(job_id, job.title, "unchanged", "changed by another process meanwhile")
    return Reconciled(job_id, job.title, *decided)
