"""Windowed metrics: the incremental aggregates equal a brute-force recount of the events.

Random histories run on the JSON store through two queues on one data dir (two
processes' worth of state: the metrics follow one, the other commits too): submissions,
successes, retryable, throttled and fatal failures, expired leases, cancels, retries,
replays, resolutions, compactions that archive finished jobs, purges, and clock jumps
from a second to past the seven-day horizon. After each refresh the figures of every
window must equal a recount from every stored job's timeline (the percentiles within
the stated bound).
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from desktop_queue.core import FakeClock, Queue, RetryPolicy
from desktop_queue.core.errors import QueueError
from desktop_queue.core.metrics import percentile
from desktop_queue.core.outcome import Outcome
from desktop_queue.core.records import JobDict
from desktop_queue.core.search import profile_of
from desktop_queue.core.windowed import (
    PERCENTILE_BOUND,
    TIER_REACH_S,
    WINDOWS,
    Aggregates,
    WindowedMetrics,
    WindowFigures,
    jobs_of,
    window_steps,
)

# --------------------------------------------------------------------------- the recount

#: event type -> the state it leaves a job in (the module's definitions, written out again)
_AFTER = {
    "submitted": "queued",
    "leased": "running",
    "succeeded": "succeeded",
    "retry_scheduled": "queued",
    "throttled": "queued",
    "lease_expired": "queued",
    "retried": "queued",
    "released": "queued",
    "dead_lettered": "dead",
    "cancelled": "cancelled",
}


def _after(ev: dict[str, Any], state: str | None) -> str | None:
    kind = ev["type"]
    if kind in _AFTER:
        return _AFTER[kind]
    if kind == "resolved":
        return "resolved" if state == "dead" else state
    if kind == "reconciled":
        detail = ev.get("detail") or {}
        if detail.get("result_ref"):
            return "succeeded"
        return "dead" if "attempts exhausted" in str(detail.get("reason") or "") else "queued"
    return state


def recount(jobs: Iterable[JobDict], window: str, now: float) -> dict[str, Any]:
    """Every figure of ``window`` straight from the timelines: no buckets, no cursors."""
    first, step, count = window_steps(window, now)
    end = first + count * step
    minutes = step / 60.0
    depth = {s: [0] * count for s in ("queued", "running", "dead")}
    finished = {s: [0] * count for s in ("succeeded", "dead", "cancelled")}
    counters = {name: [0] * count for name in ("retries", "throttled", "lease_expiries")}
    waits: list[list[float]] = [[] for _ in range(count)]
    runs: list[list[float]] = [[] for _ in range(count)]
    by_class: dict[str, int] = {}
    requests: dict[str, list[int]] = {}
    events = 0

    def slot(at: float) -> int | None:
        return int((at - first) // step) if first <= at < end else None

    for job in jobs:
        state: str | None = None
        ready: float | None = None
        leased: float | None = None
        timeline: list[tuple[float, str | None]] = []
        for ev in job["events"]:
            at, kind, i = ev["at"], ev["type"], slot(ev["at"])
            events += i is not None
            if kind in ("submitted", "retried"):
                ready = at
            elif kind in ("retry_scheduled", "throttled"):
                ready = (ev.get("detail") or {}).get("run_after", at)
                if i is not None:
                    counters["retries" if kind == "retry_scheduled" else "throttled"][i] += 1
            elif kind == "leased":
                if ready is not None and i is not None:
                    waits[i].append(max(0.0, at - ready))
                ready, leased = None, at
                if i is not None:
                    requests.setdefault(profile_of(job) or job["kind"], [0] * count)[i] += 1
            elif kind == "succeeded" and leased is not None:
                if i is not None:
                    runs[i].append(max(0.0, at - leased))
                leased = None
            elif kind == "lease_expired":
                ready = at
                if i is not None:
                    counters["lease_expiries"][i] += 1
            elif kind == "reconciled":
                ready = at
            new = _after(ev, state)
            if new != state and new in finished and i is not None:
                finished[new][i] += 1
                if new == "dead":
                    cls = (ev.get("detail") or {}).get("error_class") if kind == "dead_lettered" else None
                    by_class[cls or "retryable"] = by_class.get(cls or "retryable", 0) + 1
            state = new
            timeline.append((at, state))
        for i in range(count):
            edge = first + (i + 1) * step
            at_edge = None
            for at, s in timeline:
                if at < edge:
                    at_edge = s
            if at_edge in depth:
                depth[at_edge][i] += 1
    flat_waits = [v for vs in waits for v in vs]
    flat_runs = [v for vs in runs for v in vs]
    ok, dead = sum(finished["succeeded"]), sum(finished["dead"])
    return {
        "depth": depth,
        "finished": finished,
        "finished_per_min": [round(sum(finished[s][i] for s in finished) / minutes, 6) for i in range(count)],
        "success_rate": [
            round(finished["succeeded"][i] / (finished["succeeded"][i] + finished["dead"][i]), 6)
            if finished["succeeded"][i] + finished["dead"][i]
            else None
            for i in range(count)
        ],
        "series_p": {
            "wait_p50_s": [percentile(w, 50) for w in waits],
            "wait_p95_s": [percentile(w, 95) for w in waits],
            "run_p50_s": [percentile(r, 50) for r in runs],
            "run_p95_s": [percentile(r, 95) for r in runs],
        },
        "total_p": {
            "wait_p50_s": percentile(flat_waits, 50),
            "wait_p95_s": percentile(flat_waits, 95),
            "run_p50_s": percentile(flat_runs, 50),
            "run_p95_s": percentile(flat_runs, 95),
        },
        **counters,
        "dead_letters_by_class": by_class,
        "requests": {p: [round(n / minutes, 6) for n in ns] for p, ns in requests.items()},
        "events": events,
        "success_rate_total": round(ok / (ok + dead), 6) if ok + dead else None,
    }


def close_enough(approx: float | None, exact: float | None) -> bool:
    if approx is None or exact is None:
        return approx is None and exact is None
    relative, absolute = PERCENTILE_BOUND
    return abs(approx - exact) <= relative * exact + absolute + 1e-9


def assert_equal(figures: WindowFigures, expected: dict[str, Any]) -> None:
    assert figures.depth == expected["depth"]
    assert figures.finished == expected["finished"]
    assert figures.finished_per_min == expected["finished_per_min"]
    assert figures.success_rate == expected["success_rate"]
    assert figures.retries == expected["retries"]
    assert figures.throttled == expected["throttled"]
    assert figures.lease_expiries == expected["lease_expiries"]
    assert figures.dead_letters_by_class == expected["dead_letters_by_class"]
    assert figures.events == expected["events"]
    assert figures.totals["success_rate"] == expected["success_rate_total"]
    got_requests = {p.profile: p.requests_per_min for p in figures.profiles if any(p.requests_per_min)}
    assert got_requests == expected["requests"]
    for name, series in expected["series_p"].items():
        got = getattr(figures, name)
        assert all(close_enough(a, e) for a, e in zip(got, series, strict=True)), (name, got, series)
    for name, exact in expected["total_p"].items():
        assert close_enough(figures.totals[name], exact), (name, figures.totals[name], exact)


# --------------------------------------------------------------------------- random histories

POLICY = RetryPolicy()
OPS = st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 3)),
    st.tuples(st.just("complete"), st.integers(0, 1)),
    st.tuples(st.sampled_from(["fail_retryable", "fail_throttled", "fail_fatal"]), st.integers(0, 1)),
    st.tuples(st.just("expire"), st.integers(0, 1)),
    st.tuples(st.sampled_from(["cancel", "retry", "replay", "resolve"]), st.integers(0, 50)),
    st.tuples(st.sampled_from(["compact", "purge", "refresh"]), st.integers(0, 1)),
    st.tuples(st.just("advance"), st.sampled_from([0.004, 0.3, 2.5, 45.0, 700.0, 4000.0, 30_000.0, 200_000.0])),
)


class History:
    """Two queues on one data dir (the metrics follow ``a``; ``b`` commits as another process would)."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="dq-windowed-"))
        self.clock = FakeClock()
        self.a = self._open(1)
        self.b = self._open(2)
        self.metrics = WindowedMetrics(self.a)
        self.n = 0

    def _open(self, seed: int) -> Queue:
        return Queue.open(
            self.tmp / "data",
            clock=self.clock,
            policy=POLICY,
            rng=random.Random(seed),
            rotate_bytes=1 << 20,
            background_compaction=False,
            keep_finished=1,
            keep_finished_s=60.0,
        )

    def close(self) -> None:
        self.a.close()
        self.b.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _finished_ids(self, q: Queue) -> list[str]:
        return sorted(j.id for j in q.list() if j.is_finished)

    def run(self, op: tuple[str, Any]) -> None:
        name, arg = op
        q = self.a if self.n % 2 else self.b
        self.n += 1
        try:
            if name == "submit":
                kinds = ["demo", "openai.chat", "demo", "lab.chat"]
                q.submit(
                    kinds[arg % 4], {"n": self.n}, max_attempts=2, priority="background" if arg % 2 else "interactive"
                )
            elif name in ("complete", "fail_retryable", "fail_throttled", "fail_fatal", "expire"):
                lease = q.lease(lease_s=1.0 if name == "expire" else 60.0)
                if lease is None:
                    return
                self.clock.advance(0.05 + 0.37 * arg)
                if name == "complete":
                    q.complete(lease, {"text": "ok"})
                elif name == "expire":
                    self.clock.advance(5.0)
                    q.reap()
                else:
                    cls = name.removeprefix("fail_")
                    q.fail(lease, Outcome(ok=False, error_class=cls, message="x", retry_after=1.0))  # type: ignore[arg-type]
            elif name in ("cancel", "retry", "replay", "resolve"):
                jobs = q.list()
                if not jobs:
                    return
                job = jobs[arg % len(jobs)]
                if name == "cancel":
                    q.cancel(job.id)
                elif name == "retry":
                    q.retry(job.id)
                elif name == "replay":
                    q.replay(job.id)
                else:
                    q.resolve(job.id)
            elif name == "compact":
                q.store.compact_now()
            elif name == "purge":
                q.purge(self.clock.now() - 3600.0 * (1 + arg))
            elif name == "advance":
                self.clock.advance(float(arg))
        except QueueError:
            pass  # (not allowed in the job's state: nothing changed)

    def check(self) -> None:
        now = self.clock.now()
        for window in WINDOWS:
            figures = self.metrics.figures(window, now)
            json.dumps(figures.to_json())  # JSON-ready, every time
            jobs = self.a.store.read(lambda st: [dict(j, events=list(j["events"])) for j in _all(st)])
            assert_equal(figures, recount(jobs, window, now))


