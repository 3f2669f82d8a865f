"""What a compaction does per job it folds: no wasted file system calls, nothing lost.

The cost of a fold must follow what changed since the last one (issue 10); these tests
pin the calls that made it cost more (unlinks of result files that never existed, the
child's start-up importing the whole core package) without timing anything.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.model import State
from desktop_queue.core.store import compaction
from desktop_queue.core.store.codec import segment_name, spare_name
from desktop_queue.core.store.fileio import TEMP_MARK, WriteCancelled, atomic_write
from desktop_queue.core.store.journal import _CHILD, Store, prepare_spare


def run_jobs(queue: Queue, clock: FakeClock, n: int, *, tag: str = "j", size: int = 0) -> dict[str, Any]:
    """Submits and completes ``n`` jobs; returns each job's id mapped to the result it stored."""
    out: dict[str, Any] = {}
    for i in range(n):
        job = queue.submit("demo", {"prompt": f"{tag}{i}"}, title=f"{tag} {i}").job
        lease = queue.lease("w")
        assert lease is not None and lease.job_id == job.id
        clock.advance(1.0)
        result = {"text": f"answer {tag}{i}" + "x" * size}
        queue.complete(lease, result)
        out[job.id] = result
    return out


def results_of(queue: Queue, ids: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for job_id in ids:
        job = queue.get(job_id)
        assert job.state == State.SUCCEEDED, job_id
        doc = queue.results.get(job.idempotency_key)
        found[job_id] = doc["result"] if doc else None
    return found


def test_a_fold_unlinks_no_file_that_does_not_exist(
    open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = open_queue(keep_finished=5, background_compaction=False)
    expected = run_jobs(queue, clock, 60)
    queue.results.materialize(queue.get(next(iter(expected))).idempotency_key)  # one that has a file
    missing: list[str] = []
    unlinked: list[str] = []
    real_unlink = os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        (unlinked if os.path.lexists(path) else missing).append(os.fspath(path))
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    queue.store.compact_now()
    monkeypatch.undo()
    assert missing == []
    # the materialized copy of an archived result went with the others' records
    assert sum(1 for p in unlinked if "results" in Path(p).parts and TEMP_MARK not in p) == 1
    assert len(queue.store.state.jobs) == 5
    assert results_of(queue, list(expected)) == expected
    queue.close()
    assert results_of(open_queue(keep_finished=5, background_compaction=False), list(expected)) == expected


def test_a_result_too_large_to_inline_stays_a_file_when_archived(
    open_queue: Callable[..., Queue], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result document over the inline limit is not archived with its job: its file is kept (written if need be)."""
    monkeypatch.setattr(compaction, "INLINE_RESULT_MAX", 2000)
    queue = open_queue(keep_finished=2, background_compaction=False)
    small = run_jobs(queue, clock, 4, tag="s")
    large = run_jobs(queue, clock, 4, tag="l", size=4000)
    more = run_jobs(queue, clock, 3, tag="m")  # the large ones leave the hot set too
    queue.store.compact_now()
    expected = {**small, **large, **more}
    assert results_of(queue, list(expected)) == expected
    queue.close()
    again = open_queue(keep_finished=2, background_compaction=False)
    assert results_of(again, list(expected)) == expected
    for job_id in large:
        assert again.results.path_for(again.get(job_id).idempotency_key).exists()


def _closed_segments(queue: Queue, clock: FakeClock, n: int) -> tuple[dict[str, Any], int]:
    """Runs ``n`` jobs and closes their segment; returns their results and the segment to fold up to."""
    expected = run_jobs(queue, clock, n)
    store = queue.store
    with store._mutex, store._commit_lock.held() if store._commit_lock else _null():
        store._rotate()
    return expected, store.segment - 1


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_the_compaction_child_folds_without_importing_the_queue(
    open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path
) -> None:
    """The exact command the store runs: it folds, and loads the store modules only."""
    queue = open_queue(keep_finished=5, background_compaction=False)
    expected, upto = _closed_segments(queue, clock, 30)
    root = data_dir / "store"
    probe = _CHILD.replace(
        "sys.exit(main(sys.argv[1:]))",
        "code = main(sys.argv[1:]); print(' '.join(sorted(sys.modules))); sys.exit(code)",
    )
    assert probe != _CHILD
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", probe, str(root), str(upto), "5", "900.0", repr(clock.now())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    modules = set(proc.stdout.split())
    assert "desktop_queue.core.store.compaction" in modules
    assert not {"desktop_queue.core.queue", "desktop_queue.core.flow", "desktop_queue.core.present"} & modules
    assert (root / f"snapshot-{upto:012d}.json").exists()
    assert not (root / segment_name(upto - 1)).exists() or upto == 1
    queue.close()
    again = open_queue(keep_finished=5, background_compaction=False)
    assert results_of(again, list(expected)) == expected
    assert len(again.store.state.jobs) == 5


_KILLED_FOLD = textwrap.dedent(
    """
    import os, signal, sys
    from desktop_queue.core.store import compaction

    step = int(sys.argv[2])
    seen = [0]

    def counting(module, name):
        real = getattr(module, name)
        def wrapped(*a, **k):
            seen[0] += 1
            if seen[0] == step:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*a, **k)
        setattr(module, name, wrapped)

    # every call that changes a file or makes it durable, and every index commit
    for name in ("write", "fsync", "fdatasync", "replace", "link", "unlink", "rename", "sync"):
        if hasattr(os, name):
            counting(os, name)
    from desktop_queue.core import results
    if results._syncfs is not None:  # the result files' flush, where there is syncfs
        counting(results, "_syncfs")
    import sqlite3
    real_connect = sqlite3.connect
    class Counting(sqlite3.Connection):
        def execute(self, sql, *a):
            if sql.startswith("COMMIT"):
                seen[0] += 1
                if seen[0] == step:
                    os.kill(os.getpid(), signal.SIGKILL)
            return super().execute(sql, *a)
    sqlite3.connect = lambda *a, **k: real_connect(*a, factory=Counting, **k)
    sys.argv = [sys.argv[0], sys.argv[1], sys.argv[3], "5", "900.0", sys.argv[4]]
    code = compaction.main(sys.argv[1:])
    print("done", seen[0])
    sys.exit(code)
    """
)


@pytest.mark.slow
def test_a_fold_killed_at_any_call_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL at every write, sync, rename, link, unlink and index commit of a fold run as
    the child runs it: every job and every result is there at the next open, and the next
    compaction finishes the fold."""
    step = 1
    while True:
        data_dir = tmp_path / f"fold-{step}"
        clock = FakeClock()
        queue = Queue.open(data_dir, clock=clock, background_compaction=False, keep_finished=5)
        expected, upto = _closed_segments(queue, clock, 16)
        with monkeypatch.context() as patch:  # the segments stay to fold, as a killed process leaves them
            patch.setattr(Store, "_fold_tail_if_last", lambda self: None)
            queue.close()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        proc = subprocess.run(
            [sys.executable, "-c", _KILLED_FOLD, str(data_dir / "store"), str(step), str(upto), repr(clock.now())],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        finished = proc.returncode == 0
        assert finished or proc.returncode == -signal.SIGKILL, proc.stderr
        after = Queue.open(data_dir, clock=clock, background_compaction=False, keep_finished=5)
        assert {j.id for j in after.list()} == set(expected), f"lost jobs at step {step}"
        assert results_of(after, list(expected)) == expected, f"lost results at step {step}"
        after.store.compact_now()  # the next compaction finishes what the killed one began
        assert results_of(after, list(expected)) == expected
        assert len(after.store.state.jobs) == 5
        after.close()
        if finished:
            break
        step += 1
    assert step > 10  # the drill did kill it at many points


def test_close_while_the_child_folds_loses_nothing(open_queue: Callable[..., Queue], clock: FakeClock) -> None:
    """A store closed while its compaction child runs: the child finishes, and every job and result is there."""
    queue = open_queue(keep_finished=5, rotate_bytes=64 << 10)
    expected: dict[str, Any] = {}
    tag = 0
    while queue.store._compactor is None:  # until a rotation starts the child
        expected.update(run_jobs(queue, clock, 5, tag=f"b{tag}-"))
        tag += 1
    queue.close()  # with the child running (or just done): close must not lose what it folds
    again = open_queue(keep_finished=5, background_compaction=False)
    assert results_of(again, list(expected)) == expected


def test_a_cancelled_write_leaves_nothing(tmp_path: Path) -> None:
    calls: list[int] = []

    def cancelled() -> bool:
        calls.append(1)
        return True

    with pytest.raises(WriteCancelled):
        atomic_write(tmp_path / "big", b"x" * 10_000, sync_every=1000, cancelled=cancelled)
    assert calls == [1]  # asked after the first piece, and stopped there
    assert list(tmp_path.iterdir()) == []


def test_a_spare_being_made_at_close_is_stopped_and_leaves_no_file(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    with pytest.raises(WriteCancelled):
        prepare_spare(root, 3, 8 << 20, cancelled=lambda: True)
    assert list(root.iterdir()) == []
    assert prepare_spare(root, 3, 4096, cancelled=lambda: False)  # (one piece: never asked)
    assert [p.name for p in root.iterdir()] == [spare_name(3)]


def test_close_after_a_rotation_leaves_no_temp_file_and_the_next_rotation_works(
    open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path
) -> None:
    queue = open_queue(keep_finished=5, rotate_bytes=64 << 10, background_compaction=False)
    expected: dict[str, Any] = {}
    tag = 0
    while queue.store.segment == 1:
        expected.update(run_jobs(queue, clock, 5, tag=f"c{tag}-"))
        tag += 1
    queue.close()
    root = data_dir / "store"
    assert not [p for p in root.iterdir() if TEMP_MARK in p.name]
    again = open_queue(keep_finished=5, rotate_bytes=64 << 10, background_compaction=False)
    while again.store.segment == 2:  # a rotation with or without a spare
        expected.update(run_jobs(again, clock, 5, tag=f"d{tag}-"))
        tag += 1
    assert results_of(again, list(expected)) == expected


def test_threads_that_look_at_an_ended_child_together_collect_it_once(
    open_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    """Commits in several threads poll the child outside the store's locks: exactly one collects it."""
    queue = open_queue(keep_finished=5)
    run_jobs(queue, clock, 20)
    store = queue.store
    with store._mutex, store._commit_lock.held() if store._commit_lock else _null():
        store._rotate()
    store._compact_soon(store.segment - 1)
    child = store._compactor
    assert child is not None
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet collected
    barrier = threading.Barrier(8)
    outcomes: list[object] = []

    def look() -> None:
        barrier.wait()
        try:
            outcomes.append(store._reap_compactor(wait=False))
        except Exception as exc:  # noqa: BLE001 - the test reports whatever escaped
            outcomes.append(exc)

    threads = [threading.Thread(target=look) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not [o for o in outcomes if isinstance(o, Exception)]
    assert store._compactor is None and child.returncode == 0
    assert len(store.state.jobs) == 5  # and what it archived was let go of
