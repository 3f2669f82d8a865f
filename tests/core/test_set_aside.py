"""Damaged files are set aside, never overwritten: each copy is what a person may need to look at."""

from __future__ import annotations

from pathlib import Path

import pytest

from desktop_queue.core.pause import BackgroundSwitch
from desktop_queue.core.store import fileio


@pytest.fixture
def same_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every copy is set aside within one second."""
    monkeypatch.setattr(fileio.time, "strftime", lambda fmt, *a: "20261207T080000")


def test_copies_set_aside_within_a_second_are_all_kept(tmp_path: Path, same_second: None) -> None:
    path = tmp_path / "state.json"
    names = []
    for text in ("first", "second", "third"):
        path.write_text(text)
        names.append(fileio.set_aside(path).name)
    assert names == ["state.json.corrupt-20261207T080000", "state.json.corrupt-20261207T080000-2",
                     "state.json.corrupt-20261207T080000-3"]  # fmt: skip
    assert [(tmp_path / n).read_text() for n in names] == ["first", "second", "third"]
    assert not path.exists()


def test_a_pause_file_damaged_twice_keeps_both_copies(tmp_path: Path, same_second: None) -> None:
    """(It was overwritten: each reader of a small state file set aside under one name per second.)"""
    switch = BackgroundSwitch(tmp_path)
    for text in (b"{not json", b"[1, 2, 3]"):
        switch.path.write_bytes(text)
        assert "damaged" in (switch.state().problem or "")
    kept = sorted(p.read_bytes() for p in tmp_path.glob("*.corrupt-*"))
    assert kept == sorted([b"{not json", b"[1, 2, 3]"])
