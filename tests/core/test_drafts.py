"""The New job draft kept in the data dir (core.drafts): taken once, damage set aside, never lost silently."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import orjson
import pytest

from desktop_queue.core.drafts import DRAFT_FORMAT, NEW_JOB, draft_path, keep_draft, take_draft
from desktop_queue.core.errors import StoreError

FIELDS = {"kind": "openai.chat", "input": '{"prompt": "half a prompt about otters"}', "title": "otters", "batch": ""}


def test_a_draft_is_taken_once(tmp_path: Path) -> None:
    path = keep_draft(tmp_path, NEW_JOB, FIELDS)
    assert path == draft_path(tmp_path, NEW_JOB) and path.parent.name == "drafts"
    assert take_draft(tmp_path, NEW_JOB) == FIELDS
    assert not path.exists()
    assert take_draft(tmp_path, NEW_JOB) is None


def test_a_newer_draft_replaces_the_older(tmp_path: Path) -> None:
    keep_draft(tmp_path, NEW_JOB, FIELDS)
    keep_draft(tmp_path, NEW_JOB, {**FIELDS, "title": "newer"})
    assert take_draft(tmp_path, NEW_JOB) == {**FIELDS, "title": "newer"}
    assert [p.name for p in (tmp_path / "drafts").iterdir()] == []  # (no temp file left either)


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"[]",
        orjson.dumps({"format": "other"}),
        orjson.dumps({"format": DRAFT_FORMAT, "fields": {"a": 1}}),
    ],
)
def test_a_damaged_draft_is_set_aside_and_said(tmp_path: Path, raw: bytes, caplog: pytest.LogCaptureFixture) -> None:
    path = draft_path(tmp_path, NEW_JOB)
    path.parent.mkdir(parents=True)
    path.write_bytes(raw)
    with caplog.at_level(logging.WARNING):
        assert take_draft(tmp_path, NEW_JOB) is None
    [aside] = list(path.parent.glob("new-job.json.corrupt-*"))
    assert aside.read_bytes() == raw and not path.exists()
    assert "was damaged" in caplog.text and aside.name in caplog.text


def test_a_draft_of_a_newer_version_is_left_for_it(tmp_path: Path) -> None:
    path = draft_path(tmp_path, NEW_JOB)
    path.parent.mkdir(parents=True)
    raw = orjson.dumps({"format": DRAFT_FORMAT, "schema_version": 99, "fields": {"whatever": "x"}})
    path.write_bytes(raw)
    assert take_draft(tmp_path, NEW_JOB) is None
    assert path.read_bytes() == raw


def test_a_full_disk_says_so_and_keeps_the_older_draft(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keep_draft(tmp_path, NEW_JOB, FIELDS)
    real_write = os.write

    def full(fd: int, data: bytes | memoryview) -> int:
        if b"newer" in bytes(data):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(StoreError):
        keep_draft(tmp_path, NEW_JOB, {**FIELDS, "title": "newer"})
    monkeypatch.undo()
    assert take_draft(tmp_path, NEW_JOB) == FIELDS
