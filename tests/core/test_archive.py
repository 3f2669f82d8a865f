"""The archive of finished jobs: the hot set in memory, the rest in compressed segments with a derived index.

Every question the store answers (get, list, counts, stats, duplicates, results) must get
the same answer whether a finished job is hot or archived, and whether the index exists.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.errors import NoSuchJob, StoreCorrupt
from desktop_queue.core.model import State
from desktop_queue.core.outcome import Outcome
from desktop_queue.core.store.archive import FINISHED_SINCE_SQL, Archive, encode_segment, read_segment


def run_jobs(queue: Queue, clock: FakeClock, n: int, *, tag: str = "j", fail_every: int = 0) -> list[str]:
    """Submits and finishes ``n`` jobs: each ``fail_every``-th dies (fatal), the rest succeed."""
    ids = []
    for i in range(n):
        job = queue.submit("demo", {"prompt": f"{tag}{i}"}, title=f"{tag} number {i}").job
        lease = queue.lease("w")
        assert lease is not None and lease.job_id == job.id
        clock.advance(1.0)
        if fail_every and i % fail_every == 0:
            queue.fail(lease, Outcome.failure("fatal", f"refused {i}", status=400))
        else:
            queue.complete(lease, {"text": f"answer {tag}{i}"})
        ids.append(job.id)
    return ids


def answers(queue: Queue, ids: list[str]) -> dict[str, Any]:
    """Everything a person can ask about these jobs, in a comparable form."""
    out: dict[str, Any] = {}
    for job_id in ids:
        job = queue.get(job_id)
        doc = queue.results.get(job.idempotency_key) if job.state == State.SUCCEEDED else None
        out[job_id] = (
            job.state,
            job.title,
            [e.type for e in job.events],
            doc["result"] if doc else None,
        )
    stats = queue.stats().to_json()
    return {
        "jobs": out,
        "counts": queue.counts(),
        "list": [j.id for j in queue.list()],
        "dead": [j.id for j in queue.list("dead")],
        "stats": {k: v for k, v in stats.items() if not k.endswith("_s")},
    }


@pytest.fixture
def small_hot(open_queue: Callable[..., Queue]) -> Callable[..., Queue]:
    """Queues that keep 5 finished jobs hot and compact inline."""

    def _open(**kwargs: Any) -> Queue:
        kwargs.setdefault("keep_finished", 5)
        kwargs.setdefault("background_compaction", False)
        return open_queue(**kwargs)

    return _open


def test_finished_jobs_leave_memory_and_answer_the_same(small_hot: Callable[..., Queue], clock: FakeClock) -> None:
    queue = small_hot()
    ids = run_jobs(queue, clock, 40, fail_every=7)
    before = answers(queue, ids)
    queue.store.compact_now()
    assert len(queue.store.state.jobs) == 5  # the hot set
    assert queue.store.archive.count() == 35
    assert answers(queue, ids) == before
    queue.close()
    again = small_hot()
    assert len(again.store.state.jobs) == 5
    assert answers(again, ids) == before


def test_the_window_is_told_which_jobs_the_hot_set_still_holds(
    small_hot: Callable[..., Queue], clock: FakeClock
) -> None:
    queue = small_hot()
    ids = run_jobs(queue, clock, 12)
    waiting = queue.submit("demo", {"prompt": "waits"}).job.id
    assert queue.hot_among([*ids, waiting]) == {*ids, waiting}
    queue.store.compact_now()
    assert queue.hot_among([*ids, waiting, "no-such-job"]) == {*ids[-5:], waiting}


def test_every_backend_says_its_recent_jobs_are_hot(any_queue: Queue, clock: FakeClock) -> None:
    ids = run_jobs(any_queue, clock, 3)
    assert any_queue.hot_among(ids) == set(ids)


def test_the_jobs_finished_since_a_time_are_found_hot_and_archived(
    small_hot: Callable[..., Queue], clock: FakeClock
) -> None:
    queue = small_hot()
    ids = run_jobs(queue, clock, 30, fail_every=4)
    queue.store.compact_now()
    now = clock.now()
    jobs = [queue.get(i) for i in ids]
    for back in (0.5, 3, 12.5, 25, 1000):
        expected = {
            j.id: j.finished_at
            for j in jobs
            if j.state == State.SUCCEEDED and j.finished_at is not None and j.finished_at >= now - back
        }
        assert queue.finished_since(now - back) == expected
    assert len(queue.finished_since(now - 1000)) == 22 > len(queue.raw_jobs())  # most of them archived


def test_the_jobs_finished_since_a_time_are_read_through_the_finished_index(
    small_hot: Callable[..., Queue], clock: FakeClock
) -> None:
    """Not through the state's: that reads every succeeded job of the history (the status
    bar asks at every window start for the last minute's, the alerts every upkeep)."""
    queue = small_hot()
    run_jobs(queue, clock, 12, fail_every=4)
    queue.store.compact_now()
    archive = queue.store.archive
    assert archive is not None and archive.count() > 0
    for state in (State.SUCCEEDED, State.DEAD):
        plan = " ".join(
            str(row[-1]) for row in archive._query("EXPLAIN QUERY PLAN " + FINISHED_SINCE_SQL, (0.0, state))
        )
        assert "USING INDEX jobs_finished" in plan, plan


