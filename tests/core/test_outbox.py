"""The notification outbox: every finished job is announced once, across real processes and restarts."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from desktop_queue.core import FakeClock, Queue, SystemClock
from desktop_queue.core.model import ErrorClass
from desktop_queue.core.outbox import LOG_DEAD, Notice, Outbox, log_lines
from desktop_queue.core.outcome import Outcome
from desktop_queue.core.repair import RepairScan

OpenQueue = Callable[..., Queue]
REPO = Path(__file__).resolve().parents[2]

#: a deliverer: waits for "go", then delivers until the outbox is empty; prints what it delivered
_DELIVERER = r"""
import sys, time, orjson
from desktop_queue.core.outbox import Outbox
outbox = Outbox(sys.argv[1], time.time)
print("ready", flush=True)
sys.stdin.readline()
got = []
while outbox.deliver(lambda notices: got.extend(n.key for n in notices), limit=3):
    pass
print(orjson.dumps(got).decode(), flush=True)
"""

#: claims everything, says so, then waits to be killed before it delivers or acknowledges
_CLAIMER = r"""
import sys
from desktop_queue.core.outbox import Outbox
claimed = Outbox(sys.argv[1], lambda: float(sys.argv[2])).claim()  # the test's clock
print(len(claimed), flush=True)
sys.stdin.readline()
"""

#: finishes every queued job in another process (the window learns of them from the store)
_FINISHER = r"""
import sys
from desktop_queue.core import Queue
with Queue.open(sys.argv[1]) as q:
    while (lease := q.lease("other")) is not None:
        q.complete(lease, {"ok": True})
