"""The repair scan: each finding is found and recorded once, with an injected clock."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.alerts import JOBS_STUCK, AlertBook, Rule
from desktop_queue.core.estimate import RunTimes
from desktop_queue.core.model import EventType, State
from desktop_queue.core.outbox import Outbox
from desktop_queue.core.repair import (
    LONG_RUNNING,
    MAX_FINDINGS,
    NOTIFICATION_MISSING,
    NOTIFICATION_REQUEUED,
    STUCK,
    RepairScan,
    Upkeep,
)

OpenQueue = Callable[..., Queue]


class _Provider:
    """A provider that says it cannot run (no key yet)."""

    version = "1"

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason

    def validate(self, payload: Any) -> None:
        return None

    def unavailable_reason(self) -> str | None:
        return self.reason


def findings(queue: Queue, job_id: str) -> list[dict[str, Any]]:
    return [dict(e.detail) for e in queue.get(job_id).events if e.type == EventType.REPAIR_FINDING]


def test_a_stuck_job_is_found_once_and_says_why(open_queue: OpenQueue, clock: FakeClock) -> None:
    provider = _Provider("no API key is set for profile openai")
    queue = open_queue(providers={"demo": provider})
    job = queue.submit("demo", {"prompt": "a secret prompt"}).job
    scan = RepairScan(queue)
    clock.advance(60)
    assert scan.scan().findings == []  # late, but not far past its run time yet
    clock.advance(600)
    first = scan.scan()
    assert [(f.job_id, f.code) for f in first.findings] == [(job.id, STUCK)]
    assert "no API key is set" in first.findings[0].text and first.findings[0].needs_person
    assert first.stuck == [job.id]
    clock.advance(60)
    again = scan.scan()
    assert again.findings == [] and again.stuck == [job.id]  # still stuck, not recorded again
    # a second process's scan finds it recorded too
    assert RepairScan(open_queue(providers={"demo": provider})).scan().findings == []
    (detail,) = findings(queue, job.id)
    assert detail["finding"] == STUCK and detail["kind"] == "demo" and detail["run"] == 1
    assert "secret" not in str(detail)


def test_a_kind_without_a_provider_is_named(open_queue: OpenQueue, clock: FakeClock) -> None:
    queue = open_queue()
    job = queue.submit("openai.chat", {"x": 1}).job
    clock.advance(700)
    (finding,) = RepairScan(queue, providers={"demo": _Provider()}).scan().findings
    assert finding.job_id == job.id and "no provider for kind 'openai.chat'" in finding.text


def test_no_capacity_means_not_stuck(open_queue: OpenQueue, clock: FakeClock) -> None:
    queue = open_queue()
    queue.submit("demo", {"x": 1})
    clock.advance(700)
    report = RepairScan(queue, capacity_free=lambda: False).scan()
    assert report.findings == [] and report.stuck == []


def test_a_long_run_is_found_once_per_attempt(open_queue: OpenQueue, clock: FakeClock) -> None:
    queue = open_queue()
    job = queue.submit("demo", {"x": 1}).job
    lease = queue.lease("w", lease_s=3600)
    assert lease is not None
    scan = RepairScan(queue)
    scan.run_times = RunTimes()
    for n in range(3):
        scan.run_times.observe(
            {"id": f"o{n}", "kind": "demo", "state": "succeeded", "started_at": 0, "finished_at": 20}
        )
    clock.advance(100)
    assert scan.scan().findings == []  # 5× its usual time, but younger than two minutes
    clock.advance(100)
    (finding,) = scan.scan().findings
    assert finding.code == LONG_RUNNING and finding.job_id == job.id and "10.0×" in finding.text
    clock.advance(100)
    assert scan.scan().findings == []
    assert [d["finding"] for d in findings(queue, job.id)] == [LONG_RUNNING]


def test_expired_leases_are_reaped(open_queue: OpenQueue, clock: FakeClock) -> None:
    queue = open_queue()
    job = queue.submit("demo", {"x": 1}).job
    assert queue.lease("w", lease_s=30) is not None
    clock.advance(60)
    report = RepairScan(queue).scan()
    assert report.reaped == [job.id]
    assert queue.get(job.id).state == State.QUEUED


def test_a_lost_notification_is_queued_again_once(open_queue: OpenQueue, clock: FakeClock, data_dir: Path) -> None:
    queue = open_queue()
    outbox = Outbox(data_dir, clock.now, alive=lambda holder: False)  # every other claimer has died
    job = queue.submit("demo", {"x": 1}).job
    clock.advance(1)
    lease = queue.lease("w")
    assert lease is not None
    queue.complete(lease, {"text": "done"})
    scan = RepairScan(queue, outbox=outbox)
    report = scan.scan()
    assert [n.job_id for n in report.notices_added] == [job.id]  # nobody fed the outbox: added now
    assert [f.code for f in report.findings] == [NOTIFICATION_MISSING]
    # a process claimed it and died before delivering it
    other = Outbox(data_dir, clock.now)
    other.me = "host/1/dead"
    assert [n.job_id for n in other.claim()] == [job.id]
    assert outbox.view().pending() == []
    report = scan.scan()
    assert [n.job_id for n in report.notices_requeued] == [job.id]
    assert [f.code for f in report.findings] == [NOTIFICATION_REQUEUED]
    assert [n.job_id for n in outbox.view().pending()] == [job.id]
    assert scan.scan().findings == []  # queued again once
    delivered: list[str] = []
    outbox.deliver(lambda notices: delivered.extend(n.job_id for n in notices))
    assert delivered == [job.id]
    assert scan.scan().findings == [] and outbox.view().delivered(f"{job.id}:1:succeeded")


def test_upkeep_raises_one_alert_for_stuck_jobs(open_queue: OpenQueue, clock: FakeClock, data_dir: Path) -> None:
    queue = open_queue()
    for i in range(3):
        queue.submit("demo", {"i": i})
    book = AlertBook(data_dir)
    rule = Rule(JOBS_STUCK, threshold=1, clear_s=0)
    seen: list[str] = []
    upkeep = Upkeep(
        RepairScan(queue, outbox=Outbox(data_dir, clock.now)),
        book=book,
        rules=lambda: [rule],
        on_transitions=lambda ts: seen.extend(t.kind for t in ts),
    )
    upkeep.tick()
    clock.advance(700)
    upkeep.tick()
    upkeep.tick()
    assert seen == ["fired"]
    assert len(upkeep.last.findings if upkeep.last else []) == 0  # the three were recorded by the first scan
    for _ in range(3):
        lease = queue.lease("w")
        assert lease is not None
        queue.complete(lease, {"ok": True})
    upkeep.tick()
    assert seen == ["fired", "cleared"]
    assert [t.kind for t in book.history().transitions] == ["fired", "cleared"]


def test_a_large_stuck_backlog_is_recorded_a_bounded_batch_a_scan(open_queue: OpenQueue, clock: FakeClock) -> None:
    queue = open_queue()
    queue.submit_many("demo", [{"i": i} for i in range(MAX_FINDINGS + 20)])
    clock.advance(700)
    scan = RepairScan(queue)
    sizes = []
    for _ in range(3):
        report = scan.scan()
        sizes.append(len(report.findings))
        assert len(report.stuck) == MAX_FINDINGS + 20  # the alert sees every stuck job at once
    assert sizes == [MAX_FINDINGS, 20, 0]


def test_upkeep_on_a_full_disk_says_which_file_once_and_when_it_works_again(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    from desktop_queue.core import repair as repair_module
    from desktop_queue.core.store import fileio

    queue = open_queue()
    outbox = Outbox(data_dir, clock.now)
    upkeep = Upkeep(RepairScan(queue, outbox=outbox))
    upkeep.tick()
    caplog.set_level(logging.INFO, logger=repair_module.log.name)

    def full(fd: int, data: bytes, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(fileio, "write_all", full)
        for n in range(3):  # a job finishes, and the upkeep cannot announce it
            queue.submit("demo", {"n": n})
            lease = queue.lease("w")
            assert lease is not None
            queue.complete(lease, {"ok": True})
            assert upkeep.tick() == []
    upkeep.tick()
    assert len(outbox.view().pending()) == 3

    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == repair_module.log.name]
    assert said == [
        (logging.WARNING, f"upkeep: {outbox.path}: No space left on device"),
        (logging.INFO, "upkeep works again (it had failed 3 times in a row)"),
    ]