def test_the_jobs_finished_since_a_time_over_every_backend(any_queue: Queue, clock: FakeClock) -> None:
    """PostgreSQL finds them through an index on when finished jobs changed (schema 9)."""
    ids = run_jobs(any_queue, clock, 12, fail_every=5)
    stale = any_queue.submit("demo", {"prompt": "queued"}).job.id
    now = clock.now()
    found = any_queue.finished_since(now - 4.5)
    assert found == {i: any_queue.get(i).finished_at for i in ids[-5:] if i != ids[10]}
    assert stale not in any_queue.finished_since(0) and len(any_queue.finished_since(0)) == 9


def test_result_files_of_archived_jobs_are_gone_and_results_still_read(
    small_hot: Callable[..., Queue], clock: FakeClock, data_dir: Path
) -> None:
    queue = small_hot()
    ids = run_jobs(queue, clock, 20)
    queue.store.compact_now()
    files = [p for p in (data_dir / "results").rglob("*.json") if "pending" not in p.parts]
    assert len(files) == 5  # only the hot jobs' results are files
    oldest = queue.get(ids[0])
    assert queue.results.get(oldest.idempotency_key)["result"] == {"text": "answer j0"}
    path = queue.results.materialize(oldest.idempotency_key)  # `show` and the window want a file
    assert path is not None and path.exists()


def test_deleting_the_index_loses_nothing(small_hot: Callable[..., Queue], clock: FakeClock, data_dir: Path) -> None:
    queue = small_hot()
    ids = run_jobs(queue, clock, 30, fail_every=4)
    queue.store.compact_now()
    before = answers(queue, ids)
    queue.close()
    for path in (data_dir / "store" / "archive").glob("index.sqlite3*"):
        path.unlink()
    again = small_hot()
    assert answers(again, ids) == before


