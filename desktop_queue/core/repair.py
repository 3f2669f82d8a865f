"""The repair scan: a low-rate look for what a queue nobody watches gets wrong.

Run by the lease driver's tick (at most every :data:`SCAN_EVERY_S`) and by ``work``
through :class:`Upkeep`, which also feeds the notification outbox and evaluates the
alerts. One scan:

1. expired leases: today's reaper (:meth:`Queue.reap <desktop_queue.core.queue.Queue.reap>`);
2. queued jobs far past their ``run_after`` while this process has free capacity:
   something holds them; the finding says what (no provider for the kind here, the
   provider unavailable, flow control's reason: breaker, budget, offline profile);
3. running jobs far longer than their kind's usual run time
   (:mod:`desktop_queue.core.estimate`);
4. finished jobs whose notification was never delivered: missing from the outbox, or
   claimed by a process that died before acknowledging; they are queued again.

Each finding is an event (``repair_finding``) on its job, recorded **once**: the commit
that records it looks for the same finding (code, run, attempt) in the job's timeline
first, under the store's lock, so neither a second scan nor a second process repeats it.
Findings that need a person (stuck jobs, long runs) also feed the alerts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from desktop_queue.core.alerts import AlertBook, Rule, Transition, gather, load_rules
from desktop_queue.core.errors import QueueError
from desktop_queue.core.estimate import RunTimes, model_of, run_times_of
from desktop_queue.core.lapse import Lapse, os_reason
from desktop_queue.core.model import Actor, EventType, State, clean_detail, events_of
from desktop_queue.core.outbox import Notice, Outbox
from desktop_queue.core.records import EventDict, Record, UpdateRecord

log = logging.getLogger(__name__)

#: the lease driver runs the scan at most this often
SCAN_EVERY_S = 30.0
#: a queued job this long past its run time, with capacity free, is stuck
STUCK_AFTER_S = 600.0
#: a running job this many times its usual run time (and at least LONG_MIN_S) runs long
LONG_FACTOR = 3.0
LONG_MIN_S = 120.0
#: stuck jobs recorded (and explained) in one scan at most: the rest in the next ones
MAX_FINDINGS = 100

# finding codes (an event's ``finding``)
STUCK = "stuck"
LONG_RUNNING = "long_running"
NOTIFICATION_REQUEUED = "notification_requeued"
NOTIFICATION_MISSING = "notification_missing"


@dataclass(frozen=True)
class Finding:
    """Something the scan found wrong with one job.

    Attributes:
        job_id: the job.
        code: :data:`STUCK`, :data:`LONG_RUNNING`, :data:`NOTIFICATION_REQUEUED` or
            :data:`NOTIFICATION_MISSING`.
        text: what it is, for people (no input text).
        needs_person: whether it should raise an alert.
    """

    job_id: str
    code: str
    text: str
    needs_person: bool = False


@dataclass
class ScanReport:
    """What one scan did.

    Attributes:
        reaped: jobs whose expired lease was reaped.
        findings: what was found and recorded for the first time in this scan.
        stuck: every job stuck now (recorded now or before): the alerts' signal.
        notices_added: notifications that were missing from the outbox.
        notices_requeued: notifications claimed by a process that died, queued again.
    """

    reaped: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    notices_added: list[Notice] = field(default_factory=list)
    notices_requeued: list[Notice] = field(default_factory=list)


def _has_finding(job: Mapping[str, Any], code: str) -> bool:
    run, attempt = job.get("run", 1), job.get("attempts", 0)
    for ev in events_of(job):  # type: ignore[arg-type]
        if ev["type"] != EventType.REPAIR_FINDING:
            continue
        detail = ev.get("detail") or {}
        if detail.get("finding") == code and detail.get("run") == run and ev.get("attempt") == attempt:
            return True
    return False


class RepairScan:
    """The repair scan over one queue.

    Args:
        queue: the :class:`~desktop_queue.core.queue.Queue`.
        outbox: the notification outbox (None: no notification repair).
        providers: kind -> provider this process runs (None: the queue's).
        flow: flow control, read only (why a job waits).
        capacity_free: whether this process could run another job now (None: assume it could).
        stuck_after_s, long_factor, long_min_s: the thresholds.
    """

    def __init__(
        self,
        queue: Any,
        *,
        outbox: Outbox | None = None,
        providers: Mapping[str, Any] | None = None,
        flow: Any = None,
        capacity_free: Callable[[], bool] | None = None,
        stuck_after_s: float = STUCK_AFTER_S,
        long_factor: float = LONG_FACTOR,
        long_min_s: float = LONG_MIN_S,
    ) -> None:
        self.queue = queue
        self.outbox = outbox
        self.providers = providers
        self.flow = flow
        self.capacity_free = capacity_free
        self.stuck_after_s = stuck_after_s
        self.long_factor = long_factor
        self.long_min_s = long_min_s
        self.run_times: RunTimes | None = None

    # ------------------------------------------------------------------ why a job is stuck

    def _stuck_reason(self, job: Mapping[str, Any]) -> str:
        kind = str(job.get("kind") or "")
        providers = self.providers if self.providers is not None else self.queue.providers
        if providers and kind not in providers:
            return f"no provider for kind {kind!r} in this process"
        provider = providers.get(kind) if providers else None
        ask = getattr(provider, "unavailable_reason", None)
        if callable(ask):
            try:
                reason = ask()
            except Exception as exc:  # a provider's check must not stop the scan
                reason = f"the provider's check failed ({type(exc).__name__})"
            if reason:
                return f"the provider cannot run: {reason}"
        if self.flow is not None:
            try:
                reason = self.flow.waiting_reason(job)
            except Exception as exc:  # flow state unreadable: say so rather than nothing
                reason = f"flow control could not be read ({type(exc).__name__})"
            if reason:
                return str(reason)
        return "nothing leases it: no worker takes this kind (is one running?)"

    # ------------------------------------------------------------------ the scan

    def _candidates(self, now: float) -> tuple[list[tuple[str, str, str, bool]], list[str]]:
        """(job id, code, text, needs person) of every finding now; and the stuck ids."""
        times = self.run_times if self.run_times is not None else run_times_of(self.queue)
        free = self.capacity_free() if self.capacity_free is not None else True

        def fn(st: Any) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
            hot = st.hot_jobs()
            late: list[tuple[float, dict[str, Any]]] = []
            stuck: list[str] = []
            if free:
                for job_id in st.ids_in(State.QUEUED):
                    job = hot[job_id]
                    ready = job.get("run_after", job["created_at"])
                    if ready >= now - self.stuck_after_s:
                        continue
                    stuck.append(job_id)
                    if not _has_finding(job, STUCK):  # (recorded before: still stuck, nothing new to say)
                        late.append((ready, {k: v for k, v in job.items() if k not in ("events", "lease_token")}))
            late.sort(key=lambda pair: pair[0])
            running = [
                {
                    "id": j["id"],
                    "kind": j.get("kind"),
                    "started_at": j.get("started_at"),
                    "input": {"model": model_of(j)},
                }
                for j in (hot[i] for i in st.ids_in(State.RUNNING))
                if not _has_finding(j, LONG_RUNNING)
            ]
            # a bounded scan: a backlog held by an open breaker is recorded a batch a scan
            return [job for _ready, job in late[:MAX_FINDINGS]], stuck, running

        late, stuck, running = self.queue.store.read(fn)
        out: list[tuple[str, str, str, bool]] = []
        for job in late:
            overdue = now - job.get("run_after", job["created_at"])
            out.append((job["id"], STUCK, f"queued {overdue:.0f} s past its run time: {self._stuck_reason(job)}", True))
        for job in running:
            started = job.get("started_at")
            usual = times.usual(str(job.get("kind") or ""), model_of(job))
            if started is None or usual is None or usual.seconds <= 0:
                continue
            elapsed = now - started
            if elapsed >= self.long_min_s and elapsed >= self.long_factor * usual.seconds:
                text = f"running {elapsed:.0f} s, {elapsed / usual.seconds:.1f}× its usual {usual.seconds:.0f} s"
                out.append((job["id"], LONG_RUNNING, text, True))
        return out, stuck

    def _record(self, found: Sequence[tuple[str, str, str, bool]], now: float) -> list[Finding]:
        """Records each finding's event unless its job already has it; returns those recorded."""
        if not found:
            return []

        def fn(st: Any) -> Any:
            from desktop_queue.core.backend import Change

            records: list[Record] = []
            recorded: list[Finding] = []
            for job_id, code, text, needs in found:
                job = st.hot(job_id)
                if job is None or _has_finding(job, code):
                    continue
                detail = clean_detail(
                    {"finding": code, "note": text, "run": job.get("run", 1), "kind": job.get("kind")}
                )
                ev: EventDict = {
                    "type": str(EventType.REPAIR_FINDING),
                    "at": round(now, 3),
                    "attempt": job.get("attempts", 0),
                    "epoch": job.get("lease_epoch", 0),
                    "worker": None,
                    "actor": str(Actor.SYSTEM),
                    "detail": detail,
                }
                upd: UpdateRecord = {"op": "upd", "id": job_id, "set": {}, "ev": [ev]}
                records.append(upd)
                recorded.append(Finding(job_id, code, text, needs))
            return Change(records, recorded)

        result: list[Finding] = self.queue.store.commit(fn)
        return result

    def _notifications(self, report: ScanReport) -> list[tuple[str, str, str, bool]]:
        if self.outbox is None:
            return []
        report.notices_added = self.outbox.add_missing(self.queue)
        report.notices_requeued = self.outbox.requeue(self.outbox.stale_claims())
        self.outbox.compact(self.queue)
        found = [
            (n.job_id, NOTIFICATION_MISSING, "its notification was never queued; queued now", False)
            for n in report.notices_added
        ]
        found += [
            (n.job_id, NOTIFICATION_REQUEUED, "its notification was never delivered; queued again", False)
            for n in report.notices_requeued
        ]
        return found

    def scan(self, now: float | None = None) -> ScanReport:
        """One pass; each finding is recorded once (see the module's docstring)."""
        at = self.queue.clock.now() if now is None else now
        report = ScanReport()
        report.reaped = list(self.queue.reap())
        found, report.stuck = self._candidates(at)
        # the notice pass adds the outbox's own entries: outside the store's commit
        found += self._notifications(report)
        report.findings = self._record(found, at)
        for finding in report.findings:
            log.info("repair: job %s: %s", finding.job_id, finding.text)
        return report


class Upkeep:
    """What the lease driver's low-rate tick runs: the repair scan, the outbox feed, the alerts.

    An object with a ``tick()``: the driver calls it at most every ``every_s`` seconds.
    Nothing it does may stop the driver: a failure is logged and the next tick tries again.

    Args:
        scan: the repair scan.
        book: the alert book (None: no alerts evaluated here).
        rules: the alert rules, asked on every tick (so edits apply; default: the config dir's).
        flow: flow control, read only (breakers, budgets).
        budgets: profile -> budget (callable so edits apply).
        every_s: the shortest time between two ticks' work.
        on_transitions: told the transitions this tick recorded.
        deliver: sends notifications (None: this process delivers none).
        deliver_when: asked before delivering (None: always); e.g. a worker delivers only
            while no window does.
    """

    def __init__(
        self,
        scan: RepairScan,
        *,
        book: AlertBook | None = None,
        rules: Callable[[], Iterable[Rule]] | None = None,
        flow: Any = None,
        budgets: Callable[[], Mapping[str, Any]] | None = None,
        every_s: float = SCAN_EVERY_S,
        on_transitions: Callable[[list[Transition]], None] | None = None,
        deliver: Callable[[list[Notice]], None] | None = None,
        deliver_when: Callable[[], bool] | None = None,
    ) -> None:
        self.scan = scan
        self.deliver_when = deliver_when
        self.book = book
        self.rules = rules or (lambda: load_rules().values())
        self.flow = flow
        self.budgets = budgets or (lambda: {})
        self.every_s = every_s
        self.on_transitions = on_transitions
        self.deliver = deliver
        self.last: ScanReport | None = None
        self._failing = Lapse(log, "upkeep", "upkeep works again")

    def _deliver(self, outbox: Outbox) -> list[Notice]:
        if self.deliver is None or (self.deliver_when is not None and not self.deliver_when()):
            return []
        return outbox.deliver(self.deliver)

    def flush(self) -> list[Notice]:
        """Feeds and delivers the outbox now (a window when jobs changed; a worker about to exit)."""
        outbox = self.scan.outbox
        if outbox is None:
            return []
        try:
            outbox.feed(self.scan.queue)
            notices = self._deliver(outbox)
            outbox.compact(self.scan.queue)  # (what delivering appended: not left to the next process)
        except (QueueError, OSError) as exc:
            self._failing.failed(os_reason(exc))
            return []
        self._failing.ended()
        return notices

    def tick(self) -> list[Transition]:
        """One round: feed and deliver notifications, scan, evaluate the alerts."""
        queue = self.scan.queue
        transitions: list[Transition] = []
        try:
            outbox = self.scan.outbox
            if outbox is not None:
                outbox.feed(queue)
                self._deliver(outbox)
                outbox.compact(queue)
            self.scan.run_times = run_times_of(queue)
            report = self.scan.scan()
            self.last = report
            if self.book is not None:
                signals = gather(
                    queue,
                    flow=self.flow,
                    budgets=self.budgets(),
                    run_times=self.scan.run_times,
                    stuck=report.stuck,
                )
                transitions = self.book.update(list(self.rules()), signals)
            self._failing.ended()
        except (QueueError, OSError) as exc:
            self._failing.failed(os_reason(exc))
            return []
        if transitions and self.on_transitions is not None:
            self.on_transitions(transitions)
        return transitions


__all__ = [
    "Finding",
    "LONG_RUNNING",
    "NOTIFICATION_MISSING",
    "NOTIFICATION_REQUEUED",
    "RepairScan",
    "SCAN_EVERY_S",
    "STUCK",
    "ScanReport",
    "Upkeep",
]
