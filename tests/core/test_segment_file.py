"""Reading a journal segment file: its zero-filled rest is checked, not returned.

Whatever the file holds, :func:`read_segment` must find in what
:func:`read_segment_file` returns exactly what it finds in the whole file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desktop_queue.core.store import codec
from desktop_queue.core.store.codec import encode_record, new_segment_bytes, read_segment, read_segment_file

CHUNK = len(codec._ZERO_CHUNK)


def records(n: int, start: int = 1) -> bytes:
    return b"".join(
        encode_record({"op": "upd", "id": f"j{i}", "n": i, "set": {"x": "y" * (i % 50)}})
        for i in range(start, start + n)
    )


def same_reading(path: Path) -> bytes:
    whole = path.read_bytes()
    got = read_segment_file(path)
    assert read_segment(got, 0) == read_segment(whole, 0)
    return got


def test_the_zero_filled_rest_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    written = new_segment_bytes(1, 0) + records(20)
    path.write_bytes(written + bytes(3 * CHUNK + 17))
    assert same_reading(path) == written


def test_a_file_without_zeros_is_returned_whole(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    path.write_bytes(new_segment_bytes(1, 0) + records(3))
    assert same_reading(path) == path.read_bytes()


def test_writes_past_a_hole_come_back_with_the_whole_file(tmp_path: Path) -> None:
    """A power cut can keep a later write and lose an earlier one: the records after
    the hole must reach read_segment, which reports them as lost."""
    path = tmp_path / "seg"
    head = new_segment_bytes(1, 0) + records(5)
    later = records(2, start=7)
    path.write_bytes(head + bytes(2 * CHUNK) + later + bytes(CHUNK))
    got = same_reading(path)
    assert got == path.read_bytes()
    assert [r["id"] for r in read_segment(got, 0).lost_after] == ["j7", "j8"]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 40),
    gap=st.integers(0, 3 * CHUNK),
    tail=st.sampled_from([b"", b"x", b"\x01" * 5, records(1, start=99)]),
    tail_at=st.integers(0, 2 * CHUNK),
)
def test_any_file_reads_as_the_whole_file_does(
    tmp_path_factory: pytest.TempPathFactory, n: int, gap: int, tail: bytes, tail_at: int
) -> None:
    path = tmp_path_factory.mktemp("seg") / "seg"
    data = new_segment_bytes(1, 0) + records(n) + bytes(gap)
    if tail:
        data += bytes(tail_at) + tail
    path.write_bytes(data)
    same_reading(path)