def test_a_damaged_index_is_rebuilt(small_hot: Callable[..., Queue], clock: FakeClock, data_dir: Path) -> None:
    queue = small_hot()
    ids = run_jobs(queue, clock, 30)
    queue.store.compact_now()
    before = answers(queue, ids)
    queue.close()
    index = data_dir / "store" / "archive" / "index.sqlite3"
    for suffix in ("-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    index.write_bytes(b"this is not a database" * 100)
    again = small_hot()
    assert answers(again, ids) == before
    assert any("index was damaged" in n for n in again.report.notices)


def test_a_duplicate_of_an_archived_job_returns_it(small_hot: Callable[..., Queue], clock: FakeClock) -> None:
    queue = small_hot()
    ids = run_jobs(queue, clock, 20)
    queue.store.compact_now()
    assert ids[0] not in queue.store.state.jobs
    again = queue.submit("demo", {"prompt": "j0"}, title="j number 0")
    assert again.duplicate and again.job.id == ids[0] and again.job.state == State.SUCCEEDED
    assert again.result is not None and again.result["result"] == {"text": "answer j0"}
    assert queue.lease("w") is None  # nothing new to run: the paid call is not repeated
    assert queue.counts()["succeeded"] == 20


def test_an_archived_dead_job_can_be_retried_and_is_one_job(small_hot: Callable[..., Queue], clock: FakeClock) -> None:
    queue = small_hot()
    ids = run_jobs(queue, clock, 20, fail_every=5)
    run_jobs(queue, clock, 10, tag="later")
    queue.store.compact_now()
    dead = ids[0]
    assert dead not in queue.store.state.jobs and queue.get(dead).state == State.DEAD
    queue.retry(dead)
    assert queue.get(dead).state == State.QUEUED
    counts = queue.counts()
    assert counts["queued"] == 1 and counts["dead"] == 3 and sum(counts.values()) == 30
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == dead
    queue.complete(lease, {"text": "second run"})
    run_jobs(queue, clock, 10, tag="more")
    queue.store.compact_now()  # archived again: a newer copy in a newer segment
    assert dead not in queue.store.state.jobs
    assert queue.get(dead).state == State.SUCCEEDED
    assert queue.counts()["succeeded"] == 37 and sum(queue.counts().values()) == 40
    assert [j.id for j in queue.list()].count(dead) == 1


def test_another_process_lets_go_of_what_a_compaction_archived(
    small_hot: Callable[..., Queue], clock: FakeClock
) -> None:
    writer = small_hot()
    reader = small_hot()
    ids = run_jobs(writer, clock, 30)
    assert len(reader.list()) == 30
    writer.store.compact_now()
    reader.store._follow_at = 0.0  # (it looks every few seconds)
    assert len(reader.list()) == 30
    assert len(reader.store.state.jobs) == 5
    assert reader.get(ids[0]).state == State.SUCCEEDED


def test_another_process_is_told_when_a_purge_removes_archived_jobs(
    small_hot: Callable[..., Queue], clock: FakeClock
) -> None:
    """The window keeps its counts until the store's version moves. A purge's record moves
    it before the compaction removes the archived jobs, which moved nothing: a window went
    on showing 2,313 purged jobs as succeeded."""
    window = small_hot()
    worker = small_hot()
    run_jobs(worker, clock, 30, fail_every=10)
    worker.store.compact_now()
    version = window.refresh()
    assert window.counts()["succeeded"] == 27
    window.store._follow_at = float("inf")  # (the purge record comes first: the window reads then)
    cutoff = clock.now() + 0.5
    assert worker.purge(cutoff, ["succeeded"], dry_run=True) == 27
    worker.purge(cutoff, ["succeeded"])  # its record, then the compaction that removes the archived ones
    version, changed = window.changed_since(version)
    assert changed is None  # the purge's record: read everything again
    window.store._follow_at = 0.0  # (it looks at the archive every few seconds)
    version, changed = window.changed_since(version)
    assert changed is None, "the archive lost jobs: read everything again"
    assert window.counts() == worker.counts() == {**worker.counts(), "succeeded": 0, "dead": 3}


def test_prefix_lookup_reaches_the_archive(small_hot: Callable[..., Queue], clock: FakeClock) -> None:
    queue = small_hot()
    ids = run_jobs(queue, clock, 20)
    queue.store.compact_now()
    assert queue.get(ids[0][:6]).id == ids[0]
    with pytest.raises(NoSuchJob):
        queue.get("ffffffffff")


def test_purge_removes_jobs_results_and_survives_reopen(
    small_hot: Callable[..., Queue], clock: FakeClock, data_dir: Path
) -> None:
    queue = small_hot()
    old = run_jobs(queue, clock, 20, fail_every=5)
    cutoff = clock.now() + 0.5  # the last old job finished at now
    clock.advance(3600)
    new = run_jobs(queue, clock, 10, tag="new")
    queue.store.compact_now()
    assert queue.purge(cutoff, dry_run=True) == 20
    assert queue.counts()["succeeded"] == 26  # a dry run changes nothing
    assert queue.purge(cutoff, ["dead"]) == 4
    assert queue.counts()["dead"] == 0
    assert queue.purge(cutoff) == 16
    for job_id in old:
        with pytest.raises(NoSuchJob):
            queue.get(job_id)
    files = [p for p in (data_dir / "results").rglob("*.json") if "pending" not in p.parts]
    assert len(files) <= 5
    assert queue.counts()["succeeded"] == 10 and sum(queue.counts().values()) == 10
    queue.close()
    again = small_hot()
    assert sorted(j.id for j in again.list()) == sorted(new)
    assert again.stats().jobs == 10


def test_purge_refuses_live_states(small_hot: Callable[..., Queue]) -> None:
    from desktop_queue.core.errors import InvalidInput

    queue = small_hot()
    with pytest.raises(InvalidInput, match="only finished jobs"):
        queue.purge(0.0, ["queued"])


def test_a_damaged_segment_is_quarantined_and_named(
    small_hot: Callable[..., Queue], clock: FakeClock, data_dir: Path
) -> None:
    queue = small_hot()
    ids = run_jobs(queue, clock, 20)
    queue.store.compact_now()
    queue.close()
    [segment] = (data_dir / "store" / "archive").glob("segment-*.dqa")
    raw = bytearray(segment.read_bytes())
    raw[-5] ^= 0xFF
    segment.write_bytes(bytes(raw))
    for path in (data_dir / "store" / "archive").glob("index.sqlite3*"):
        path.unlink()
    again = small_hot()
    assert any(segment.name in n and "damaged" in n for n in again.report.notices)
    assert again.get(ids[-1]).state == State.SUCCEEDED  # the hot set is whole


def test_segments_check_their_blocks() -> None:
    jobs: list[Any] = [{"id": f"{i:010x}", "seq": i, "key": "k", "state": "succeeded"} for i in range(70)]
    data, where = encode_segment(jobs)
    head, entries = read_segment(data, "s")
    assert sorted(j["id"] for *_, j in entries) == [j["id"] for j in jobs] and head["jobs"] == 70
    assert len({w[0] for w in where}) == 3  # blocks of 32
    with pytest.raises(StoreCorrupt):
        read_segment(data[:-3], "s")


def test_jobs_of_one_state_share_blocks() -> None:
    """One dead letter in twenty: a segment's 32 dead jobs lie in one block, not in 32."""
    states = ["dead" if i % 20 == 0 else "succeeded" for i in range(640)]
    jobs: list[Any] = [{"id": f"{i:010x}", "seq": i, "key": f"k{i}", "state": s} for i, s in enumerate(states)]
    data, where = encode_segment(jobs)
    dead_blocks = {where[i][0] for i, s in enumerate(states) if s == "dead"}
    assert len(dead_blocks) == 1
    # every job is where its entry says, whatever the order of the blocks
    _, entries = read_segment(data, "s")
    found = {(offset, line): job["id"] for offset, _, line, job in entries}
    assert [found[(w[0], w[2])] for w in where] == [j["id"] for j in jobs]


def test_a_store_from_schema_3_is_migrated_and_archived(tmp_path: Path, clock: FakeClock) -> None:
    from desktop_queue.core.store import journal as storage

    data_dir = tmp_path / "old"
    queue = Queue.open(data_dir, clock=clock, background_compaction=False, keep_finished=10_000_000)
    run_jobs(queue, clock, 30)
    queue.store.compact_now()
    queue.close()
    [snap] = sorted((data_dir / "store").glob("snapshot-*.json"))[-1:]
    raw = snap.read_bytes().replace(b'"schema_version":4', b'"schema_version":3', 1)
    snap.write_bytes(raw)  # (the checksum covers the jobs, not the header)
    assert storage.decode_snapshot(snap.read_bytes(), snap.name)[1]  # it reads as one to migrate
    again = Queue.open(data_dir, clock=clock, background_compaction=False, keep_finished=5)
    assert (snap.parent / f"{snap.name}.v3-backup").exists()
    assert len(again.list()) == 30
    again.store.compact_now()
    assert len(again.store.state.jobs) == 5 and len(again.list()) == 30
    again.close()


# ----------------------------------------------------------------------------- crash drill

_CRASH_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from desktop_queue.core import FakeClock, Queue
    from desktop_queue.core.store import fileio, archive, compaction, journal

    step = int(sys.argv[2])
    seen = [0]
    real_write, real_unlink, real_replace = fileio.atomic_write, os.unlink, os.replace

    def counting(fn):
        def wrapped(*a, **k):
            seen[0] += 1
            if seen[0] == step:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*a, **k)
        return wrapped

    clock = FakeClock(start=float(sys.argv[3]))
    q = Queue.open(sys.argv[1], clock=clock, background_compaction=False, keep_finished=3)
    archive.atomic_write = counting(real_write)
    compaction.atomic_write = counting(real_write)
    journal.atomic_write = counting(real_write)
    os.unlink = counting(real_unlink)
    os.replace = counting(real_replace)
    if sys.argv[4] == "purge":
        q.purge(float(sys.argv[5]))
    else:
        q.store.compact_now()
    print("done", seen[0])
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["archive", "purge"])
def test_a_kill_between_any_two_writes_loses_no_job(tmp_path: Path, verb: str) -> None:
    """SIGKILL at every file write, rename and unlink of archiving (or purging): nothing is lost or half-purged."""
    step = 1
    while True:
        data_dir = tmp_path / f"{verb}-{step}"
        clock = FakeClock()
        queue = Queue.open(data_dir, clock=clock, background_compaction=False, keep_finished=10_000)
        old = run_jobs(queue, clock, 12, fail_every=4)
        cutoff = clock.now() + 0.5
        clock.advance(60)
        new = run_jobs(queue, clock, 6, tag="new")
        queue.close()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        proc = subprocess.run(
            [sys.executable, "-c", _CRASH_CHILD, str(data_dir), str(step), repr(clock.now()), verb, repr(cutoff)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        finished = proc.returncode == 0
        assert finished or proc.returncode == -signal.SIGKILL, proc.stderr
        after = Queue.open(data_dir, clock=clock, background_compaction=False, keep_finished=3)
        listed = {j.id: j.state for j in after.list()}
        if verb == "purge" and finished:
            assert sorted(listed) == sorted(new)
        elif verb == "purge":
            # the purge record is durable or not: all of the old jobs are there, or none
            present = [i for i in old if i in listed]
            assert present in ([], old), f"half purged at step {step}"
        else:
            assert sorted(listed) == sorted(old + new), f"lost jobs at step {step}"
        for job_id in listed:
            assert after.get(job_id).state in (State.SUCCEEDED, State.DEAD)
        after.store.compact_now()  # and the next compaction finishes the work
        assert {j.id for j in after.list()} == set(listed) if verb == "archive" or finished else True
        after.close()
        if finished:
            break
        step += 1
    assert step > 3  # the drill did kill it at several points


# ----------------------------------------------------------------------------- property

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("run"), st.integers(1, 6), st.booleans()),
        st.tuples(st.just("compact")),
        st.tuples(st.just("retry_dead")),
        st.tuples(st.just("duplicate"), st.integers(0, 40)),
        st.tuples(st.just("advance"), st.integers(1, 2000)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_archived_and_hot_stores_give_the_same_answers(
    tmp_path_factory: pytest.TempPathFactory, ops: list[Any]
) -> None:
    """The same random history on a store that archives eagerly and one that never does."""
    root = tmp_path_factory.mktemp("twins")
    clocks = [FakeClock(), FakeClock()]
    queues = [
        Queue.open(root / "eager", clock=clocks[0], background_compaction=False, keep_finished=1, keep_finished_s=5),
        Queue.open(root / "never", clock=clocks[1], background_compaction=False, keep_finished=10**9),
    ]
    ids: list[str] = []
    try:
        counter = 0
        for op in ops:
            outs = []
            for queue, clock in zip(queues, clocks, strict=True):
                if op[0] == "run":
                    n, fail = op[1], op[2]
                    got = run_jobs(queue, clock, n, tag=f"p{counter}-", fail_every=2 if fail else 0)
                    outs.append(len(got))
                    if queue is queues[0]:
                        ids.extend(got)
                elif op[0] == "compact":
                    queue.store.compact_now()
                elif op[0] == "retry_dead":
                    dead = queue.list("dead", limit=1)
                    if dead:
                        queue.retry(dead[0].id)
                        lease = queue.lease("w")
                        assert lease is not None
                        queue.complete(lease, {"text": "again"})
                    outs.append(bool(dead))
                elif op[0] == "duplicate" and ids:
                    job = queue.get(ids[op[1] % len(ids)]) if queue is queues[0] else None
                    outs.append(job.state if job else None)
                elif op[0] == "advance":
                    clock.advance(op[1])
            if op[0] == "run":
                counter += 1

        # both stores made the same ids? (ids are random: compare by title instead)
        def view(queue: Queue) -> Any:
            jobs = sorted((j.title, j.state, j.run) for j in queue.list())
            return jobs, queue.counts(), {k: v for k, v in queue.stats().to_json().items() if not k.endswith("_s")}

        assert view(queues[0]) == view(queues[1])
        queues[0].close()
        for path in (root / "eager" / "store" / "archive").glob("index.sqlite3*"):
            path.unlink()
        queues[0] = Queue.open(root / "eager", clock=clocks[0], background_compaction=False, keep_finished=1)
        assert view(queues[0]) == view(queues[1])
    finally:
        for queue in queues:
            queue.close()


def test_archive_get_of_unknown_id_is_none(tmp_path: Path) -> None:
    archive = Archive(tmp_path)
    assert archive.get("nothing") is None and archive.count() == 0
    archive.close()


@pytest.mark.parametrize("scan_first", [5, 20_000])
@pytest.mark.parametrize("text", ["NUMBER 1", "er 2", "j n", "1", "%", "_", "no such title"])
def test_title_search_finds_what_a_scan_finds(
    small_hot: Callable[..., Queue], clock: FakeClock, monkeypatch: pytest.MonkeyPatch, text: str, scan_first: int
) -> None:
    """The trigram index (older jobs) and the scan (newest ones) together answer as a full scan does."""
    from desktop_queue.core.store import archive

    monkeypatch.setattr(archive, "SCAN_FIRST", scan_first)
    queue = small_hot()
    run_jobs(queue, clock, 40)
    queue.store.compact_now()
    every = queue.history(limit=1000)
    expected = [r.id for r in every if text.lower() in (r.title or "").lower()]
    assert [r.id for r in queue.history(text=text, limit=1000)] == expected
    assert [r.id for r in queue.history(text=text, limit=3)] == expected[:3]


def test_a_title_search_with_nothing_archived_finds_nothing(open_queue: Callable[..., Queue]) -> None:
    queue = open_queue()
    queue.submit("demo", {"prompt": "alpha"}, title="alpha")
    assert queue.history(text="alpha") == []  # (the hot job is the window's own row)


def test_a_segment_written_again_but_not_indexed_is_indexed_when_read(
    small_hot: Callable[..., Queue], clock: FakeClock, data_dir: Path
) -> None:
    """A crash between a purge's rewrite of a segment and its indexing leaves stale rows: reading mends them."""
    queue = small_hot()
    ids = run_jobs(queue, clock, 40, fail_every=4)
    queue.store.compact_now()
    queue.close()
    [segment] = (data_dir / "store" / "archive").glob("segment-*.dqa")
    _, entries = read_segment(segment.read_bytes(), segment.name)
    kept = [job for *_, job in entries if job["state"] != "dead"]  # as a purge of dead jobs writes it
    segment.write_bytes(encode_segment(kept)[0])  # ... and the index is never told
    again = small_hot()
    survivor = kept[-1]["id"]
    assert again.get(survivor).state == State.SUCCEEDED
    with pytest.raises(NoSuchJob):
        again.get(ids[0])  # a dead one, gone with the rewrite
    hot_dead = sum(1 for j in again.store.state.jobs.values() if j["state"] == State.DEAD)
    assert again.counts()["dead"] == hot_dead  # the archived dead ones went with the rewrite
    assert not list((data_dir / "store" / "archive").glob("*.corrupt-*"))  # nothing was taken for damage


def test_a_compaction_asked_for_segments_folded_since_does_nothing(
    open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path
) -> None:
    """Two processes can ask for compactions up to different segments; one that gets the
    lock after another folded past its segment must not fold again from an older
    snapshot (that wrote an older state and restored result files of archived jobs)."""
    from desktop_queue.core.store.compaction import compact
    from desktop_queue.core.store.fileio import FileLock

    root = data_dir / "store"
    queue = open_queue(keep_finished=2, background_compaction=False, rotate_bytes=4096)
    held = FileLock(root / "compact.lock")
    assert held.acquire(blocking=False)  # as if another process compacted all along: none runs here
    run_jobs(queue, clock, 30)
    held.close()
    newest = queue.store.segment - 1
    compact(root, newest)
    snaps = sorted(p.name for p in root.glob("snapshot-*.json"))
    files = sorted(p.name for p in (data_dir / "results").rglob("*.json") if "pending" not in p.parts)
    archived = sorted(p.name for p in (root / "archive").glob("segment-*"))
    for stale in range(newest - 3, newest):
        assert compact(root, stale) == 0
    assert sorted(p.name for p in root.glob("snapshot-*.json")) == snaps
    assert sorted(p.name for p in (data_dir / "results").rglob("*.json") if "pending" not in p.parts) == files
    assert sorted(p.name for p in (root / "archive").glob("segment-*")) == archived
    queue.close()


def test_jobs_by_id_gives_what_job_gives_reading_each_block_once(
    small_hot: Callable[..., Queue], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outbox asks for the jobs a compaction archived since they changed: in a set's
    order, one at a time, a worker's exit decompressed a block for nearly every one."""
    import desktop_queue.core.store.archive as archive_mod

    queue = small_hot()
    ids = run_jobs(queue, clock, 120, fail_every=9)
    queue.store.compact_now()
    waiting = queue.submit("demo", {"prompt": "waits"}).job.id
    assert queue.store.archive.count() == 115
    wanted = [*sorted(ids, key=lambda i: i[::-1]), waiting, "ffffffffff"]  # no order of theirs
    cutoff = clock.now()
    clock.advance(10)
    queue.purge(cutoff - 100, ["dead"])  # a purge recorded, the archive not yet rewritten

    one_by_one = queue.store.read(lambda st: [j for j in (st.job(i) for i in wanted) if j is not None])
    decoded: list[int] = []
    real = archive_mod._decode_block
    monkeypatch.setattr(archive_mod, "_decode_block", lambda *a: decoded.append(1) or real(*a))
    queue.store.archive._blocks.clear()
    together = queue.store.read(lambda st: st.jobs_by_id(wanted))

    assert together == one_by_one
    assert [j["id"] for j in together][-1] == waiting
    blocks = {row.location[:3] for row in queue.store.archive.rows_of(ids)}
    assert len(decoded) == len(blocks) < 115


def test_a_segment_a_running_compaction_has_not_indexed_yet_is_left_to_it(
    small_hot: Callable[..., Queue], clock: FakeClock, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction writes its archive segment, then indexes it. A worker that looked in
    between indexed the whole segment itself: its jobs parsed at once, 10 MiB at the
    peak of a worker on the million-job store. It now follows the segments indexed
    already, and the new one at its next look."""
    from desktop_queue.core.store.archive import segment_file
    from desktop_queue.core.store.fileio import FileLock, atomic_write

    reader = small_hot()
    writer = small_hot()
    run_jobs(writer, clock, 10)
    assert len(reader.list()) == 10
    reader.store._follow_at = float("inf")  # (it looks every few seconds: not now)
    writer.store.compact_now()  # segment 1, indexed: 5 jobs archived, 5 kept hot
    ids = run_jobs(writer, clock, 12, tag="k")
    assert len(reader.list()) == 22 and len(reader.store.state.jobs) == 22
    compacting = FileLock(data_dir / "store" / "compact.lock")
    assert compacting.acquire(blocking=False)  # a compaction runs
    finished = [reader.store.state.jobs[i] for i in ids]
    atomic_write(data_dir / "store" / "archive" / segment_file(2), encode_segment(finished)[0])  # not yet indexed
    indexed: list[int] = []
    real = Archive._ingest
    monkeypatch.setattr(Archive, "_ingest", lambda self, n, *a: indexed.append(n) or real(self, n, *a))

    reader.store._follow_at = 0.0
    assert len(reader.list()) == 22
    assert indexed == [] and len(reader.store.state.jobs) == 17  # segment 1 followed, 2 left

    compacting.close()  # it ended (here, without indexing: whoever looks next does)
    reader.store._follow_at = 0.0
    assert len(reader.list()) == 22
    assert indexed == [2] and len(reader.store.state.jobs) == 5
