"""Numbered records and the group-sync mark: damage that reads as whole is still found and named.

A duplicated, deleted or swapped journal line passes its checksum; a deleted current
segment or one cut at a record boundary leaves a store that loads cleanly. Each used to
change the state silently (issue 10, "Damage and bad input").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from desktop_queue.core import Queue, State
from desktop_queue.core.store.codec import decode_record

OpenQueue = Callable[..., Queue]


def journal(data_dir: Path) -> Path:
    return sorted((data_dir / "store").glob("journal-*.jsonl"))[-1]


def lines(seg: Path) -> list[bytes]:
    return seg.read_bytes().split(b"\0", 1)[0].splitlines(keepends=True)


def write_lines(seg: Path, new: list[bytes]) -> None:
    size = seg.stat().st_size
    body = b"".join(new)
    seg.write_bytes(body + b"\0" * max(0, size - len(body)))


def three_jobs(open_queue: OpenQueue) -> tuple[Queue, list[str]]:
    queue = open_queue()
    ids = [queue.submit("demo", {"prompt": f"p{i}"}).job.id for i in range(3)]
    lease = queue.lease("w")
    assert lease is not None
    queue.complete(lease, {"text": "done"})
    return queue, ids


def test_records_are_numbered_in_order(open_queue: OpenQueue, data_dir: Path) -> None:
    queue, _ = three_jobs(open_queue)
    numbers = [r.get("n") for line in lines(journal(data_dir)) if (r := decode_record(line.rstrip(b"\n")))]
    assert numbers[0] is None  # the header
    assert numbers[1:] == list(range(1, len(numbers)))
    queue.close()
    again = open_queue()
    again.submit("demo", {"prompt": "after reopen"})
    numbers = [r.get("n") for line in lines(journal(data_dir)) if (r := decode_record(line.rstrip(b"\n")))]
    assert numbers[1:] == list(range(1, len(numbers)))


@pytest.mark.parametrize("damage", ["duplicate", "delete", "swap"])
def test_a_repeated_lost_or_moved_line_is_reported_not_applied(
    open_queue: OpenQueue, data_dir: Path, damage: str
) -> None:
    queue, ids = three_jobs(open_queue)
    queue.close()
    seg = journal(data_dir)
    got = lines(seg)
    # lines: header, new 0, new 1, new 2, lease, complete
    if damage == "duplicate":
        got.insert(3, got[2])
    elif damage == "delete":
        del got[2]
    else:
        got[2], got[3] = got[3], got[2]
    write_lines(seg, got)
    again = open_queue()
    [notice] = [n for n in again.report.notices if "repeated, lost or moved" in n]
    assert "kept aside" in notice
    # what came before the damaged line is loaded; nothing after it is applied silently
    assert again.get(ids[0]).state in (State.QUEUED, State.RUNNING, State.SUCCEEDED)
    assert sorted((data_dir / "store").glob("journal-*.corrupt-*"))


def test_a_deleted_current_segment_is_reported(open_queue: OpenQueue, data_dir: Path) -> None:
    queue, _ = three_jobs(open_queue)
    queue.close()
    journal(data_dir).unlink()
    again = open_queue()
    assert any("is missing: changes that had been saved" in n for n in again.report.notices), again.report.notices


def test_a_cut_at_a_record_boundary_is_reported(open_queue: OpenQueue, data_dir: Path) -> None:
    queue, _ = three_jobs(open_queue)
    queue.close()
    seg = journal(data_dir)
    write_lines(seg, lines(seg)[:-1])  # the last record gone, cleanly
    again = open_queue()
    assert any("had been saved to disk: the changes in between are lost" in n for n in again.report.notices)


def test_an_all_zero_segment_is_not_called_harmless(open_queue: OpenQueue, data_dir: Path) -> None:
    queue, _ = three_jobs(open_queue)
    queue.close()
    seg = journal(data_dir)
    seg.write_bytes(b"\0" * seg.stat().st_size)
    again = open_queue()
    assert any("lost" in n for n in again.report.notices)
    assert not any("no change lost" in n for n in again.report.notices)


def test_a_clean_reopen_says_nothing(open_queue: OpenQueue) -> None:
    queue, _ = three_jobs(open_queue)
    queue.close()
    assert open_queue().report.notices == []