def _all(view: Any) -> list[JobDict]:
    from desktop_queue.core.model import events_of

    out = list(jobs_of(view))
    for job in out:
        events_of(job)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=60))
def test_incremental_equals_recount(ops: list[tuple[str, Any]]) -> None:
    history = History()
    try:
        for op in ops:
            history.run(op)
            if op[0] == "refresh":
                history.check()
        history.check()
        # a fresh process (its cache gone) derives the same figures from the store alone
        fresh = WindowedMetrics(history.b)
        now = history.clock.now()
        for window in WINDOWS:
            assert fresh.figures(window, now).to_json() == history.metrics.figures(window, now).to_json()
    finally:
        history.close()


# --------------------------------------------------------------------------- examples


def test_folds_only_what_changed(open_queue: Any, clock: FakeClock) -> None:
    """Between two figures, only the jobs that changed are read: no rebuild, no rescan."""
    queue = open_queue()
    for i in range(5):
        queue.submit("demo", {"i": i})
    metrics = WindowedMetrics(queue)
    first = metrics.figures("1h")
    assert first.depth["queued"][-1] == 5
    assert metrics.rebuilds == 1
    lease = queue.lease()
    assert lease is not None
    clock.advance(2.0)
    queue.complete(lease, {"text": "done"})
    second = metrics.figures("1h")
    assert metrics.rebuilds == 1
    assert second.depth["queued"][-1] == 4
    assert second.finished["succeeded"][-1] == 1
    assert second.totals["run_p50_s"] == pytest.approx(2.0, rel=0.011)


