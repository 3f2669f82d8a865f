"""Result files a fold needs on disk are flushed on the data dir's file system, and a failure stops the fold."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core import results as results_module
from tests.core.test_archive import run_jobs


def _eio(*_args: object) -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


@pytest.mark.parametrize("where", ["syncfs", "each file"])
def test_a_fold_whose_result_files_the_disk_refuses_keeps_the_journal(
    open_queue: Callable[..., Queue],
    clock: FakeClock,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """The hot jobs' results live in the journal records a fold removes; their files must be
    on disk first. A write-back error there used to be ignored, and the fold went on."""
    queue = open_queue(keep_finished=50, background_compaction=False)
    ids = run_jobs(queue, clock, 20)
    snapshots = sorted((data_dir / "store").glob("snapshot-*.json"))
    with monkeypatch.context() as failing:
        if where == "syncfs":
            failing.setattr(results_module, "_syncfs", _eio)
        else:
            failing.setattr(results_module, "_syncfs", None)
            failing.setattr(results_module, "fsync_dir", _eio)
        queue.store.compact_now()  # type: ignore[attr-defined]
    assert sorted((data_dir / "store").glob("snapshot-*.json")) == snapshots  # nothing folded
    queue.close()

    again = open_queue(keep_finished=50, background_compaction=False)
    for job_id in ids:
        job = again.get(job_id)
        assert again.results.get(job.idempotency_key) is not None
        assert again.results.problem(job.idempotency_key) is None
    again.store.compact_now()  # type: ignore[attr-defined]
    assert len(sorted((data_dir / "store").glob("snapshot-*.json"))) > len(snapshots)


@pytest.mark.skipif(results_module._syncfs is None, reason="syncfs is Linux's")
def test_result_files_are_flushed_on_the_data_dirs_file_system_alone(
    open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = open_queue(keep_finished=50, background_compaction=False)
    ids = run_jobs(queue, clock, 3)
    keys = [queue.get(i).idempotency_key for i in ids]
    for key in keys:
        queue.results.materialize(key)
    flushed: list[int] = []
    monkeypatch.setattr(results_module, "_syncfs", lambda fd: flushed.append(os.fstat(fd).st_dev))
    monkeypatch.setattr(os, "sync", lambda: pytest.fail("sync(2) waits for every disk"))
    queue.results.make_durable(keys)
    assert flushed == [data_dir.stat().st_dev]  # one call, on the data dir's file system
