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


_MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /home/ana/Private rw,nosuid,nodev shared:20 - fuse.gocryptfs /home/ana/.cipher rw
41 22 0:36 / /mnt/my\\040disk rw shared:21 - fuseblk /dev/sdb1 rw
42 22 0:37 / /mnt/my\\040disk/inner rw shared:22 - tmpfs tmpfs rw
"""


def test_the_file_system_of_a_path_is_that_of_its_deepest_mount(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(_MOUNTINFO)

    def kind(path: str) -> str | None:
        return results_module._fs_type(path, str(mountinfo))

    assert kind("/home/ana/Private/queue/results") == "fuse.gocryptfs"
    assert kind("/home/ana/Privateer") == "ext4"  # (a prefix of the name is not the mount)
    assert kind("/mnt/my disk/results") == "fuseblk"
    assert kind("/mnt/my disk/inner/x") == "tmpfs"
    assert results_module._fs_type("/", str(tmp_path / "gone")) is None


def test_on_fuse_result_files_are_synced_one_by_one(
    open_queue: Callable[..., Queue], clock: FakeClock, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """syncfs(2) returns success on a FUSE file system without syncing it: a fold's result
    files there were taken back by a power cut (the power-cut drill, whose own compaction
    children were not told to sync them one by one)."""
    queue = open_queue(keep_finished=50, background_compaction=False)
    keys = [queue.get(i).idempotency_key for i in run_jobs(queue, clock, 3)]
    for key in keys:
        queue.results.materialize(key)
    monkeypatch.setattr(results_module, "_syncfs", lambda fd: pytest.fail("syncfs does not reach FUSE"))
    monkeypatch.setattr(results_module, "_fs_type", lambda path: "fuse.gocryptfs")
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real_fsync(fd))
    queue.results.make_durable(keys)
    files = {str(queue.results.path_for(k)) for k in keys}
    assert files <= set(synced)
    assert str(data_dir / "results") in synced  # (a new shard's name is in it)