def test_empty_window_and_bad_window(open_queue: Any, clock: FakeClock) -> None:
    queue = open_queue()
    metrics = WindowedMetrics(queue)
    figures = metrics.figures("24h")
    assert figures.empty
    assert len(figures.times) == 144 and figures.step_s == 600
    assert figures.to_json()["empty"] is True
    with pytest.raises(ValueError, match="unknown window"):
        metrics.figures("2h")


def test_old_dead_letters_still_count_after_the_horizon(open_queue: Any, clock: FakeClock) -> None:
    """A dead letter that nobody touched for weeks still waits: the 1 h depth says so,
    from a process that never saw it die."""
    queue = open_queue(keep_finished=0, keep_finished_s=0.0, background_compaction=False)
    job = queue.submit("demo", {"doomed": True}, max_attempts=1).job
    lease = queue.lease()
    assert lease is not None
    queue.fail(lease, Outcome(ok=False, error_class="fatal", message="bad request"))  # type: ignore[arg-type]
    clock.advance(20 * 86_400.0)
    queue.store.compact_now()
    metrics = WindowedMetrics(queue)
    figures = metrics.figures("1h")
    assert figures.depth["dead"] == [1] * 60
    assert figures.dead_letters_by_class == {}
    queue.retry(job.id)
    figures = metrics.figures("1h")
    assert figures.depth["dead"][-1] == 0 and figures.depth["queued"][-1] == 1


