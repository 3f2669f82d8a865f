"""Windowed metrics: the last hour, day or week of the queue, from aggregates kept up to date.

:class:`WindowedMetrics` folds every job's timeline into *time buckets* of counters
(jobs finished per state, dead letters per error class, retries, throttles, lease
expiries, leases per provider profile, changes of the queue depth per state) and of
histograms (queue wait and run time, in the archive's 2 % log-spaced bins,
:func:`~desktop_queue.core.store.archive.bucket_of`), in three tiers: per minute, per ten
minutes and per hour (:data:`TIERS`), one for each window's step, each reaching back as
far as its window reads (:data:`TIER_REACH_S`: an event of yesterday is counted by the
hourly tier alone). A window's figures read its 60, 144 or 168 buckets, whatever the
store holds: nothing rescans the jobs when the window repaints.

Incremental: a job's events only ever grow (a purge removes a whole job), so each job
keeps a small *cursor* (how many of its events are folded, the state they left it in,
when it became runnable and when it was leased) and a change folds only the events past
it. The jobs to look at come from the store's ``changed_since(version)``, which sees
every process's commits: with several processes on one data dir each keeps its own
buckets, derived from the store, never the record of truth. There is no cache file.

Rebuilt from the store (at first use, after a purge, or when the store reloaded): the hot
jobs, and the archived jobs updated within :data:`HORIZON_S` (plus a day: a late
``stale_result`` does not move ``updated_at``). The archive is read by its index, a page
of rows at a time, and only those jobs' segments are decompressed; an older archived job
only counts as a dead letter still waiting, by its id. Jobs quiet for longer than the
horizon leave the buckets (:meth:`Aggregates.prune`), so ``now`` must only move forward.

Percentiles merge the histograms of the window's buckets: a p50 or p95 is within 1 % of
the exact value plus 10 µs (:data:`PERCENTILE_BOUND`; a bin spans 2 % of ``1 ms + value``
and stands for its middle, and interpolating between two ranks keeps that bound).

Definitions (a brute-force recount of the events gives the same numbers, see
``tests/core/test_windowed_metrics.py``): a step of the window covers
``[start, start + step_s)``, aligned to the step; the window is the step holding ``now``
and the steps before it. *Depth* is the number of jobs ``queued``, ``running`` and
``dead`` (not resolved) after every event before a step's end. *Finished* counts the
transitions into ``succeeded``, ``dead`` and ``cancelled``; the success rate is
succeeded / (succeeded + dead) (a cancellation is a person's choice, not a failure).
Wait runs from a job becoming runnable to its next lease and counts in the lease's step;
run time from a lease to the success that ended it, in the success's step (as for the
all-time :func:`desktop_queue.core.metrics.compute`). A profile's requests are its jobs'
leases (one provider call each).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from desktop_queue.core.metrics import weighted_percentile
from desktop_queue.core.model import EventType, State, events_of
from desktop_queue.core.records import EventDict, JobDict
from desktop_queue.core.search import profile_of as job_profile
from desktop_queue.core.store.archive import bucket_of, bucket_value

if TYPE_CHECKING:
    from desktop_queue.core.backend import View
    from desktop_queue.core.flow import FlowControl
    from desktop_queue.core.queue import Queue
    from desktop_queue.core.store.archive import ArchivedRow

Window = Literal["1h", "24h", "7d"]
#: window -> (length, step) in seconds: 60 minutes, 144 ten-minute steps, 168 hours
WINDOWS: dict[str, tuple[int, int]] = {"1h": (3600, 60), "24h": (86_400, 600), "7d": (7 * 86_400, 3600)}
#: the buckets' widths, one tier per window step: a minute, ten minutes, an hour
TIERS = (60, 600, 3600)
#: how far back the buckets reach: the longest window, and one step more (a window is aligned to its steps)
HORIZON_S = 7 * 86_400 + 3600
#: how far back each tier reaches: its window, and one step more (the per-minute tier is read
#: by the last hour only; keeping a week of it would add every event to three tiers for nothing)
TIER_REACH_S: dict[int, int] = {step: length + step for length, step in WINDOWS.values()}
#: archived jobs updated this long ago still count (a late stale result does not touch ``updated_at``)
ARCHIVE_MARGIN_S = 86_400
#: the states whose depth is shown over time (the others only grow)
DEPTH_STATES = (State.QUEUED, State.RUNNING, State.DEAD)
FINISHED_STATES = (State.SUCCEEDED, State.DEAD, State.CANCELLED)
#: a resolved dead letter waits for nobody: a state of its own for the depth
RESOLVED = "resolved"
#: how far a windowed percentile may be from the exact one: ``relative * exact + absolute``
PERCENTILE_BOUND = (0.01, 1e-5)
#: archive index rows read per page while rebuilding (one short read of the store each)
PAGE_ROWS = 20_000
#: jobs folded per read of the store (a read holds it: the driver's commits wait meanwhile)
FOLD_CHUNK = 1000
#: how often the buckets let go of what left the horizon
PRUNE_EVERY_S = 600.0

_STATE_OF: dict[str, str] = {
    EventType.SUBMITTED: State.QUEUED,
    EventType.LEASED: State.RUNNING,
    EventType.SUCCEEDED: State.SUCCEEDED,
    EventType.RETRY_SCHEDULED: State.QUEUED,
    EventType.THROTTLED: State.QUEUED,
    EventType.LEASE_EXPIRED: State.QUEUED,
    EventType.RETRIED: State.QUEUED,
    EventType.RELEASED: State.QUEUED,
    EventType.DEAD_LETTERED: State.DEAD,
    EventType.CANCELLED: State.CANCELLED,
}


def state_after(event: EventDict | Mapping[str, Any], state: str | None) -> str | None:
    """The state a job is in after ``event``, given the state before it (None: not yet submitted).

    A reconciliation says where it left the job by what it records: a result reference
    (succeeded), attempts exhausted (dead), else queued again; a failure the provider
    reported is recorded after it as its own event.
    """
    kind = event["type"]
    found = _STATE_OF.get(kind)
    if found is not None:
        return found
    if kind == EventType.RESOLVED:
        return RESOLVED if state == State.DEAD else state
    if kind == EventType.RECONCILED:
        detail = event.get("detail") or {}
        if detail.get("result_ref"):
            return State.SUCCEEDED
        if "attempts exhausted" in str(detail.get("reason") or ""):
            return State.DEAD
        return State.QUEUED
    return state


def dead_class(event: EventDict | Mapping[str, Any]) -> str:
    """The error class a dead letter is counted under (a lost last attempt is ``retryable``)."""
    value = (event.get("detail") or {}).get("error_class")
    return str(value) if value else "retryable"


# --------------------------------------------------------------------------- figures


@dataclass
class ProfileFigures:
    """One provider profile: its request rate over the window against its limit, and its breaker now.

    Attributes:
        profile: the profile's name.
        requests_per_min: leases of its jobs per minute, one value per step.
        limit_rpm: its requests-per-minute limit as flow control applies it now (after
            adaptive slow-down), or None (unlimited, or no flow control known).
        breaker: ``closed``, ``open`` or ``half_open`` now, or None when unknown.
        in_flight: attempts running now, across the processes of the data dir.
    """

    profile: str
    requests_per_min: list[float] = field(default_factory=list)
    limit_rpm: float | None = None
    breaker: str | None = None
    in_flight: int | None = None


@dataclass
class WindowFigures:
    """What the Metrics pane draws and ``stats --json --window`` prints (all JSON-ready).

    Series have one value per step, at ``times`` (the steps' starts, UTC epoch seconds).
    Durations are seconds; a percentile is None when nothing was measured.
    """

    window: str
    now: float
    start: float
    end: float
    step_s: int
    times: list[float] = field(default_factory=list)
    #: state -> jobs in it at each step's end (queued, running, dead letters waiting)
    depth: dict[str, list[int]] = field(default_factory=dict)
    #: state -> jobs that became succeeded, dead or cancelled in each step
    finished: dict[str, list[int]] = field(default_factory=dict)
    finished_per_min: list[float] = field(default_factory=list)
    success_rate: list[float | None] = field(default_factory=list)
    wait_p50_s: list[float | None] = field(default_factory=list)
    wait_p95_s: list[float | None] = field(default_factory=list)
    run_p50_s: list[float | None] = field(default_factory=list)
    run_p95_s: list[float | None] = field(default_factory=list)
    retries: list[int] = field(default_factory=list)
    throttled: list[int] = field(default_factory=list)
    lease_expiries: list[int] = field(default_factory=list)
    #: error class -> jobs that became dead in the window
    dead_letters_by_class: dict[str, int] = field(default_factory=dict)
    profiles: list[ProfileFigures] = field(default_factory=list)
    #: the whole window's figures (the series summed, the percentiles over every measure)
    totals: dict[str, Any] = field(default_factory=dict)
    #: events recorded in the window (0 with no depth either: nothing to show)
    events: int = 0

    @property
    def empty(self) -> bool:
        """Nothing happened in the window and nothing waits."""
        return not self.events and not any(any(v) for v in self.depth.values())

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["empty"] = self.empty
        out["percentile_error"] = {"relative": PERCENTILE_BOUND[0], "absolute_s": PERCENTILE_BOUND[1]}
        return out


def window_steps(window: str, now: float) -> tuple[int, int, int]:
    """``(first step start, step, steps)`` of ``window`` ending with the step that holds ``now``.

    Raises:
        ValueError: an unknown window.
    """
    if window not in WINDOWS:
        raise ValueError(f"unknown window {window!r} (choose one of {', '.join(WINDOWS)})")
    length, step = WINDOWS[window]
    count = length // step
    last = int(math.floor(now / step)) * step
    return last - (count - 1) * step, step, count


def _percentile_of(hist: Mapping[int, int], q: float) -> float | None:
    return weighted_percentile([(bucket_value(b), n) for b, n in hist.items()], q)


def profile_limits(flow: FlowControl | None) -> dict[str, tuple[float | None, str | None, int | None]]:
    """``profile -> (requests per minute allowed now, breaker state, attempts in flight)`` from
    flow control's shared state (read only: :meth:`FlowControl.snapshot` of each profile)."""
    if flow is None:
        return {}
    out: dict[str, tuple[float | None, str | None, int | None]] = {}
    for name in flow.profiles():
        try:
            snap = flow.snapshot(name)
        except (KeyError, OSError, ValueError):
            continue  # (removed meanwhile, or its shared file unreadable: shown without a limit)
        budget = snap.get("requests_budget")
        # (a profile's rate window is a minute, as its rpm setting says)
        limit = round(float(budget), 3) if isinstance(budget, (int, float)) else None
        out[name] = (limit, snap.get("breaker"), snap.get("in_flight"))
    return out


# --------------------------------------------------------------------------- the aggregates


@dataclass(slots=True)
class _Cursor:
    """How far one job's timeline is folded."""

    n: int = 0
    state: str | None = None
    ready_at: float | None = None
    leased_at: float | None = None
    last_at: float = 0.0


class _Bucket:
    __slots__ = ("counters", "waits", "runs")

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}
        self.waits: dict[int, int] = {}
        self.runs: dict[int, int] = {}


