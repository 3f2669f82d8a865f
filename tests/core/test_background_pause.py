"""The data dir's background switch on disk, and the lease that honours it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from desktop_queue import cli
from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.errors import StoreError
from desktop_queue.core.pause import PAUSE_FILE, BackgroundSwitch
from desktop_queue.core.present import background_pause_reason, background_pause_text


def test_a_flip_is_durable_and_seen_by_every_reader(data_dir: Path) -> None:
    clock = FakeClock()
    one, other = BackgroundSwitch(data_dir, clock), BackgroundSwitch(data_dir, clock)
    assert not one.paused and not other.paused  # no file: background work runs
    state = one.set(True, "cli", reason="  quota day  ", where="host:1")
    assert (state.paused, state.by, state.where, state.at, state.reason) == (
        True,
        "cli",
        "host:1",
        clock.now(),
        "quota day",
    )
    assert other.state() == state  # another reader (another process) sees it at once
    assert BackgroundSwitch(data_dir).state() == state  # and a restart too
    doc = orjson.loads((data_dir / PAUSE_FILE).read_bytes())
    assert doc["format"] == "desktop-queue.background-pause" and doc["checksum"].startswith("sha256:")
    other.set(False, "user")
    assert not one.paused and one.state().by == "user"


def test_pausing_what_is_paused_keeps_who_paused_it_first(data_dir: Path) -> None:
    clock = FakeClock()
    switch = BackgroundSwitch(data_dir, clock)
    first = switch.set(True, "user")
    clock.advance(60)
    assert switch.set(True, "cli") == first
    assert background_pause_text(first, clock.now()).startswith("Background work paused (by user, ")
    assert background_pause_reason(first) == "background jobs paused (by user)"


def test_a_damaged_file_is_kept_aside_and_the_last_state_holds(data_dir: Path) -> None:
    switch = BackgroundSwitch(data_dir)
    switch.set(True, "cli")
    path = data_dir / PAUSE_FILE
    path.write_bytes(path.read_bytes().replace(b'"paused": true', b'"paused": false'))  # the checksum no longer fits
    state = switch.state()
    assert state.paused and state.problem is not None and "kept aside" in state.problem
    assert list(data_dir.glob(f"{PAUSE_FILE}.corrupt-*"))
    fresh = BackgroundSwitch(data_dir).state()  # a process that read nothing before: not paused, nothing to trust
    assert not fresh.paused


def test_a_file_from_a_newer_version_is_never_overwritten(data_dir: Path) -> None:
    path = data_dir / PAUSE_FILE
    data_dir.mkdir(parents=True, exist_ok=True)
    newer = orjson.dumps({"format": "desktop-queue.background-pause", "schema_version": 99, "state": {}})
    path.write_bytes(newer)
    switch = BackgroundSwitch(data_dir)
    assert "newer Desktop Queue" in (switch.state().problem or "")
    with pytest.raises(StoreError, match="newer"):
        switch.set(True, "cli")
    assert path.read_bytes() == newer


def test_a_lease_of_the_interactive_lane_never_looks_at_background_jobs(data_dir: Path) -> None:
    with Queue.open(data_dir) as queue:
        background = queue.submit("demo", {"prompt": "later"}).job.id
        interactive = queue.submit("demo", {"prompt": "now"}, priority="interactive").job.id
        seen: list[str] = []

        def accept(job: dict[str, Any]) -> bool:
            seen.append(job["id"])
            return True

        lease = queue.lease("w", lanes=("interactive",), accept=accept)
        assert lease is not None and lease.job_id == interactive
        assert queue.lease("w", lanes=("interactive",), accept=accept) is None
        assert background not in seen  # not scanned at all: a long paused lane costs nothing
        assert queue.lease("w") is not None  # both lanes: it is there


def test_the_cli_flips_the_switch_and_refuses_a_long_reason(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--data-dir", str(data_dir), "pause-background"]) == 0
    assert "interactive jobs run" in capsys.readouterr().out
    assert BackgroundSwitch(data_dir).state().by == "cli"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--data-dir", str(data_dir), "pause-background", "--reason", "x" * 201])
    assert exit_info.value.code == 2
    assert "at most 200 characters" in capsys.readouterr().err
    assert cli.main(["--data-dir", str(data_dir), "resume-background"]) == 0
    assert capsys.readouterr().out.startswith("Background work resumed (it was paused by cli at ")
    assert not BackgroundSwitch(data_dir).paused