def test_aggregates_prune_keeps_live_jobs() -> None:
    agg = Aggregates()
    job: JobDict = {  # type: ignore[typeddict-item]
        "id": "j1",
        "kind": "demo",
        "events": [{"type": "submitted", "at": 1000.0, "detail": {}}],
    }
    agg.fold(job)
    agg.prune(1000.0 + 30 * 86_400)
    assert "j1" in agg.cursors and agg.depth["queued"] == 1
    assert all(not buckets for buckets in agg.tiers.values())


def test_each_tier_keeps_only_what_its_window_reads(open_queue: Any, clock: FakeClock) -> None:
    """The per-minute tier is read by the last hour only, the ten-minute one by the last day:
    a job of two days ago is counted in the hourly tier alone, and the windows are those of a recount."""
    queue = open_queue()

    def run_one(i: int) -> None:
        queue.submit("demo", {"i": i})
        lease = queue.lease()
        assert lease is not None
        clock.advance(3.0)
        queue.complete(lease, {"text": "ok"})

    run_one(0)
    clock.advance(2 * 86_400.0)
    run_one(1)
    now = clock.now()
    metrics = WindowedMetrics(queue)
    for window in WINDOWS:
        jobs = queue.store.read(lambda st: [dict(j, events=list(j["events"])) for j in _all(st)])
        assert_equal(metrics.figures(window, now), recount(jobs, window, now))
    agg = metrics._agg
    assert agg is not None
    for width, buckets in agg.tiers.items():
        reach = now - TIER_REACH_S[width]
        assert buckets and all((n + 1) * width > reach for n in buckets), width
    assert sum(b.counters.get("f:succeeded", 0) for b in agg.tiers[3600].values()) == 2
    assert sum(b.counters.get("f:succeeded", 0) for b in agg.tiers[60].values()) == 1
    clock.advance(2 * 3600.0)  # later, what left a tier's reach is let go at the next prune
    metrics.figures("1h", clock.now() + 601.0)
    assert not agg.tiers[60] and agg.tiers[3600]