class Aggregates:
    """The time buckets and the jobs' cursors, fed one timeline at a time (no store, no lock).

    :class:`WindowedMetrics` keeps one up to date from a queue; tests feed one directly.
    """

    def __init__(self, profile_of: Callable[[JobDict], str | None] = job_profile) -> None:
        self.profile_of = profile_of
        #: bucket width (s) -> bucket number (start // width) -> what happened in it
        self.tiers: dict[int, dict[int, _Bucket]] = {width: {} for width in TIERS}
        self.cursors: dict[str, _Cursor] = {}
        #: jobs in each depth state, as folded
        self.depth: dict[str, int] = dict.fromkeys(DEPTH_STATES, 0)
        #: archived dead letters still waiting that are not folded (older than the horizon)
        self.unfolded_dead: set[str] = set()
        #: bucket width -> the earliest time its tier still counts (see :meth:`advance`)
        self.floors: dict[int, float] = dict.fromkeys(TIERS, -math.inf)

    def advance(self, now: float) -> None:
        """From now on, a tier leaves out events before its reach (:data:`TIER_REACH_S`) back
        from ``now``: no window asked at ``now`` or later reads them (``now`` only moves on)."""
        for width in self.tiers:
            self.floors[width] = max(self.floors[width], now - TIER_REACH_S[width])

    def _add(self, at: float, counts: list[tuple[str, int]], wait: int | None, run: int | None) -> None:
        """Adds one event's counts (and wait or run time bin) to its bucket of every tier that reaches it."""
        floors = self.floors
        for width, buckets in self.tiers.items():
            if at < floors[width]:
                continue
            number = int(at // width)
            bucket = buckets.get(number)
            if bucket is None:
                bucket = buckets[number] = _Bucket()
            counters = bucket.counters
            for name, n in counts:
                counters[name] = counters.get(name, 0) + n
            if wait is not None:
                bucket.waits[wait] = bucket.waits.get(wait, 0) + 1
            if run is not None:
                bucket.runs[run] = bucket.runs.get(run, 0) + 1

    def fold(self, job: JobDict) -> None:
        """Folds the events of ``job`` not folded yet (all of them for a job not seen before)."""
        job_id = job["id"]
        events = events_of(job)
        cursor = self.cursors.get(job_id)
        if cursor is None:
            cursor = self.cursors[job_id] = _Cursor()
            self.unfolded_dead.discard(job_id)  # (now folded from its first event on)
        if cursor.n >= len(events):
            return
        profile: str | None = None
        depth = self.depth
        for ev in events[cursor.n :]:
            kind = ev["type"]
            at = float(ev["at"])
            counts: list[tuple[str, int]] = [("events", 1)]
            wait: int | None = None
            run: int | None = None
            if at > cursor.last_at:
                cursor.last_at = at
            if kind == EventType.SUBMITTED or kind == EventType.RETRIED:
                cursor.ready_at = at
            elif kind == EventType.RETRY_SCHEDULED or kind == EventType.THROTTLED:
                cursor.ready_at = (ev.get("detail") or {}).get("run_after", at)
                counts.append(("retries" if kind == EventType.RETRY_SCHEDULED else "throttled", 1))
            elif kind == EventType.LEASED:
                if cursor.ready_at is not None:
                    wait = bucket_of(max(0.0, at - cursor.ready_at))
                cursor.ready_at = None
                cursor.leased_at = at
                if profile is None:
                    profile = self.profile_of(job) or job.get("kind") or "?"
                counts.append(("req:" + profile, 1))
            elif kind == EventType.SUCCEEDED and cursor.leased_at is not None:
                run = bucket_of(max(0.0, at - cursor.leased_at))
                cursor.leased_at = None
            elif kind == EventType.LEASE_EXPIRED:
                counts.append(("lease_expiries", 1))
                cursor.ready_at = at
            elif kind == EventType.RECONCILED:
                cursor.ready_at = at
            before = cursor.state
            after = state_after(ev, before)
            if after != before:
                if before in depth:
                    depth[before] -= 1
                    counts.append(("d:" + before, -1))
                if after is not None and after in depth:
                    depth[after] += 1
                    counts.append(("d:" + after, 1))
                if after in FINISHED_STATES:
                    counts.append(("f:" + after, 1))
                    if after == State.DEAD:
                        counts.append(("dc:" + (dead_class(ev) if kind == EventType.DEAD_LETTERED else "retryable"), 1))
                cursor.state = after
            self._add(at, counts, wait, run)
        cursor.n = len(events)

    def prune(self, now: float) -> None:
        """Lets go of buckets older than the horizon and of the cursors of jobs finished before it.

        A pruned job's events all lie before any window asked later (``now`` only moves on),
        so folding it again from its first event, should it change, counts only its new ones
        in a window; a dead letter still waiting is remembered by its id alone.
        """
        floor = now - HORIZON_S
        self.advance(now)
        for width, buckets in self.tiers.items():
            reach = now - TIER_REACH_S[width]
            for number in [n for n in buckets if (n + 1) * width <= reach]:
                del buckets[number]
        for job_id, cursor in list(self.cursors.items()):
            if cursor.last_at >= floor or cursor.state in (State.QUEUED, State.RUNNING):
                continue
            del self.cursors[job_id]
            if cursor.state == State.DEAD:
                self.depth[State.DEAD] -= 1
                self.unfolded_dead.add(job_id)

    # ----------------------------------------------------------------- reading

    def figures(
        self, window: str, now: float, limits: Mapping[str, tuple[float | None, str | None, int | None]]
    ) -> WindowFigures:
        """The figures of ``window`` ending at ``now`` (see the module's definitions)."""
        first, step, count = window_steps(window, now)
        out = WindowFigures(window=window, now=now, start=float(first), end=float(first + count * step), step_s=step)
        out.times = [float(first + i * step) for i in range(count)]
        buckets = self.tiers[step]  # (each window's step is a tier: one bucket a step)
        first_n = first // step
        end_n = first_n + count
        # the depth at a step's end: what is folded now, less the changes at or after that end
        later = dict.fromkeys(DEPTH_STATES, 0)
        depth_now = dict(self.depth)
        depth_now[State.DEAD] += len(self.unfolded_dead)
        for number in (n for n in buckets if n >= end_n):
            for s in DEPTH_STATES:
                later[s] += buckets[number].counters.get("d:" + s, 0)
        steps: list[dict[str, int]] = [{} for _ in range(count)]
        waits: list[dict[int, int]] = [{} for _ in range(count)]
        runs: list[dict[int, int]] = [{} for _ in range(count)]
        for i in range(count):
            bucket = buckets.get(first_n + i)
            if bucket is not None:
                steps[i], waits[i], runs[i] = bucket.counters, bucket.waits, bucket.runs  # (read only)
        out.depth = {str(s): [0] * count for s in DEPTH_STATES}
        for i in range(count - 1, -1, -1):
            for s in DEPTH_STATES:
                out.depth[str(s)][i] = depth_now[s] - later[s]
                later[s] += steps[i].get("d:" + s, 0)
        out.finished = {str(s): [acc.get("f:" + s, 0) for acc in steps] for s in FINISHED_STATES}
        minutes = step / 60.0
        for i, acc in enumerate(steps):
            done = sum(out.finished[str(s)][i] for s in FINISHED_STATES)
            out.finished_per_min.append(round(done / minutes, 6))
            ok, dead = out.finished[State.SUCCEEDED][i], out.finished[State.DEAD][i]
            out.success_rate.append(round(ok / (ok + dead), 6) if ok + dead else None)
            out.wait_p50_s.append(_percentile_of(waits[i], 50))
            out.wait_p95_s.append(_percentile_of(waits[i], 95))
            out.run_p50_s.append(_percentile_of(runs[i], 50))
            out.run_p95_s.append(_percentile_of(runs[i], 95))
            out.retries.append(acc.get("retries", 0))
            out.throttled.append(acc.get("throttled", 0))
            out.lease_expiries.append(acc.get("lease_expiries", 0))
            out.events += acc.get("events", 0)
            for name, n in acc.items():
                if name.startswith("dc:") and n:
                    cls = name[3:]
                    out.dead_letters_by_class[cls] = out.dead_letters_by_class.get(cls, 0) + n
        requests: dict[str, list[float]] = {}
        for i, acc in enumerate(steps):
            for name, n in acc.items():
                if name.startswith("req:") and n:
                    requests.setdefault(name[4:], [0.0] * count)[i] = round(n / minutes, 6)
        for name in sorted(set(requests) | set(limits)):
            limit, breaker, in_flight = limits.get(name, (None, None, None))
            out.profiles.append(ProfileFigures(name, requests.get(name, [0.0] * count), limit, breaker, in_flight))
        all_waits: dict[int, int] = {}
        all_runs: dict[int, int] = {}
        for target, parts in ((all_waits, waits), (all_runs, runs)):
            for hist in parts:
                for b, n in hist.items():
                    target[b] = target.get(b, 0) + n
        hours = count * step / 3600.0
        finished = {str(s): sum(out.finished[str(s)]) for s in FINISHED_STATES}
        ok, dead = finished[State.SUCCEEDED], finished[State.DEAD]
        out.totals = {
            "finished": finished,
            "finished_per_min": round(sum(finished.values()) / (count * minutes), 6),
            "success_rate": round(ok / (ok + dead), 6) if ok + dead else None,
            "wait_p50_s": _percentile_of(all_waits, 50),
            "wait_p95_s": _percentile_of(all_waits, 95),
            "run_p50_s": _percentile_of(all_runs, 50),
            "run_p95_s": _percentile_of(all_runs, 95),
            "retries": sum(out.retries),
            "throttled": sum(out.throttled),
            "lease_expiries": sum(out.lease_expiries),
            "retries_per_hour": round(sum(out.retries) / hours, 6),
            "throttled_per_hour": round(sum(out.throttled) / hours, 6),
            "lease_expiries_per_hour": round(sum(out.lease_expiries) / hours, 6),
            "dead_letters": sum(out.dead_letters_by_class.values()),
            "depth_now": {str(s): out.depth[str(s)][-1] for s in DEPTH_STATES},
        }
        return out


# --------------------------------------------------------------------------- over a queue


def profile_finder(flow: FlowControl | None) -> Callable[[JobDict], str | None]:
    """A job's provider profile: its own ``profile`` field, else the one flow control runs it
    on (its input's, else the default profile: an ``openai.chat`` job on a default profile
    named "litellm" is litellm's, not "openai"); without flow control, as the search finds it.
    """
    if flow is None:
        return job_profile

    def profile_of(job: JobDict) -> str | None:
        if isinstance(job.get("profile"), str):
            return job_profile(job)
        return flow.profile_for(str(job.get("kind") or ""), job.get("input"))

    return profile_of


class WindowedMetrics:
    """The windowed figures of one queue, kept up to date from its store's changes.

    Thread-safe; meant to be refreshed off the GUI thread (a rebuild reads the archive's
    index, a page at a time). Each process keeps its own; nothing is written.

    Args:
        queue: the queue whose jobs are counted.
        flow: flow control, for each profile's limit and breaker (None: none shown).
        profile_of: a job's provider profile (default: :func:`profile_finder` of ``flow``).
    """

    def __init__(
        self,
        queue: Queue,
        *,
        flow: FlowControl | None = None,
        profile_of: Callable[[JobDict], str | None] | None = None,
    ) -> None:
        self.queue = queue
        self.flow = flow
        self.profile_of = profile_of or profile_finder(flow)
        self._lock = threading.Lock()
        self._agg: Aggregates | None = None
        self._version = 0
        self._pruned_at = -math.inf
        #: how many times the aggregates were rebuilt from the store (for tests and the log)
        self.rebuilds = 0

    def refresh(self, now: float | None = None) -> None:
        """Folds every change committed since the last call (any process's)."""
        now = self.queue.clock.now() if now is None else now
        with self._lock:
            if self._agg is None:
                self._rebuild(now)
            else:
                self._agg.advance(now)
                version, ids = self.queue.changed_since(self._version)
                if ids is None:
                    self._rebuild(now)
                elif ids:
                    self._fold_ids(sorted(ids))
                    self._version = version
                else:
                    self._version = version
            if now - self._pruned_at >= PRUNE_EVERY_S:
                assert self._agg is not None
                self._agg.prune(now)
                self._pruned_at = now

    def figures(self, window: str, now: float | None = None) -> WindowFigures:
        """Refreshes, then the figures of ``window`` (``1h``, ``24h`` or ``7d``) ending at ``now``.

        Raises:
            ValueError: an unknown window.
        """
        now = self.queue.clock.now() if now is None else now
        window_steps(window, now)  # (an unknown window fails before any work)
        self.refresh(now)
        limits = profile_limits(self.flow)
        with self._lock:
            assert self._agg is not None
            return self._agg.figures(window, now, limits)

    def _fold_ids(self, ids: list[str]) -> None:
        """Folds the jobs of ``ids``, hot or archived, :data:`FOLD_CHUNK` a read (the store is
        never held for long: the window's driver commits meanwhile)."""
        agg = self._agg
        assert agg is not None
        for job in self.queue.job_dicts(ids, chunk=FOLD_CHUNK):
            agg.fold(job)  # (a purged job is left out: a purge rebuilds)

    def _fold_rows(self, rows: list[ArchivedRow], *, waiting: bool) -> None:
        """Folds archived jobs (``waiting``: only notes the old dead letters still waiting), a chunk a read."""
        agg = self._agg
        assert agg is not None
        for start in range(0, len(rows), FOLD_CHUNK):
            chunk = rows[start : start + FOLD_CHUNK]

            def fn(st: View, chunk: list[ArchivedRow] = chunk) -> None:
                if st.archive is None:
                    return
                for job in st.archive.jobs(chunk):
                    if st.purged(job):
                        continue
                    if not waiting:
                        agg.fold(job)
                    elif job["id"] not in agg.cursors:
                        agg.unfolded_dead.add(job["id"])

            self.queue.store.read(fn)

    def _rebuild(self, now: float) -> None:
        """Folds the store afresh (a purge while it runs starts it again; the third try stands)."""
        self.rebuilds += 1
        for _ in range(3):
            if self._rebuild_once(now):
                return

    def _rebuild_once(self, now: float) -> bool:
        """The hot set, the archive a page of index rows at a time, then what changed meanwhile;
        False: a purge (or a reload) came in between."""
        agg = self._agg = Aggregates(self.profile_of)
        agg.advance(now)
        version = self.queue.refresh()  # (the changes since the beginning would name every job)
        floor = now - HORIZON_S - ARCHIVE_MARGIN_S

        def named(st: View) -> tuple[list[str], list[str]] | None:
            # (a view that keeps every job, PostgreSQL's, names those of the horizon itself:
            # there its hot set is the whole history)
            horizon: Callable[[float], tuple[list[str], list[str]]] | None = getattr(st, "horizon_ids", None)
            return horizon(floor) if horizon is not None else None

        def page(st: View, before: int | None) -> tuple[list[ArchivedRow], list[ArchivedRow], int | None]:
            archive = st.archive
            if archive is None:
                return [], [], None
            found = archive.rows(before_seq=before, limit=PAGE_ROWS)
            hot = st.hot_jobs()
            rows = [r for r in found if r.id not in hot]  # (the hot copy is newer)
            recent = [r for r in rows if (r.updated_at or 0.0) >= floor]
            waiting = [
                r for r in rows if (r.updated_at or 0.0) < floor and r.state == State.DEAD and r.resolved_at is None
            ]
            return recent, waiting, found[-1].seq if len(found) == PAGE_ROWS else None

        horizon = self.queue.store.read(named)
        if horizon is not None:
            recent_ids, waiting_ids = horizon
            self._fold_ids(recent_ids)
            agg.unfolded_dead.update(i for i in waiting_ids if i not in agg.cursors)
        else:
            # hot first: a job archived meanwhile is folded already (its archived copy folds
            # nothing more), and one that came back to the hot set was changed, so
            # changed_since names it; each job has one cursor, whichever copy was read
            self._fold_ids(self.queue.store.read(lambda st: list(st.hot_jobs())))
            before: int | None = None
            while True:
                recent, waiting, before = self.queue.store.read(lambda st, b=before: page(st, b))  # type: ignore[misc]
                self._fold_rows(recent, waiting=False)
                self._fold_rows(waiting, waiting=True)
                if before is None:
                    break
        latest, ids = self.queue.changed_since(version)
        if ids is None:
            self._version = latest
            return False
        self._fold_ids(sorted(ids))
        self._version = latest
        return True


def jobs_of(view: View) -> Iterable[JobDict]:
    """Every job a view holds, hot and archived, with its events (the brute-force side of the
    tests, and nothing a repaint may call: it reads the whole history)."""
    hot = view.hot_jobs()
    yield from hot.values()
    if view.archive is not None:
        rows = [r for r in view.archive.rows() if r.id not in hot]
        for job in view.archive.jobs(rows):
            if not view.purged(job):
                yield job