print("done", flush=True)
"""


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _finish(queue: Queue, n: int, dead: int = 0, first: int = 0) -> list[str]:
    ids = []
    for i in range(first, first + n):
        ids.append(queue.submit("demo", {"i": i}, title=f"job {i}").job.id)
        lease = queue.lease("w")
        assert lease is not None
        if i - first < dead:
            queue.fail(lease, Outcome.failure(ErrorClass.FATAL, "HTTP 400"))
        else:
            queue.complete(lease, {"i": i})
    return ids


def test_notices_come_from_the_store_and_are_added_once(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path
) -> None:
    queue = open_queue()
    outbox = Outbox(data_dir, clock.now)
    outbox.view()  # the outbox starts here: jobs finished before are not announced
    clock.advance(1)
    ids = _finish(queue, 4, dead=1)
    added = outbox.feed(queue)
    assert sorted(n.job_id for n in added) == sorted(ids)
    assert {n.state for n in added} == {"succeeded", "dead"}
    assert outbox.feed(queue) == [] and outbox.add_missing(queue) == []
    texts = sorted(n.text() for n in added)
    assert texts[:2] == ["“job 0” dead-lettered; it waits for you in Dead letters", "“job 1” finished"]


def test_a_notice_quotes_a_title_that_ends_in_its_own_full_stop() -> None:
    """The banner read "Write a short poem about queues.: finished"."""
    assert _notice(1).text() == "“a private prompt 1” finished"
    titled = Notice("k", "0123456789", "succeeded", "Write a short poem about queues.", "openai.chat", 0.0)
    assert titled.text() == "“Write a short poem about queues.” finished"
    untitled = Notice("k", "0123456789", "dead", "", "openai.chat", 0.0)
    assert untitled.text() == "openai.chat job 01234567 dead-lettered; it waits for you in Dead letters"


def test_notices_a_full_disk_refused_are_added_by_the_next_feed(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while jobs finish: the feed fails naming the file, and loses none of them."""
    from desktop_queue.core.store import fileio

    queue = open_queue()
    outbox = Outbox(data_dir, clock.now)
    outbox.view()
    clock.advance(1)
    first = _finish(queue, 3)
    outbox.feed(queue)
    ids = _finish(queue, 3, first=3)
    real_write_all = fileio.write_all

    def half_then_full(fd: int, data: bytes, **kwargs: Any) -> None:
        real_write_all(fd, data[: len(data) // 2])  # part of it went, then the disk was full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(fileio, "write_all", half_then_full)
        with pytest.raises(OSError) as failed:
            outbox.feed(queue)
    assert failed.value.filename == str(outbox.path) and failed.value.errno == errno.ENOSPC

    outbox.feed(queue)
    view = outbox.view()
    assert sorted(n.job_id for n in view.pending()) == sorted(first + ids)  # each once
    assert len(view.notices) == 1 and "damaged" in view.notices[0]  # the torn line, ended by the next append


def test_a_round_delivers_every_pending_notice_at_once(open_queue: OpenQueue, clock: FakeClock, data_dir: Path) -> None:
    """A deliverer looks every half minute: a worker that finished 120 jobs meanwhile is
    told in one round (one notification in the window), not 50 a round, falling behind."""
    queue = open_queue()
    outbox = Outbox(data_dir, clock.now)
    outbox.view()
    clock.advance(1)
    ids = _finish(queue, 120, dead=3)
    outbox.feed(queue)
    rounds: list[list[str]] = []
    assert len(outbox.deliver(lambda notices: rounds.append([n.job_id for n in notices]))) == 120
    assert rounds == [ids]  # one round, oldest first
    assert outbox.view().pending() == [] and outbox.deliver(lambda notices: rounds.append([])) == []


def test_jobs_archived_before_a_feed_are_announced(open_queue: OpenQueue, clock: FakeClock, data_dir: Path) -> None:
    """A worker's first feed comes a moment after it starts leasing, and the next every half
    minute; meanwhile it finishes more jobs than the hot set keeps, and a compaction
    archives them: 660 of 3,000 instant demo jobs were never announced."""
    queue = open_queue(keep_finished=5, background_compaction=False)
    outbox = Outbox(data_dir, clock.now)
    outbox.start(queue)  # the worker starts: its outbox follows the store from here
    clock.advance(1)
    first = _finish(queue, 30, dead=2)
    queue.store.compact_now()  # 25 of them archived before the first feed
    assert len([j for j in queue.raw_jobs() if j["state"] != "queued"]) == 5
    added = outbox.feed(queue)
    assert sorted(n.job_id for n in added) == sorted(first)
    assert sum(n.state == "dead" for n in added) == 2
    later = _finish(queue, 20, first=30)
    queue.store.compact_now()  # and between two feeds
    assert sorted(n.job_id for n in outbox.feed(queue)) == sorted(later)
    assert outbox.feed(queue) == []


def test_archived_jobs_are_folded_into_notices_as_they_are_read(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy worker's feed read every job archived since the last one, whole, before it
    made their notices: 50,000 instant jobs took `work` to a 348 MiB peak, which its
    memory then kept."""
    from desktop_queue.core import outbox as outbox_module

    queue = open_queue(keep_finished=5, background_compaction=False)
    outbox = Outbox(data_dir, clock.now)
    outbox.start(queue)
    clock.advance(1)
    _finish(queue, 30)
    queue.store.compact_now()
    steps: list[str] = []
    read = queue.job_dicts

    def one_at_a_time(ids: Any, chunk: int = 500) -> Any:
        for job in read(ids, chunk=1):
            steps.append("read")
            yield job

    def noticed(job: Any) -> Any:
        steps.append("notice")
        return notice_of(job)

    notice_of = outbox_module.notice_of
    monkeypatch.setattr(queue, "job_dicts", one_at_a_time)
    monkeypatch.setattr(outbox_module, "notice_of", noticed)
    assert len(outbox.feed(queue)) == 30
    first = steps.index("read")  # (the hot set's look comes after)
    assert steps.count("read") == 30  # the 5 hot jobs and the 25 archived, the same way
    assert steps[first : first + 60] == ["read", "notice"] * 30  # each made its notice before the next was read


def test_history_before_the_outbox_is_not_announced(open_queue: OpenQueue, clock: FakeClock, data_dir: Path) -> None:
    queue = open_queue()
    _finish(queue, 2)
    clock.advance(1)
    assert Outbox(data_dir, clock.now).feed(queue) == []


def test_a_retried_job_is_announced_again_for_its_new_ending(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path
) -> None:
    queue = open_queue()
    outbox = Outbox(data_dir, clock.now)
    outbox.view()
    (job_id,) = _finish(queue, 1, dead=1)
    assert [n.key for n in outbox.feed(queue)] == [f"{job_id}:1:dead"]
    queue.retry(job_id)
    lease = queue.lease("w")
    assert lease is not None
    queue.complete(lease, {"ok": True})
    assert [n.key for n in outbox.feed(queue)] == [f"{job_id}:2:succeeded"]


def test_two_processes_and_a_restart_deliver_each_notice_once(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path
) -> None:
    queue = open_queue()
    outbox = Outbox(data_dir, clock.now)
    outbox.view()
    clock.advance(1)
    ids = _finish(queue, 20, dead=5)
    outbox.feed(queue)
    procs = [_spawn(_DELIVERER, str(data_dir)) for _ in range(2)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        delivered = [orjson.loads(proc.communicate(timeout=60)[0]) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    keys = delivered[0] + delivered[1]
    assert len(keys) == len(set(keys)) == 20
    assert {k.split(":")[0] for k in keys} == set(ids)
    # a restart (a new process's outbox, the same jobs fed again) delivers nothing
    restarted = Outbox(data_dir, clock.now)
    assert restarted.feed(queue) == []
    assert restarted.deliver(lambda notices: None) == []


def test_a_claimer_killed_before_delivering_is_repaired_and_delivered_once(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path
) -> None:
    queue = open_queue()
    outbox = Outbox(data_dir, clock.now)
    outbox.view()
    clock.advance(1)
    _finish(queue, 3)
    outbox.feed(queue)
    proc = _spawn(_CLAIMER, str(data_dir), str(clock.now()))
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "3"
        assert outbox.deliver(lambda notices: None) == []  # claimed by the other process
        assert RepairScan(queue, outbox=outbox).scan().notices_requeued == []  # it still runs
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    report = RepairScan(queue, outbox=outbox).scan()
    assert len(report.notices_requeued) == 3
    got: list[str] = []
    outbox.deliver(lambda notices: got.extend(n.key for n in notices))
    assert len(got) == 3
    assert RepairScan(queue, outbox=outbox).scan().notices_requeued == []


def test_jobs_finished_by_another_process_reach_this_outbox(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path
) -> None:
    queue = open_queue(clock=SystemClock())  # the child runs on the real clock: so do its jobs here
    outbox = Outbox(data_dir, time.time)
    outbox.feed(queue)
    ids = [queue.submit("demo", {"i": i}).job.id for i in range(3)]
    proc = _spawn(_FINISHER, str(data_dir))
    out, err = proc.communicate(timeout=60)
    assert out.strip() == "done", err
    assert sorted(n.job_id for n in outbox.feed(queue)) == sorted(ids)


def test_a_torn_last_line_is_skipped_with_a_note(open_queue: OpenQueue, clock: FakeClock, data_dir: Path) -> None:
    queue = open_queue()
    outbox = Outbox(data_dir, clock.now)
    outbox.view()
    clock.advance(1)
    _finish(queue, 2)
    outbox.feed(queue)
    with open(outbox.path, "ab") as f:
        f.write(b'{"op": "ack", "key": "')  # a crash in the middle of an append
    view = outbox.view()
    assert len(view.pending()) == 2
    assert any("torn" in n for n in view.notices)
    got: list[str] = []
    outbox.deliver(lambda notices: got.extend(n.key for n in notices))
    assert len(got) == 2 and outbox.view().pending() == []


def test_compaction_keeps_what_is_needed(open_queue: OpenQueue, clock: FakeClock, data_dir: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import desktop_queue.core.outbox as outbox_mod

    monkeypatch.setattr(outbox_mod, "COMPACT_LINES", 5)
    queue = open_queue()
    outbox = Outbox(data_dir, clock.now)
    outbox.view()
    clock.advance(1)
    _finish(queue, 4)
    outbox.feed(queue)
    outbox.deliver(lambda notices: None, limit=2)
    assert outbox.compact(queue)
    view = outbox.view()
    assert len(view.pending()) == 2 and sum(e.acked for e in view.entries.values()) == 2
    assert outbox.feed(queue) == [] and outbox.add_missing(queue) == []  # nothing announced again


def test_short_worker_runs_keep_the_file_small_and_announce_each_job_once(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the repair scan compacted, every 30 s: a day of ``work --until-idle`` runs,
    each shorter than that, left 213,000 lines that every feed, claim and ack parsed
    whole (100 MiB at each read). A feed now compacts what has grown."""
    import desktop_queue.core.outbox as outbox_mod

    monkeypatch.setattr(outbox_mod, "COMPACT_LINES", 40)
    queue = open_queue(keep_finished=3, keep_finished_s=0.0, background_compaction=False)
    told: list[str] = []
    sizes = []
    for run in range(12):
        outbox = Outbox(data_dir, clock.now)  # a new process each run
        outbox.start(queue)
        clock.advance(1)
        _finish(queue, 5, dead=run % 2, first=run * 5)
        queue.store.compact_now()  # (the hot set moves on: acknowledged notices can go)
        outbox.feed(queue)
        outbox.deliver(lambda notices: told.extend(n.job_id for n in notices))
        sizes.append(len(outbox.path.read_bytes().splitlines()))
    assert sorted(told) == sorted({j.id for j in queue.list()}) and len(told) == 60
    assert max(sizes) < 40 + 3 * 5 + 1, sizes  # (a run appends an add, a claim and an ack a job)
    assert outbox.feed(queue) == [] and outbox.add_missing(queue) == []


def test_a_read_holds_the_entries_not_the_file(data_dir: Path, clock: FakeClock) -> None:
    """The worker's peak on the million-job store was a read of the outbox: the file, its
    lines and their records all at once. A read now holds what it builds, a line at a time."""
    import tracemalloc

    outbox = Outbox(data_dir, clock.now)
    outbox.view()
    keys = [f"job{i}:1:succeeded" for i in range(50)]
    lines = [
        orjson.dumps({"op": "add", "key": k, "job_id": k[:5], "state": "succeeded", "finished_at": clock.now() + 1})
        for k in keys
    ]
    for round_ in range(1000):  # claimed and queued again, over and over: many lines, few entries
        lines += [
            orjson.dumps({"op": op, "key": k, "by": "h/1/2", "at": round_})
            for k in keys[:20]
            for op in ("claim", "requeue")
        ]
    with open(outbox.path, "ab") as fh:
        fh.write(b"\n".join(lines) + b"\n")
    size = outbox.path.stat().st_size
    assert size > 2_000_000
    tracemalloc.start()
    try:
        view = outbox.view()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(view.pending()) == 50 and view.lines == 1 + len(lines)
    assert peak < size / 4, f"a read of {size:,} bytes held {peak:,}"


_WINDOW = r"""
import sys, time
from desktop_queue.core.outbox import Outbox
Outbox(sys.argv[1], time.time).hold_window()
print("holding", flush=True)
sys.stdin.readline()
"""


def test_an_open_window_is_seen_by_other_processes_until_it_dies(data_dir: Path) -> None:
    outbox = Outbox(data_dir, time.time)
    assert not outbox.window_present()
    proc = _spawn(_WINDOW, str(data_dir))
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        assert outbox.window_present()
        proc.kill()  # the OS releases the lock of a process that died
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert not outbox.window_present()


def test_a_malformed_line_in_the_middle_is_skipped_with_a_note(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path
) -> None:
    queue = open_queue()
    outbox = Outbox(data_dir, clock.now)
    outbox.view()
    with open(outbox.path, "ab") as f:
        f.write(b'{"op": "add", "key": "x"}\n')  # valid JSON, not a notice
    clock.advance(1)
    _finish(queue, 1)
    assert len(outbox.feed(queue)) == 1
    view = outbox.view()
    assert len(view.pending()) == 1 and any("line 2 is damaged" in n for n in view.notices)


def test_the_first_feed_follows_from_the_current_version_not_from_every_change(tmp_path: Path) -> None:
    """Changes "since the beginning" name every job ever written (a million rows on
    PostgreSQL, read at each start of a window): the first feed reads the hot set once
    and follows the store's changes from the version it had then."""
    calls: list[Any] = []
    ended = {"id": "a1", "state": "succeeded", "finished_at": 5.0, "title": "t", "kind": "demo"}

    class _Queue:
        def refresh(self) -> int:
            calls.append("refresh")
            return 7

        def changed_since(self, version: int) -> tuple[int, set[str]]:
            calls.append(("changed_since", version))
            return 9, {"a1"}

        def hot_ids(self, states: Any = None) -> list[str]:
            calls.append("hot_ids")
            return ["a1"]

        def job_dicts(self, ids: set[str]) -> list[dict[str, Any]]:
            calls.append(("job_dicts", set(ids)))
            return [ended] if "a1" in ids else []

    outbox = Outbox(tmp_path, lambda: 0.0)
    assert [n.job_id for n in outbox.feed(_Queue())] == ["a1"]
    assert outbox.feed(_Queue()) == []  # (announced once)
    assert calls == ["refresh", "hot_ids", ("job_dicts", {"a1"}), ("changed_since", 7), ("job_dicts", {"a1"})]


def _notice(i: int, state: str = "succeeded", kind: str = "demo") -> Notice:
    job_id = f"{i:010x}"
    return Notice(f"{job_id}:1:{state}", job_id, state, f"a private prompt {i}", kind, 1_700_000_000.0 + i)


def test_a_log_names_a_few_notices_one_by_one() -> None:
    notices = [_notice(1), _notice(2, "dead")]
    assert log_lines(notices) == [
        "job 0000000001 (demo): finished",
        "job 0000000002 (demo): dead-lettered; it waits for you in Dead letters",
    ]


def test_a_drained_backlog_is_counted_in_a_log_and_its_dead_letters_still_named() -> None:
    """A worker that drained 2,000 jobs said "finished" 2,000 times; the dead letter was lost among them."""
    notices = [_notice(i, kind="demo" if i % 4 else "openai.chat") for i in range(2000)]
    notices.insert(700, _notice(5000, "dead", "openai.chat"))
    lines = log_lines(notices)
    assert lines == [
        "2,000 jobs finished (demo 1,500; openai.chat 500)",
        "job 0000001388 (openai.chat): dead-lettered; it waits for you in Dead letters",
    ]
    assert not any("private prompt" in line for line in lines)


def test_past_a_page_of_dead_letters_a_log_counts_the_rest() -> None:
    lines = log_lines([_notice(i, "dead") for i in range(LOG_DEAD + 2)])
    assert len(lines) == LOG_DEAD + 1
    assert lines[-1] == (
        "2 more jobs dead-lettered; they wait for you in Dead letters (desktop-queue list --state dead)"
    )
    assert lines[0] == "job 0000000000 (demo): dead-lettered; it waits for you in Dead letters"


def _ended(clock: FakeClock, *names: str) -> list[dict[str, Any]]:
    """Finished jobs as the store holds them, for :meth:`Outbox.add`."""
    return [{"id": n, "state": "succeeded", "title": n, "kind": "demo", "finished_at": clock.now() + 1} for n in names]


class _CountingJson:
    """``orjson`` as the outbox module sees it, counting the lines it parses."""

    def __init__(self) -> None:
        self.parsed = 0
        self.dumps = orjson.dumps
        self.JSONDecodeError = orjson.JSONDecodeError

    def loads(self, raw: Any) -> Any:
        self.parsed += 1
        return orjson.loads(raw)


def _as_read_whole(outbox: Outbox) -> dict[str, tuple[bool, str | None]]:
    """Each entry of ``outbox``'s view: acknowledged, claimed by."""
    return {k: (e.acked, e.claimed_by) for k, e in outbox.view().entries.items()}


def test_a_read_parses_only_what_was_appended_since_the_last(
    data_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every feed, claim and acknowledgement parsed the whole file: a worker's exit read
    the notices of the 6,000 jobs it ran four times over."""
    import desktop_queue.core.outbox as outbox_mod

    counting = _CountingJson()
    monkeypatch.setattr(outbox_mod, "orjson", counting)
    mine, theirs = Outbox(data_dir, clock.now), Outbox(data_dir, clock.now)  # two processes
    mine.view()
    theirs.add(_ended(clock, *(f"t{i}" for i in range(10))))
    counting.parsed = 0
    assert len(mine.view().pending()) == 10
    assert counting.parsed == 10  # their ten lines, not the header again
    counting.parsed = 0
    mine.add(_ended(clock, "m1", "m2"))
    claimed = mine.claim()
    mine.ack(claimed)
    assert len(claimed) == 12
    assert len(mine.view().pending()) == 0
    assert counting.parsed == 0  # its own lines: applied as written, never read back
    theirs.view()
    assert counting.parsed == 2 + 2 * 12  # theirs read mine: two adds, a claim and an ack each
    assert _as_read_whole(mine) == _as_read_whole(theirs) == _as_read_whole(Outbox(data_dir, clock.now))


def test_a_file_compacted_by_another_process_is_read_again_whole(
    data_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    import desktop_queue.core.outbox as outbox_mod

    monkeypatch.setattr(outbox_mod, "COMPACT_LINES", 5)
    mine, theirs = Outbox(data_dir, clock.now), Outbox(data_dir, clock.now)
    mine.add(_ended(clock, "a", "b", "c", "d"))
    mine.ack(mine.claim(limit=2))
    assert theirs.compact()  # the two acknowledged (no hot set given) go
    theirs.add(_ended(clock, "e"))
    assert sorted(n.job_id for n in mine.view().pending()) == ["c", "d", "e"]
    assert _as_read_whole(mine) == _as_read_whole(Outbox(data_dir, clock.now))


def test_a_file_written_again_at_the_same_inode_is_not_taken_for_the_one_read(data_dir: Path, clock: FakeClock) -> None:
    """A compaction's new file can get the inode number of one deleted before: its header
    tells the two apart, and a file read as it was would carry notices it no longer has."""
    mine = Outbox(data_dir, clock.now)
    mine.add(_ended(clock, "a", "b"))
    assert len(mine.view().pending()) == 2
    other = Outbox(data_dir / "elsewhere", clock.now)
    other.add(_ended(clock, "x", "y", "z"))
    with open(mine.path, "r+b") as fh:  # (same inode, another file's bytes, longer than before)
        fh.write(other.path.read_bytes())
        fh.truncate()
    assert sorted(n.job_id for n in mine.view().pending()) == ["x", "y", "z"]


def test_a_flush_leaves_the_next_process_only_what_it_needs(
    open_queue: OpenQueue, clock: FakeClock, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feed compacted before the delivery that appended a claim and an acknowledgement
    for each notice: a worker's exit left 15,000 lines, read whole by the next process."""
    import desktop_queue.core.outbox as outbox_mod
    from desktop_queue.core.repair import Upkeep

    monkeypatch.setattr(outbox_mod, "COMPACT_LINES", 40)
    queue = open_queue(keep_finished=3, background_compaction=False)
    outbox = Outbox(data_dir, clock.now)
    outbox.start(queue)
    told: list[str] = []
    upkeep = Upkeep(RepairScan(queue, outbox=outbox), deliver=lambda notices: told.extend(n.job_id for n in notices))
    clock.advance(1)
    ids = _finish(queue, 30)
    queue.store.compact_now()  # all but 3 leave the hot set
    upkeep.flush()
    assert sorted(told) == sorted(ids)
    lines = outbox.path.read_bytes().splitlines()
    assert len(lines) == 1 + 2 * 3  # the header; an add and an ack for each job still hot
    assert outbox.feed(queue) == [] and outbox.add_missing(queue) == []  # nothing announced again


def test_a_started_outbox_reads_each_job_once_at_its_first_feed(tmp_path: Path) -> None:
    """A worker's first feed is at its exit: the jobs it ran changed, and its look through
    the hot set for what a process that died left unannounced read them all again."""
    read: list[set[str]] = []
    ended = [{"id": i, "state": "succeeded", "finished_at": 5.0, "title": "t", "kind": "demo"} for i in ("a", "b", "c")]

    class _Queue:
        def refresh(self) -> int:
            return 7

        def changed_since(self, version: int) -> tuple[int, set[str]]:
            return 9, {"a", "b"}  # this process ran them

        def hot_ids(self, states: Any = None) -> list[str]:
            return ["a", "b", "c"]  # c: finished by a process that died before announcing it

        def job_dicts(self, ids: Any) -> list[dict[str, Any]]:
            read.append(set(ids))
            return [j for j in ended if j["id"] in ids]

    outbox = Outbox(tmp_path, lambda: 0.0)
    outbox.start(_Queue())
    assert sorted(n.job_id for n in outbox.feed(_Queue())) == ["a", "b", "c"]
    assert read == [{"a", "b"}, {"c"}]
